// Runs the Hopper GEMM core (gemm_core_sm90.cuh) as gemm_core_plan.h configures it: the operands'
// and the output's tensor maps, the persistent (cluster) grid, and stream-K's workspace. Each
// type's instantiation (bfloat16, float16, float32 as TF32) has a file of its own
// (gemm_cuda_core_<type>_sm90.cu).
#pragma once

#include <algorithm>
#include <atomic>
#include <sstream>
#include <string>

#include "cuda/common/arrival_counters.h"
#include "cuda/sm90/gemm_core_plan.h"
#include "cuda/sm90/gemm_core_sm90.cuh"
#include "cuda/dispatch/gemm_dispatch.cuh"

namespace tiledmm {

template <typename T>
struct CoreLaunch {
  static constexpr bool kTf32 = std::is_same_v<T, float>;
  // TFLOAT32: the TMA rounds float32 to nearest TF32 on its way into shared memory.
  static constexpr CUtensorMapDataType kType = kTf32                      ? CU_TENSOR_MAP_DATA_TYPE_TFLOAT32
                                               : std::is_same_v<T, __half> ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                                                           : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  static constexpr int kBK = 128 / static_cast<int>(sizeof(T));  // a K tile: one 128-byte row
  // What runs the problems the core leaves (plan_core: a tile or two over a very long K).
  using Fallback = std::conditional_t<kTf32, WgmmaTf32Family, WgmmaFamily<WgmmaHalfInput<T>>>;
  template <int kIndex>
  using TileOf = CoreTile<kCoreBM[kIndex], kCoreBN[kIndex], kCoreCluster[kIndex], sizeof(T), kCorePingPong[kIndex],
                          kCoreIssuers[kIndex]>;

  // An operand's map: a K-major one has lines of k elements and boxes of BK by the tile's lines; an
  // MN-major one lines of its m (or n) elements and boxes of one 128-byte column block (BK elements)
  // by BK lines.
  static TensorMap operand_map(const MatrixOperand& x, bool k_major, int64_t extent, int64_t k, int64_t batch,
                               int tile_lines) {
    const T* data = static_cast<const T*>(x.data);
    return k_major ? make_operand_map(data, k, extent, batch, x.ld, x.batch_stride, kBK, tile_lines, kType,
                                      CU_TENSOR_MAP_SWIZZLE_128B)
                   : make_operand_map(data, extent, k, batch, x.ld, x.batch_stride, kBK, kBK, kType,
                                      CU_TENSOR_MAP_SWIZZLE_128B);
  }
  // A K-major operand's box: the tile's lines (a K-major B's: one block's part of the tile, which
  // clusters share), or its own lines in whole atoms where fewer (core_box_lines; not where a
  // cluster shares B's tile).
  static OperandMaps maps(const GemmProblem& p, int tile) {
    const int cluster = kCoreCluster[tile];
    const int a_lines = core_box_lines(p.m, kCoreBM[tile], p.a.row_major);
    const int b_lines = core_box_lines(p.n, kCoreBN[tile] / cluster, !p.b.row_major && cluster == 1);
    return OperandMaps{operand_map(p.a, p.a.row_major, p.m, p.k, p.batch, a_lines),
                       operand_map(p.b, !p.b.row_major, p.n, p.k, p.batch, b_lines)};
  }

  // Launches kKernel on `blocks` blocks in clusters of Tile::kCluster, as many clusters as fit the GPU
  // at once (a persistent grid needs no more: each walks the work items).
  template <auto kKernel, class Tile, typename... Args>
  static void launch(int blocks, cudaStream_t stream, const Args&... args) {
    opt_in_smem<kKernel, Tile::kSmemBytes>();
    cudaLaunchConfig_t config{};
    config.blockDim = dim3(Tile::kThreads);
    config.dynamicSmemBytes = Tile::kSmemBytes;
    config.stream = stream;
    // Programmatic dependent launch: the blocks start (their mbarriers set up) while the stream's
    // previous grid finishes, and wait for it before any global access (gemm_core_kernel).
    cudaLaunchAttribute attributes[2] = {behind_last_grid(), {}};
    attributes[1].id = cudaLaunchAttributeClusterDimension;
    attributes[1].val.clusterDim.x = Tile::kCluster;
    attributes[1].val.clusterDim.y = attributes[1].val.clusterDim.z = 1;
    config.attrs = attributes;
    config.numAttrs = Tile::kCluster > 1 ? 2 : 1;
    if constexpr (Tile::kCluster == 1) {
      config.gridDim = dim3(blocks);
      STD_CUDA_CHECK(cudaLaunchKernelEx(&config, kKernel, args...));
      return;
    }
    // Clusters that fit the GPU at once, asked once per device (fewer clusters only make each
    // stream-K share longer: the walk divides by the grid it gets).
    static std::atomic<int> fit[64] = {};
    int device = 0;
    STD_CUDA_CHECK(cudaGetDevice(&device));
    if (fit[device % 64].load() == 0) {
      int clusters = 0;
      config.gridDim = dim3(blocks);
      STD_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&clusters, kKernel, &config));
      fit[device % 64].store(std::max(clusters, 1));
    }
    blocks = std::min(blocks, fit[device % 64].load() * Tile::kCluster);
    config.gridDim = dim3(blocks);
    STD_CUDA_CHECK(cudaLaunchKernelEx(&config, kKernel, args...));
  }

  // A forced core tile (kCoreTileBase + index) must name one of the core's, and TF32 operands it
  // can read (plan_core_run: A row-major; B row-major only on the cooperative tiles).
  static void check_forced_tile(const GemmProblem& p) {
    STD_TORCH_CHECK(p.tile_override < kCoreTileBase + kCoreTiles, "tiledmm: tile index ", p.tile_override,
                    " out of range: the Hopper GEMM core's tiles are ", kCoreTileBase, " ... ",
                    kCoreTileBase + kCoreTiles - 1);
    STD_TORCH_CHECK(!kTf32 || p.a.row_major, "tiledmm: tile ", p.tile_override,
                    " (the Hopper GEMM core's) reads TF32 operands with A row-major only (x @ W^T, or A @ B "
                    "computed as B^T A^T); wgmma reads TF32 from shared memory K-major only");
    STD_TORCH_CHECK(!kTf32 || !p.b.row_major || p.tile_override < kCoreTileBase ||
                        !kCorePingPong[p.tile_override - kCoreTileBase],
                    "tiledmm: tile ", p.tile_override, " (the Hopper GEMM core's ping-pong tile) reads TF32 operands "
                    "K-major only: B column-major (x @ W^T)");
  }

  static void run(const GemmProblem& problem, cudaStream_t stream, const DeviceLimits& device) {
    check_forced_tile(problem);
    const CoreRun oriented = plan_core_run(problem, device.num_sms);
    const GemmProblem& p = oriented.problem;
    const CorePlan& plan = oriented.plan;
    if (!plan.fits) return run_family<Fallback>(problem, stream, device);
    const OperandMaps operand_maps = maps(p, plan.tile);
    // core_takes checked what the maps need; a driver without the encoder leaves them invalid.
    if (!operand_maps.a.valid || !operand_maps.b.valid) {
      STD_TORCH_CHECK(p.tile_override < 0, "tiledmm: tile ", p.tile_override,
                      " (the Hopper GEMM core's) reads its operands by tensor maps, which need 16-byte aligned "
                      "starts, leading dimensions and batch strides and a driver that encodes them");
      return run_family<Fallback>(problem, stream, device);
    }
    T* const out = static_cast<T*>(p.c);
    GemmArgs<T, T> args{static_cast<const T*>(p.a.data), static_cast<const T*>(p.b.data), out, p.a.ld, p.b.ld,
                        p.a.batch_stride, p.b.batch_stride, p.batch, p.m, p.n, p.k, 1, p.k};
    if (p.bias != nullptr) {  // added in the epilogue, to the float32 sums
      args.bias = static_cast<const T*>(p.bias);
      args.bias_stride = p.bias_stride;
      *p.bias_added = true;
    }
    const int cluster = kCoreCluster[plan.tile];
    const int64_t k_tiles = (p.k + kBK - 1) / kBK;
    // Stream-K tiles: the parts of each block's m64 row blocks, and their arrival counters (the
    // stream's, or zeroed here while a graph is captured).
    torch::stable::Tensor workspace;
    CoreParts ws{nullptr, nullptr, plan.max_parts};
    if (plan.dp_tiles < plan.tiles) {
      const int64_t slots = (plan.tiles - plan.dp_tiles) * cluster * (kCoreBM[plan.tile] / 64);
      ws.arrivals = arrival_counters(p.device_index, stream, slots);
      const int64_t part_bytes = slots * plan.max_parts * 64 * kCoreBN[plan.tile] * 4;
      const int64_t counter_bytes = ws.arrivals == nullptr ? slots * 4 : 0;
      workspace = torch::stable::empty({part_bytes + counter_bytes}, torch::headeronly::ScalarType::Byte, std::nullopt,
                                       torch::stable::Device(torch::headeronly::DeviceType::CUDA, p.device_index));
      unsigned char* base = static_cast<unsigned char*>(workspace.mutable_data_ptr());
      ws.parts = reinterpret_cast<float*>(base);
      if (ws.arrivals == nullptr) {
        ws.arrivals = reinterpret_cast<unsigned*>(base + part_bytes);
        STD_CUDA_CHECK(cudaMemsetAsync(ws.arrivals, 0, counter_bytes, stream));
      }
    }
    with_index<kCoreTiles>(plan.tile, [&](auto index) {
      constexpr int kIndex = decltype(index)::value;
      using Tile = TileOf<kIndex>;
      constexpr int kRows = Tile::BM * Tile::kCluster;
      // C's lines: its rows, n outputs long (transposed: m, whole 128-byte chunks of a pass's lines).
      const TensorMap output_map = p.c_transposed ? make_output_map(out, p.m, p.n, p.batch, Tile::Pass::kLines)
                                                  : make_output_map(out, p.n, p.m, p.batch, 64, 1, Tile::Pass::kChunkBytes);
      const CoreWalk walk{static_cast<int>((p.m + kRows - 1) / kRows), static_cast<int>((p.n + Tile::BN - 1) / Tile::BN),
                          plan.group_rows, static_cast<int>(k_tiles), plan.dp_tiles,
                          (plan.tiles - plan.dp_tiles) * k_tiles};
      auto run_layout = [&](auto a_k_major, auto b_k_major, auto transposed_out) {
        constexpr auto kKernel = gemm_core_kernel<T, Tile, decltype(a_k_major)::value, decltype(b_k_major)::value,
                                                  decltype(transposed_out)::value>;
        launch<kKernel, Tile>(plan.clusters * cluster, stream, args, operand_maps, output_map, walk, ws);
        STD_CUDA_KERNEL_LAUNCH_CHECK();
      };
      const std::false_type no;
      const std::true_type yes;
      // Transposed products (plan_core_run) run on the cooperative tiles only. TF32 reads B K-major,
      // and A K-major or, transposed (dy @ W), MN-major through registers; 16-bit products run
      // transposed where both operands are K-major or both MN-major.
      if (p.c_transposed) {
        STD_TORCH_CHECK(!Tile::kPingPong && !p.b.row_major == (kTf32 || p.a.row_major),
                        "tiledmm: internal error: a transposed product on the ping-pong tile, or in a layout the "
                        "core does not run transposed");
        if constexpr (!Tile::kPingPong)
          with_bool(p.a.row_major, [&](auto a) { run_layout(a, std::bool_constant<kTf32 || decltype(a)::value>{}, yes); });
      } else if constexpr (kTf32) {
        STD_TORCH_CHECK(p.a.row_major && !p.b.row_major, "tiledmm: internal error: TF32 operands not K-major");
        run_layout(yes, yes, no);
      } else {
        with_bool(p.a.row_major, [&](auto a) { with_bool(!p.b.row_major, [&](auto b) { run_layout(a, b, no); }); });
      }
    });
  }

  static std::string describe(const GemmProblem& problem, const DeviceLimits& device) {
    check_forced_tile(problem);
    const CoreRun oriented = plan_core_run(problem, device.num_sms);
    const GemmProblem& p = oriented.problem;
    const CorePlan& plan = oriented.plan;
    if (!plan.fits) return describe_family<Fallback>(problem, device) + "; not the Hopper GEMM core: " + plan.why;
    const int bn = kCoreBN[plan.tile];
    std::ostringstream s;
    s << "kernel: "
      << (kTf32 ? "TF32 (inputs rounded to TF32)" : std::is_same_v<T, __half> ? "float16" : "bfloat16")
      << " Hopper GEMM core (wgmma, sm_90a; float32 accumulation)\n";
    int stages = 0;
    with_index<kCoreTiles>(plan.tile, [&](auto index) { stages = TileOf<decltype(index)::value>::kStages; });
    const int cluster = kCoreCluster[plan.tile];
    const int groups = kCoreBM[plan.tile] / 64;
    s << "tile " << kCoreTileBase + plan.tile << ": " << kCoreBM[plan.tile] << "x" << bn << "x" << kBK
      << " (m x n x k per block), " << groups << " math warpgroup" << (groups > 1 ? "s" : "") << " (wgmma m64n" << bn
      << (kTf32 ? "k8" : "k16")
      << (kCorePingPong[plan.tile] ? " over the whole tile, taking the tiles in turn: one's epilogue runs beside the "
                                     "other's products"
                                   : groups > 1 ? " over 64 rows each" : "")
      << ") and a producer warpgroup, " << stages
      << "-stage pipeline on full/empty mbarriers, "
      << (cluster > 1 ? "clusters of " + std::to_string(cluster) +
                            " blocks above one another sharing B's tiles (each copies its part into all by TMA "
                            "multicast), "
                      : std::string())
      << "persistent: " << plan.clusters * cluster << " blocks walk " << plan.tiles
      << " tiles in groups of " << plan.group_rows
      << " row tiles (L2 reuse); each tile's result leaves shared memory by bulk tensor copies while the "
         "next tile computes\n";
    if (p.c_transposed)
      s << "computed as C^T = B^T A^T ("
        << (kTf32 && problem.b.row_major ? "wgmma reads TF32 B K-major only"
                                         : "the orientation the rule estimates faster, or level, no taller than "
                                           "wide and in one round")
        << "), its " << p.m << " x " << p.n << " result written transposed into C\n";
    s << "loads: both operands' tiles by bulk tensor copies (TMA, 128-byte swizzle), "
      << (p.a.row_major ? "A K-major" : "A MN-major") << ", " << (p.b.row_major ? "B MN-major" : "B K-major")
      << (kTf32 ? " (each through a TFLOAT32 tensor map, which rounds every element to nearest TF32)" : " (wgmma reads either)")
      << (kTf32 && !p.a.row_major ? "; A's fragments from shared memory into the math warps' registers\n" : "\n");
    if (plan.dp_tiles < plan.tiles)
      s << "stream-K: " << plan.tiles - plan.dp_tiles << " of the " << plan.tiles
        << " tiles' K tiles shared evenly by the clusters (K split into up to " << plan.max_parts
        << " ranges a tile); each range leaves its float32 sums in a workspace, and a tile's last range to "
           "finish adds them in range order and writes the output\n";
    s << "why: " << plan.why;
    return s.str();
  }
};

// The core's path for type T (gemm_dispatch.cuh's CorePath<T>), instantiated in a file of its own
// a type (gemm_cuda_core_<type>_sm90.cu), so that the types build in parallel.
#define TILEDMM_CORE_PATH_INSTANCE(T)                                                                           \
  template <>                                                                                                   \
  void run_family<CorePath<T>>(const GemmProblem& p, cudaStream_t stream, const DeviceLimits& device) {         \
    CoreLaunch<T>::run(p, stream, device);                                                                      \
  }                                                                                                             \
  template <>                                                                                                   \
  std::string describe_family<CorePath<T>>(const GemmProblem& p, const DeviceLimits& device) {                  \
    return CoreLaunch<T>::describe(p, device);                                                                  \
  }

}  // namespace tiledmm
