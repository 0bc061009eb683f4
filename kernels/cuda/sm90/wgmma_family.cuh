// The wgmma families: gemm_wgmma.cuh's kernel on Hopper (16-bit, TF32, 3xTF32) as the dispatcher
// runs it (gemm_dispatch.cuh): each input path's tile table (WgmmaTileTable), and the family's
// tile for each layout, bulk tensor copies, residue-class tiles for operands without 16-byte
// alignment, planning knobs (plan_launch), launch and description (WgmmaFamily).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <ostream>
#include <tuple>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <torch/csrc/stable/macros.h>
#include <torch/headeronly/util/Exception.h>

#include "cuda/common/stage_loader.cuh"
#include "cuda/common/tensor_maps.h"
#include "cuda/dispatch/family.cuh"
#include "cuda/sm80/mma_math.cuh"
#include "cuda/sm90/class_tile_loader.cuh"
#include "cuda/sm90/gemm_wgmma.cuh"
#include "cuda/sm90/residue_class_loader.cuh"
#include "plan/gemm_problem.h"

namespace tiledmm {

// Hopper's warpgroup instructions (gemm_wgmma, sm_90a): fp16/bf16, and float32 as TF32 or
// 3xTF32, one table per input path.
// 128 x 256 with four stages is 193 KiB: one block per SM, two warpgroups of 128 accumulators.
// Short K: a persistent 128 x 128 tile, warp-specialized (its producer's copies run through all
// of a block's items), each math warpgroup writing its own rows by bulk copies from three
// buffers of its own while the other's wgmmas run. On an H200 against 128 x 128 at two blocks
// per SM: smallK (K = 64) 1.07x torch against 0.81x (0.99-1.08x in the four layouts), K = 16
// 0.92-0.99x against 0.80-0.85x, K = 32 0.90-0.99x against 0.73-0.79x, K = 128 0.88x against
// 0.70x, K = 256 0.66x against 0.62-0.64x (bench/NOTES.md item 86); the writing by warpgroup,
// 1.10-1.12x at smallK, 0.96x at K = 32 (item 87). Aligned operands run on the Hopper GEMM core
// instead past K = 64, and at one K tile on outputs of up to kCoreShortKMaxRounds rounds (item 183).
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
  static constexpr double kPsPerOperandElement = 38;  // ~600 TFLOP/s on 128 x 256 (WgmmaFamily)
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
  static constexpr double kPsPerOperandElement = 93;  // WgmmaFamily
};
// 3xTF32 keeps a second set of accumulators (the float32 sums) and B's big and small tiles:
// 128 x 128 at most (four stages are 193 KiB; three where an MN-major B adds its raw tiles,
// WgmmaFamily::kLayoutStages). Short K on a persistent 128 x 128 tile of three stages: smallK
// 1.90x torch against 1.14x on the four-stage one (H100; bench/NOTES.md item 77). 64 x 128's
// four stages (161 KiB) leave room for one block an SM: a producer warpgroup copies and splits B
// beside its one math warpgroup (alone, the four warps did both in turn and issued an instruction
// every 3.8 cycles: attention's p @ v 1.62x torch, item 203).
template <>
struct WgmmaTileTable<WgmmaTf32Input<Split3xTf32Math>> {
  using Tiles = std::tuple<WgmmaTile<128, 128, 32, 4, 1, 1>, WgmmaTile<128, 128, 32, 4, 1, 1>,
                           WgmmaTile<128, 128, 32, 3, 1, 1, true>, WgmmaTile<64, 128, 32, 4, 1, 1>>;
  using FallbackTiles = Tiles;
  static constexpr const char* kName =
      "3xTF32 tensor cores (wgmma, sm_90a; three products per step, sums moved into float32 every "
      "32 of K)";
  static constexpr double kPsPerOperandElement = 139;  // WgmmaFamily
};

template <class Input>
struct WgmmaFamily {
  using T = typename Input::T;
  using Acc = float;
  using Tiles = typename WgmmaTileTable<Input>::Tiles;
  using FallbackTiles = typename WgmmaTileTable<Input>::FallbackTiles;
  static constexpr const char* kName = WgmmaTileTable<Input>::kName;
  // plan_launch times these plans by their waves: a block's time is its operand elements (BM + BN
  // a K step) at this many picoseconds of one SM each. H100 sweeps (bench/NOTES.md item 161):
  // TF32 93 (128 x 256, A^T x B at K = 8192), 3xTF32 139 (128 x 128); 16-bit from its rate.
  static constexpr double kPsPerOperandElement = WgmmaTileTable<Input>::kPsPerOperandElement;
  // 3xTF32's sums move into float32 once per 32 of K, so an output too small to fill the GPU,
  // unsplit, is one sequential float32 sum of up to K / 32 tile sums per output: on all-positive
  // inputs that measured 2.0-2.4x torch's error (96 x 80 outputs, K 33-1000; cuBLAS splits K
  // there). Measured within the contract from K = 4096 in 8 slices, and in slices up to 2048 long
  // (item 161): such outputs run here where K >= kSmallOutputMinK, in kSmallOutputSlices K slices
  // or more and none longer than kSmallOutputSliceK, where the slices' workspace fits
  // kMaxAccuracyWorkspace (is_as_accurate); on mma.sync otherwise (gemm_dispatch.cuh).
  //   An output's error grows with the sums in sequence: a slice's K / (32 S) tile sums, then the
  // second kernel's S slices. Past K = 2^17 slices of 2048 make the second sum the longer one, so
  // there the slices lengthen to sqrt(32 K), where both sums are as long and their total is least
  // (K = 524288: 128 slices of 4096, 256 sums in sequence against 320 for 256 slices of 2048, and
  // half the blocks: item 177).
  static constexpr int64_t kSmallOutputMinK = 4096, kSmallOutputSlices = 8, kSmallOutputSliceK = 2048;
  static bool fills_gpu(const GemmProblem& p, int num_sms) {
    using Medium = std::tuple_element_t<kMedium, Tiles>;
    return output_tiles(p, Medium::BM, Medium::BN) >= num_sms;
  }
  static int64_t min_splits(const GemmProblem& p, int num_sms) {
    if (Input::kPromoteTiles == 0 || p.k < kSmallOutputMinK || fills_gpu(p, num_sms)) return 1;
    const int64_t short_slices = (p.k + kSmallOutputSliceK - 1) / kSmallOutputSliceK;
    const auto balanced = static_cast<int64_t>(std::ceil(std::sqrt(static_cast<double>(p.k) / 32)));
    return std::max(kSmallOutputSlices, std::min(short_slices, balanced));
  }
  static bool is_as_accurate(const GemmProblem& p, int num_sms) {
    return fills_gpu(p, num_sms) ||
           (p.k >= kSmallOutputMinK &&
            min_splits(p, num_sms) * p.batch * p.m * p.n * int64_t(sizeof(Acc)) <= kMaxAccuracyWorkspace);
  }
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
      // The scaled splits' product starts behind the split (ScaledSplitPath), whose lines it waits for.
      auto launch_kernel = [&](auto bulk, const OperandMaps& maps) {
        launch_with_smem<gemm_wgmma_kernel<Input, Tile, kMode, kARowMajor, kBRowMajor, Out, kTransposedOut,
                                           decltype(bulk)::value>,
                         Tile, kSmem, 1, Input::kScaledOutput>(args, device.num_sms, stream, output_map, maps);
      };
      if constexpr (kBulk<Tile, kVec, kBRowMajor>) {
        // The operands' maps hold the K they store: a re-read segment is not stored twice.
        const OperandMaps maps = bulk_maps<Tile>(args.a, args.lda, args.batch_stride_a, kARowMajor, args.b, args.ldb,
                                                 args.batch_stride_b, kBRowMajor, args.batch, args.m, args.n,
                                                 args.k - args.reread_k);
        if (maps.b.valid) return launch_kernel(std::true_type{}, maps);
      }
      STD_TORCH_CHECK(args.reread_k == 0, "tiledmm: internal error: a K segment read twice needs bulk tensor copies");
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

}  // namespace tiledmm
