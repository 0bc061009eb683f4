// The Hopper tensor-core matrix-product kernel (wgmma, sm_90a), for fp16/bf16 operands and for
// float32 operands rounded to TF32.
//
// A block of BM / 64 warpgroups computes a BM x BN tile of C[z]: warpgroup w owns rows
// [64 w, 64 w + 64) across all BN columns, one m64nBNk16 (TF32: k8) wgmma per step of K. K
// advances in tiles of BK (one 128-byte row: 64 16-bit elements, 32 floats) through a ring of
// kStages shared-memory stages, filled by cp.async (16-byte; without 16-byte alignment,
// element-wise for float32 and, for 16-bit types, the aligned 16-byte windows around each chunk,
// shifted into place once landed; an MN-major float32 B into a raw tile, transposed into place),
// or by bulk tensor copies (TF32's aligned K-major B and aligned 16-bit operands in the
// warp-specialized tiles, bulk_tile_loader.cuh; C^T products without 16-byte alignment on
// the large tile: both operands by their lines' residue classes, every class in each tile for
// TF32, residue_class_loader.cuh, one class a tile for 16-bit types, class_tile_loader.cuh).
// Two pipelines (WgmmaTile::kSpecialized):
//   shared: every warpgroup copies and computes, meeting the others at one barrier per K tile;
//   specialized: a producer warpgroup fills the stages and the math warpgroups compute, each
// side waiting on the other's per-stage mbarriers, so that the math warpgroups drift apart and
// one's fragment loads and float32 additions run while the other's wgmmas do.
//   16-bit operands: stages keep each operand's global layout in wgmma's 128-byte-swizzled form
// (Swizzle128Tile); wgmma reads K-major or MN-major tiles itself, both from shared memory.
//   TF32: wgmma reads TF32 from shared memory K-major only, and does not round it. So A comes
// from registers: its raw float32 stage (mma.sync's layout, any orientation) is read as
// fragments and rounded there; B's stage is K-major, rounded in place (tf32_stage_loader.cuh), or,
// aligned in the warp-specialized tiles, copied by the TMA through a TFLOAT32 tensor map, which
// rounds it on the way (kBulk, bulk_tile_loader.cuh). 16-bit operands, aligned, come by bulk
// tensor copies in the persistent warp-specialized tile (kBulk: both operands).
// The dispatcher runs row-major A x row-major B (whose B is MN-major) as C^T = B^T A^T, which
// makes the shared-memory operand K-major, and TF32's x @ W^T without 16-byte alignment as
// C^T = W x^T, whose x lines are then the residue-class path's B lines; the result is then written
// column-major (kTransposedOut).
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/common/block_sync.cuh"
#include "cuda/common/gemm_common.cuh"
#include "cuda/common/gemm_epilogue.cuh"
#include "cuda/sm80/gemm_mma.cuh"
#include "cuda/sm80/mma_math.cuh"
#include "cuda/common/tensor_maps.h"
#include "cuda/common/ptx.cuh"
#include "cuda/sm90/class_tile_loader.cuh"
#include "cuda/sm90/output_scales.cuh"
#include "cuda/sm90/residue_class_loader.cuh"
#include "cuda/common/stage_loader.cuh"
#include "cuda/sm90/bulk_tile_loader.cuh"
#include "cuda/sm90/tf32_stage_loader.cuh"
#include "cuda/sm90/wgmma.cuh"

namespace tiledmm {

// BK: one 128-byte row of the operand type (64 for 16-bit types, 32 for float32).
// kProducers > 0 (warp-specialized): that many more warpgroups, the producers, fill the stages
// (copies, and TF32's rounding) while the BM / 64 math warpgroups only compute; the two sides wait
// on each other through mbarriers. Otherwise every warpgroup does both, meeting at one barrier
// per K tile.
// kPersistent: kMinBlocks blocks per SM walk the output tiles (for_each_work_item), each tile's
// result staged in a buffer of its own and sent out by bulk asynchronous copies, so that the
// next tile's copies and products run while it is written (short K, where the output's writes
// take as long as the products).
template <int BM_, int BN_, int BK_, int kStages_, int kMinBlocks_ = 1, int kProducers_ = 0, bool kPersistent_ = false>
struct WgmmaTile {
  static constexpr int BM = BM_, BN = BN_, BK = BK_, kStages = kStages_, kMinBlocks = kMinBlocks_;
  static constexpr int kProducers = kProducers_;
  static constexpr bool kPersistent = kPersistent_;
  static constexpr bool kSpecialized = kProducers > 0;
  static constexpr int kWarpGroups = BM / 64;  // math warpgroups
  static constexpr int kMathThreads = 128 * kWarpGroups;
  static constexpr int kLoadThreads = kSpecialized ? 128 * kProducers : kMathThreads;
  static constexpr int kThreads = kSpecialized ? kMathThreads + kLoadThreads : kMathThreads;
  // Registers per thread of each role (setmaxnreg): the math warpgroups take what the producers
  // leave of the block's starting registers (the launch cap, a multiple of 8, times its
  // threads). The math warps need at most 184 (TF32 128 x 256: 128 accumulators; 3xTF32
  // 128 x 128: 128 accumulators and sums; the kernel gives 3xTF32 200 where its producer
  // allows); the producers' unrolled copies keep each chunk's addresses, which spill below 136
  // registers with one producer warpgroup (TF32 A^T x B: 156 bytes at 96) and fit the 72 left
  // with two, each copying half as many chunks.
  static constexpr int kMathRegisters = 184;
  // A block of one math and one producer warpgroup keeps what it is compiled with (up to 255 a
  // thread): nothing to move.
  static constexpr bool kReallocates = kSpecialized && kThreads > 256;
  static constexpr int producer_registers(int math) {
    return kSpecialized ? (65536 / kThreads / 8 * 8 * kThreads - kMathThreads * math) / kLoadThreads / 8 * 8 : 0;
  }
  template <int kOtherProducers, int kOtherStages = kStages, bool kOtherPersistent = kPersistent>
  using WithProducers = WgmmaTile<BM, BN, BK, kOtherStages, kMinBlocks, kOtherProducers, kOtherPersistent>;
  static_assert(BM % 64 == 0 && (BN == 64 || BN == 128 || BN == 256), "wgmma tile shapes");
  static_assert(!kSpecialized || kMinBlocks == 1, "setmaxnreg needs the one-block register cap");
  // Copies run kStages - 2 tiles ahead, or kStages - 1 where each tile waits for its own wgmmas
  // (kAhead, kInFlight in the kernel).
  static_assert(kStages >= 3, "the pipeline needs three stages or more");
};

// What the kernel needs to know of its inputs (one struct per path): the storage type, the
// stage loaders, whether A comes from registers, whether B's stages are always K-major and how
// many tiles a B stage holds, the K of one wgmma, and the products of one K step.
//   WgmmaHalfInput: fp16/bf16, both operands from shared memory.
//   WgmmaTf32Input<Math>: float32 with A from registers as Math's fragments (mma_math.cuh):
// Tf32Math (one product) or Split3xTf32Math (3xTF32: big and small parts of both operands, three
// products, the tensor-core sums promoted into float32 every kPromoteTiles K tiles).
//   kScaledOutput: float16 splits of float32 operands scaled by powers of two (scaled_split.cuh),
// whose float32 result is scaled back in the epilogue by args.row_scale and args.col_scale.
template <typename Half, bool kScaledOutput_ = false>
struct WgmmaHalfInput {
  using T = Half;
  static constexpr int kStepK = 16, kPromoteTiles = 0;
  static constexpr bool kARegisters = false, kRecomputeNaN = false, kScaledOutput = kScaledOutput_;
  static constexpr bool kBStagesKMajor = false;  // stages keep the source layout; wgmma transposes
  static constexpr bool kRoundingBulkB = false;
  template <int BX, int BK, int kThreads, bool kAlongK, LoadMode kMode>
  using ALoader = StageLoader<Half, BX, BK, kThreads, kAlongK, kMode, Swizzle128Tile>;
  template <int BX, int BK, int kThreads, bool kAlongK, LoadMode kMode, int /*kStages*/>
  using BLoader = ALoader<BX, BK, kThreads, kAlongK, kMode>;
  // Without 16-byte alignment (kClassBoxes): one residue class of lines per tile, A from registers.
  template <int BM, int BN, int BK, bool /*kAKMajor*/>
  using ClassLoader = ClassTileLoader<Half, BM, BN, BK>;
  template <int kSteps>
  struct AOperands {};  // descriptors, computed per wgmma
  template <int N, bool kAKMajor, bool kBKMajor>
  __device__ __forceinline__ static void mma(float (&d)[N / 2], uint64_t a, uint64_t b) {
    wgmma::mma_m64k16<N, std::is_same_v<Half, __nv_bfloat16>, !kAKMajor, !kBKMajor>(d, a, b);
  }
};

template <class Math_>
struct WgmmaTf32Input {
  using T = float;
  using Math = Math_;
  static constexpr bool kSplit = Math::kPromote;  // 3xTF32
  static constexpr int kStepK = 8;
  // The tensor cores' float32 additions truncate (Split3xTf32Math), so 3xTF32's sums are moved
  // into float32 after every K tile, each tile's products starting from zero. Within a tile the
  // two small products of every step go first and the big ones last: only the additions onto a
  // sum of full size lose bits that matter, four per tile (a product order of small, small, big
  // per step had eleven: 3.2x torch's error at K = 64).
  static constexpr int kPromoteTiles = kSplit ? 1 : 0;
  static constexpr bool kARegisters = true, kRecomputeNaN = Math::kRecomputeNaN, kScaledOutput = false;
  static constexpr bool kBStagesKMajor = true;
  // A K-major, aligned B may come by bulk copies that round it (BulkTileLoader through a TFLOAT32
  // map; kBulk in the kernel): TF32's one product, whose B tiles are the rounded values.
  static constexpr bool kRoundingBulkB = !kSplit;
  template <int BX, int BK, int kThreads, bool kAlongK, LoadMode kMode>
  using ALoader = StageLoader<float, BX, BK, kThreads, kAlongK, kMode>;  // raw, mma.sync's layout
  // An MN-major B is transposed through raw cp.async tiles, a ring of kStages - 1 of them (the
  // most a pipeline has copied and not yet finished: kLag + 1 in the specialized one, kAhead in
  // the shared one, in gemm_wgmma_kernel).
  template <int BX, int BK, int kThreads, bool kAlongK, LoadMode kMode, int kStages>
  using BLoader = std::conditional_t<kAlongK, Tf32CopyLoader<BX, BK, kThreads, kMode, kSplit>,
                                     Tf32TransposeCopyLoader<BX, BK, kThreads, kMode, kSplit, kStages - 1>>;
  // Without 16-byte alignment (kClassBoxes): every residue class of lines in each tile.
  template <int BM, int BN, int BK, bool kAKMajor>
  using ClassLoader = ResidueClassLoader<BM, BN, BK, kAKMajor>;
  using AOperand = typename Math::template Operand<Math::kARegs>;
  template <int kSteps>
  struct AOperands {
    AOperand step[kSteps];
  };
  // One K tile's products: b(s), b_small(s): descriptors of step s's big and small B tiles.
  // fresh: the first product overwrites d rather than adding to it.
  template <int N, int kSteps, class BDescriptor, class BSmallDescriptor>
  __device__ __forceinline__ static void mma_tile(float (&d)[N / 2], const AOperands<kSteps>& a,
                                                  const BDescriptor& b, const BSmallDescriptor& b_small,
                                                  bool fresh) {
    int accumulate = fresh ? 0 : 1;
    if constexpr (kSplit) {
#pragma unroll
      for (int s = 0; s < kSteps; ++s) {
        wgmma::mma_tf32_m64k8_rs<N>(d, a.step[s].small, b(s), accumulate);
        wgmma::mma_tf32_m64k8_rs<N>(d, a.step[s].big, b_small(s));
        accumulate = 1;
      }
#pragma unroll
      for (int s = 0; s < kSteps; ++s) wgmma::mma_tf32_m64k8_rs<N>(d, a.step[s].big, b(s));
    } else {
#pragma unroll
      for (int s = 0; s < kSteps; ++s) {
        wgmma::mma_tf32_m64k8_rs<N>(d, a.step[s].r, b(s), accumulate);
        accumulate = 1;
      }
    }
  }
};

constexpr int kHopperMaxSmem = 227 * 1024;  // one block's opt-in maximum on sm_90

// Shared memory of one block: the output tiles' buffer (kPersistent), kStages stages of A, then of
// B (each as large as its loader needs for the operand's layout and load mode), the B loader's
// ring (an MN-major float32 B's raw tiles), a full and an empty mbarrier per stage
// (kSpecialized), and 1024 bytes to align the stages and the buffer (the swizzles are functions
// of the address).
//   The buffer takes what the rest leaves of the 227 KiB, in whole 16-bit tiles, and at least one
// float32 tile (the widest output): the more output tiles the bulk copies may still be reading,
// the longer the write path can fall behind without holding the math warps up.
// kClassBoxes: operands without 16-byte alignment by bulk copies of residue classes of their
// lines (Input::ClassLoader: ResidueClassLoader, ClassTileLoader).
template <class Input, class Tile, bool kARowMajor>
using ClassLoaderOf = typename Input::template ClassLoader<Tile::BM, Tile::BN, Tile::BK, kARowMajor>;
template <class Input, class Tile, LoadMode kMode, bool kARowMajor, bool kBRowMajor, bool kClassBoxes = false>
constexpr int wgmma_stage_bytes() {
  if constexpr (kClassBoxes) {
    using Classes = ClassLoaderOf<Input, Tile, kARowMajor>;
    return Tile::kStages * (Classes::kAStageElems + Classes::kBStageElems) *
           static_cast<int>(sizeof(typename Input::T));
  }
  using ALoader = typename Input::template ALoader<Tile::BM, Tile::BK, Tile::kLoadThreads, kARowMajor, kMode>;
  using BLoader =
      typename Input::template BLoader<Tile::BN, Tile::BK, Tile::kLoadThreads, !kBRowMajor, kMode, Tile::kStages>;
  return (Tile::kStages * (ALoader::kStageElems + BLoader::kStageElems) + BLoader::kRingElems) *
         static_cast<int>(sizeof(typename Input::T));
}
template <class Tile>
constexpr int wgmma_fixed_bytes(int stage_bytes) {
  // A full and an empty mbarrier per stage, and one for the first tile of an item (kClassBoxes).
  return stage_bytes + (Tile::kSpecialized ? 16 * Tile::kStages + 8 : 0) + 1024;
}
template <class Input, class Tile, LoadMode kMode, bool kARowMajor, bool kBRowMajor, bool kClassBoxes = false>
constexpr int wgmma_output_buffer_bytes() {
  if constexpr (!Tile::kPersistent) {
    return 0;
  } else {
    constexpr int kHalfTile = Tile::BM * Tile::BN * 2;
    constexpr int kLeftTiles =
        (kHopperMaxSmem -
         wgmma_fixed_bytes<Tile>(wgmma_stage_bytes<Input, Tile, kMode, kARowMajor, kBRowMajor, kClassBoxes>())) /
        kHalfTile;
    return (kLeftTiles > 2 ? kLeftTiles : 2) * kHalfTile;
  }
}
template <class Input, class Tile, LoadMode kMode, bool kARowMajor, bool kBRowMajor, bool kClassBoxes = false>
constexpr int wgmma_smem_bytes() {
  return wgmma_output_buffer_bytes<Input, Tile, kMode, kARowMajor, kBRowMajor, kClassBoxes>() +
         wgmma_fixed_bytes<Tile>(wgmma_stage_bytes<Input, Tile, kMode, kARowMajor, kBRowMajor, kClassBoxes>());
}

// Persistent warp-specialized tiles: each math warpgroup writes its own 64 rows of a work item
// (staged in buffers of its own, sent by its own bulk copies, meeting at its own barrier; a
// column-major output's group rows are two of the tile's four 128-byte boxes), so that one
// group's writing runs while the other group's wgmmas do, the groups taking turns at the tensor
// cores. 3xTF32 at K = 32-256: up to 8% faster than one block-wide epilogue, none over 1% slower
// (smallK 2.35x -> 2.45x torch); TF32, whose items are a third of the work, keeps the block-wide
// one (smallK 0.99x against 0.97-0.98x; bench/NOTES.md item 97).
template <class Input, class Tile>
constexpr bool kGroupOutput =
    Tile::kPersistent && Tile::kSpecialized && (!Input::kARegisters || Input::kPromoteTiles > 0);
// Whether register A is read from a stage contiguous along m, pairing its fragment rows (the
// kernel's kRows, below).
template <class Input, bool kARowMajor>
constexpr bool kPairedFragmentRows = Input::kARegisters && !kARowMajor;
// The 128-byte chunks of a line that one box of the output's map writes (bulk_box_offset): two
// (256 bytes of each line at once; H200: TF32 smallK 1.35 -> 1.24 ms, 'highest' x @ W^T at short
// K 2.19 -> 1.96 ms, bench/NOTES.md item 139) where the staged lines are long enough, except for
// - a row-major tile of paired fragment rows (A read from an M-contiguous stage): a half warp's
//   rows 2 g + half would fall into two swizzle phases, two-way bank conflicts (its rows g + 8 half
//   are conflict-free only with two chunks);
// - a column-major tile that each math warpgroup writes in parts (3xTF32's C^T products): its
//   time is not the writes', and it ran 1-5% slower with two.
template <class Input, class Tile, bool kARowMajor, bool kTransposedOut, typename Out>
constexpr int kOutputBoxChunks = [] {
  constexpr bool kPairedRows = kPairedFragmentRows<Input, kARowMajor>;
  constexpr bool kGroupParts = kTransposedOut && kGroupOutput<Input, Tile>;
  constexpr int kLineLen = kTransposedOut ? Tile::BM : Tile::BN;
  return kLineLen * static_cast<int>(sizeof(Out)) >= 256 && !kGroupParts && (kTransposedOut || !kPairedRows) ? 2 : 1;
}();
// The lines of the output tensor map's boxes: the tile's columns (a column-major output), a
// group's rows, or the tile's rows (at most 64 where a box has two chunks).
template <class Input, class Tile, bool kARowMajor, bool kTransposedOut, typename Out>
constexpr int kOutputBoxLines =
    kBulkBoxLines<kTransposedOut ? Tile::BN : kGroupOutput<Input, Tile> ? 64 : Tile::BM,
                  kOutputBoxChunks<Input, Tile, kARowMajor, kTransposedOut, Out>>;

// kTransposedOut: the kernel's m x n result is C^T (see above), written column-major; a persistent
// block walks its row tiles first, so that the tiles the blocks write at once lie side by side
// along the output's lines rather than above one another (TF32 smallK 1.39 -> 1.29 ms on an H200,
// bench/NOTES.md item 130).
// kBulk (warp-specialized, 16-byte aligned): the shared-memory operands' tiles by bulk tensor
// copies (BulkTileLoader) through maps.a and maps.b: TF32's K-major B, through a TFLOAT32 map that
// rounds it on the way (A comes from registers), and both 16-bit operands in either orientation.
// kClassBoxes (warp-specialized, K-major B without 16-byte alignment, C^T products; A MN-major, or
// K-major from TF32's x @ W^T): both operands' tiles by bulk tensor copies of their residue
// classes through the maps (Input::ClassLoader), B's lines permuted by class, A from registers.
// output_map: the output's tensor map (kPersistent tiles), where valid.
template <class Input, class Tile, LoadMode kMode, bool kARowMajor, bool kBRowMajor, typename Out,
          bool kTransposedOut = false, bool kBulk = false, bool kClassBoxes = false>
__global__ void __launch_bounds__(Tile::kThreads, Tile::kMinBlocks)
    gemm_wgmma_kernel(const GemmArgs<typename Input::T, Out> args, const __grid_constant__ TensorMap output_map,
                      const __grid_constant__
                          std::conditional_t<kClassBoxes, typename ClassLoaderOf<Input, Tile, kARowMajor>::Maps, OperandMaps>
                              maps) {
  using T = typename Input::T;
  static_assert(Tile::BK * sizeof(T) == 128, "a K tile is one 128-byte row");
  if constexpr (!wgmma::kCompiled) {
    __trap();  // not an sm_90a pass: the dispatcher launches this kernel only on sm_90a images
  } else {
    constexpr int BM = Tile::BM, BN = Tile::BN, BK = Tile::BK, kStages = Tile::kStages;
    constexpr int kMathThreads = Tile::kMathThreads;
    constexpr int kRowBytes = 128;  // one row of a swizzle atom: BK elements
    constexpr int kStep = Input::kStepK;
    constexpr int kSteps = BK / kStep;
    constexpr bool kAKMajor = kARowMajor;
    constexpr bool kBKMajor = !kBRowMajor || Input::kBStagesKMajor;
    // kBulk: B's tiles, and A's where it comes from shared memory, by bulk tensor copies.
    constexpr bool kBulkA = kBulk && !Input::kARegisters, kBulkB = kBulk;
    static_assert(!kBulk || (Tile::kSpecialized && kMode == LoadMode::kVector &&
                             (Input::kRoundingBulkB ? !kBRowMajor : !Input::kARegisters)),
                  "bulk tiles: TF32's K-major B, or both 16-bit operands, aligned, in the warp-specialized pipeline");
    // The scaled splits' bulk tiles may read a segment of K twice (GemmArgs::reread_k).
    constexpr bool kRereads = Input::kScaledOutput;
    static_assert(!Input::kScaledOutput || Tile::kSpecialized, "the scaled splits' product: warp-specialized");
    using ALoader = std::conditional_t<kBulkA, BulkTileLoader<T, BM, BK, kARowMajor, 1, kRereads>,
                                       typename Input::template ALoader<BM, BK, Tile::kLoadThreads, kARowMajor, kMode>>;
    using BLoader =
        std::conditional_t<kBulkB, BulkTileLoader<T, BN, BK, !kBRowMajor, 1, kRereads>,
                           typename Input::template BLoader<BN, BK, Tile::kLoadThreads, !kBRowMajor, kMode, kStages>>;
    using Classes = ClassLoaderOf<Input, Tile, kARowMajor>;
    static_assert(!kClassBoxes || (Classes::kFits && Tile::kSpecialized && !Tile::kPersistent && !kBRowMajor &&
                                   kTransposedOut && !kBulk),
                  "residue-class boxes: C^T products (K-major B) in the warp-specialized pipeline");
    constexpr bool kClassCluster = kClassBoxes && Classes::kClusterBlocks > 1;
    using AOperands = std::conditional_t<kClassBoxes, typename Classes::template Fragments<kSteps>,
                                         typename Input::template AOperands<kSteps>>;
    constexpr bool kFinishesInPlace = ALoader::kFinishesInPlace || BLoader::kFinishesInPlace;
    static_assert(!(ALoader::kRegisterStaged || BLoader::kRegisterStaged),
                  "wgmma stages are filled by cp.async or bulk copies");
    // Groups of wgmmas left running at the end of a step: one (the next step's loads overlap
    // them), except with register A: were the next tile's A registers written while wgmmas are in
    // flight, ptxas would serialize every wgmma (its C7513 advisory).
    constexpr int kInFlight = Input::kARegisters || kClassBoxes ? 0 : 1;
    // A B stage holds the loader's tiles (3xTF32: big, then small; raw copies or windows' side
    // slots last).
    constexpr int kAStageElems = kClassBoxes ? Classes::kAStageElems : ALoader::kStageElems;
    constexpr int kBStageElems = kClassBoxes ? Classes::kBStageElems : BLoader::kStageElems;
    constexpr int kBTileElems = BLoader::Tile::kElems;
    constexpr int kStageBytes = wgmma_stage_bytes<Input, Tile, kMode, kARowMajor, kBRowMajor, kClassBoxes>();
    constexpr bool kStagedEpilogue =
        Tile::kPersistent || staged_output_fits<BM, BN, Out, kTransposedOut>(kStageBytes);
    // The staged epilogue writes over the stages, unless the tile has its own buffer.
    constexpr bool kEpilogueOverStages = kStagedEpilogue && !Tile::kPersistent;
    constexpr bool kPromote = Input::kPromoteTiles > 0;
    // Registers of a math thread (the producers take the rest): 200 for 3xTF32 where one producer
    // warpgroup copies 16-byte chunks, whose addresses fit the 104 left (the persistent row-major
    // B variants spilled 80-96 bytes in the staging at 184, 16-24 at 200; 'highest' 1-2% faster
    // on the aligned problems, smallK x @ W^T 7%: bench/NOTES.md item 95).
    // kClassBoxes: 128 accumulators and a K tile's A fragments (TF32 64 registers, 16-bit 16); its
    // producer only issues bulk copies.
    constexpr int kMathRegisters = kClassBoxes ? 232
                                   : kPromote && kMode == LoadMode::kVector && Tile::kProducers == 1 ? 200
                                                                                                      : Tile::kMathRegisters;
    static_assert(!Tile::kReallocates || Tile::producer_registers(kMathRegisters) >= 24, "setmaxnreg's range");
    // Persistent tiles: as many output buffers as the buffer holds tiles of Out, taken in turn,
    // so that a tile is staged while the last one's bulk copies still read theirs (kGroupOutput:
    // each of them in one part per math warpgroup).
    constexpr int kOutputBufferBytes =
        wgmma_output_buffer_bytes<Input, Tile, kMode, kARowMajor, kBRowMajor, kClassBoxes>();
    constexpr int kOutputTileBytes = BM * BN * static_cast<int>(sizeof(Out));
    constexpr int kOutputBuffers = kOutputBufferBytes / kOutputTileBytes;
    constexpr bool kGroupOut = kGroupOutput<Input, Tile>;
    constexpr int kBoxChunks = kOutputBoxChunks<Input, Tile, kARowMajor, kTransposedOut, Out>;

    extern __shared__ unsigned char smem_raw[];
    unsigned char* const output_buffer = smem_raw + (1024 - ptx::smem_address(smem_raw) % 1024) % 1024;
    unsigned char* const smem = output_buffer + kOutputBufferBytes;  // the stages
    T* const a_stages = reinterpret_cast<T*>(smem);
    T* const b_stages = a_stages + kStages * kAStageElems;
    // Where the B loader keeps one, its ring follows the B stages.
    auto attach_ring = [&](BLoader& loader) {
      if constexpr (BLoader::kRingElems > 0) loader.ring = b_stages + kStages * kBStageElems;
    };

    const int tid = threadIdx.x, warp = tid / 32, group = warp / 4;

    // Descriptors of k step s (kStep of K, 32 bytes) of this warpgroup's A rows and of B, in one
    // stage. K-major operands advance 32 bytes along their 128-byte rows; MN-major ones kStep
    // rows. This warpgroup's 64 rows of A start 64 lines (K-major) or one 64-row column block
    // (MN-major: 16-bit only, a 128-byte block row holding 64 elements) after the previous
    // group's: 64 * BK elements either way.
    static_assert(kAKMajor || sizeof(T) == 2 || Input::kARegisters,
                  "MN-major stages hold 64 elements per 128-byte row");
    auto a_descriptor = [&](const T* stage, int s) {
      if constexpr (kAKMajor)
        return wgmma::descriptor(stage + group * 64 * BK + s * kStep, 16, 8 * kRowBytes);
      else
        return wgmma::descriptor(stage + group * 64 * BK + s * kStep * BK, BK * kRowBytes, 8 * kRowBytes);
    };
    auto b_descriptor = [&](const T* stage, int s) {
      if constexpr (kBKMajor) return wgmma::descriptor(stage + s * kStep, 16, 8 * kRowBytes);
      else return wgmma::descriptor(stage + s * kStep * BK, BK * kRowBytes, 8 * kRowBytes);
    };
    // Register A read from a stage contiguous along m pairs its fragment rows (fragment_row): one
    // 8-byte load for two rows, and, as the accumulators' rows follow A's, one 8-byte store for
    // two outputs of a column-major tile (the C^T products of row-major operands, whose A^T is
    // contiguous along m). A K-major A keeps ldmatrix's rows. (H200, against unpaired rows: 'highest' smallK 2.49x ->
    // 2.60x, TF32 transA 0.70x -> 0.76x; bench/NOTES.md item 98.)
    constexpr bool kPairedRows = kPairedFragmentRows<Input, kARowMajor>;
    // kClassBoxes: the rows its loads of A want.
    constexpr FragmentRows kRows = kClassBoxes    ? Classes::kRows
                                   : kPairedRows ? FragmentRows::kPaired
                                                 : FragmentRows::kPlain;
    // One K tile's wgmmas on the stage of index `stage`, committed as one group: register A
    // first (load_tile_a: this warp's 16 rows of the stage, every k step, as Math's rounded
    // fragments), then the products (issue_tile). fresh: promoted sums start each period of
    // kPromoteTiles from zero.
    // kClassBoxes: this thread's A elements (Classes::class_offsets), set for each work item.
    typename Classes::Offsets class_offset;
    auto load_tile_a = [&](AOperands& ops, int stage) {
      if constexpr (kClassBoxes) {
        Classes::load(ops, a_stages + stage * kAStageElems, class_offset);
      } else if constexpr (Input::kARegisters) {
        using Math = typename Input::Math;
#pragma unroll
        for (int s = 0; s < kSteps; ++s)
          ops.step[s] = Math::prepare(load_a<Math, typename ALoader::Tile, kARowMajor, kPairedRows>(
              a_stages + stage * kAStageElems, group * 64 + (warp % 4) * 16, 0, s * kStep, tid % 32));
      }
    };
    auto issue_tile = [&](float (&acc)[BN / 2], const AOperands& ops, int stage, int64_t t) {
      const T* as = a_stages + stage * kAStageElems;
      const T* bs = b_stages + stage * kBStageElems;
      const bool fresh = kPromote && t % (kPromote ? Input::kPromoteTiles : 1) == 0;
      wgmma::fence_operands(acc);
      wgmma::fence();
      if constexpr (kClassBoxes) {
        Classes::template issue<BN>(acc, ops, bs, b_descriptor);
      } else if constexpr (Input::kARegisters) {
        Input::template mma_tile<BN>(
            acc, ops, [&](int s) { return b_descriptor(bs, s); },
            [&](int s) { return b_descriptor(bs + kBTileElems, s); }, fresh);
      } else {
#pragma unroll
        for (int s = 0; s < kSteps; ++s)
          Input::template mma<BN, kAKMajor, kBKMajor>(acc, a_descriptor(as, s), b_descriptor(bs, s));
      }
      wgmma::commit_group();
      wgmma::fence_operands(acc);
    };
    // A work item's accumulators, and its promoted float32 sums (kPromote), start from zero.
    constexpr int kSums = kPromote ? BN / 2 : 1;
    auto clear = [&](float (&acc)[BN / 2], float (&sum)[kSums]) {
#pragma unroll
      for (int r = 0; r < BN / 2; ++r) acc[r] = 0.0f;
#pragma unroll
      for (int r = 0; r < kSums; ++r) sum[r] = 0.0f;
    };
    // After tile t's wgmmas have retired: its sums into float32 at the end of a period.
    auto promote = [&](float (&sum)[kSums], const float (&acc)[BN / 2], int64_t t,
                       int64_t k_tiles) {
      if constexpr (kPromote) {
        static_assert(kInFlight == 0, "promotion reads the accumulators of retired wgmmas");
        if ((t + 1) % Input::kPromoteTiles == 0 || t + 1 == k_tiles) {
#pragma unroll
          for (int r = 0; r < BN / 2; ++r) sum[r] += acc[r];
        }
      }
    };

    // The math warps' result of a work item, written out. Split inputs turn non-finite values
    // into NaN (inf - inf): a block with NaN outputs recomputes them with exact float32 arithmetic
    // in its staged tile (a cold path: inline in the store, it cost every 3xTF32 kernel hundreds
    // of bytes of spills).
    int64_t stored = 0;  // tiles this thread has stored
    // The output lines of a work item's staged lines (kClassBoxes: B's lines permuted by class).
    auto lines_of = [&](const WorkItem<T>& w) {
      if constexpr (kClassBoxes) return Classes::lines(w.n0);
      else return SameLines{};
    };
    // kGroupOut: this math warpgroup's writers, at named barrier 5 + group (1-4 are taken).
    const GroupWriters group_writers{group, 5 + group};
    // kScaledOutput: each output times its row's and its column's scale (kPlain rows: 16-bit),
    // read as a warp-specialized tile's item starts, so that the loads land during its K loop.
    using Scales = OutputScales<Input::kScaledOutput, BN>;
    auto scales_of = [&](const WorkItem<T>& w) {
      return Scales(args, w, group * 64 + (warp % 4) * 16 + (tid % 32) / 4, (tid % 32) % 4);
    };
    auto store_result = [&](const WorkItem<T>& w, const float (&result)[BN / 2], const Scales& scales) {
      // The m64nN result is the m16n8 layout repeated: warp w of the group holds rows
      // 16 w ... 16 w + 15 of its 64, and tile j of 8 columns in registers 4 j ... 4 j + 3.
      auto value = [&](int, int j, int half, int e) { return scales(result[4 * j + 2 * half + e], j, half, e); };
      auto store = [&](const auto& repair) {
        const void* map = output_map.valid ? &output_map.map : nullptr;
        Out* const c = args.c + w.z * args.m * args.n;
        if constexpr (kGroupOut) {
          unsigned char* tile = output_buffer + ((stored % kOutputBuffers) * Tile::kWarpGroups + group) *
                                                    (kOutputTileBytes / Tile::kWarpGroups);
          store_output_tile<64, BN, 128, 1, BN / 8, true, kTransposedOut, kOutputBuffers, kRows, kBoxChunks>(
              value, c, args.m, args.n, w.m0 + group * 64, w.n0, (warp % 4) * 16, 0, tile, repair, map, w.z,
              group_writers);
        } else {
          unsigned char* tile = smem;
          if constexpr (Tile::kPersistent) tile = output_buffer + (stored % kOutputBuffers) * kOutputTileBytes;
          store_output_tile<BM, BN, kMathThreads, 1, BN / 8, kStagedEpilogue, kTransposedOut, kOutputBuffers,
                            kRows, kBoxChunks>(
              value, c, args.m, args.n, w.m0, w.n0, group * 64 + (warp % 4) * 16, 0, tile, repair, map, w.z,
              BlockWriters{}, lines_of(w));
        }
        ++stored;
      };
      if constexpr (Input::kRecomputeNaN) {
        static_assert(kStagedEpilogue, "NaN outputs are recomputed in the staged tile");
        // One test of the outputs' sum rather than one per output (a chain of 64 dependent predicate
        // updates a tile, 5% of 'highest' smallK's stall samples, bench/NOTES.md item 117): a NaN
        // output makes the sum NaN. Outputs of +inf and -inf make it NaN as well; the repair then
        // finds no NaN to recompute.
        constexpr int kChains = 8;
        static_assert(BN / 2 % kChains == 0, "whole chains");
        float partial[kChains];
#pragma unroll
        for (int q = 0; q < kChains; ++q) partial[q] = result[q];
#pragma unroll
        for (int r = kChains; r < BN / 2; ++r) partial[r % kChains] += result[r];
#pragma unroll
        for (int width = kChains / 2; width > 0; width /= 2)
#pragma unroll
          for (int q = 0; q < width; ++q) partial[q] += partial[q + width];
        const bool has_nan = isnan(partial[0]);
        auto exact = [&](int64_t row, int64_t col) {
          return exact_dot<kARowMajor, kBRowMajor>(w.a, args.lda, w.b, args.ldb, row, col, w.k_begin,
                                                   w.k_begin + w.k_len);
        };
        const bool any_nan =
            kGroupOut ? sync::warps_or<128>(has_nan, group_writers.barrier) : sync::warps_or<kMathThreads>(has_nan);
        store(NanRepair<decltype(exact)>{any_nan, exact});
      } else {
        store(NoRepair{});
      }
    };

    // A work item's K tiles: kClassBoxes's windows of B start up to Classes::lead before each tile.
    auto with_tiles = [&](WorkItem<T> w) {
      if constexpr (kClassBoxes) w.k_tiles = (w.k_len + Classes::lead(maps, w.n0) + BK - 1) / BK;
      return w;
    };

    if constexpr (Tile::kSpecialized) {
      // Stage s is full once the producer's kLoadThreads threads have arrived on full[s] (copies
      // landed, rounded, fenced for the tensor cores) and, with bulk B, B's bulk copy has landed
      // on it too; empty once the math threads have arrived on empty[s] (its wgmmas retired).
      // Both sides count the tiles the block has put through the ring (`ring`): tile i is in
      // stage i % kStages, in phase i / kStages.
      // kClassBoxes: an item's first tile lands on first_landed, which its producer waits for.
      uint64_t* const full = reinterpret_cast<uint64_t*>(smem + kStageBytes);
      uint64_t* const empty = full + kStages;
      uint64_t* const first_landed = empty + kStages;
      // kClassCluster: a stage is empty once both blocks of the cluster are done with it (each math
      // warp's lane 0 arrives on the other block's mbarrier for the warp).
      if (tid == 0) {
        for (int s = 0; s < kStages; ++s) {
          sync::mbarrier_init(full + s, Tile::kLoadThreads);
          sync::mbarrier_init(empty + s, kClassCluster ? Classes::kClusterBlocks * kMathThreads : kMathThreads);
        }
        sync::mbarrier_init(first_landed, 1);
        if constexpr (kBulk || kClassBoxes) sync::fence_mbarrier_init();  // bulk copies complete on them
      }
      if constexpr (kClassCluster) ptx::cluster_sync();  // the other block's mbarriers too, before its copies
      else __syncthreads();
      // The scaled splits' product is launched behind the split (programmatic dependent launch,
      // ScaledSplitPath): the set-up above ran beside the split's end; its lines are read only now.
      if constexpr (Input::kScaledOutput) ptx::wait_prior_grids();
      int64_t ring = 0;
      if (group >= Tile::kWarpGroups) {
        // The producer: copies of tile i (counted through the ring), then the finishing work
        // (TF32 rounding and transposing in place) of the oldest tile not yet published once
        // kLag later tiles' copies have been asked for (its own have had their time to land),
        // and its publication.
        //   The ring's tiles make one pipeline through all of the block's work items where
        // finishing a tile needs nothing of its item (kAcrossItems): an item's last tiles are
        // published once the next item's copies are on their way, so that a persistent block's
        // next short-K item lands while the last one is computed (draining at each item's end,
        // the copies of a one-K-tile item were never in flight beside the math: bf16 smallK ran
        // 2 us an item). Windows shifted by their matrix's misalignment, and an epilogue over
        // the stages (the producer then waits for the math warps between items), publish each
        // item's tiles by its end. Where both operands come by bulk copies (kBulkA), which count
        // their own bytes on the stage's full mbarrier, a tile is published as soon as its copies
        // are issued (kLag 0), so that every stage is in flight.
        if constexpr (Tile::kReallocates) sync::set_registers<Tile::producer_registers(kMathRegisters), false>();
        constexpr int kLag = kBulkA ? 0 : kStages - 2;
        constexpr bool kAcrossItems =
            !kEpilogueOverStages && !ALoader::kFinishNeedsItem && !BLoader::kFinishNeedsItem;
        const int load_tid = tid - kMathThreads;
        ALoader a_loader;
        BLoader b_loader;
        Classes classes;
        attach_ring(b_loader);
        // K past two segments re-reads A's big part one segment back, B's two (GemmArgs::reread_k).
        if constexpr (kRereads && kBulkA && kBulkB) {
          if (const int64_t segment = args.reread_k; segment > 0) {
            a_loader.rereads(2 * segment, segment);
            b_loader.rereads(2 * segment, 2 * segment);
          }
        }
        int64_t items = 0;  // the work items this block has started
        auto publish = [&](int64_t i) {  // tile i of the ring, once its copies have landed
          const int s = static_cast<int>(i % kStages);
          if constexpr (kClassBoxes) {
            if (i == ring) {  // the item's first tile: its windows of B (and of a K-major A) reach before k = 0
              sync::mbarrier_wait(first_landed, static_cast<uint32_t>(items - 1) & 1);
              classes.finish_first(a_stages + s * kAStageElems, b_stages + s * kBStageElems, load_tid,
                                   Tile::kLoadThreads);
            }
          } else {
            a_loader.finish(a_stages + s * kAStageElems);
            b_loader.finish(b_stages + s * kBStageElems);
          }
          if constexpr (!kBulkA) ptx::fence_shared_for_async_proxy();  // this side's writes, for wgmma
          sync::mbarrier_arrive(full + s);
        };
        // Tiles [first, last) of the ring, once every copy has landed.
        auto publish_rest = [&](int64_t first, int64_t last) {
          ptx::cp_async_wait<0>();
          for (int64_t i = first; i < last; ++i) publish(i);
        };
        for_each_work_item<BM, BN, BK, Tile::kPersistent, kClassCluster, kTransposedOut>(args, [&](const WorkItem<T>& item) {
          const WorkItem<T> w = with_tiles(item);
          // The math warps are done with the stages (a staged epilogue over them). Both roles
          // meet at named barrier 4, each from its own branch.
          if constexpr (kEpilogueOverStages) sync::warps_anywhere<Tile::kThreads, 4>();
          ++items;
          if constexpr (kClassBoxes) {
            classes.start(&maps, w.m0, w.n0, w.k_begin, map_matrix(args.batch_stride_a, args, w),
                          map_matrix(args.batch_stride_b, args, w), load_tid);
          } else {
            if constexpr (kBulkA)
              a_loader.start(&maps.a.map, w.m0, w.k_begin, map_matrix(args.batch_stride_a, args, w), load_tid);
            else
              a_loader.start(w.a, args.lda, w.m0, w.k_begin, load_tid);
            if constexpr (kBulkB)
              b_loader.start(&maps.b.map, w.n0, w.k_begin, map_matrix(args.batch_stride_b, args, w), load_tid);
            else
              b_loader.start(w.b, args.ldb, w.n0, w.k_begin, load_tid);
          }
          for (int64_t t = 0; t < w.k_tiles; ++t) {
            const int64_t i = ring + t;
            const int s = static_cast<int>(i % kStages);
            // Copies into the B loader's ring (its slot's last tile was finished a step ago) go
            // before the wait for the stage, which only the stage's own copies need.
            constexpr bool kBRing = BLoader::kRingElems > 0;
            auto fetch_b = [&] {
              if constexpr (kBulkB) b_loader.fetch(b_stages + s * kBStageElems, full + s);
              else b_loader.fetch(b_stages + s * kBStageElems, args.n - w.n0, w.k_len - t * BK);
            };
            if constexpr (kBRing && !kClassBoxes) fetch_b();
            if (i >= kStages) sync::mbarrier_wait(empty + s, static_cast<uint32_t>(i / kStages - 1) & 1);
            if constexpr (kClassBoxes) {
              classes.fetch(a_stages + s * kAStageElems, b_stages + s * kBStageElems, t == 0 ? first_landed : full + s,
                            t == 0);
              publish(i);  // its boxes land on the stage's mbarrier
            } else {
              if constexpr (kBulkA) a_loader.fetch(a_stages + s * kAStageElems, full + s);
              else a_loader.fetch(a_stages + s * kAStageElems, args.m - w.m0, w.k_len - t * BK);
              if constexpr (!kBRing) fetch_b();
              ptx::cp_async_commit();  // one group a tile
              if (kAcrossItems ? i >= kLag : t >= kLag) {
                ptx::cp_async_wait<kLag>();  // tile i - kLag has landed
                publish(i - kLag);
              }
            }
          }
          if constexpr (!kAcrossItems && !kClassBoxes)
            publish_rest(ring + (w.k_tiles > kLag ? w.k_tiles - kLag : 0), ring + w.k_tiles);
          ring += w.k_tiles;
        });
        if constexpr (kAcrossItems) publish_rest(ring > kLag ? ring - kLag : 0, ring);
      } else {
        if constexpr (Tile::kReallocates) sync::set_registers<kMathRegisters, true>();
        for_each_work_item<BM, BN, BK, Tile::kPersistent, kClassCluster, kTransposedOut>(args, [&](const WorkItem<T>& item) {
          const WorkItem<T> w = with_tiles(item);
          float acc[BN / 2], sum[kSums];
          clear(acc, sum);
          const Scales scales = scales_of(w);
          // With the producer: it may fill the stages again (bulk copies write them through the
          // async proxy, after the epilogue's stores).
          if constexpr (kEpilogueOverStages) {
            if constexpr (kBulk || kClassBoxes) ptx::fence_shared_for_async_proxy();
            sync::warps_anywhere<Tile::kThreads, 4>();
          }
          if constexpr (kClassBoxes)
            Classes::class_offsets(class_offset, maps, w.n0, group * 64 + (warp % 4) * 16, tid % 32);
          AOperands ops;
          for (int64_t t = 0; t < w.k_tiles; ++t) {
            const int64_t i = ring + t;
            const int stage = static_cast<int>(i % kStages);
            sync::mbarrier_wait(full + stage, static_cast<uint32_t>(i / kStages) & 1);
            load_tile_a(ops, stage);
            // Two math warpgroups take turns at issuing their tiles' wgmmas: the tensor cores then
            // run one's while the other loads its next fragments, rather than both groups' at
            // once and then neither. Group 0 issues tile t once group 1 has issued t - 1, and group
            // 1 issues t once group 0 has: each signals the other (barrier.arrive, named barriers
            // 2 and 3) without waiting.
            constexpr bool kTakeTurns = Tile::kWarpGroups == 2;
            if constexpr (kTakeTurns) {
              if (group == 0 && t > 0) sync::warps_anywhere<kMathThreads, 2>();
              if (group == 1) sync::warps_anywhere<kMathThreads, 3>();
            }
            issue_tile(acc, ops, stage, t);
            if constexpr (kTakeTurns) {
              if (group == 0) sync::arrive<kMathThreads, 3>();
              if (group == 1) sync::arrive<kMathThreads, 2>();
            }
            wgmma::wait_group<kInFlight>();  // tile t - kInFlight's wgmmas have retired
            wgmma::fence_operands(acc);
            if (t >= kInFlight) {
              sync::mbarrier_arrive(empty + (i - kInFlight) % kStages);
              if constexpr (kClassCluster) {
                static_assert(kInFlight == 0 && Classes::kClusterBlocks == 2, "one other block, each tile's own wgmmas");
                __syncwarp();
                if (tid % 32 == 0) sync::mbarrier_arrive_cluster(empty + i % kStages, ptx::cluster_rank() ^ 1, 32);
              }
            }
            promote(sum, acc, t, w.k_tiles);
          }
          wgmma::wait_group<0>();
          wgmma::fence_operands(acc);
          // Group 1's signal after its last tile, taken here: every turn barrier ends the work
          // item with as many arrivals as waits (racecheck reported the epilogue's stores as
          // unordered when a one-tile item left group 0 with only an arrival).
          if (Tile::kWarpGroups == 2 && group == 0 && w.k_tiles > 0) sync::warps_anywhere<kMathThreads, 2>();
          if (kInFlight > 0 && w.k_tiles > 0) sync::mbarrier_arrive(empty + (ring + w.k_tiles - 1) % kStages);
          ring += w.k_tiles;
          if constexpr (kPromote) store_result(w, sum, scales);
          else store_result(w, acc, scales);
        });
        if constexpr (kGroupOut) finish_bulk_output(group_writers);
        else if constexpr (Tile::kPersistent) finish_bulk_output();
      }
      // The other block of the cluster may still copy into this one's stages and arrive on its
      // mbarriers until it is done.
      if constexpr (kClassCluster) ptx::cluster_sync();
    } else {
      // Every warp copies and computes. At tile t the block waits for tile t's copies,
      // publishes them with a barrier, issues tile t's wgmmas, starts the copies of tile
      // t + kAhead into the stage of the oldest tile whose wgmmas have retired and lets the
      // wgmmas run while it waits for the previous tile's (16-bit) or for its own (TF32).
      constexpr int kAhead = kStages - 1 - kInFlight;
      ALoader a_loader;
      BLoader b_loader;
      attach_ring(b_loader);
      for_each_work_item<BM, BN, BK, Tile::kPersistent, false, kTransposedOut>(args, [&](const WorkItem<T>& w) {
        float acc[BN / 2], sum[kSums];
        clear(acc, sum);

        __syncthreads();  // the previous work item's threads are done with the stages
        a_loader.start(w.a, args.lda, w.m0, w.k_begin, tid);
        b_loader.start(w.b, args.ldb, w.n0, w.k_begin, tid);
#pragma unroll
        for (int s = 0; s < kAhead; ++s) {
          if (s < w.k_tiles) {
            a_loader.fetch(a_stages + s * kAStageElems, args.m - w.m0, w.k_len - s * BK);
            b_loader.fetch(b_stages + s * kBStageElems, args.n - w.n0, w.k_len - s * BK);
          }
          ptx::cp_async_commit();
        }

        // Tiles finished in place (TF32 B rounded, windows shifted) are finished by each thread
        // once its copies of them have landed, a tile ahead, while the current tile's wgmmas run:
        // tile 0 here, tile t + 1 in step t. Published by the barrier of the step that uses them.
        auto finish = [&](int s) {
          if constexpr (kFinishesInPlace) {
            ptx::cp_async_wait<kAhead - 1>();
            a_loader.finish(a_stages + s * kAStageElems);
            b_loader.finish(b_stages + s * kBStageElems);
          }
        };
        if (w.k_tiles > 0) finish(0);

        int stage = 0;  // the stage of tile t
        AOperands ops;
        for (int64_t t = 0; t < w.k_tiles; ++t) {
          ptx::cp_async_wait<kAhead - 1>();  // tile t has landed (this thread's copies) ...
          ptx::fence_shared_for_async_proxy();
          __syncthreads();  // ... everyone's; and every warpgroup's wgmmas of tile t - 1 - kInFlight retired

          // Tile t's wgmmas first, so that the tensor cores go from tile t - 1's to them with as
          // small a gap as can be; the loads of later tiles are issued while they run.
          load_tile_a(ops, stage);
          issue_tile(acc, ops, stage, t);

          auto stage_of = [&](int64_t tile_ahead) {
            const int s = stage + static_cast<int>(tile_ahead);
            return s >= kStages ? s - kStages : s;
          };
          // Tile t + kAhead into the stage of tile t - 1 - kInFlight, whose wgmmas have retired.
          const int64_t next = t + kAhead;
          if (next < w.k_tiles) {
            a_loader.fetch(a_stages + stage_of(kAhead) * kAStageElems, args.m - w.m0, w.k_len - next * BK);
            b_loader.fetch(b_stages + stage_of(kAhead) * kBStageElems, args.n - w.n0, w.k_len - next * BK);
          }
          ptx::cp_async_commit();
          if (t + 1 < w.k_tiles) finish(stage_of(1));
          wgmma::wait_group<kInFlight>();  // tile t - 1's wgmmas have retired (register A: tile t's)
          wgmma::fence_operands(acc);
          promote(sum, acc, t, w.k_tiles);
          stage = stage + 1 == kStages ? 0 : stage + 1;
        }
        wgmma::wait_group<0>();
        wgmma::fence_operands(acc);
        if constexpr (kPromote) store_result(w, sum, scales_of(w));
        else store_result(w, acc, scales_of(w));
      });
      if constexpr (Tile::kPersistent) finish_bulk_output();
    }
  }
}

}  // namespace tiledmm
