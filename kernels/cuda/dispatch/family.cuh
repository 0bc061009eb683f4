// What every kernel family (gemm_dispatch.cuh lists them) is written against: the tile roles
// that index a family's tile table, what the dispatcher knows of the GPU (DeviceLimits), the grid
// of a tile's kernel and its launch with dynamic shared memory (and clusters), the test for
// 16-byte loads, and the limits of K splits.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <type_traits>

#include <cuda_runtime.h>

#include <torch/csrc/stable/macros.h>
#include <torch/headeronly/util/Exception.h>

#include "cuda/common/gemm_common.cuh"
#include "plan/gemm_problem.h"

namespace tiledmm {

// Tile tables are indexed by role; each family fills every role with the tile measured fastest
// for it (the "large" tile need not be the largest). The wave-timed families (plan_launch) choose
// among their large, medium and small tiles by modelled time instead; the roles below are the
// other families' rules, and kShortK is every family's.
enum TileRole : int {
  kLarge = 0,   // outputs at least one tile tall and wide that fill the GPU (kLargeMinWaves
                // blocks per SM) with this tile
  kMedium = 1,  // outputs that fill it once with this tile; its block count sizes split-K for speed
  kShortK = 2,  // K <= 256: several blocks per SM, or persistent blocks, so that writing one tile's
                // output overlaps another tile's loads and math
  kSmall = 3,   // outputs too small to fill the GPU, with K too short to split (and, where the
                // family says kNarrowOnSmallTile, outputs narrower than the medium tile)
};

// Calls f(std::bool_constant<value>{}) for a run-time bool.
template <typename F>
void with_bool(bool value, F&& f) {
  if (value) f(std::true_type{});
  else f(std::false_type{});
}

// What the dispatcher needs to know of the GPU.
struct DeviceLimits {
  int num_sms;
  int max_smem;  // shared memory one block may opt in to, in bytes (99 KiB on sm_86/89, 227 on sm_90)
  bool wgmma;    // a Hopper GPU (compute capability 9.0) and a build with sm_90a code
};

// Blocks of bm x bn tiles that cover the problem's outputs.
inline int64_t output_tiles(const GemmProblem& p, int64_t bm, int64_t bn) {
  return ((p.m + bm - 1) / bm) * ((p.n + bn - 1) / bn) * p.batch;
}

// Whether a tile's kernel walks the output tiles with a grid of kMinBlocks blocks per SM
// (WgmmaTile::kPersistent) rather than one block per tile.
template <class Tile, class = void>
struct IsPersistent : std::false_type {};
template <class Tile>
struct IsPersistent<Tile, std::void_t<decltype(Tile::kPersistent)>> : std::bool_constant<Tile::kPersistent> {};

// The grid of a tile's kernel: a block per column of output tiles, rows of tiles and (matrix, K
// slice) pairs past 65535 covered by grid-stride loops; or, for a persistent tile, kMinBlocks
// blocks per SM.
template <class Tile, typename T, typename Out>
dim3 launch_grid(const GemmArgs<T, Out>& args, int num_sms) {
  const int64_t n_tiles = (args.n + Tile::BN - 1) / Tile::BN, m_tiles = (args.m + Tile::BM - 1) / Tile::BM;
  const int64_t matrices = args.batch * args.splits;
  STD_TORCH_CHECK(n_tiles <= INT32_MAX, "tiledmm: n = ", args.n, " is too large");
  if constexpr (IsPersistent<Tile>::value)
    return dim3(static_cast<unsigned>(std::min<int64_t>(n_tiles * m_tiles * matrices, int64_t(num_sms) * Tile::kMinBlocks)));
  return dim3(static_cast<unsigned>(n_tiles), static_cast<unsigned>(std::min<int64_t>(m_tiles, 65535)),
              static_cast<unsigned>(std::min<int64_t>(matrices, 65535)));
}

// Lets kKernel take kSmem bytes of dynamic shared memory on the current device (above 48 KiB a
// kernel must opt in, once per device).
template <auto kKernel, int kSmem>
void opt_in_smem() {
  static std::atomic<uint64_t> opted_in{0};
  int device = 0;
  STD_CUDA_CHECK(cudaGetDevice(&device));
  const uint64_t bit = uint64_t(1) << (device % 64);
  if (kSmem > 48 * 1024 && !(opted_in.load() & bit)) {
    STD_CUDA_CHECK(cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    opted_in.fetch_or(bit);
  }
}

// The launch attribute of a programmatic dependent launch: the grid starts while the stream's last
// grid finishes, and waits for it (ptx::wait_prior_grids) before it reads what that grid writes.
inline cudaLaunchAttribute behind_last_grid() {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  return attribute;
}

// Launches the kernel of a tile with kSmem bytes of dynamic shared memory, passing it args and the
// kernel's further arguments, if any. kClusterRows > 1: clusters of that many blocks along the
// grid's rows of tiles, rounded up to whole clusters (the caller checks that they fit the grid's
// 65535). kBehindLastGrid: a programmatic dependent launch, for a kernel that waits for the
// stream's last grid (ptx::wait_prior_grids) before it reads what that grid writes.
template <auto kKernel, class Tile, int kSmem, int kClusterRows = 1, bool kBehindLastGrid = false, typename Args,
          typename... More>
void launch_with_smem(const Args& args, int num_sms, cudaStream_t stream, const More&... more) {
  opt_in_smem<kKernel, kSmem>();
  const dim3 grid = launch_grid<Tile>(args, num_sms);
  if constexpr (kClusterRows > 1 || kBehindLastGrid) {
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(grid.x, (grid.y + kClusterRows - 1) / kClusterRows * kClusterRows, grid.z);
    config.blockDim = dim3(Tile::kThreads);
    config.dynamicSmemBytes = kSmem;
    config.stream = stream;
    static_assert(kClusterRows == 1 || !kBehindLastGrid, "one launch attribute");
    cudaLaunchAttribute attribute = behind_last_grid();
    if constexpr (kClusterRows > 1) {
      attribute.id = cudaLaunchAttributeClusterDimension;
      attribute.val.clusterDim.x = 1;
      attribute.val.clusterDim.y = kClusterRows;
      attribute.val.clusterDim.z = 1;
    }
    config.attrs = &attribute;
    config.numAttrs = 1;
    STD_CUDA_CHECK(cudaLaunchKernelEx(&config, kKernel, args, more...));
  } else {
    kKernel<<<grid, Tile::kThreads, kSmem, stream>>>(args, more...);
  }
}

constexpr int64_t kMinSlabsPerSplit = 16;  // each slice of a split K runs at least this many K tiles
// ... or this many where the families without a wave model split K because an output's tiles
// cannot fill the GPU (plan_launch's small-output branch): there a block's fixed costs weigh less
// than the SMs left idle (200 x 3000 x 100 'highest' on mma.sync ran 4 tiles in 5 slices, 20 blocks
// on 132 SMs, at 0.52-0.60x torch, and 0.69-0.80x in 23 slices; 'ieee' 0.37-0.51x -> 0.59-0.80x on
// small outputs: H200, bench/NOTES.md item 204).
constexpr int64_t kMinSlabsPerSmallOutputSplit = 4;
// Wave-timed plans (plan_launch, for families with a kPsPerOperandElement): a split K's slices
// each write their partial product in float32 and a second kernel reads them back, 8 bytes an
// output element a slice, at about 2.3 TB/s on an H100 (3072 x 768 outputs: 8.2 us a slice for
// TF32 and 3xTF32 alike, bench/NOTES.md item 161). A split's modelled time is divided by
// kSplitGain, so that it must beat the best single slice by 10%, the model's error.
constexpr double kWorkspacePsPerByte = 0.43;
constexpr double kSplitGain = 0.9;
// Longest K one accumulator sums before its slice is added to the others: rounding error grows
// with the length of a sequential sum, so longer K is split for accuracy as well as for speed.
// Done only while the slices' workspace stays under kMaxAccuracyWorkspace bytes.
constexpr int64_t kMaxSliceK = 8192;
constexpr int64_t kMaxAccuracyWorkspace = int64_t(256) << 20;

// 16-byte loads need 16-byte-aligned data, leading dimension, batch stride, and a unit-stride
// extent that is a whole number of vectors.
inline bool vectorizable(const MatrixOperand& x, int64_t unit_stride_extent, int64_t vec) {
  return reinterpret_cast<uintptr_t>(x.data) % 16 == 0 && x.ld % vec == 0 &&
         x.batch_stride % vec == 0 && unit_stride_extent % vec == 0;
}

}  // namespace tiledmm
