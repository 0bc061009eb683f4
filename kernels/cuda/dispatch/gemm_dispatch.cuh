// The one place that chooses a kernel for a problem: the path (which arithmetic: exact CUDA-core
// float32, 3xTF32, TF32, 16-bit or float64 tensor cores, from the dtype and the precision
// argument), the tile shape, K splits, load width and operand layouts; launches it, and says what
// it chose and why (tiledmm.explain). Each path is a kernel family, instantiated in its own file
// (gemm_cuda_<path>.cu) so that they compile in parallel.
#pragma once

#include <atomic>
#include <cstdint>
#include <sstream>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include <cuda_runtime.h>

#include <torch/csrc/stable/device.h>
#include <torch/csrc/stable/macros.h>
#include <torch/csrc/stable/ops.h>
#include <torch/headeronly/util/Exception.h>

#include "cuda/sm90/gemm_core_plan.h"
#include "cuda/sm80/gemm_mma.cuh"
#include "plan/gemm_problem.h"
#include "cuda/sm80/gemm_tiled.cuh"
#include "cuda/sm90/gemm_wgmma.cuh"
#include "cuda/sm80/mma_math.cuh"

namespace tiledmm {

// Tile tables are indexed by role; each family fills every role with the tile measured fastest
// for it (the "large" tile need not be the largest).
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

// Launches the kernel of a tile with kSmem bytes of dynamic shared memory, passing it args and the
// kernel's further arguments, if any. kClusterRows > 1: clusters of that many blocks along the
// grid's rows of tiles, rounded up to whole clusters (the caller checks that they fit the grid's
// 65535).
template <auto kKernel, class Tile, int kSmem, int kClusterRows = 1, typename Args, typename... More>
void launch_with_smem(const Args& args, int num_sms, cudaStream_t stream, const More&... more) {
  opt_in_smem<kKernel, kSmem>();
  const dim3 grid = launch_grid<Tile>(args, num_sms);
  if constexpr (kClusterRows > 1) {
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(grid.x, (grid.y + kClusterRows - 1) / kClusterRows * kClusterRows, grid.z);
    config.blockDim = dim3(Tile::kThreads);
    config.dynamicSmemBytes = kSmem;
    config.stream = stream;
    cudaLaunchAttribute cluster{};
    cluster.id = cudaLaunchAttributeClusterDimension;
    cluster.val.clusterDim.x = 1;
    cluster.val.clusterDim.y = kClusterRows;
    cluster.val.clusterDim.z = 1;
    config.attrs = &cluster;
    config.numAttrs = 1;
    STD_CUDA_CHECK(cudaLaunchKernelEx(&config, kKernel, args, more...));
  } else {
    kKernel<<<grid, Tile::kThreads, kSmem, stream>>>(args, more...);
  }
}

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

constexpr int64_t kMinSlabsPerSplit = 16;  // each slice of a split K runs at least this many K tiles
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

// Hopper's warpgroup instructions (gemm_wgmma, sm_90a): fp16/bf16, and float32 as TF32 or
// 3xTF32, one table per input path.
// 128 x 256 with four stages is 193 KiB: one block per SM, two warpgroups of 128 accumulators.
// Short K: a persistent 128 x 128 tile, warp-specialized (its producer's copies run through all
// of a block's items), each math warpgroup writing its own rows by bulk copies from three
// buffers of its own while the other's wgmmas run. On an H200 against 128 x 128 at two blocks
// per SM: smallK (K = 64) 1.07x torch against 0.81x (0.99-1.08x in the four layouts), K = 16
// 0.92-0.99x against 0.80-0.85x, K = 32 0.90-0.99x against 0.73-0.79x, K = 128 0.88x against
// 0.70x, K = 256 0.66x against 0.62-0.64x (bench/NOTES.md item 86); the writing by warpgroup,
// 1.10-1.12x at smallK, 0.96x at K = 32 (item 87).
template <class Input>
struct WgmmaTileTable {  // fp16, bf16
  using T = typename Input::T;
  using Tiles = std::tuple<WgmmaTile<128, 256, 64, 4>, WgmmaTile<128, 128, 64, 4>,
                           WgmmaTile<128, 128, 64, 4, 1, 1, true>, WgmmaTile<64, 128, 64, 4, 2>>;
  // Operands without 16-byte alignment are copied as aligned windows (LoadMode::kWindowed), which
  // need shared memory for the side slots but no registers: the same tiles, but for short K two
  // blocks per SM (windows are shifted by their matrix's misalignment, so the persistent tile's
  // producer would drain its copies at every item: 8205 x 63 x 5921 0.42-0.45x torch against
  // 0.46-0.48x).
  using FallbackTiles = std::tuple<WgmmaTile<128, 256, 64, 4>, WgmmaTile<128, 128, 64, 4>,
                                   WgmmaTile<128, 128, 64, 3, 2>, WgmmaTile<64, 128, 64, 4, 2>>;
  static constexpr const char* kName =
      std::is_same_v<T, __nv_bfloat16> ? "bfloat16 tensor cores (wgmma, sm_90a; float32 accumulation)"
                                       : "float16 tensor cores (wgmma, sm_90a; float32 accumulation)";
};
// TF32: A from registers, B by cp.async or, K-major and aligned, by rounding bulk copies
// (WgmmaFamily::kBulk). An MN-major B (A^T x B products only) also needs a ring
// of raw tiles: 128 x 256 then runs three stages (WgmmaFamily::LayoutTile; transA 0.94x torch
// against 0.76x on 128 x 128 with four, H200, bench/NOTES.md item 100). Operands without 16-byte
// alignment are copied element-wise by cp.async. Short K takes a persistent 128 x 128 tile:
// smallK (K = 64) 0.91x torch against 0.77x on 128 x 256 (H100; bench/NOTES.md item 77).
template <>
struct WgmmaTileTable<WgmmaTf32Input<Tf32Math>> {
  using Tiles = std::tuple<WgmmaTile<128, 256, 32, 4, 1, 1>, WgmmaTile<128, 128, 32, 4, 1, 1>,
                           WgmmaTile<128, 128, 32, 3, 1, 1, true>, WgmmaTile<64, 128, 32, 4, 2>>;
  using FallbackTiles = Tiles;
  static constexpr const char* kName =
      "TF32 tensor cores (wgmma, sm_90a; inputs rounded to TF32, float32 accumulation)";
};
// 3xTF32 keeps a second set of accumulators (the float32 sums) and B's big and small tiles:
// 128 x 128 at most (four stages are 193 KiB; three where an MN-major B adds its raw tiles,
// WgmmaFamily::kLayoutStages). Short K on a persistent 128 x 128 tile of three stages: smallK
// 1.90x torch against 1.14x on the four-stage one (H100; bench/NOTES.md item 77).
template <>
struct WgmmaTileTable<WgmmaTf32Input<Split3xTf32Math>> {
  using Tiles = std::tuple<WgmmaTile<128, 128, 32, 4, 1, 1>, WgmmaTile<128, 128, 32, 4, 1, 1>,
                           WgmmaTile<128, 128, 32, 3, 1, 1, true>, WgmmaTile<64, 128, 32, 4>>;
  using FallbackTiles = Tiles;
  static constexpr const char* kName =
      "3xTF32 tensor cores (wgmma, sm_90a; three products per step, sums moved into float32 every "
      "32 of K)";
};

template <class Input>
struct WgmmaFamily {
  using T = typename Input::T;
  using Acc = float;
  using Tiles = typename WgmmaTileTable<Input>::Tiles;
  using FallbackTiles = typename WgmmaTileTable<Input>::FallbackTiles;
  static constexpr const char* kName = WgmmaTileTable<Input>::kName;
  static constexpr int kLargeMinWaves = 1;
  static constexpr bool kNarrowOnSmallTile = false;
  // Split K on the large tile, one block per SM: bf16 largeK (256 x 524288 x 256) 0.91x torch
  // with 66 slices of 128 x 256, against 0.72x on 128 x 128 (scripts/tile_sweep.py).
  static constexpr bool kSplitOnLargeTile = true;
  static constexpr int kMediumBlocksPerSm = 1;  // the medium tiles' shared memory fits one block
  // float32: row-major A x row-major B runs as C^T = B^T A^T, whose shared-memory operand (A^T) is
  // K-major, as TF32 wgmma needs (gemm_wgmma.cuh).
  static constexpr bool kTransposesRowMajorProducts = std::is_same_v<T, float>;
  // TF32's x @ W^T without 16-byte alignment runs as C^T = W x^T as well: its B (x's rows) and its
  // A (W's rows) then come by residue-class boxes (kClassBoxes), B's lines permuted by class as the
  // column-major result's lines.
  static constexpr bool kTransposesMisalignedNt = Input::kRoundingBulkB;
  // 16-bit row-major products without 16-byte alignment: the output's first rows, a multiple of
  // 8 x 256 (one band of every residue class), as C^T = B^T A^T on tiles of one residue class of
  // A's rows each (ClassTileLoader: both operands by bulk tensor copies, no shift pass); the rest
  // of the rows on the windowed path.
  static constexpr bool kClassTiles = sizeof(T) == 2;
  using ClassTile = WgmmaTile<128, 256, 64, 4, 1, 1>;
  using ClassTileLoad = ClassLoaderOf<Input, ClassTile, false>;  // (16-bit only)
  struct ClassTilePlan {
    int64_t rows;  // 0: none
    ClassTileMaps maps;
  };
  // Where the grid of the large tile fills the GPU, K is short of a split and long enough for the
  // large tile, one matrix (the rest of the rows of a batch would not be one strided matrix).
  static ClassTilePlan class_tile_plan(const GemmProblem& p, const DeviceLimits& device) {
    ClassTilePlan plan{};
    if constexpr (kClassTiles) {
      constexpr int64_t kBand = kClassTileClasses * ClassTile::BN, kVecWidth = 16 / sizeof(T);
      const int64_t rows = p.m / kBand * kBand;
      const bool aligned = vectorizable(p.a, p.k, kVecWidth) && vectorizable(p.b, p.n, kVecWidth);
      const int64_t row_tiles = (p.n + ClassTile::BM - 1) / ClassTile::BM, tiles = rows / ClassTile::BN * row_tiles;
      // Clusters of two along the grid's rows of tiles (at least two, else half the blocks compute
      // nothing), one work item a block (Classes::kClusterBlocks).
      if (aligned || !p.a.row_major || !p.b.row_major || p.batch != 1 || p.tile_override >= 0 ||
          p.splits_override >= 1 || rows == 0 || p.k <= 256 || p.k > kMaxSliceK || tiles < device.num_sms ||
          row_tiles < 2 || row_tiles >= 65535)
        return plan;
      // A: B's rows (k lines of n elements); B: A's first rows.
      int box_lines[kClassTileClasses];
      for (int d = 0; d < kClassTileClasses; ++d) box_lines[d] = ClassTileLoad::a_box_lines(d);
      constexpr CUtensorMapDataType kType =
          std::is_same_v<T, __half> ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
      plan.maps = make_class_maps<kClassTileClasses>(
          static_cast<const T*>(p.b.data), p.b.ld, 0, p.n, p.k, static_cast<const T*>(p.a.data), p.a.ld, 0, rows, p.k,
          1, ClassTileLoad::kALineElems, box_lines, ClassTile::BK, ClassTileLoad::kBBoxLines, kType);
      if (plan.maps.valid) plan.rows = rows;
    }
    return plan;
  }
  static void launch_class_tiles(const GemmProblem& p, const ClassTilePlan& plan, cudaStream_t stream,
                                 const DeviceLimits& device) {
    if constexpr (kClassTiles) {
      constexpr LoadMode kMode = LoadMode::kVector;  // the stage loaders' (unused: ClassTileLoader copies)
      constexpr int kSmem = wgmma_smem_bytes<Input, ClassTile, kMode, false, false, true>();
      static_assert(kSmem <= kHopperMaxSmem, "class-tile stages fit the shared memory");
      const int64_t k_chunk = (p.k + ClassTile::BK - 1) / ClassTile::BK * ClassTile::BK;
      const GemmArgs<T, T> args{static_cast<const T*>(p.b.data), static_cast<const T*>(p.a.data),
                                static_cast<T*>(p.c), p.b.ld, p.a.ld, 0, 0, 1, p.n, plan.rows, p.k, 1, k_chunk};
      launch_with_smem<gemm_wgmma_kernel<Input, ClassTile, kMode, false, false, T, true, false, true>, ClassTile,
                       kSmem, ClassTileLoad::kClusterBlocks>(args, device.num_sms, stream, TensorMap{}, plan.maps);
      STD_CUDA_KERNEL_LAUNCH_CHECK();
    }
  }
  static void describe_class_tiles(std::ostream& s, const ClassTilePlan& plan) {
    s << "rows 0 ... " << plan.rows - 1 << " (" << plan.rows / (kClassTileClasses * ClassTile::BN)
      << " band(s) of " << kClassTileClasses * ClassTile::BN
      << " rows): computed as C^T = B^T A^T, written column-major, on " << ClassTile::BM << "x" << ClassTile::BN
      << "x" << ClassTile::BK
      << " tiles whose lines are A's rows of one residue class (rows 8 apart share their misalignment): both "
         "operands by bulk tensor copies (TMA) of their lines' eight residue classes: A's rows (A^T, from shared "
         "memory) by one box per tile whose window starts at the class's misalignment, B^T's fragments read into "
         "registers at k shifted by the same, one wgmma m64n"
      << ClassTile::BN
      << "k16 per k step, warp-specialized (one producer warpgroup issues the copies); clusters of two blocks "
         "whose tiles share A's rows, each block copying half of them into both (multicast)";
  }

  // The tile a layout runs: a float32 B that is MN-major in the kernel (A^T x B) is transposed
  // by the producer, whose work then sets the pace; two producer warpgroups there (H100, against
  // one: TF32 transA 0.68x torch against 0.60x, 3xTF32 1.87x against 1.78x), one elsewhere (two
  // took 3xTF32 square from 2.31x to 2.17x, issue slots going to the producers). Not for BN 256:
  // its accumulators need more registers than a 512-thread block starts with. Element-wise
  // copies (no 16-byte alignment) take two as well: four cp.async a chunk. An MN-major B's ring
  // of raw tiles leaves room for three stages of 3xTF32's 128 x 128 (big and small tiles) and of
  // TF32's 128 x 256 (one producer warpgroup, which keeps pace there once its copies land whole
  // lines: item 100), and no room for a persistent 3xTF32 tile's output buffer.
  static constexpr bool kRawSplitB(bool b_row_major) { return b_row_major && Input::kPromoteTiles > 0; }
  template <class Tile, bool kBRowMajor>
  static constexpr int kLayoutStages =
      kRawSplitB(kBRowMajor) || (kBRowMajor && sizeof(T) == 4 && Tile::BN == 256) ? 3 : Tile::kStages;
  template <class Tile, bool kBRowMajor, bool kVec>
  using LayoutTile =
      std::conditional_t<Tile::kSpecialized && (kBRowMajor || !kVec) && sizeof(T) == 4,
                         typename Tile::template WithProducers<Tile::BN <= 128 ? 2 : 1, kLayoutStages<Tile, kBRowMajor>,
                                                               Tile::kPersistent && !kRawSplitB(kBRowMajor)>,
                         Tile>;

  // Without 16-byte alignment, 16-bit operands copy the aligned windows around each chunk (16-byte
  // cp.async, shifted into place once landed), where loads through registers exposed their
  // latency at every K tile; float32 keeps element-wise cp.async: its producer warpgroup sets the
  // pace, and the shift pass cost it more instructions than three more copies per chunk
  // (irregular 'highest' 1.73x -> 1.12x torch, TF32 1.00x -> 0.71x on an H100; bench/NOTES.md),
  // each instruction a warp's run of consecutive elements (kWarpElement: no bank conflicts).
  static constexpr LoadMode mode(bool vec) {
    return vec ? LoadMode::kVector : sizeof(T) == 2 ? LoadMode::kWindowed : LoadMode::kWarpElement;
  }

  template <class TableTile, typename Out, bool kVec, bool kARowMajor, bool kBRowMajor, bool kTransposedOut>
  static void launch(const GemmArgs<T, Out>& args, const DeviceLimits& device, cudaStream_t stream) {
    using Tile = LayoutTile<TableTile, kBRowMajor, kVec>;
    constexpr LoadMode kMode = mode(kVec);
    constexpr int kSmem = wgmma_smem_bytes<Input, Tile, kMode, kARowMajor, kBRowMajor>();
    if constexpr (kTransposesRowMajorProducts && kARowMajor && kBRowMajor) {
      STD_TORCH_CHECK(false, "tiledmm: internal error: row-major float32 products run transposed");
    } else if constexpr (kSmem > kHopperMaxSmem) {
      // plan_launch never picks such a tile for this layout (nor accepts it when forced): not built.
      STD_TORCH_CHECK(false, "tiledmm: internal error: tile exceeds Hopper's shared memory");
    } else {
      // A persistent tile's output leaves by bulk tensor copies where its layout allows a map.
      TensorMap output_map{};
      if constexpr (Tile::kPersistent)
        output_map = make_output_map(args.c, kTransposedOut ? args.m : args.n, kTransposedOut ? args.n : args.m,
                                     args.batch * args.splits, kOutputBoxLines<Input, Tile, kARowMajor, kTransposedOut, Out>,
                                     kOutputBoxChunks<Input, Tile, kARowMajor, kTransposedOut, Out>);
      if constexpr (kClassBoxes<Tile, kVec, kARowMajor, kBRowMajor, kTransposedOut>) {
        if (class_grid_fits<Tile>(args.splits, args.batch, args.m)) {
          const ResidueClassMaps maps = class_maps<Tile, kARowMajor>(args.a, args.lda, args.batch_stride_a, args.b,
                                                                     args.ldb, args.batch_stride_b, args.batch, args.m,
                                                                     args.n, args.k);
          constexpr int kClassSmem = wgmma_smem_bytes<Input, Tile, kMode, kARowMajor, kBRowMajor, true>();
          static_assert(kClassSmem <= kHopperMaxSmem, "residue-class stages fit the shared memory");
          if (maps.valid)
            return launch_with_smem<gemm_wgmma_kernel<Input, Tile, kMode, kARowMajor, kBRowMajor, Out, kTransposedOut,
                                                      false, true>,
                                    Tile, kClassSmem, ClassLoaderOf<Input, Tile, kARowMajor>::kClusterBlocks>(
                  args, device.num_sms, stream, output_map, maps);
        }
      }
      auto launch_kernel = [&](auto bulk, const OperandMaps& maps) {
        launch_with_smem<gemm_wgmma_kernel<Input, Tile, kMode, kARowMajor, kBRowMajor, Out, kTransposedOut,
                                           decltype(bulk)::value>,
                         Tile, kSmem>(args, device.num_sms, stream, output_map, maps);
      };
      if constexpr (kBulk<Tile, kVec, kBRowMajor>) {
        const OperandMaps maps = bulk_maps<Tile>(args.a, args.lda, args.batch_stride_a, kARowMajor, args.b, args.ldb,
                                                 args.batch_stride_b, kBRowMajor, args.batch, args.m, args.n, args.k);
        if (maps.b.valid) return launch_kernel(std::true_type{}, maps);
      }
      launch_kernel(std::false_type{}, OperandMaps{});
    }
  }
  // Operand tiles by bulk tensor copies (BulkTileLoader), where the operands allow tensor maps
  // (else cp.async):
  //   TF32's K-major, 16-byte aligned B in the warp-specialized tiles, through a map that rounds
  // it to TF32 (else rounded in shared memory). On an H200 against cp.async and the rounding pass:
  // square 0.63x torch -> 0.91x, standard 0.62x -> 0.93x, x @ W^T 0.65-0.69x -> 0.92-0.96x
  // (bench/NOTES.md item 112).
  //   Both 16-bit operands, 16-byte aligned, in the persistent short-K tile: the copies count their
  // bytes on the stage's mbarrier, so the producer publishes a stage as soon as it has issued them
  // and every stage is in flight (cp.async's stages were published two tiles late, which left the
  // math warps waiting on the L2 at K = 128-256; bench/NOTES.md item 147).
  template <class Tile, bool kVec, bool kBRowMajor>
  static constexpr bool kBulk = Tile::kSpecialized && kVec &&
                                (Input::kRoundingBulkB ? !kBRowMajor : !Input::kARegisters && Tile::kPersistent);
  // TF32's C^T products (row-major A x row-major B, and x @ W^T) without 16-byte alignment on the
  // large tile: both operands by bulk tensor copies of their lines' residue classes
  // (ResidueClassLoader; the kernel's A MN-major, or K-major: W), where K is not split and the maps
  // fit; else element-wise cp.async and the rounding pass.
  template <class Tile, bool kVec, bool kARowMajor, bool kBRowMajor, bool kTransposedOut>
  static constexpr bool kClassBoxes = Input::kRoundingBulkB && !kVec && !kBRowMajor && kTransposedOut &&
                                      Tile::kSpecialized && !Tile::kPersistent && Tile::BN == 256;
  // Its grid: K not split, clusters of two blocks along the rows of tiles (ResidueClassLoader),
  // which the grid's 65535 rows must hold, and one work item a block (the grid holds every matrix).
  template <class Tile>
  static bool class_grid_fits(int64_t splits, int64_t batch, int64_t m) {
    return splits == 1 && batch <= 65535 && (m + Tile::BM - 1) / Tile::BM < 65535;
  }
  template <class Tile, bool kARowMajor>
  static ResidueClassMaps class_maps(const void* a, int64_t lda, int64_t batch_stride_a, const void* b, int64_t ldb,
                                     int64_t batch_stride_b, int64_t batch, int64_t m, int64_t n, int64_t k) {
    using Classes = ResidueClassLoader<Tile::BM, Tile::BN, Tile::BK, kARowMajor>;
    int box_lines[kResidueClasses];
    for (int& lines : box_lines) lines = Classes::kALines;
    return make_class_maps<kResidueClasses>(static_cast<const float*>(a), lda, batch_stride_a, kARowMajor ? k : m,
                                            kARowMajor ? m : k, static_cast<const float*>(b), ldb, batch_stride_b, n, k,
                                            batch, Classes::kALineElems, box_lines, Tile::BK, Classes::kClassLines,
                                            CU_TENSOR_MAP_DATA_TYPE_TFLOAT32);
  }
  // The maps of a tile that runs bulk tiles (kBulk): TF32's B through a TFLOAT32 map, or both
  // 16-bit operands; maps.b is valid only where every map the kernel needs is. TF32's persistent
  // short-K tile only past K = 64: 16384 x 256 x 16384 0.58-0.67x -> 0.89-0.94x, K = 128
  // 0.79-0.85x -> 0.89x, but smallK (K = 64) 0.96-0.97x -> 0.93-0.94x (item 114).
  //   A K-major operand's map has lines of k elements and a box of the tile's lines; an MN-major
  // one's, lines of its m (or n) elements and boxes of one 128-byte column block by BK lines.
  template <class Tile>
  static OperandMaps bulk_maps(const void* a, int64_t lda, int64_t batch_stride_a, bool a_row_major, const void* b,
                               int64_t ldb, int64_t batch_stride_b, bool b_row_major, int64_t batch, int64_t m,
                               int64_t n, int64_t k) {
    OperandMaps maps{};
    if constexpr (Input::kRoundingBulkB) {
      if (Tile::kPersistent && k <= 64) return maps;
      maps.b = make_operand_map(static_cast<const float*>(b), k, n, batch, ldb, batch_stride_b, Tile::BK, Tile::BN,
                                CU_TENSOR_MAP_DATA_TYPE_TFLOAT32, CU_TENSOR_MAP_SWIZZLE_128B);
    } else {
      constexpr CUtensorMapDataType kType =
          std::is_same_v<T, __half> ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
      constexpr int kBlockElems = 128 / static_cast<int>(sizeof(T));
      auto map = [&](const void* x, int64_t ld, int64_t batch_stride, bool k_major, int64_t extent, int tile_lines) {
        const T* data = static_cast<const T*>(x);
        return k_major ? make_operand_map(data, k, extent, batch, ld, batch_stride, Tile::BK, tile_lines, kType,
                                          CU_TENSOR_MAP_SWIZZLE_128B)
                       : make_operand_map(data, extent, k, batch, ld, batch_stride, kBlockElems, Tile::BK, kType,
                                          CU_TENSOR_MAP_SWIZZLE_128B);
      };
      maps.a = map(a, lda, batch_stride_a, a_row_major, m, Tile::BM);
      maps.b = map(b, ldb, batch_stride_b, !b_row_major, n, Tile::BN);
      maps.b.valid = maps.b.valid && maps.a.valid;
    }
    return maps;
  }
  template <class TableTile, bool kVec>
  static void describe(std::ostream& s, const GemmProblem& p, const DeviceLimits&) {
    if (p.b.row_major) {
      describe_layout<LayoutTile<TableTile, true, kVec>, kVec>(s, p);
    } else {
      using Tile = LayoutTile<TableTile, false, kVec>;
      describe_layout<Tile, kVec>(s, p);
      auto maps_valid = [&](auto a_row) {
        return class_maps<Tile, decltype(a_row)::value>(p.a.data, p.a.ld, p.a.batch_stride, p.b.data, p.b.ld,
                                                        p.b.batch_stride, p.batch, p.m, p.n, p.k)
            .valid;
      };
      if (kClassBoxes<Tile, kVec, false, false, true> && p.c_transposed && class_grid_fits<Tile>(1, p.batch, p.m) &&
          (p.a.row_major ? maps_valid(std::true_type{}) : maps_valid(std::false_type{})))
        s << "; where K is not split, both operands' tiles by bulk tensor copies (TMA) of their lines' four residue "
             "classes (lines 4 apart share their misalignment) through TFLOAT32 tensor maps, which round them on "
             "the way: B's lines permuted by class, four sets of A fragments shifted in k, four m64n"
          << Tile::BN / 4
          << "k8 wgmmas per k step; clusters of two blocks whose tiles share B's lines, each block copying half of "
             "B's classes into both (multicast)";
    }
    if (bulk_tiles<TableTile, kVec>(p))
      s << (Input::kRoundingBulkB ? "; B's tiles by bulk tensor copies (TMA) through a TFLOAT32 tensor map, which "
                                    "rounds them to TF32 on the way"
                                  : "; both operands' tiles by bulk tensor copies (TMA), counted on each stage's "
                                    "mbarrier");
  }
  // Whether p runs the table tile's kernel with bulk tiles (kBulk, and maps that fit).
  template <class TableTile, bool kVec>
  static bool bulk_tiles(const GemmProblem& p) {
    bool bulk = false;
    with_bool(p.b.row_major, [&](auto b_row) {
      using Tile = LayoutTile<TableTile, decltype(b_row)::value, kVec>;
      if constexpr (kBulk<Tile, kVec, decltype(b_row)::value>)
        bulk = bulk_maps<Tile>(p.a.data, p.a.ld, p.a.batch_stride, p.a.row_major, p.b.data, p.b.ld, p.b.batch_stride,
                               p.b.row_major, p.batch, p.m, p.n, p.k)
                   .b.valid;
    });
    return bulk;
  }
  template <class Tile, bool kVec>
  static void describe_layout(std::ostream& s, const GemmProblem& p) {
    s << Tile::BM << "x" << Tile::BN << "x" << Tile::BK << " (m x n x k per block), "
      << Tile::kWarpGroups << " math warpgroup(s), each wgmma m64n" << Tile::BN << "k" << Input::kStepK
      << " over 64 rows, ";
    if constexpr (Tile::kSpecialized)
      s << "warp-specialized (" << Tile::kProducers << " producer warpgroup(s) fill"
        << (sizeof(T) == 4 ? " and round" : "") << " the stages; mbarriers between the two roles), ";
    s << Tile::kStages << "-stage pipeline (" << smem_bytes<Tile, kVec>(p) / 1024
      << " KiB shared memory, 128-byte swizzle), " << Tile::kMinBlocks << " block(s) per SM";
    if constexpr (kGroupOutput<Input, Tile>)
      s << ", persistent (each block walks output tiles; each math warpgroup's rows of a tile leave shared-memory "
           "buffers of its own by bulk asynchronous copies while the other warpgroup computes)";
    else if constexpr (Tile::kPersistent)
      s << ", persistent (each block walks output tiles; a tile's result leaves its own shared-memory buffer "
           "by bulk asynchronous copies while the next tile is computed)";
  }
  template <class Tile, bool kVec>
  static int smem_bytes(const GemmProblem& p) {
    int bytes = 0;
    with_bool(p.a.row_major, [&](auto a_row) {
      with_bool(p.b.row_major, [&](auto b_row) {
        constexpr bool kBRowMajor = decltype(b_row)::value;
        bytes = wgmma_smem_bytes<Input, LayoutTile<Tile, kBRowMajor, kVec>, mode(kVec), decltype(a_row)::value,
                                 kBRowMajor>();
      });
    });
    return bytes;
  }
  static const char* load_text(bool vec) {
    if constexpr (sizeof(T) == 2) {
      return vec ? "16-byte cp.async"
                 : "the aligned 16-byte windows around each chunk by cp.async, shifted into place in shared "
                   "memory (no 16-byte alignment)";
    } else {
      if constexpr (Input::kSplit)
        return vec ? "16-byte cp.async; A split into TF32 parts in registers, B split in shared memory "
                     "(an MN-major B copied raw, then split and transposed in shared memory)"
                   : "element-wise cp.async (no 16-byte alignment); A split into TF32 parts in registers, "
                     "B split in shared memory (an MN-major B copied raw, then split and transposed in shared memory)";
      return vec ? "16-byte cp.async; A rounded to TF32 in registers; B rounded in shared memory (an "
                   "MN-major B copied raw and transposed in shared memory), or by bulk tensor copies where the "
                   "tile says so"
                 : "element-wise cp.async (no 16-byte alignment); A rounded to TF32 in registers, B "
                   "rounded in shared memory (an MN-major B copied raw and transposed in shared memory)";
    }
  }
};
using WgmmaTf32Family = WgmmaFamily<WgmmaTf32Input<Tf32Math>>;
using Wgmma3xTf32Family = WgmmaFamily<WgmmaTf32Input<Split3xTf32Math>>;

// Calls f(std::integral_constant<int, index>) for a run-time index in [0, N).
template <int N, int I = 0, typename F>
void with_index(int index, F&& f) {
  if constexpr (I < N) {
    if (index == I) return f(std::integral_constant<int, I>{});
    with_index<N, I + 1>(index, f);
  }
}

template <class Tiles, typename F>
void with_tile(int index, F&& f) {
  with_index<static_cast<int>(std::tuple_size_v<Tiles>)>(
      index, [&](auto i) { f(std::tuple_element_t<decltype(i)::value, Tiles>{}); });
}

// Calls f(vec as a std::bool_constant, Tiles{}) with the family's tile table for 16-byte loads
// (vec) or for the fallback.
template <class Family, typename F>
void with_table(bool vec, F&& f) {
  if (vec) f(std::true_type{}, typename Family::Tiles{});
  else f(std::false_type{}, typename Family::FallbackTiles{});
}

// Blocks of bm x bn tiles that cover the problem's outputs.
inline int64_t output_tiles(const GemmProblem& p, int64_t bm, int64_t bn) {
  return ((p.m + bm - 1) / bm) * ((p.n + bn - 1) / bn) * p.batch;
}

struct LaunchPlan {
  int tile;
  int64_t splits, k_chunk;
  bool vec;
  std::string why;
};

// Whether K is split for accuracy (a long K, within the workspace budget) on top of any split for
// speed; Acc: the accumulator type of the slices.
template <typename Acc>
int64_t accuracy_splits(const GemmProblem& p) {
  const int64_t splits = (p.k + kMaxSliceK - 1) / kMaxSliceK;
  const bool affordable = splits * p.batch * p.m * p.n * int64_t(sizeof(Acc)) <= kMaxAccuracyWorkspace;
  return splits > 1 && affordable ? splits : 1;
}

template <class Family>
LaunchPlan plan_launch(const GemmProblem& p, const DeviceLimits& device) {
  const int num_sms = device.num_sms;
  using T = typename Family::T;
  constexpr int64_t kVecWidth = 16 / sizeof(T);
  const bool vec = vectorizable(p.a, p.a.row_major ? p.k : p.m, kVecWidth) &&
                   vectorizable(p.b, p.b.row_major ? p.n : p.k, kVecWidth);
  int num_tiles = 0;
  with_table<Family>(vec, [&](auto, auto tiles) { num_tiles = std::tuple_size_v<decltype(tiles)>; });
  struct TileInfo {
    int64_t bm, bn, bk;
    int smem;  // bytes of shared memory a block needs
  };
  auto info = [&](int tile) {
    TileInfo t{};
    with_table<Family>(vec, [&](auto v, auto tiles) {
      with_tile<decltype(tiles)>(tile, [&](auto s) {
        using S = decltype(s);
        t = {S::BM, S::BN, S::BK, Family::template smem_bytes<S, decltype(v)::value>(p)};
      });
    });
    return t;
  };
  auto blocks = [&](int tile) { return output_tiles(p, info(tile).bm, info(tile).bn); };
  auto smem = [&](int tile) { return info(tile).smem; };
  const bool large_fits = p.m >= info(kLarge).bm && p.n >= info(kLarge).bn;  // no empty rows or columns
  LaunchPlan plan{kMedium, 1, 0, vec, ""};
  if (p.tile_override >= 0) {
    STD_TORCH_CHECK(p.tile_override < num_tiles, "tiledmm: tile index ", p.tile_override,
                    " out of range [0, ", num_tiles, ")");
    plan.tile = p.tile_override;
    plan.why = "forced by the caller";
    STD_TORCH_CHECK(smem(plan.tile) <= device.max_smem, "tiledmm: tile ", plan.tile, " needs ",
                    smem(plan.tile), " bytes of shared memory; this GPU allows ", device.max_smem);
  } else if (p.k <= 256) {
    plan.tile = kShortK;
    plan.why = "short K (<= 256): the output's writes weigh as much as the products, and the short-K tile "
               "overlaps them with other work (several blocks per SM, or a persistent block's next tile)";
  } else if (large_fits && blocks(kLarge) >= Family::kLargeMinWaves * num_sms) {
    plan.tile = kLarge;
    plan.why = "large output: the large tile fills every SM (" + std::to_string(Family::kLargeMinWaves) +
               " block(s) each or more)";
  } else if (Family::kNarrowOnSmallTile && (p.m < info(kMedium).bm || p.n < info(kMedium).bn) &&
             blocks(kSmall) >= num_sms) {
    plan.tile = kSmall;
    plan.why = "narrow output (fewer rows or columns than the medium tile): the small tile wastes less";
  } else if (blocks(kMedium) >= num_sms) {
    plan.tile = kMedium;
    plan.why = "medium output: the medium tile still fills every SM";
  } else {
    // K is split so that the slices fill the GPU: with the large tile where the family prefers it,
    // else with the medium one, each at the blocks per SM it runs at.
    const int split_tile = Family::kSplitOnLargeTile && large_fits ? kLarge : kMedium;
    const int64_t per_sm = split_tile == kLarge ? Family::kLargeMinWaves : Family::kMediumBlocksPerSm;
    const int64_t slabs = (p.k + info(split_tile).bk - 1) / info(split_tile).bk;
    const int64_t want = (per_sm * num_sms + blocks(split_tile) - 1) / blocks(split_tile);
    plan.splits = std::min(want, slabs / kMinSlabsPerSplit);
    if (plan.splits >= 2) {
      plan.tile = split_tile;
      plan.why = "small output, long K: K is split so that about " + std::to_string(per_sm) +
                 " block(s) per SM run";
    } else {
      plan.tile = kSmall;
      plan.why = "small output, short K: small tiles for more blocks";
    }
  }
  // A tile needing more shared memory than this GPU has gives way to the medium, then small one.
  for (const int fallback : {kMedium, kSmall}) {
    if (p.tile_override >= 0 || smem(plan.tile) <= device.max_smem) break;
    plan.why += "; tile " + std::to_string(plan.tile) + " needs more shared memory than this GPU's " +
                std::to_string(device.max_smem) + " bytes: tile " + std::to_string(fallback);
    plan.tile = fallback;
  }
  const int64_t for_accuracy = accuracy_splits<typename Family::Acc>(p);
  if (p.tile_override < 0 && for_accuracy > plan.splits) {
    plan.splits = for_accuracy;
    plan.why += "; K > " + std::to_string(kMaxSliceK) + " is split for accuracy";
  }
  if (p.splits_override >= 1) plan.splits = p.splits_override;
  plan.splits = std::max<int64_t>(plan.splits, 1);
  const int64_t bk = info(plan.tile).bk;
  const int64_t per_split = (p.k + plan.splits - 1) / plan.splits;
  plan.k_chunk = std::max<int64_t>(bk, (per_split + bk - 1) / bk * bk);
  plan.splits = std::max<int64_t>(1, (p.k + plan.k_chunk - 1) / plan.k_chunk);  // no empty slice
  return plan;
}

template <class Family, typename Out>
void launch_plan(const GemmProblem& p, const LaunchPlan& plan, Out* out, const DeviceLimits& device,
                 cudaStream_t stream) {
  using T = typename Family::T;
  const GemmArgs<T, Out> args{static_cast<const T*>(p.a.data), static_cast<const T*>(p.b.data),
                              out, p.a.ld, p.b.ld, p.a.batch_stride, p.b.batch_stride,
                              p.batch, p.m, p.n, p.k, plan.splits, plan.k_chunk};
  with_table<Family>(plan.vec, [&](auto vec, auto tiles) {
    with_tile<decltype(tiles)>(plan.tile, [&](auto shape) {
      using Tile = decltype(shape);
      with_bool(p.a.row_major, [&](auto a_row) {
        with_bool(p.b.row_major, [&](auto b_row) {
          constexpr bool kARow = decltype(a_row)::value, kBRow = decltype(b_row)::value;
          auto launch = [&](auto transposed) {
            Family::template launch<Tile, Out, decltype(vec)::value, kARow, kBRow,
                                    decltype(transposed)::value>(args, device, stream);
            STD_CUDA_KERNEL_LAUNCH_CHECK();
          };
          // Transposed products come out of orient() with B column-major, A column-major (or
          // row-major: x @ W^T without 16-byte alignment).
          if constexpr ((Family::kTransposesRowMajorProducts && !kARow && !kBRow) ||
                        (Family::kTransposesMisalignedNt && kARow && !kBRow && !std::decay_t<decltype(vec)>::value))
            with_bool(p.c_transposed, launch);
          else
            launch(std::false_type{});
        });
      });
    });
  });
}

// The problem as the family runs it: row-major A x row-major B as C^T = B^T A^T where the family
// wants that (B^T and A^T are B's and A's memory read column-major; the kernel writes its n x m
// result column-major, which is C row-major), and x @ W^T without 16-byte alignment as C^T = W x^T
// where the family wants that (W row-major, x^T column-major).
template <class Family>
GemmProblem orient(const GemmProblem& p) {
  constexpr int64_t kVecWidth = 16 / sizeof(typename Family::T);
  const bool misaligned_nt = Family::kTransposesMisalignedNt && p.a.row_major && !p.b.row_major &&
                             !(vectorizable(p.a, p.k, kVecWidth) && vectorizable(p.b, p.k, kVecWidth));
  if (!(Family::kTransposesRowMajorProducts && p.a.row_major && p.b.row_major) && !misaligned_nt) return p;
  GemmProblem q = p;
  q.a = p.b;
  q.b = p.a;
  q.a.row_major = misaligned_nt;  // W^T's memory is W row-major; the rest read column-major
  q.b.row_major = false;
  q.m = p.n;
  q.n = p.m;
  q.c_transposed = true;
  return q;
}

// Rows [rows, m) of p: A's rows and C's from there on (A row-major, one matrix).
inline GemmProblem rows_after(const GemmProblem& p, int64_t rows, int64_t elem_size) {
  GemmProblem q = p;
  q.a.data = static_cast<const char*>(p.a.data) + rows * p.a.ld * elem_size;
  q.c = static_cast<char*>(p.c) + rows * p.n * elem_size;
  q.m = p.m - rows;
  return q;
}

// The rows of `whole` that the family's class tiles take (plan.rows; 0: none), and the rest.
template <class Family>
auto split_class_tile_rows(const GemmProblem& whole, const DeviceLimits& device) {
  const auto plan = Family::class_tile_plan(whole, device);
  return std::make_pair(plan, plan.rows > 0 ? rows_after(whole, plan.rows, sizeof(typename Family::T)) : whole);
}

template <class Family>
void run_family(const GemmProblem& whole, cudaStream_t stream, const DeviceLimits& device) {
  using T = typename Family::T;
  using Acc = typename Family::Acc;
  GemmProblem problem = whole;
  if constexpr (Family::kClassTiles) {
    const auto [classes, rest] = split_class_tile_rows<Family>(whole, device);
    if (classes.rows > 0) Family::launch_class_tiles(whole, classes, stream, device);
    if (rest.m == 0) return;
    problem = rest;
  }
  const GemmProblem p = orient<Family>(problem);
  const LaunchPlan plan = plan_launch<Family>(p, device);
  if (plan.splits == 1) return launch_plan<Family, T>(p, plan, static_cast<T*>(p.c), device, stream);

  // Each slice writes its partial product in the accumulator type; a second kernel sums them.
  const int64_t mn = p.m * p.n, total = p.batch * mn;
  torch::stable::Tensor partial = torch::stable::empty(
      {total * plan.splits},
      std::is_same_v<Acc, double> ? torch::headeronly::ScalarType::Double
                                  : torch::headeronly::ScalarType::Float,
      std::nullopt, torch::stable::Device(torch::headeronly::DeviceType::CUDA, p.device_index));
  Acc* workspace = static_cast<Acc*>(partial.mutable_data_ptr());
  launch_plan<Family, Acc>(p, plan, workspace, device, stream);
  const int64_t blocks = std::min<int64_t>((total + 255) / 256, 65535);
  splitk_reduce_kernel<T, Acc><<<static_cast<unsigned>(blocks), 256, 0, stream>>>(
      workspace, static_cast<T*>(p.c), mn, plan.splits, total);
  STD_CUDA_KERNEL_LAUNCH_CHECK();
}

template <class Family>
std::string describe_family(const GemmProblem& whole, const DeviceLimits& device) {
  std::ostringstream s;
  s << "kernel: " << Family::kName << "\n";
  GemmProblem problem = whole;
  if constexpr (Family::kClassTiles) {
    const auto [classes, rest] = split_class_tile_rows<Family>(whole, device);
    if (classes.rows > 0) {
      Family::describe_class_tiles(s, classes);
      s << "\n";
      if (rest.m == 0)
        return s.str() + "why: rows without 16-byte alignment, in whole bands (" + std::to_string(device.num_sms) +
               " SMs)";
      s << "rows " << classes.rows << " ... " << whole.m - 1 << ":\n";
    }
    problem = rest;
  }
  const GemmProblem p = orient<Family>(problem);
  const LaunchPlan plan = plan_launch<Family>(p, device);
  if (p.c_transposed)
    s << "operands: computed as C^T = B^T A^T (" << p.m << " x " << p.n << ", written column-major), "
      << (p.a.row_major ? "so that A's rows, without 16-byte alignment, are the lines of the kernel's B\n"
                        : "so that the shared-memory operand is K-major\n");
  with_table<Family>(plan.vec, [&](auto vec, auto tiles) {
    with_tile<decltype(tiles)>(plan.tile, [&](auto shape) {
      s << "tile " << plan.tile << ": ";
      Family::template describe<decltype(shape), decltype(vec)::value>(s, p, device);
      s << "\n";
    });
  });
  s << "loads: " << Family::load_text(plan.vec) << "\n";
  if (plan.splits > 1)
    s << "split K: " << plan.splits << " slices of " << plan.k_chunk
      << ", partial products summed in the accumulator type by a second kernel (workspace "
      << plan.splits * p.batch * p.m * p.n * int64_t(sizeof(typename Family::Acc)) << " bytes)\n";
  s << "why: " << plan.why << " (" << device.num_sms << " SMs)";
  return s.str();
}

// 'highest' (float32 accuracy by the fastest path that has it), on Hopper: 3xTF32 on wgmma
// (1.5-1.8x cuBLAS's float32 on the anchors), except where its accuracy falls short (below).
// Elsewhere it runs the exact kernel where that
// is both as accurate as cuBLAS and faster than 3xTF32 (on an H200, mma.sync's TF32 rate caps
// 3xTF32 at 108 TFLOP/s, and it ran at 0.64-0.81x of the exact kernel: bench/NOTES.md): outputs
// at least a tile wide and tall that fill the GPU (both libraries sum them along K in one pass)
// or whose K is long enough to be split for accuracy. Elsewhere 3xTF32: small outputs, where
// cuBLAS splits K and one sequential sum was 2-3.5x less accurate, and narrow ones, where the
// exact kernel's wide tiles run partly empty. Below kMin3xTf32K the exact kernel again: 3xTF32's
// dropped small x small product and truncated tensor-core sums do not average out over so few
// products.
constexpr int64_t kMin3xTf32K = 32;

// On Hopper 3xTF32 runs on wgmma, whose sums move into float32 once per 32 of K; an output too
// small to fill the GPU whose K is not split into several slices is then one sequential float32
// sum of up to a few dozen tile sums per output, and on all-positive inputs that measured 2.0-2.4x
// torch's error (96 x 80 outputs, K 33-1000; cuBLAS splits K there). The mma.sync kernel, which
// moves its sums every 8 of K, keeps those problems within the contract.
// Measured within the contract from K = 4096 split into 8 slices (96 x 80 outputs): an output
// too small to fill the GPU takes wgmma only where plan_launch splits K at least that finely.
inline bool wgmma_3xtf32_is_as_accurate(const GemmProblem& p, int num_sms) {
  using Medium = std::tuple_element_t<kMedium, Wgmma3xTf32Family::Tiles>;
  constexpr int64_t kMinSplitK = 4096, kMinSlices = 8;
  const int64_t tiles = output_tiles(p, Medium::BM, Medium::BN);
  return tiles >= num_sms || (p.k >= kMinSplitK && tiles * kMinSlices <= num_sms);
}

// 'highest' at short K on Hopper: one float16 product of the operands' scaled splits (3 K long,
// scaled_split.cuh), where the output's writes take as long as 3xTF32's products. On an H200,
// 32768 x 64 x 32768: 1.31-1.39 ms against 3xTF32's 1.69-1.80 (torch 4.04-4.44), error 1.3e-7
// against torch's 1.4e-7 on randn and 1.9e-7 against 1.2e-7 on rand; K = 48 and 33: 2.7x and 2.5x
// torch against 3xTF32's 2.1x and 1.7x (bench/NOTES.md items 148-149). At K = 32 its product
// alone was no faster than 3xTF32, and at K = 128 slower and 2.9x torch's error on rand (longer
// chains of truncating tensor-core additions): 32 < K <= 64, outputs that fill the GPU, one K slice.
struct ScaledSplitPath {};
constexpr int64_t kMinScaledSplitK = 33, kMaxScaledSplitK = 64;
inline bool scaled_split_fits(const GemmProblem& p, int num_sms) {
  using Tile = std::tuple_element_t<kShortK, WgmmaTileTable<WgmmaHalfInput<__half>>::Tiles>;
  return p.k >= kMinScaledSplitK && p.k <= kMaxScaledSplitK && p.tile_override < 0 && p.splits_override < 1 &&
         p.m >= Tile::BM && p.n >= Tile::BN && output_tiles(p, Tile::BM, Tile::BN) >= 2 * num_sms;
}
template <>
void run_family<ScaledSplitPath>(const GemmProblem& p, cudaStream_t stream, const DeviceLimits& device);
template <>
std::string describe_family<ScaledSplitPath>(const GemmProblem& p, const DeviceLimits& device);

// The Hopper GEMM core (gemm_core_sm90.cuh, configured by gemm_core_plan.h) for 16-bit operands and
// TF32 (T = float): its run_family and describe_family are defined with its kernels
// (gemm_cuda_core_<type>_sm90.cu).
template <typename T>
struct CorePath {};
#define TILEDMM_CORE_PATH(T)                                                                                   \
  template <>                                                                                                   \
  void run_family<CorePath<T>>(const GemmProblem& p, cudaStream_t stream, const DeviceLimits& device);          \
  template <>                                                                                                   \
  std::string describe_family<CorePath<T>>(const GemmProblem& p, const DeviceLimits& device);
TILEDMM_CORE_PATH(__half)
TILEDMM_CORE_PATH(__nv_bfloat16)
TILEDMM_CORE_PATH(float)
#undef TILEDMM_CORE_PATH

inline bool exact_is_faster_and_as_accurate(const GemmProblem& p, int num_sms) {
  using Medium = std::tuple_element_t<kMedium, ExactFloatFamily::Tiles>;
  if (p.m < Medium::BM || p.n < Medium::BN) return false;
  return output_tiles(p, Medium::BM, Medium::BN) >= num_sms || accuracy_splits<float>(p) > 1;
}

// The path of a problem: calls f(Family{}, why) for the family its dtype and precision select.
// T: the device storage type.
template <typename T, typename F>
void with_family(const GemmProblem& p, const DeviceLimits& device, F&& f) {
  const int num_sms = device.num_sms;
  if constexpr (std::is_same_v<T, float>) {
    switch (p.precision) {
      case Precision::k3xTf32:
        if (device.wgmma && wgmma_3xtf32_is_as_accurate(p, num_sms))
          return f(Wgmma3xTf32Family{}, "precision 3xtf32: float32 accuracy on TF32 tensor cores");
        return f(MmaFamily<Split3xTf32Math>{}, "precision 3xtf32: float32 accuracy on TF32 tensor cores");
      case Precision::kTf32:
        if (device.wgmma && core_takes(p))
          return f(CorePath<float>{}, "precision tf32: inputs rounded to TF32; both operands K-major (x @ W^T), "
                                      "16-byte aligned, K > " + std::to_string(kCoreMinK - 1) +
                                      ": the Hopper GEMM core");
        if (device.wgmma) return f(WgmmaTf32Family{}, "precision tf32: inputs rounded to TF32");
        return f(MmaFamily<Tf32Math>{}, "precision tf32: inputs rounded to TF32");
      case Precision::kHighest:
        if (p.k < kMin3xTf32K)
          return f(ExactFloatFamily{}, "precision highest: K < " + std::to_string(kMin3xTf32K) +
                                           " is too short for 3xTF32 to keep float32 accuracy: exact kernel");
        // One output row or column: memory-bound, where 3xTF32 buys no speed, and a single dot
        // product with cancellation showed 3xTF32's dropped remainder product (5.4e-6 against
        // torch's 1.2e-6 at 1 x 257 x 1).
        if (p.m == 1 || p.n == 1)
          return f(ExactFloatFamily{}, "precision highest: a single output row or column (memory-bound): "
                                       "exact kernel");
        if (device.wgmma && scaled_split_fits(p, num_sms))
          return f(ScaledSplitPath{}, "precision highest: short K (" + std::to_string(kMinScaledSplitK) + " ... " +
                                          std::to_string(kMaxScaledSplitK) +
                                          ") with an output that fills the GPU: float32 accuracy from one float16 "
                                          "product of the operands' scaled big and remainder parts");
        if (device.wgmma && wgmma_3xtf32_is_as_accurate(p, num_sms))
          return f(Wgmma3xTf32Family{}, "precision highest: 3xTF32 on Hopper's warpgroup tensor "
                                        "cores, float32 accuracy faster than the exact kernel");
        if (device.wgmma)
          return f(MmaFamily<Split3xTf32Math>{},
                   "precision highest: a small output with K too short to split, where 3xTF32 on "
                   "mma.sync (float32 sums every 8 of K) keeps float32 accuracy");
        if (exact_is_faster_and_as_accurate(p, num_sms))
          return f(ExactFloatFamily{},
                   "precision highest: an output that fills the GPU (or a K split for accuracy), "
                   "where the exact kernel is as accurate as cuBLAS and faster than 3xTF32 on mma.sync");
        return f(MmaFamily<Split3xTf32Math>{},
                 "precision highest: a small or narrow output, where 3xTF32 keeps float32 accuracy "
                 "however K is split, and is faster than the exact kernel's wide tiles");
      default:
        return f(ExactFloatFamily{}, "precision ieee: exact float32 arithmetic");
    }
  } else if constexpr (std::is_same_v<T, double>) {
    f(MmaFamily<DoubleMath>{}, "float64: IEEE double fused multiply-adds on the FP64 tensor cores");
  } else if (device.wgmma && core_takes(p)) {
    f(CorePath<T>{}, "16-bit inputs on Hopper, 16-byte aligned, K > " + std::to_string(kCoreMinK - 1) +
                         ": the Hopper GEMM core");
  } else if (device.wgmma) {
    f(WgmmaFamily<WgmmaHalfInput<T>>{}, "16-bit inputs on Hopper: warpgroup tensor cores, float32 accumulation");
  } else {
    f(MmaFamily<HalfMath<T>>{}, "16-bit inputs: tensor cores, float32 accumulation");
  }
}

// Each family is instantiated once, in its own file (gemm_cuda_<path>.cu):
//   namespace tiledmm { TILEDMM_FAMILY_TEMPLATES(, MmaFamily<Tf32Math>) }
#define TILEDMM_FAMILIES(X)                                                                 \
  X(ExactFloatFamily) X(MmaFamily<Split3xTf32Math>) X(MmaFamily<Tf32Math>)                \
  X(MmaFamily<DoubleMath>) X(MmaFamily<HalfMath<__half>>) X(MmaFamily<HalfMath<__nv_bfloat16>>) \
  X(WgmmaFamily<WgmmaHalfInput<__half>>) X(WgmmaFamily<WgmmaHalfInput<__nv_bfloat16>>)       \
  X(WgmmaTf32Family) X(Wgmma3xTf32Family)
#define TILEDMM_FAMILY_TEMPLATES(prefix, Family)                                 \
  prefix template void run_family<Family>(const GemmProblem&, cudaStream_t, const DeviceLimits&); \
  prefix template std::string describe_family<Family>(const GemmProblem&, const DeviceLimits&);
#define TILEDMM_EXTERN_FAMILY(Family) TILEDMM_FAMILY_TEMPLATES(extern, Family)
TILEDMM_FAMILIES(TILEDMM_EXTERN_FAMILY)

}  // namespace tiledmm
