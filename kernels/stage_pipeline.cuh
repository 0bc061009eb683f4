// The K loop of the kernels whose every warp both copies and computes (gemm_mma on the tensor
// cores, gemm_tiled on the CUDA cores): K advances in tiles of BK through a ring of kStages
// shared-memory stages; while the warps multiply the tile in one stage, cp.async copies of the
// next kStages - 1 tiles are in flight, with one barrier per tile. (gemm_wgmma's producer and
// math warps hand stages over by mbarriers instead.)
#pragma once

#include <cstdint>

#include "ptx.cuh"

namespace tiledmm {

// One work item's K loop: its kStages stages of A at a_stages and of B at b_stages, filled by
// the loaders (started at the item's first tile); m_left, n_left: the matrix extent left from
// the output tile's origin; k_len: the item's length of K. multiply(a_stage, b_stage) runs the
// math of one tile once every thread's copies of it have landed.
template <int kStages, int BK, class ALoader, class BLoader, typename T, typename Multiply>
__device__ __forceinline__ void multiply_k_tiles(ALoader& a_loader, BLoader& b_loader, T* a_stages,
                                                 T* b_stages, int64_t m_left, int64_t n_left,
                                                 int64_t k_len, const Multiply& multiply) {
  static_assert(kStages >= 2, "the pipeline needs two stages or more");
  constexpr int kAElems = ALoader::kStageElems, kBElems = BLoader::kStageElems;
  const int64_t k_tiles = (k_len + BK - 1) / BK;
  __syncthreads();  // the previous work item's warps are done with the stages
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < k_tiles) {
      a_loader.fetch(a_stages + s * kAElems, m_left, k_len - s * BK);
      b_loader.fetch(b_stages + s * kBElems, n_left, k_len - s * BK);
      a_loader.deposit(a_stages + s * kAElems);
      b_loader.deposit(b_stages + s * kBElems);
    }
    ptx::cp_async_commit();
  }

  int stage = 0;  // the stage of tile t
  for (int64_t t = 0; t < k_tiles; ++t) {
    ptx::cp_async_wait<kStages - 2>();  // tile t has landed (this thread's copies) ...
    __syncthreads();  // ... everyone's, and everyone is done with tile t - 1's stage
    const int64_t next = t + kStages - 1;
    const int next_stage = stage == 0 ? kStages - 1 : stage - 1;  // tile t - 1's stage
    if (next < k_tiles) {
      a_loader.fetch(a_stages + next_stage * kAElems, m_left, k_len - next * BK);
      b_loader.fetch(b_stages + next_stage * kBElems, n_left, k_len - next * BK);
    }
    ptx::cp_async_commit();
    multiply(static_cast<const T*>(a_stages + stage * kAElems),
             static_cast<const T*>(b_stages + stage * kBElems));
    // kStaged loaders: the registers of the next tile's loads go into its stage after the math.
    if (next < k_tiles) {
      a_loader.deposit(a_stages + next_stage * kAElems);
      b_loader.deposit(b_stages + next_stage * kBElems);
    }
    stage = stage + 1 == kStages ? 0 : stage + 1;
  }
}

}  // namespace tiledmm
