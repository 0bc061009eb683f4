// The K loop of the kernels whose every warp both copies and computes (gemm_mma on the tensor
// cores, gemm_tiled on the CUDA cores): K advances in tiles of BK through a ring of kStages
// shared-memory stages; while the warps multiply the tile in one stage, cp.async copies of the
// next kStages - 1 tiles are in flight, with one barrier per tile. (gemm_wgmma's producer and
// math warps hand stages over by mbarriers instead.)
#pragma once

#include <cstdint>

#include "cuda/common/ptx.cuh"

namespace tiledmm {

// Copies of K tile t of a work item into stage s (loads into registers, for loaders that stage
// through them: deposit_k_tile stores those).
template <int BK, class ALoader, class BLoader, typename T>
__device__ __forceinline__ void fetch_k_tile(ALoader& a_loader, BLoader& b_loader, T* a_stages, T* b_stages,
                                             int s, int64_t t, int64_t m_left, int64_t n_left, int64_t k_len) {
  a_loader.fetch(a_stages + s * ALoader::kStageElems, m_left, k_len - t * BK);
  b_loader.fetch(b_stages + s * BLoader::kStageElems, n_left, k_len - t * BK);
}
template <class ALoader, class BLoader, typename T>
__device__ __forceinline__ void deposit_k_tile(const ALoader& a_loader, const BLoader& b_loader, T* a_stages,
                                               T* b_stages, int s) {
  a_loader.deposit(a_stages + s * ALoader::kStageElems);
  b_loader.deposit(b_stages + s * BLoader::kStageElems);
}

// One work item's K loop from the start (loaders started at the item's first tile): the copies of
// its first kStages - 1 tiles, then one tile at a time: its kStages stages of A at a_stages and of
// B at b_stages, filled by the loaders; m_left, n_left: the matrix extent left from the output
// tile's origin; k_len: the item's length of K. multiply(a_stage, b_stage) runs the math of one
// tile once every thread's copies of it have landed.
template <int kStages, int BK, class ALoader, class BLoader, typename T, typename Multiply>
__device__ __forceinline__ void multiply_k_tiles(ALoader& a_loader, BLoader& b_loader, T* a_stages,
                                                 T* b_stages, int64_t m_left, int64_t n_left,
                                                 int64_t k_len, const Multiply& multiply) {
  static_assert(kStages >= 2, "the pipeline needs two stages or more");
  const int64_t k_tiles = (k_len + BK - 1) / BK;
  __syncthreads();  // the previous work item's warps are done with the stages
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < k_tiles) {
      fetch_k_tile<BK>(a_loader, b_loader, a_stages, b_stages, s, s, m_left, n_left, k_len);
      deposit_k_tile(a_loader, b_loader, a_stages, b_stages, s);
    }
    ptx::cp_async_commit();
  }
  int stage = 0;  // the stage of tile t
  for (int64_t t = 0; t < k_tiles; ++t) {
    ptx::cp_async_wait<kStages - 2>();  // tile t has landed (this thread's copies) ...
    __syncthreads();  // ... everyone's, and everyone is done with tile t - 1's stage
    const int64_t next = t + kStages - 1;
    const int next_stage = stage == 0 ? kStages - 1 : stage - 1;  // tile t - 1's stage
    if (next < k_tiles) fetch_k_tile<BK>(a_loader, b_loader, a_stages, b_stages, next_stage, next, m_left, n_left, k_len);
    ptx::cp_async_commit();
    multiply(static_cast<const T*>(a_stages + stage * ALoader::kStageElems),
             static_cast<const T*>(b_stages + stage * BLoader::kStageElems));
    // Register-staged loaders: the next tile's loads go into its stage after the math.
    if (next < k_tiles) deposit_k_tile(a_loader, b_loader, a_stages, b_stages, next_stage);
    stage = stage + 1 == kStages ? 0 : stage + 1;
  }
}

}  // namespace tiledmm
