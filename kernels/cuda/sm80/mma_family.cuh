// The mma.sync families: gemm_mma.cuh's kernel, for each precision path of mma_math.cuh, as the
// dispatcher runs it (gemm_dispatch.cuh): each path's tile table (MmaTileTable), and the family's
// planning knobs (plan_launch), launch and description (MmaFamily).
#pragma once

#include <ostream>
#include <tuple>

#include "cuda/common/stage_loader.cuh"
#include "cuda/dispatch/family.cuh"
#include "cuda/sm80/gemm_mma.cuh"
#include "cuda/sm80/mma_math.cuh"
#include "plan/gemm_problem.h"

namespace tiledmm {

// Tensor cores (gemm_mma), for one precision path. Every stage line is 128 bytes along k
// (BK * sizeof(T) = 128), so BK is 32 for 32-bit types, 64 for 16-bit, 16 for float64.
// FallbackTiles serve operands without 16-byte alignment; 16-bit ones stage their loads through
// registers, which the 256 x 128 tile cannot spare.
template <class Math>
struct MmaTileTable;
// Chosen from scripts/tile_sweep.py on an H200 (bench/NOTES.md). Tiles with two blocks per SM
// (the last argument) trade a few spilled registers for occupancy: measured faster. The 256 x 128
// fp16/bf16 tile needs 144 KiB of shared memory: GPUs with less fall back (plan_launch).
template <typename Half>
struct MmaTileTable<HalfMath<Half>> {
  using Tiles = std::tuple<MmaTile<256, 128, 64, 4, 2, 3>, MmaTile<128, 128, 64, 2, 4, 3, 2>,
                           MmaTile<128, 128, 64, 2, 4, 2, 2>, MmaTile<64, 64, 64, 2, 2, 3, 2>>;
  using FallbackTiles = std::tuple<MmaTile<128, 128, 64, 2, 4, 3>, MmaTile<128, 128, 64, 2, 4, 3>,
                                   MmaTile<128, 128, 64, 2, 4, 2>, MmaTile<64, 64, 64, 2, 2, 3>>;
};
template <>
struct MmaTileTable<Tf32Math> {
  using Tiles = std::tuple<MmaTile<128, 128, 32, 2, 4, 3, 2>, MmaTile<128, 128, 32, 2, 4, 3, 2>,
                           MmaTile<128, 128, 32, 2, 4, 2, 2>, MmaTile<64, 64, 32, 2, 2, 3, 2>>;
  using FallbackTiles = Tiles;
};
// 3xTF32 splits every fragment in two: small warp tiles, and many blocks per SM for latency.
template <>
struct MmaTileTable<Split3xTf32Math> {
  using Tiles = std::tuple<MmaTile<64, 64, 32, 2, 2, 3, 2>, MmaTile<64, 128, 32, 2, 4, 3, 2>,
                           MmaTile<64, 128, 32, 2, 4, 2, 2>, MmaTile<64, 64, 32, 2, 2, 3, 2>>;
  using FallbackTiles = Tiles;
};
template <>
struct MmaTileTable<DoubleMath> {
  using Tiles = std::tuple<MmaTile<128, 128, 16, 4, 2, 3>, MmaTile<64, 128, 16, 2, 4, 3>,
                           MmaTile<64, 64, 16, 2, 2, 3, 2>, MmaTile<64, 64, 16, 2, 2, 3, 2>>;
  using FallbackTiles = Tiles;
};

template <class Math>
struct MmaFamily {
  using T = typename Math::T;
  using Acc = typename Math::Acc;
  using Tiles = typename MmaTileTable<Math>::Tiles;
  using FallbackTiles = typename MmaTileTable<Math>::FallbackTiles;
  static constexpr const char* kName = Math::kName;
  static constexpr int kLargeMinWaves = 1;  // the large tile pays from one block per SM
  static constexpr bool kNarrowOnSmallTile = false;
  static constexpr bool kSplitOnLargeTile = false;
  static constexpr int kMediumBlocksPerSm = 2;  // (float64's medium tile fits one: not yet re-measured)
  static constexpr double kPsPerOperandElement = 0;  // not wave-timed: plan_launch's tile roles
  static constexpr bool kTransposesRowMajorProducts = false;
  static constexpr bool kTransposesMisalignedNt = false;
  static constexpr bool kClassTiles = false;

  template <class Tile, typename Out, bool kVec, bool kARowMajor, bool kBRowMajor, bool>
  static void launch(const GemmArgs<T, Out>& args, const DeviceLimits& device, cudaStream_t stream) {
    constexpr LoadMode kMode = kVec ? LoadMode::kVector : fallback_load_mode<T>();
    launch_with_smem<gemm_mma_kernel<Math, Tile, kMode, kMode, kARowMajor, kBRowMajor, Out>, Tile,
                     mma_smem_bytes<T, Tile>()>(args, device.num_sms, stream);
  }
  template <class Tile, bool kVec>
  static void describe(std::ostream& s, const GemmProblem&, const DeviceLimits&) {
    s << Tile::BM << "x" << Tile::BN << "x" << Tile::BK << " (m x n x k per block), "
      << Tile::kWarpsM * Tile::kWarpsN << " warps of " << Tile::WTM << "x" << Tile::WTN << ", "
      << Tile::kStages << "-stage cp.async pipeline (" << mma_smem_bytes<T, Tile>() / 1024
      << " KiB shared memory), " << Tile::kMinBlocks << " block(s) per SM";
  }
  template <class Tile, bool kVec>
  static int smem_bytes(const GemmProblem&) {
    return mma_smem_bytes<T, Tile>();
  }
  static const char* load_text(bool vec) {
    if (vec) return "16-byte cp.async";
    return sizeof(T) == 2 ? "element loads staged through registers (no 16-byte alignment)"
                          : "element-wise cp.async (no 16-byte alignment)";
  }
};

}  // namespace tiledmm
