// The tensor-core matrix-product kernel (mma.sync), for every precision path (mma_math.cuh).
//
// Each block computes a BM x BN tile of C[z] with a grid of warps, each warp a WTM x WTN tile as
// MT x NT instruction tiles. K advances in tiles of BK through a ring of kStages shared-memory
// stages (stage_pipeline.cuh): while the warps multiply stage t, cp.async copies of tiles
// t+1 .. t+kStages-1 are in flight (one barrier per tile). Stages keep each operand's global
// layout (stage_loader.cuh); fragments come out of them by ldmatrix (transposing where the
// layout needs it) or, for 32-bit-across-lines and float64 fragments, by scalar loads. Loads are
// predicated against the matrix extent and zero-filled beyond it, so any shape and any leading
// dimension works without padding copies.
#pragma once

#include <cstdint>

#include "cuda/common/gemm_common.cuh"
#include "cuda/common/gemm_epilogue.cuh"
#include "cuda/sm80/mma_math.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/common/stage_loader.cuh"
#include "cuda/sm80/stage_pipeline.cuh"

namespace tiledmm {

// kMinBlocks: blocks that must fit on one multiprocessor (caps registers per thread).
template <int BM_, int BN_, int BK_, int kWarpsM_, int kWarpsN_, int kStages_, int kMinBlocks_ = 1>
struct MmaTile {
  static constexpr int BM = BM_, BN = BN_, BK = BK_, kWarpsM = kWarpsM_, kWarpsN = kWarpsN_;
  static constexpr int kStages = kStages_, kMinBlocks = kMinBlocks_;
  static constexpr int kThreads = 32 * kWarpsM * kWarpsN;
  static constexpr int WTM = BM / kWarpsM, WTN = BN / kWarpsN;  // one warp's tile
  static_assert(kStages >= 2, "the pipeline needs two stages or more");
};

// Shared memory of one block: kStages stages of A, then of B.
template <typename T, class Tile>
constexpr int mma_smem_bytes() {
  return Tile::kStages * (Tile::BM + Tile::BN) * Tile::BK * static_cast<int>(sizeof(T));
}

// ldmatrix moves 16-bit elements, or 32-bit ones without transposing.
template <typename T, bool kAlongK>
constexpr bool kUseLdmatrix = sizeof(T) == 2 || (sizeof(T) == 4 && kAlongK);

// The A fragment of the M x K instruction tile at rows m0 + dm, k dk of a stage: m0 is this
// warp's (run-time), dm and dk are the unrolled loops' constants (swizzled_offset keeps them out
// of the swizzle). kPairedRows: rows as fragment_row<FragmentRows::kPaired> says.
template <class Math, class Stage, bool kAlongK, bool kPairedRows = false>
__device__ __forceinline__ Fragment<typename Math::Reg, Math::kARegs> load_a(
    const typename Math::T* stage, int m0, int dm, int dk, int lane) {
  using T = typename Math::T;
  Fragment<typename Math::Reg, Math::kARegs> f;
  if constexpr (kUseLdmatrix<T, kAlongK>) {
    // Matrices 0..3: rows +0/+8, then k +0/+(one 16-byte chunk, or 8 rows when transposed).
    // Lane 8j + r addresses line r of matrix j. (Paired rows would put 8 lines of one matrix in
    // four swizzle phases: two-way bank conflicts.)
    static_assert(!kPairedRows, "paired rows: 32-bit elements along m");
    const int j = lane / 8, r = lane % 8;
    if constexpr (kAlongK) {
      ptx::ldmatrix_x4<false>(
          f.r, stage + swizzled_offset<Stage>(m0 + r + 8 * (j % 2), dm, Stage::kChunkElems * (j / 2), dk));
    } else {
      ptx::ldmatrix_x4<true>(f.r, stage + swizzled_offset<Stage>(r + 8 * (j / 2), dk, m0 + 8 * (j % 2), dm));
    }
  } else {
    static_assert(sizeof(T) == sizeof(typename Math::Reg), "one element per register");
    static_assert(!kPairedRows || (sizeof(T) == 4 && !kAlongK), "paired rows: 32-bit elements along m");
    const int g = lane / 4, t4 = lane % 4;
#pragma unroll
    for (int i = 0; i < Math::kARegs; i += kPairedRows ? 2 : 1) {
      const int di = 8 * (i % 2), dki = dk + (Math::K / 2) * (i / 2);
      if constexpr (kPairedRows) {
        // Rows 2 g and 2 g + 1: adjacent in a 16-byte chunk.
        const uint2 v = *reinterpret_cast<const uint2*>(stage + swizzled_offset<Stage>(t4, dki, m0 + 2 * g, dm));
        f.r[i] = v.x, f.r[i + 1] = v.y;
      } else {
        const T v = stage[kAlongK ? swizzled_offset<Stage>(m0 + g, dm + di, t4, dki)
                                  : swizzled_offset<Stage>(t4, dki, m0 + g, dm + di)];
        if constexpr (sizeof(T) == 4) f.r[i] = __float_as_uint(v);
        else f.r[i] = v;
      }
    }
  }
  return f;
}

// The B fragments of two adjacent K x 8 instruction tiles at columns n0 + dn and n0 + dn + 8, k dk
// (n0 this warp's, dn and dk constants, as for load_a): registers [0, kBRegs) and
// [kBRegs, 2 kBRegs).
template <class Math, class Stage, bool kAlongK>
__device__ __forceinline__ Fragment<typename Math::Reg, 2 * Math::kBRegs> load_b_pair(
    const typename Math::T* stage, int n0, int dn, int dk, int lane) {
  using T = typename Math::T;
  Fragment<typename Math::Reg, 2 * Math::kBRegs> f;
  if constexpr (kUseLdmatrix<T, kAlongK>) {
    // Matrices 0..3: k +0/+(one 16-byte chunk, or 8 rows when transposed), then n +0/+8.
    const int j = lane / 8, r = lane % 8;
    if constexpr (kAlongK) {
      ptx::ldmatrix_x4<false>(
          f.r, stage + swizzled_offset<Stage>(n0 + r + 8 * (j / 2), dn, Stage::kChunkElems * (j % 2), dk));
    } else {
      ptx::ldmatrix_x4<true>(f.r, stage + swizzled_offset<Stage>(r + 8 * (j % 2), dk, n0 + 8 * (j / 2), dn));
    }
  } else {
    const int g = lane / 4, t4 = lane % 4;
#pragma unroll
    for (int q = 0; q < 2; ++q)
#pragma unroll
      for (int i = 0; i < Math::kBRegs; ++i) {
        const int dnq = dn + 8 * q, dki = dk + (Math::K / 2) * i;
        const T v = stage[kAlongK ? swizzled_offset<Stage>(n0 + g, dnq, t4, dki)
                                  : swizzled_offset<Stage>(t4, dki, n0 + g, dnq)];
        if constexpr (sizeof(T) == 4) f.r[q * Math::kBRegs + i] = __float_as_uint(v);
        else f.r[q * Math::kBRegs + i] = v;
      }
  }
  return f;
}

// The float32 dot product of row `row` of A and column `col` of B over [k0, k1), one fused
// multiply-add at a time (the exact kernel's arithmetic).
template <bool kARowMajor, bool kBRowMajor>
__device__ float exact_dot(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t row,
                           int64_t col, int64_t k0, int64_t k1) {
  float sum = 0.0f;
  for (int64_t k = k0; k < k1; ++k)
    sum = fmaf(a[kARowMajor ? row * lda + k : k * lda + row],
               b[kBRowMajor ? k * ldb + col : col * ldb + k], sum);
  return sum;
}

template <class Math, class Tile, LoadMode kAMode, LoadMode kBMode, bool kARowMajor,
          bool kBRowMajor, typename Out>
__global__ void __launch_bounds__(Tile::kThreads, Tile::kMinBlocks)
    gemm_mma_kernel(const GemmArgs<typename Math::T, Out> args) {
  using T = typename Math::T;
  using Acc = typename Math::Acc;
  constexpr int BM = Tile::BM, BN = Tile::BN, BK = Tile::BK, kStages = Tile::kStages;
  constexpr int M = Math::M, K = Math::K;
  // K steps unrolled together: unrolled further, ptxas hoists every step's fragment loads at once
  // and runs out of registers.
  constexpr int kStepUnroll = Math::kStepUnroll;
  constexpr int MT = Tile::WTM / M, NT = Tile::WTN / 8, kCRegs = M * 8 / 32;
  static_assert(M == 16 && Tile::WTM % M == 0 && Tile::WTN % 16 == 0 && BK % K == 0, "whole instruction tiles");
  using ALoader = StageLoader<T, BM, BK, Tile::kThreads, kARowMajor, kAMode>;
  using BLoader = StageLoader<T, BN, BK, Tile::kThreads, !kBRowMajor, kBMode>;
  using AStage = typename ALoader::Tile;
  using BStage = typename BLoader::Tile;
  // The output tile goes out through shared memory (over the stages) where it fits there.
  constexpr bool kStagedEpilogue = staged_output_fits<BM, BN, Out>(mma_smem_bytes<T, Tile>());
  using AOperand = typename Math::template Operand<Math::kARegs>;
  using BOperand = typename Math::template Operand<Math::kBRegs>;

  extern __shared__ __align__(128) unsigned char smem[];
  T* const a_stages = reinterpret_cast<T*>(smem);
  T* const b_stages = a_stages + kStages * ALoader::kStageElems;

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int warp_m = (warp / Tile::kWarpsN) * Tile::WTM, warp_n = (warp % Tile::kWarpsN) * Tile::WTN;
  ALoader a_loader;
  BLoader b_loader;

  for_each_work_item<BM, BN, BK>(args, [&](const WorkItem<T>& w) {
    const int64_t m0 = w.m0, n0 = w.n0;
    Acc acc[MT][NT][kCRegs];
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int r = 0; r < kCRegs; ++r) acc[i][j][r] = Acc(0);

    a_loader.start(w.a, args.lda, m0, w.k_begin, tid);
    b_loader.start(w.b, args.ldb, n0, w.k_begin, tid);
    multiply_k_tiles<kStages, BK>(a_loader, b_loader, a_stages, b_stages, args.m - m0, args.n - n0, w.k_len,
                                  [&](const T* as, const T* bs) {
#pragma unroll kStepUnroll
      for (int kk = 0; kk < BK; kk += K) {
        AOperand af[MT];
        BOperand bf[NT];
#pragma unroll
        for (int i = 0; i < MT; ++i)
          af[i] = Math::prepare(load_a<Math, AStage, kARowMajor>(as, warp_m, i * M, kk, lane));
#pragma unroll
        for (int j = 0; j < NT; j += 2) {
          const auto pair = load_b_pair<Math, BStage, !kBRowMajor>(bs, warp_n, j * 8, kk, lane);
          Fragment<typename Math::Reg, Math::kBRegs> lo, hi;
#pragma unroll
          for (int r = 0; r < Math::kBRegs; ++r) {
            lo.r[r] = pair.r[r];
            hi.r[r] = pair.r[Math::kBRegs + r];
          }
          bf[j] = Math::prepare(lo);
          bf[j + 1] = Math::prepare(hi);
        }
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
          for (int j = 0; j < NT; ++j) {
            if constexpr (Math::kPromote) {
              // This step's product starts from zero and is added in float32 (see Math).
              Acc step[kCRegs] = {};
              Math::mma(step, af[i], bf[j]);
#pragma unroll
              for (int r = 0; r < kCRegs; ++r) acc[i][j][r] += step[r];
            } else {
              Math::mma(acc[i][j], af[i], bf[j]);
            }
          }
      }
    });

    // Lane (g, t4) holds rows g and g + 8 of each instruction tile, columns 2 t4 and 2 t4 + 1.
    const int g = lane / 4, t4 = lane % 4;
    auto output = [&](int i, int j, int half, int e) {
      Acc v = acc[i][j][2 * half + e];
      if constexpr (Math::kRecomputeNaN) {
        const int64_t row = m0 + warp_m + i * M + g + 8 * half;
        const int64_t col = n0 + warp_n + j * 8 + 2 * t4 + e;
        if (isnan(v) && row < args.m && col < args.n)
          v = exact_dot<kARowMajor, kBRowMajor>(w.a, args.lda, w.b, args.ldb, row, col, w.k_begin,
                                                w.k_begin + w.k_len);
      }
      return v;
    };
    store_output_tile<BM, BN, Tile::kThreads, MT, NT, kStagedEpilogue>(
        output, args.c + w.z * args.m * args.n, args.m, args.n, m0, n0, warp_m, warp_n, smem);
  });
}

}  // namespace tiledmm
