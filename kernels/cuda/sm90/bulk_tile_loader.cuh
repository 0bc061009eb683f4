// Operand tiles by bulk tensor copies (the TMA) for the warp-specialized wgmma kernels, through a
// tensor map with the 128-byte swizzle, which lands a box in Swizzle128Tile's layout: a K-major
// tile (its lines along x, k within one 128-byte row) is one box of BX lines (fewer where the map's
// box has fewer: `bytes`, the Hopper GEMM core's operands of few lines); an MN-major tile
// (lines along k, x across 128-byte column blocks) is one box of BK lines per column block, as many
// blocks as cover BX (BX 160: three, the last one's second half the next tile's columns, which
// wgmma m64n160 does not read; 64-byte blocks in the 64-byte swizzle, exact, measured slower where
// many blocks share B's lines: bench/NOTES.md item 176). The map's element type may change the
// values on the way (TFLOAT32 rounds float32 to nearest TF32).
// Same interface as StageLoader, with nothing to finish once the copies land.
#pragma once

#include <cstdint>

#include <cuda.h>

#include "cuda/common/block_sync.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/common/stage_loader.cuh"

namespace tiledmm {

// A tile per K step, issued by one producer thread into the stage and counted on the
// stage's full mbarrier (whose arrivals it does not change: the producer's threads still arrive
// once the rest of the stage is ready). Boxes past the end of K, or of the matrix's lines, land
// as zeros; slices of a split K are whole tiles, so a box leaves its slice only there.
//   kParts > 1: the tile is shared by a cluster of kParts blocks; each issues part `part` of it (a
// K-major tile's lines, BX / kParts to a box; an MN-major tile's column blocks) into the same stage
// of every block of the cluster (multicast), and each counts the whole tile's bytes.
//   kRereads: tiles from k = wrap_at on come from wrap_back elements of K earlier (the scaled
// splits' second read of their big parts, GemmArgs::reread_k).
template <typename T, int BX, int BK, bool kAlongK, int kParts = 1, bool kRereads = false>
struct BulkTileLoader {
  static constexpr int kBlock = 128 / static_cast<int>(sizeof(T));  // a 128-byte column block's elements
  static constexpr int kWidth = kAlongK ? BX : (BX + kBlock - 1) / kBlock * kBlock;  // the lines or columns copied
  using Tile = Swizzle128Tile<T, kAlongK ? kWidth : BK, kAlongK ? BK : kWidth>;
  static constexpr int kBoxes = Tile::kLineElems / Tile::kBlockElems;  // column blocks
  static constexpr int kBoxLines = kAlongK ? BX / kParts : Tile::kLines;  // the map's box
  static_assert(Tile::kLines <= 256 && (!kAlongK || kBoxes == 1), "a box: one 128-byte row by at most 256 lines");
  static_assert(kAlongK ? kBoxLines % 8 == 0 : kBoxes % kParts == 0, "whole swizzle atoms, whole column blocks");
  static constexpr bool kRegisterStaged = false, kFinishesInPlace = false, kFinishNeedsItem = false;
  static constexpr int kStageTiles = 1, kStageElems = Tile::kElems, kRingElems = 0;

  const CUtensorMap* map = nullptr;
  int x0 = 0, matrix = 0;  // the next tile's coordinates in the map (the map holds them in 32 bits) ...
  int64_t k = 0;           // ... and k, which passes the map's end after the last tile
  bool issuer = false;     // this thread issues the copies
  int part = 0;
  // What a tile's copies land: a K-major tile whose map has boxes of fewer than BX lines lands their
  // bytes (kParts 1 only: a shared tile's blocks each count the whole tile).
  uint32_t bytes = Tile::kElems * sizeof(T);
  int64_t wrap_at = INT64_MAX, wrap_back = 0;  // kRereads: set by rereads()

  // matrix: the operand's matrix in the map (0 where the batch broadcasts it); part: this block's
  // rank in the cluster that shares the tile.
  __device__ __forceinline__ void start(const CUtensorMap* map_, int64_t x0_, int64_t k0, int64_t matrix_, int tid,
                                        int part_ = 0) {
    map = map_;
    x0 = static_cast<int>(x0_);
    k = k0;
    matrix = static_cast<int>(matrix_);
    issuer = tid == 0;
    part = part_;
  }
  // With kRereads: tiles from k = at on are copied from `back` elements of K earlier.
  __device__ __forceinline__ void rereads(int64_t at, int64_t back) {
    wrap_at = at;
    wrap_back = back;
  }
  // The next tile into `stage` (1024-byte aligned), landing on `full`.
  __device__ __forceinline__ void fetch(T* stage, uint64_t* full) {
    if (issuer) {
      sync::mbarrier_expect_tx(full, bytes);
      const int kc = static_cast<int>(kRereads && k >= wrap_at ? k - wrap_back : k);
      auto load = [&](T* to, int x, int y) {
        if constexpr (kParts == 1) ptx::bulk_tensor_load(map, to, full, x, y, matrix);
        else ptx::bulk_tensor_load_multicast(map, to, full, x, y, matrix, (1u << kParts) - 1);
      };
      if constexpr (kAlongK) {
        load(stage + part * kBoxLines * BK, kc, x0 + part * kBoxLines);
      } else {
#pragma unroll
        for (int b = part * kBoxes / kParts; b < (part + 1) * kBoxes / kParts; ++b)
          load(stage + b * Tile::kLines * Tile::kBlockElems, x0 + b * Tile::kBlockElems, kc);
      }
    }
    k += BK;
  }
  // Past the next tile, which another thread copies.
  __device__ __forceinline__ void skip() { k += BK; }
  __device__ __forceinline__ void finish(T* /*stage*/) const {}
};

}  // namespace tiledmm
