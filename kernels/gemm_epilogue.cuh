// Writing a block's output tile (both tensor-core kernels). The accumulators are laid out as the
// mma.sync m16n8 result, which wgmma's m64nN result repeats: each warp holds MT x NT tiles of
// 16 x 8 at (warp_m + 16 i, warp_n + 8 j), lane (g, t4) rows g and g + 8, columns 2 t4 and 2 t4 + 1.
#pragma once

#include <cstdint>

#include "gemm_common.cuh"
#include "ptx.cuh"

namespace tiledmm {

// Row padding of the staged tile: one 16-byte chunk, so that the rows start in different banks.
template <int BN, typename Out>
constexpr int kStagedOutLd = BN + 16 / static_cast<int>(sizeof(Out));

// Whether a BM x BN tile of Out fits in smem_bytes of shared memory for the staged epilogue.
template <int BM, int BN, typename Out>
constexpr bool staged_output_fits(int smem_bytes) {
  return BM * kStagedOutLd<BN, Out> * static_cast<int>(sizeof(Out)) <= smem_bytes;
}

// value(i, j, half, e): the accumulator of row g + 8 half, column 2 t4 + e of tile (i, j).
// c: the row-major m x n output; (m0, n0): the block's tile. kStaged: through shared memory (over
// the stages, which every warp must be done with), so that global memory sees whole 16-byte row
// segments; otherwise pairs of adjacent outputs straight from the registers.
template <int BM, int BN, int kThreads, int MT, int NT, bool kStaged, typename Out, typename Value>
__device__ __forceinline__ void store_output_tile(const Value& value, Out* c, int64_t m, int64_t n,
                                                  int64_t m0, int64_t n0, int warp_m, int warp_n,
                                                  unsigned char* smem) {
  const int tid = threadIdx.x, lane = tid % 32, g = lane / 4, t4 = lane % 4;
  if constexpr (kStaged) {
    constexpr int kOutLd = kStagedOutLd<BN, Out>;
    ptx::cp_async_wait<0>();
    __syncthreads();  // every warp is done with the stages the tile is written over
    Out* tile = reinterpret_cast<Out*>(smem);
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
      for (int half = 0; half < 2; ++half)
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          Out* p = tile + (warp_m + i * 16 + g + 8 * half) * kOutLd + warp_n + j * 8 + 2 * t4;
          store_pair(p, value(i, j, half, 0), value(i, j, half, 1));
        }
    __syncthreads();
    constexpr int kVec = 16 / static_cast<int>(sizeof(Out)), kRowVecs = BN / kVec;
    const bool vec = n % kVec == 0 && reinterpret_cast<uintptr_t>(c) % 16 == 0;
    for (int v = tid; v < BM * kRowVecs; v += kThreads) {
      const int r = v / kRowVecs, col = (v % kRowVecs) * kVec;
      const int64_t row = m0 + r;
      if (row >= m || n0 + col >= n) continue;
      const Out* src = tile + r * kOutLd + col;
      Out* dst = c + row * n + n0 + col;
      if (vec) {
        *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
      } else {
        for (int e = 0; e < kVec && n0 + col + e < n; ++e) dst[e] = src[e];
      }
    }
  } else {
    const bool pairs = n % 2 == 0;  // two adjacent outputs make one aligned store
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int64_t row = m0 + warp_m + i * 16 + g + 8 * half;
        if (row >= m) continue;
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          const int64_t col = n0 + warp_n + j * 8 + 2 * t4;
          Out* p = c + row * n + col;
          if (pairs && col < n) {
            store_pair(p, value(i, j, half, 0), value(i, j, half, 1));
          } else {
            if (col < n) p[0] = from_acc<Out>(value(i, j, half, 0));
            if (col + 1 < n) p[1] = from_acc<Out>(value(i, j, half, 1));
          }
        }
      }
  }
}

}  // namespace tiledmm
