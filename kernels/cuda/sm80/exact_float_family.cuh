// The exact float32 family: gemm_tiled.cuh's kernel on the CUDA cores as the dispatcher runs it
// (gemm_dispatch.cuh): its tile table, the tile each layout runs, where the persistent short-K
// tile runs on Hopper, its planning knobs (plan_launch), its launch and its description.
#pragma once

#include <cstdint>
#include <ostream>
#include <tuple>
#include <type_traits>

#include "cuda/common/stage_loader.cuh"
#include "cuda/common/tensor_maps.h"
#include "cuda/dispatch/family.cuh"
#include "cuda/sm80/gemm_tiled.cuh"
#include "plan/gemm_problem.h"

namespace tiledmm {

// Exact float32 on the CUDA cores (gemm_tiled). Tiles from sweeps on an H100 (bench/NOTES.md
// items 63-66, 69, 82-83): 128 x 256 with 8 warps of 32 x 128 and 8 x 16 outputs per thread, one
// block per SM (128 x 128 tiles of 4 warps at two blocks per SM measured slower). Operands contiguous along K
// are transposed by 4-byte cp.async copies (nn.Linear's x @ W^T 0.87x torch, against 0.78x
// through registers, whose 128 x 256 x 32 kernels spill), except where short K has only A
// contiguous along K (smallK 1.14x against 1.11x). BK = 32 on large aligned outputs and short K;
// BK = 16 for split K (largeK 0.91x against 0.85x) and without 16-byte alignment (irregular 0.96x
// against 0.93x). Short K without 16-byte alignment, or with B contiguous along K, runs 8 x 8
// outputs per thread at two blocks per SM (8205 x 63 x 5921: 0.59-0.66x torch in the four layouts,
// against 0.51-0.53x on 128 x 256, H200; at 128 registers the tile spills 56-172 bytes, all
// outside the K loop).
struct ExactFloatFamily {
  using T = float;
  using Acc = float;
  using Wide = TiledTile<128, 256, 32, 4, 2, 8, 16, 3, 1, true>;
  using Deep = TiledTile<128, 256, 16, 4, 2, 8, 16, 3, 1, true>;  // BK = 16
  using Registers = TiledTile<128, 256, 32, 4, 2, 8, 16, 3>;       // transposing through registers
  using TwoPerSm = TiledTile<128, 128, 32, 4, 2, 8, 8, 3, 2, true>;
  using Small = TiledTile<64, 64, 16, 2, 2, 8, 4, 3, 4, true>;
  using Tiles = std::tuple<Wide, Deep, Registers, Small>;  // large, medium, short K, small
  using FallbackTiles = std::tuple<Deep, Deep, TwoPerSm, Small>;
  // The tile a layout runs: where B is contiguous along K the register transposer spills, and
  // short K runs the two-blocks tile, which copies (x @ W^T on an H200: 8192 x 16 x 4096 0.75x
  // torch against 0.73x, 32768 x 64 x 32768 1.07x against 1.02x, 1.05x against 0.92x on an H100;
  // A^T x B^T the same or better; K = 256 0.84x against 0.83x, where 128 x 256 copying read 0.93x
  // but 0.66x at K = 16: bench/NOTES.md item 83).
  template <class Tile, bool kBRowMajor>
  using LayoutTile = std::conditional_t<std::is_same_v<Tile, Registers> && !kBRowMajor, TwoPerSm, Tile>;
  // The short-K register tile on Hopper, where the output allows a tensor map and K fits in two
  // stages: persistent blocks whose output tiles leave by bulk copies while the next tile is
  // computed; A's whole K stays in shared memory while a block's consecutive tiles share its
  // rows, and B's tiles come by bulk tensor copies (smallK 1.20x -> 1.35x torch on an H200,
  // bench/NOTES.md item 101; with the 128 KiB buffer, all 227 KiB of shared memory). Longer K
  // measured slower than the register tile (K = 256: 0.97x torch against 1.03x; K = 64, A^T x B:
  // 1.14x against 1.08x; item 85): copies asked for after a tile's bulk copies land behind them.
  // Two rounds of k steps unrolled, not all eight: a loop that runs twice per tile fetched its 77
  // KB of code anew each time (smallK 1.15x against 1.12x; long K loses 2-5% that way, so the
  // other tiles unroll all).
  using Persistent = TiledTile<128, 256, 32, 4, 2, 8, 16, 2, 1, true, true, 2>;
  template <class Tile>
  static bool runs_persistent(const DeviceLimits& device, const void* c, int64_t m, int64_t n, int64_t k,
                              int64_t matrices) {
    return std::is_same_v<Tile, Registers> && device.wgmma && k <= Persistent::kStages * Persistent::BK &&
           output_map_fits(c, n, m, matrices, sizeof(float));
  }
  static constexpr const char* kName = "gemm_tiled: exact float32 fused multiply-adds on CUDA cores";
  static constexpr int kLargeMinWaves = 2;  // BK = 32 from two waves of blocks
  // Outputs narrower than 256 columns or 128 rows (smallK's backward products, 32768 x 64 and
  // 64 x 32768) take the small tile: the medium one would leave up to 3/4 of its columns empty
  // (smallK forward+backward 0.49x torch).
  static constexpr bool kNarrowOnSmallTile = true;
  static constexpr bool kSplitOnLargeTile = false;  // split K runs the medium tile ...
  static constexpr int kMediumBlocksPerSm = 1;      // ... one block per SM (66 slices of largeK: 0.87x
                                                    // torch, against 0.85x with 132)
  static constexpr double kPsPerOperandElement = 0;  // not wave-timed: plan_launch's tile roles
  static constexpr bool kTransposesRowMajorProducts = false;
  static constexpr bool kTransposesMisalignedNt = false;
  static constexpr bool kClassTiles = false;
  // Without 16-byte alignment: element copies, each cp.async instruction a warp's run of
  // consecutive elements (no bank conflicts); operands contiguous along K are copied 4 bytes at a
  // time anyway.
  static constexpr LoadMode mode(bool vec) { return vec ? LoadMode::kVector : LoadMode::kWarpElement; }

  template <class TableTile, typename Out, bool kVec, bool kARowMajor, bool kBRowMajor, bool>
  static void launch(const GemmArgs<T, Out>& args, const DeviceLimits& device, cudaStream_t stream) {
    using Tile = LayoutTile<TableTile, kBRowMajor>;
    constexpr LoadMode kMode = mode(kVec);
    auto launch_tile = [&](auto tile, const TensorMap& map, const TensorMap& b_map) {
      using S = decltype(tile);
      launch_with_smem<gemm_tiled_kernel<S, kMode, kARowMajor, kBRowMajor, Out>, S,
                       TiledStages<S, kMode, kARowMajor, kBRowMajor>::kSmemBytes>(args, device.num_sms, stream, map,
                                                                                  b_map);
    };
    if constexpr (std::is_same_v<Tile, Registers>) {
      if (runs_persistent<Tile>(device, args.c, args.m, args.n, args.k, args.batch * args.splits)) {
        const TensorMap map = make_output_map(args.c, args.n, args.m, args.batch * args.splits, Persistent::BM);
        const TensorMap b_map = make_operand_map(args.b, args.n, args.k, args.batch, args.ldb, args.batch_stride_b,
                                                 Persistent::BN, Persistent::BK, CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
                                                 CU_TENSOR_MAP_SWIZZLE_NONE);
        if (map.valid && b_map.valid) return launch_tile(Persistent{}, map, b_map);
      }
    }
    launch_tile(Tile{}, TensorMap{}, TensorMap{});
  }
  template <class TableTile, bool kVec>
  static void describe(std::ostream& s, const GemmProblem& p, const DeviceLimits& device) {
    with_bool(p.b.row_major, [&](auto b_row) {
      using Tile = LayoutTile<TableTile, decltype(b_row)::value>;
      if constexpr (std::is_same_v<Tile, Registers>) {
        if (runs_persistent<Tile>(device, p.c, p.m, p.n, p.k, p.batch)) return describe_layout<Persistent, kVec>(s, p);
      }
      describe_layout<Tile, kVec>(s, p);
    });
  }
  template <class Tile, bool kVec>
  static void describe_layout(std::ostream& s, const GemmProblem& p) {
    s << Tile::BM << "x" << Tile::BN << "x" << Tile::BK << " (m x n x k per block), "
      << Tile::kWarpsM * Tile::kWarpsN << " warps of " << Tile::WTM << "x" << Tile::WTN << ", " << Tile::TM
      << "x" << Tile::TN << " outputs per thread, " << Tile::kStages << "-stage pipeline ("
      << tile_smem_bytes<Tile, kVec>(p) / 1024 << " KiB shared memory), " << Tile::kMinBlocks
      << " block(s) per SM";
    if (p.a.row_major || !p.b.row_major)  // an operand contiguous along k
      s << "; operands contiguous along k transposed "
        << (Tile::kAsyncTranspose ? "by 4-byte cp.async copies" : "through registers");
    if constexpr (Tile::kPersistent)
      s << "; persistent (each block walks output tiles; a tile's result leaves its own shared-memory buffer "
           "by bulk asynchronous copies while the next tile is computed); A's whole K kept in shared memory "
           "across a block's consecutive tiles, B's tiles by bulk tensor copies";
  }
  static const char* load_text(bool vec) {
    return vec ? "16-byte loads: cp.async for an operand contiguous along m (A) or n (B); one contiguous "
                 "along k is transposed into its stage on the way"
               : "element loads (no 16-byte alignment): cp.async by a warp's runs of consecutive elements for "
                 "an operand contiguous along m (A) or n (B); one contiguous along k is transposed into its "
                 "stage on the way";
  }
  // Shared memory of a tile as it runs in the problem's layout (Tile: after LayoutTile).
  template <class Tile, bool kVec>
  static int tile_smem_bytes(const GemmProblem& p) {
    int bytes = 0;
    with_bool(p.a.row_major, [&](auto a_row) {
      with_bool(p.b.row_major, [&](auto b_row) {
        bytes = TiledStages<Tile, mode(kVec), decltype(a_row)::value, decltype(b_row)::value>::kSmemBytes;
      });
    });
    return bytes;
  }
  // A table tile's (the persistent variant needs more, on Hopper, which has it).
  template <class TableTile, bool kVec>
  static int smem_bytes(const GemmProblem& p) {
    int bytes = 0;
    with_bool(p.b.row_major, [&](auto b_row) {
      bytes = tile_smem_bytes<LayoutTile<TableTile, decltype(b_row)::value>, kVec>(p);
    });
    return bytes;
  }
};

}  // namespace tiledmm
