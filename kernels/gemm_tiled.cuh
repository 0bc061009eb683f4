// The tiled shared-memory matrix-product kernel, on CUDA cores.
//
// Each block computes a BM x BN tile of C[z]; each thread a TM x TN sub-tile in registers, as
// groups of 4 rows and 4 columns spread across the tile so that shared-memory reads are 16 bytes
// wide and consecutive threads read consecutive groups. K advances in slabs of BK: the next slab
// is loaded from global memory into registers while the current one is multiplied out of shared
// memory (double buffering, one barrier per slab). Loads are predicated against the matrix
// extent, so any shape works; with kVec > 1 each load moves 16 bytes, which the dispatcher allows
// only when the pointers, leading dimensions and unit-stride extents are multiples of 16 bytes.
#pragma once

#include <cstdint>

#include "gemm_common.cuh"

namespace tiledmm {

// Four consecutive accumulator values from 16-byte-aligned shared memory.
__device__ __forceinline__ void load4(const float* p, float* out) {
  const float4 v = *reinterpret_cast<const float4*>(p);
  out[0] = v.x; out[1] = v.y; out[2] = v.z; out[3] = v.w;
}

// kMinBlocks: blocks that must fit on one multiprocessor (caps registers per thread).
template <int BM_, int BN_, int BK_, int TM_, int TN_, int kMinBlocks_ = 1>
struct TileShape {
  static constexpr int BM = BM_, BN = BN_, BK = BK_, TM = TM_, TN = TN_, kMinBlocks = kMinBlocks_;
  static constexpr int kThreadsM = BM / TM, kThreadsN = BN / TN;
  static constexpr int kThreads = kThreadsM * kThreadsN;
  static_assert(TM % 4 == 0 && TN % 4 == 0, "threads own groups of 4 rows and 4 columns");
  static_assert(BM % TM == 0 && BN % TN == 0, "the thread grid must cover the tile");
};

// Rows of padding per shared-memory line: keeps 16-byte alignment and spreads the transposing
// stores of k-contiguous operands over more banks.
constexpr int kSmemPad = 4;

// Moves BK x BX slabs of one operand (x indexes m for A, n for B) from global memory into shared
// memory, stored k-major (smem[p][x]) for either source layout, in two steps: load() into
// registers, store() into shared memory, so the loads of slab t+1 overlap the math on slab t.
// kAlongK: the operand's unit-stride dimension is k (row-major A, column-major B).
// A thread's vectors sit at one unit-stride offset, kLineStep lines apart, so it keeps a single
// running offset into global memory and needs no per-element address arithmetic.
template <typename T, typename Acc, int BX, int BK, int kThreads, int kVec, bool kAlongK>
struct SlabLoader {
  static constexpr int kContig = kAlongK ? BK : BX;  // slab extent along the unit stride
  static constexpr int kLines = kAlongK ? BX : BK;   // slab extent along the other dimension
  static constexpr int kVecsPerLine = kContig / kVec;
  static constexpr int kLineStep = kThreads / kVecsPerLine;
  static constexpr int kPerThread = (kLines + kLineStep - 1) / kLineStep;
  static_assert(kContig % kVec == 0, "a vector must not straddle a slab line");
  static_assert(kThreads % kVecsPerLine == 0, "threads must tile whole slab lines");

  struct alignas(sizeof(T) * kVec) Vec {
    T v[kVec];
  };
  Vec staged[kPerThread];
  const T* base;
  int64_t ld, offset;  // offset: this thread's first element of the next slab
  int c, line;         // this thread's unit-stride offset and first line within a slab

  // The operand's matrix at `base`; the first slab at (x0, p0).
  __device__ __forceinline__ void start(const T* base_, int64_t ld_, int64_t x0, int64_t p0, int tid) {
    base = base_;
    ld = ld_;
    c = (tid % kVecsPerLine) * kVec;
    line = tid / kVecsPerLine;
    offset = kAlongK ? (x0 + line) * ld + p0 + c : (p0 + line) * ld + x0 + c;
  }

  // Loads the next slab; x_left and p_left: the matrix extent left from the slab's origin. With
  // kVec > 1 the unit-stride extent is a multiple of kVec: a vector is all in or all out.
  __device__ __forceinline__ void load(int64_t x_left, int64_t p_left) {
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int l = line + i * kLineStep;
      const int x = kAlongK ? l : c, p = kAlongK ? c : l;
      if ((kLines % kLineStep == 0 || l < kLines) && x < x_left && p < p_left) {
        staged[i] = *reinterpret_cast<const Vec*>(base + offset + i * kLineStep * ld);
      } else {
#pragma unroll
        for (int v = 0; v < kVec; ++v) staged[i].v[v] = from_acc<T, Acc>(Acc(0));
      }
    }
    offset += kAlongK ? BK : BK * ld;
  }

  __device__ __forceinline__ void store(Acc (*smem)[BX + kSmemPad]) const {
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int l = line + i * kLineStep;
      if (kLines % kLineStep != 0 && l >= kLines) continue;
#pragma unroll
      for (int v = 0; v < kVec; ++v) {
        const Acc value = to_acc<Acc>(staged[i].v[v]);
        if (kAlongK) smem[c + v][l] = value;
        else smem[l][c + v] = value;
      }
    }
  }
};

// Row (or column) of the tile owned by a thread's i-th register: groups of 4, one group per
// stride of 4 * threads along that dimension.
template <int kThreadsAlong>
__device__ __forceinline__ int owned_index(int i, int thread) {
  return (i / 4) * (4 * kThreadsAlong) + thread * 4 + i % 4;
}

template <typename T, typename Out, class Tile, int kVec, bool kARowMajor, bool kBRowMajor>
__global__ void __launch_bounds__(Tile::kThreads, Tile::kMinBlocks)
    gemm_tiled_kernel(const GemmArgs<T, Out> args) {
  using Acc = typename Accumulator<T>::type;
  constexpr int BM = Tile::BM, BN = Tile::BN, BK = Tile::BK, TM = Tile::TM, TN = Tile::TN;
  constexpr int kThreads = Tile::kThreads;

  __shared__ __align__(16) Acc a_smem[2][BK][BM + kSmemPad];
  __shared__ __align__(16) Acc b_smem[2][BK][BN + kSmemPad];
  SlabLoader<T, Acc, BM, BK, kThreads, kVec, kARowMajor> a_loader;
  SlabLoader<T, Acc, BN, BK, kThreads, kVec, !kBRowMajor> b_loader;

  const int tid = threadIdx.x;
  const int tx = tid % Tile::kThreadsN, ty = tid / Tile::kThreadsN;
  const int64_t m_tiles = (args.m + BM - 1) / BM;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * BN;

  // z enumerates (matrix of the batch, slice of K). Grid-stride over z and row tiles: gridDim.y
  // and .z are capped at 65535.
  for (int64_t z = blockIdx.z; z < args.batch * args.splits; z += gridDim.z) {
    const int64_t matrix = z / args.splits;
    const int64_t k_begin = (z % args.splits) * args.k_chunk;
    const int64_t k_end = min(args.k, k_begin + args.k_chunk);
    const int64_t k_tiles = (k_end - k_begin + BK - 1) / BK;
    const T* a = args.a + matrix * args.batch_stride_a;
    const T* b = args.b + matrix * args.batch_stride_b;
    for (int64_t mt = blockIdx.y; mt < m_tiles; mt += gridDim.y) {
      const int64_t m0 = mt * BM;
      Acc acc[TM][TN];
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = Acc(0);

      a_loader.start(a, args.lda, m0, k_begin, tid);
      b_loader.start(b, args.ldb, n0, k_begin, tid);
      if (k_tiles > 0) {
        a_loader.load(args.m - m0, k_end - k_begin);
        b_loader.load(args.n - n0, k_end - k_begin);
        a_loader.store(a_smem[0]);
        b_loader.store(b_smem[0]);
        __syncthreads();
      }
      for (int64_t t = 0; t < k_tiles; ++t) {
        const int cur = static_cast<int>(t & 1);
        const bool more = t + 1 < k_tiles;
        if (more) {
          a_loader.load(args.m - m0, k_end - k_begin - (t + 1) * BK);
          b_loader.load(args.n - n0, k_end - k_begin - (t + 1) * BK);
        }
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
          Acc a_frag[TM], b_frag[TN];
#pragma unroll
          for (int i = 0; i < TM; i += 4)
            load4(&a_smem[cur][kk][owned_index<Tile::kThreadsM>(i, ty)], &a_frag[i]);
#pragma unroll
          for (int j = 0; j < TN; j += 4)
            load4(&b_smem[cur][kk][owned_index<Tile::kThreadsN>(j, tx)], &b_frag[j]);
#pragma unroll
          for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < TN; ++j) acc[i][j] += a_frag[i] * b_frag[j];
        }
        // The buffer written here was last read before the previous iteration's barrier.
        if (more) {
          a_loader.store(a_smem[cur ^ 1]);
          b_loader.store(b_smem[cur ^ 1]);
        }
        __syncthreads();
      }

      Out* c = args.c + z * args.m * args.n;
#pragma unroll
      for (int i = 0; i < TM; ++i) {
        const int64_t row = m0 + owned_index<Tile::kThreadsM>(i, ty);
        if (row >= args.m) continue;
#pragma unroll
        for (int j = 0; j < TN; ++j) {
          const int64_t col = n0 + owned_index<Tile::kThreadsN>(j, tx);
          if (col < args.n) c[row * args.n + col] = from_acc<Out>(acc[i][j]);
        }
      }
    }
  }
}

}  // namespace tiledmm
