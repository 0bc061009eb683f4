// The K loop of the kernels whose every warp both copies and computes (gemm_mma on the tensor
// cores, gemm_tiled on the CUDA cores): K advances in tiles of BK through a ring of kStages
// shared-memory stages; while the warps multiply the tile in one stage, cp.async copies of the
// next kStages - 1 tiles are in flight, with one barrier per tile. (gemm_wgmma's producer and
// math warps hand stages over by mbarriers instead.)
#pragma once

#include <cstdint>

#include "ptx.cuh"

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

// What run_k_tiles copies once the item's own tiles are all in flight: nothing (a block whose next
// item starts a new pipeline), or, in a persistent block, its next item's first tiles.
struct NothingBeyond {
  __device__ __forceinline__ bool operator()(int64_t, int) const { return false; }
};

// One work item's K loop once the copies of its first kStages - 1 tiles are in flight, one
// committed group each, in the stages from first_stage on (mod kStages): its kStages stages of A
// at a_stages and of B at b_stages, filled by the loaders; m_left, n_left: the matrix extent left
// from the output tile's origin; k_len: the item's length of K. multiply(a_stage, b_stage) runs
// the math of one tile once every thread's copies of it have landed. Where a stage frees up
// after the item's last tile has been asked for, beyond(j, stage) may start the copies of tile j
// of what comes next into it (and says whether it did), so that they land under this item's
// math. Returns the stage after the item's last (that of the first tile beyond).
template <int kStages, int BK, class ALoader, class BLoader, typename T, typename Multiply,
          typename Beyond = NothingBeyond>
__device__ __forceinline__ int run_k_tiles(ALoader& a_loader, BLoader& b_loader, T* a_stages, T* b_stages,
                                           int64_t m_left, int64_t n_left, int64_t k_len, const Multiply& multiply,
                                           int first_stage = 0, const Beyond& beyond = {}) {
  static_assert(kStages >= 2, "the pipeline needs two stages or more");
  const int64_t k_tiles = (k_len + BK - 1) / BK;
  int stage = first_stage;  // the stage of tile t
  for (int64_t t = 0; t < k_tiles; ++t) {
    ptx::cp_async_wait<kStages - 2>();  // tile t has landed (this thread's copies) ...
    __syncthreads();  // ... everyone's, and everyone is done with tile t - 1's stage
    const int64_t next = t + kStages - 1;
    const int next_stage = stage == 0 ? kStages - 1 : stage - 1;  // tile t - 1's stage
    bool fetched = next < k_tiles;
    if (fetched) fetch_k_tile<BK>(a_loader, b_loader, a_stages, b_stages, next_stage, next, m_left, n_left, k_len);
    else fetched = beyond(next - k_tiles, next_stage);
    ptx::cp_async_commit();
    multiply(static_cast<const T*>(a_stages + stage * ALoader::kStageElems),
             static_cast<const T*>(b_stages + stage * BLoader::kStageElems));
    // Register-staged loaders: the next tile's loads go into its stage after the math.
    if (fetched) deposit_k_tile(a_loader, b_loader, a_stages, b_stages, next_stage);
    stage = stage + 1 == kStages ? 0 : stage + 1;
  }
  return stage;
}

// One work item's K loop from the start (loaders started at the item's first tile): the copies of
// its first kStages - 1 tiles, then run_k_tiles.
template <int kStages, int BK, class ALoader, class BLoader, typename T, typename Multiply>
__device__ __forceinline__ void multiply_k_tiles(ALoader& a_loader, BLoader& b_loader, T* a_stages,
                                                 T* b_stages, int64_t m_left, int64_t n_left,
                                                 int64_t k_len, const Multiply& multiply) {
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
  run_k_tiles<kStages, BK>(a_loader, b_loader, a_stages, b_stages, m_left, n_left, k_len, multiply);
}

}  // namespace tiledmm
