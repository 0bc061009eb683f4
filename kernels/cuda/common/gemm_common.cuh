// What the kernels (CUDA-core gemm_tiled, tensor-core gemm_mma and gemm_wgmma) share: their
// arguments and work items, conversions between storage and accumulator types, and the split-K
// reduction.
#pragma once

#include <cstdint>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "plan/accumulator.h"

namespace tiledmm {

template <typename Acc, typename T>
__device__ __forceinline__ Acc to_acc(T x) { return static_cast<Acc>(x); }
template <>
__device__ __forceinline__ float to_acc<float, __half>(__half x) { return __half2float(x); }
template <>
__device__ __forceinline__ float to_acc<float, __nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T, typename Acc>
__device__ __forceinline__ T from_acc(Acc x) { return static_cast<T>(x); }
template <>
__device__ __forceinline__ __half from_acc<__half, float>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_acc<__nv_bfloat16, float>(float x) {
  return __float2bfloat16_rn(x);
}

// Out: T, or the accumulator type when K is split and each slice writes a partial product.
template <typename T, typename Out>
struct GemmArgs {
  const T* a;
  const T* b;
  Out* c;  // (batch * splits) m x n matrices, row-major (column-major for transposed products)
  int64_t lda, ldb, batch_stride_a, batch_stride_b;
  int64_t batch, m, n, k;
  int64_t splits, k_chunk;  // K is cut into `splits` slices of k_chunk (a multiple of BK)
  // Scaled float16 splits of float32 operands (scaled_split.cuh): output (z, i, j) is the sum times
  // row_scale[z * row_scale_stride + i] * col_scale[z * col_scale_stride + j]; unused elsewhere.
  const float* row_scale = nullptr;
  const float* col_scale = nullptr;
  int64_t row_scale_stride = 0, col_scale_stride = 0;
  // Splits stored as two segments of reread_k elements, A' = [lo | hi] and B' = [hi ; lo]: the K
  // tiles from 2 reread_k on read the big parts again, A's one segment back and B's two, so that the
  // product runs lo hi + hi lo + hi hi (bulk tensor copies only; 0: K is read as stored).
  int64_t reread_k = 0;
  // linear's bias, where the kernel adds it in its epilogue (the Hopper GEMM core, whose problems are
  // never transposed): output (z, i, j) gains bias[j * bias_stride].
  const T* bias = nullptr;
  int64_t bias_stride = 0;
};

// One work item of a block: a BM x BN tile of one matrix of the batch, over one slice of K.
template <typename T>
struct WorkItem {
  int64_t z;  // its (matrix of the batch, slice of K) pair: the index of the output matrix it writes
  int64_t m0, n0, k_begin, k_len, k_tiles;
  const T* a;  // the matrix's operands
  const T* b;
};

// The matrix of work item w in a tensor map of an operand whose matrices are batch_stride apart
// (make_operand_map: one matrix where the batch broadcasts it). The 64-bit division is skipped
// without K slices (items cost it every time).
template <typename T, typename Out>
__device__ __forceinline__ int64_t map_matrix(int64_t batch_stride, const GemmArgs<T, Out>& args,
                                              const WorkItem<T>& w) {
  return batch_stride == 0 ? 0 : args.splits == 1 ? w.z : w.z / args.splits;
}

// Work item (z, row tile mt, column tile nt): z = matrix * splits + slice is the (matrix of the
// batch, slice of K) pair.
template <int BM, int BN, int BK, typename T, typename Out>
__device__ __forceinline__ WorkItem<T> work_item(const GemmArgs<T, Out>& args, int64_t z, int64_t matrix,
                                                 int64_t slice, int64_t mt, int64_t nt) {
  const int64_t k_begin = slice * args.k_chunk;
  const int64_t k_len = min(args.k, k_begin + args.k_chunk) - k_begin;
  return WorkItem<T>{z, mt * BM, nt * BN, k_begin, k_len, (k_len + BK - 1) / BK,
                     args.a + matrix * args.batch_stride_a, args.b + matrix * args.batch_stride_b};
}

// A persistent block's work items: numbered columns fastest (kRowsFirst: rows), then the other
// tile index, then K slices, then matrices, it takes items blockIdx.x, blockIdx.x + gridDim.x, ...
// so that the blocks' items at any moment are neighbours along the output's lines in memory (a
// column-major output wants rows first); or, kContiguous, a range of
// consecutive items (the blocks' ranges differ in length by one at most), whose neighbours mostly
// share their rows of A. Each item is kept as its digits in those four radices, and the next one
// is found by adding the stride's digits with carries: decomposing every index by 64-bit
// divisions cost each warp ~300 instructions of serial latency an item (a fifth of a bf16
// short-K item's time on wgmma; bench/NOTES.md item 86).
template <int BM, int BN, int BK, bool kContiguous = false, bool kRowsFirst = false>
struct PersistentWalk {
  int64_t radix[4], digit[4], step[4];  // matrix, slice, then the slower and the faster tile index
  int64_t left;                         // kContiguous: the items left in the block's range

  template <typename T, typename Out>
  __device__ __forceinline__ explicit PersistentWalk(const GemmArgs<T, Out>& args)
      : radix{args.batch, args.splits, kRowsFirst ? (args.n + BN - 1) / BN : (args.m + BM - 1) / BM,
              kRowsFirst ? (args.m + BM - 1) / BM : (args.n + BN - 1) / BN} {
    if constexpr (kContiguous) {
      const int64_t items = radix[0] * radix[1] * radix[2] * radix[3];
      const int64_t first = items * blockIdx.x / gridDim.x;
      left = items * (blockIdx.x + 1) / gridDim.x - first;
      split(first, digit);
      split(1, step);
    } else {
      split(blockIdx.x, digit);
      split(gridDim.x, step);
    }
  }
  __device__ __forceinline__ void split(int64_t index, int64_t (&d)[4]) const {
#pragma unroll
    for (int j = 3; j > 0; --j) {
      d[j] = index % radix[j];
      index /= radix[j];
    }
    d[0] = index;
  }
  __device__ __forceinline__ bool valid() const { return kContiguous ? left > 0 : digit[0] < radix[0]; }
  // Each digit and its step are below their radix: one subtraction carries.
  __device__ __forceinline__ void advance() {
    if constexpr (kContiguous) --left;
    bool carry = false;
#pragma unroll
    for (int j = 3; j > 0; --j) {
      digit[j] += step[j] + carry;
      carry = digit[j] >= radix[j];
      if (carry) digit[j] -= radix[j];
    }
    digit[0] += step[0] + carry;
  }
  template <typename T, typename Out>
  __device__ __forceinline__ WorkItem<T> item(const GemmArgs<T, Out>& args) const {
    return work_item<BM, BN, BK>(args, digit[0] * args.splits + digit[1], digit[0], digit[1],
                                 digit[kRowsFirst ? 3 : 2], digit[kRowsFirst ? 2 : 3]);
  }
};

// Calls body(WorkItem<T>) for each of this block's work items; every warp of the block runs
// through the same items.
//   Default: block (x, y, z) takes column tile x, and grid-strides over row tiles (y) and
// (matrix, K slice) pairs z (gridDim.y and .z are capped at 65535).
//   kPersistent: a one-dimensional grid of about one block per SM walks all the tiles
// (PersistentWalk), so that a block's next tile can start while its last one's output is still
// being written; kRowsFirst: the walk's row tiles fastest (a column-major output).
template <int BM, int BN, int BK, bool kPersistent = false, bool kEveryRowTile = false, bool kRowsFirst = false,
          typename T, typename Out, typename Body>
__device__ __forceinline__ void for_each_work_item(const GemmArgs<T, Out>& args, const Body& body) {
  if constexpr (kPersistent) {
    for (PersistentWalk<BM, BN, BK, false, kRowsFirst> walk(args); walk.valid(); walk.advance())
      body(walk.item(args));
  } else {
    // kEveryRowTile: blocks whose row tile is past the matrix (a grid rounded up to whole clusters)
    // run it too, for the copies they share with the others.
    const int64_t m_tiles = kEveryRowTile ? gridDim.y : (args.m + BM - 1) / BM;
    for (int64_t z = blockIdx.z; z < args.batch * args.splits; z += gridDim.z)
      for (int64_t mt = blockIdx.y; mt < m_tiles; mt += gridDim.y)
        body(work_item<BM, BN, BK>(args, z, z / args.splits, z % args.splits, mt, blockIdx.x));
  }
}

// Two adjacent outputs (an even column of an even-width row, or a shared-memory tile) in one
// store.
template <typename Out, typename Acc>
__device__ __forceinline__ void store_pair(Out* p, Acc v0, Acc v1) {
  if constexpr (std::is_same_v<Out, float>) {
    *reinterpret_cast<float2*>(p) = make_float2(v0, v1);
  } else if constexpr (std::is_same_v<Out, double>) {
    *reinterpret_cast<double2*>(p) = make_double2(v0, v1);
  } else if constexpr (std::is_same_v<Out, __half>) {
    *reinterpret_cast<__half2*>(p) = __floats2half2_rn(v0, v1);
  } else {
    *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(v0, v1);
  }
}

// Sums the K slices' partial products in the accumulator type and rounds once to T.
template <typename T, typename Acc>
__global__ void splitk_reduce_kernel(const Acc* partial, T* c, int64_t mn, int64_t splits,
                                     int64_t total) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const Acc* slices = partial + (i / mn) * splits * mn + i % mn;
    Acc sum = Acc(0);
    for (int64_t s = 0; s < splits; ++s) sum += slices[s * mn];
    c[i] = from_acc<T>(sum);
  }
}

// Adds linear's bias to C's rows of n columns (C[i] += bias[(i % n) * stride]), summed in the
// accumulator type: for the kernels without an epilogue for it.
template <typename T>
__global__ void add_bias_kernel(T* c, const T* bias, int64_t n, int64_t stride, int64_t total) {
  using Acc = typename Accumulator<T>::type;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    c[i] = from_acc<T>(to_acc<Acc>(c[i]) + to_acc<Acc>(bias[(i % n) * stride]));
}

}  // namespace tiledmm
