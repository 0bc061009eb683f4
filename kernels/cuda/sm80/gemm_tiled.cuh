// The tiled shared-memory matrix-product kernel on CUDA cores: exact float32 fused multiply-adds.
//
// Each block computes a BM x BN tile of C[z] with a grid of warps, each warp a WTM x WTN tile,
// each lane a TM x TN sub-tile of it in registers. K advances in tiles of BK through a ring of
// kStages shared-memory stages (stage_pipeline.cuh). Stages hold both operands x-major (lines of
// BX along m for A, n for B, padded: PaddedTile): an operand whose unit stride is along x
// (column-major A, row-major B) is copied straight in by cp.async; one whose unit stride is
// along k is transposed on the way, by 4-byte cp.async copies (AsyncTransposingLoader) or
// through registers (TransposingLoader), as the tile says. Every k step adds the
// outer product of TM values of A and TN values of B to the sub-tile, one fused multiply-add per
// output in k order (the exact float32 sum), the values read by 16-byte shared-memory loads.
// Loads are predicated against the matrix extent and zero-filled beyond it, so any shape works;
// 16-byte loads where the dispatcher finds the operand 16-byte aligned, element loads otherwise.
// Outputs go from registers to global memory, or, in persistent blocks (TiledTile::kPersistent),
// through a shared-memory buffer that sm_90's bulk tensor copies send out while the block computes
// its next tile.
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/common/gemm_common.cuh"
#include "cuda/common/gemm_epilogue.cuh"
#include "cuda/common/tensor_maps.h"
#include "cuda/common/ptx.cuh"
#include "cuda/common/stage_loader.cuh"
#include "cuda/sm80/stage_pipeline.cuh"

namespace tiledmm {

// kMinBlocks: blocks that must fit on one multiprocessor (caps registers per thread).
// kAsyncTranspose: operands contiguous along K transposed by cp.async copies, not registers.
// kPersistent: a grid of one block per SM walks the output tiles; each tile is staged in a buffer
// of its own and leaves by bulk tensor copies (sm_90) while the block computes the next one,
// whose first K tile is copied in while the last one is staged.
// kUnrolledRounds: rounds of four k steps unrolled in a K tile's math (0: all of them).
template <int BM_, int BN_, int BK_, int kWarpsM_, int kWarpsN_, int TM_, int TN_, int kStages_,
          int kMinBlocks_ = 1, bool kAsyncTranspose_ = false, bool kPersistent_ = false, int kUnrolledRounds_ = 0>
struct TiledTile {
  static constexpr int BM = BM_, BN = BN_, BK = BK_, kWarpsM = kWarpsM_, kWarpsN = kWarpsN_;
  static constexpr int TM = TM_, TN = TN_, kStages = kStages_, kMinBlocks = kMinBlocks_;
  static constexpr bool kAsyncTranspose = kAsyncTranspose_, kPersistent = kPersistent_;
  static constexpr int kUnrolledRounds = kUnrolledRounds_ > 0 ? kUnrolledRounds_ : BK / 4;
  static constexpr int kThreads = 32 * kWarpsM * kWarpsN;
  static constexpr int WTM = BM / kWarpsM, WTN = BN / kWarpsN;  // one warp's tile
  static constexpr int kLanesM = WTM / TM, kLanesN = WTN / TN;  // a warp's lanes: kLanesM x kLanesN
  static_assert(kLanesM * kLanesN == 32 && WTM % TM == 0 && WTN % TN == 0,
                "the lanes must tile the warp tile");
  static_assert(TM % 4 == 0 && TN % 4 == 0 && BK % 4 == 0, "16-byte loads, four k steps a round");
  static_assert(!kPersistent || (kMinBlocks == 1 && kStages == 2 && BN % 32 == 0),
                "persistent: one block per SM, the next item's first K tile prefetched into stage 0 "
                "while the rest are free, and whole 128-byte boxes");
};

// The x-major stage of one operand: BK lines of BX.
template <int BX, int BK>
using TiledStage = PaddedTile<float, BK, BX>;

// The x-major stage of an operand copied in by the bulk copies of a tensor map (a persistent
// tile's B): BK dense lines of BX, as the map's boxes land. Loads at one k read one line's
// consecutive 16-byte chunks, which need no padding to hit distinct banks.
template <int BX, int BK>
struct BoxStage {
  static constexpr int kElems = BX * BK;
  __host__ __device__ __forceinline__ static constexpr int offset(int k, int x) { return k * BX + x; }
};

// Copies a k-major operand's BX x BK tiles (row-major A, column-major B: lines along k in
// memory) into x-major stages, through registers: a 16-byte load's four elements go to four
// lines (AsyncTransposingLoader copies 4 bytes at a time instead), so the operand must be 16-byte
// aligned (TiledStages checks). fetch() loads this thread's
// chunks into registers and deposit() stores them transposed after the current tile's math
// (stage_pipeline.cuh). Thread t loads the 4-element
// chunks 2 i + t % 2 of line t / 2 (and of the lines kThreads / 2 further on): a warp's load
// reads 16 lines x 32 bytes (whole sectors), and its store of element v writes 16 consecutive x
// at two k lines 4 (BX + 4) words apart, 16 banks apart: 32 distinct banks.
template <int BX, int BK, int kThreads>
struct TransposingLoader {
  using Tile = TiledStage<BX, BK>;
  static constexpr int kChunksPerLine = BK / 4, kLinesPerPass = kThreads / 2;
  static constexpr int kPasses = BX / kLinesPerPass, kChunkPairs = kChunksPerLine / 2;
  static_assert(BX % kLinesPerPass == 0 && kChunksPerLine % 2 == 0,
                "threads must cover the tile in pairs of chunks");
  static_assert(Tile::kLineStride % 32 == 4, "the stores' bank pattern above");
  static constexpr int kStageElems = stage_elems<float, Tile>(Tile::kElems);  // as StageLoader's

  float staged[kPasses][kChunkPairs][4];
  const float* ptr;  // this thread's first chunk of the next tile
  int64_t ld;
  int line, chunk;   // this thread's first line and chunk within a tile

  // The operand's matrix at base with leading dimension ld; its first tile at (x0, k0).
  __device__ __forceinline__ void start(const float* base, int64_t ld_, int64_t x0, int64_t k0, int tid) {
    ld = ld_;
    line = tid / 2;
    chunk = tid % 2;
    ptr = base + (x0 + line) * ld + k0 + 4 * chunk;
  }

  // x_left, k_left: the matrix extent left from the tile's origin; zeros beyond it. The k extent
  // is a multiple of 4: a chunk is all inside or all outside.
  __device__ __forceinline__ void fetch(float*, int64_t x_left, int64_t k_left) {
#pragma unroll
    for (int p = 0; p < kPasses; ++p)
#pragma unroll
      for (int i = 0; i < kChunkPairs; ++i) {
        const int k = 4 * (chunk + 2 * i);
        const bool line_ok = line + p * kLinesPerPass < x_left;
        const float* src = ptr + p * kLinesPerPass * ld + 8 * i;
        const float4 v =
            line_ok && k < k_left ? *reinterpret_cast<const float4*>(src) : make_float4(0, 0, 0, 0);
        staged[p][i][0] = v.x, staged[p][i][1] = v.y, staged[p][i][2] = v.z, staged[p][i][3] = v.w;
      }
    ptr += BK;
  }

  __device__ __forceinline__ void deposit(float* stage) const {
#pragma unroll
    for (int p = 0; p < kPasses; ++p)
#pragma unroll
      for (int i = 0; i < kChunkPairs; ++i)
#pragma unroll
        for (int v = 0; v < 4; ++v)
          stage[Tile::offset(4 * (chunk + 2 * i) + v, line + p * kLinesPerPass)] = staged[p][i][v];
  }
};

// Copies a k-major operand's BX x BK tiles into x-major stages by 4-byte cp.async (no registers,
// no store after the math), one element per copy. A warp's copy covers 4 lines x 8 consecutive k
// (lane l: line l / 8, k l % 8): it reads 4 whole 32-byte sectors, and with stage lines BX + 4
// words long it writes bank 4 (l % 8) + l / 8 + const: 32 distinct banks. Warp w copies the line
// groups w, w + kWarps, ... at every 8 k of the tile. Any alignment (4-byte copies).
template <int BX, int BK, int kThreads>
struct AsyncTransposingLoader {
  using Tile = TiledStage<BX, BK>;
  static constexpr int kWarps = kThreads / 32;
  static constexpr int kGroupLines = 4 * kWarps;  // lines between a thread's line groups
  static constexpr int kLineGroups = BX / kGroupLines, kKGroups = BK / 8;
  static_assert(BX % kGroupLines == 0 && BK % 8 == 0, "warps must cover the tile in 4 x 8 copies");
  static_assert(Tile::kLineStride % 32 == 4, "the copies' bank pattern above");
  static constexpr int kStageElems = stage_elems<float, Tile>(Tile::kElems);

  const float* base;  // the matrix: the source address of zero-filled copies
  const float* ptr;   // this thread's first element of the next tile
  int64_t ld;
  int line, k;        // this thread's first line and its k within a tile

  __device__ __forceinline__ void start(const float* base_, int64_t ld_, int64_t x0, int64_t k0, int tid) {
    base = base_;
    ld = ld_;
    line = 4 * (tid / 32) + tid % 32 / 8;
    k = tid % 8;
    ptr = base + (x0 + line) * ld + k0 + k;
  }

  // x_left, k_left: the matrix extent left from the tile's origin; zeros beyond it.
  __device__ __forceinline__ void fetch(float* stage, int64_t x_left, int64_t k_left) {
    auto copy = [&](auto checked) {
#pragma unroll
      for (int j = 0; j < kLineGroups; ++j) {
        const bool line_ok = !checked || line + kGroupLines * j < x_left;
        const float* src = ptr + kGroupLines * j * ld;
#pragma unroll
        for (int i = 0; i < kKGroups; ++i) {
          const bool ok = !checked || (line_ok && k + 8 * i < k_left);
          float* dst = stage + Tile::offset(k + 8 * i, line + kGroupLines * j);
          ptx::cp_async<4>(dst, ok ? src + 8 * i : base, ok);
        }
      }
    };
    if (x_left >= BX && k_left >= BK) copy(std::false_type{});
    else copy(std::true_type{});
    ptr += BK;
  }
  __device__ __forceinline__ void deposit(float*) const {}
};

// The loader of one operand: cp.async copies straight in for one whose unit stride is along x
// (its lines are the stage's), a transposing one otherwise (the tile's choice: registers were
// faster only at short K with only A contiguous along K, bench/NOTES.md items 69 and 83).
// (Column-major B copied straight into k-major stages and read 4 k of one column per load
// measured slower: item 65.)
template <class Tile, int BX, LoadMode kMode, bool kAlongK>
using TiledLoader = std::conditional_t<
    kAlongK,
    std::conditional_t<Tile::kAsyncTranspose, AsyncTransposingLoader<BX, Tile::BK, Tile::kThreads>,
                       TransposingLoader<BX, Tile::BK, Tile::kThreads>>,
    StageLoader<float, BX, Tile::BK, Tile::kThreads, false, kMode, PaddedTile>>;

// The loaders of a tile and layout; a block's shared memory holds kStages stages of A, then of B.
template <class Tile, LoadMode kMode, bool kARowMajor, bool kBRowMajor>
struct TiledStages {
  static_assert(Tile::kAsyncTranspose || kMode == LoadMode::kVector,
                "the register transposer loads 16-byte chunks: element-wise tiles transpose by copies");
  // A persistent tile keeps A's whole K (kStages tiles at most) in one band instead of stages: a
  // tile of kStages * BK, whose K tiles lie in it as they would in stages.
  using ABand = TiledTile<Tile::BM, Tile::BN, Tile::kStages * Tile::BK, Tile::kWarpsM, Tile::kWarpsN, Tile::TM,
                          Tile::TN, Tile::kStages, 1, Tile::kAsyncTranspose>;
  using ALoader = TiledLoader<std::conditional_t<Tile::kPersistent, ABand, Tile>, Tile::BM, kMode, kARowMajor>;
  using BLoader = TiledLoader<Tile, Tile::BN, kMode, !kBRowMajor>;  // (a persistent tile's B: bulk copies)
  static constexpr int kAElems = Tile::kPersistent ? ALoader::kStageElems : Tile::kStages * ALoader::kStageElems;
  // ... and B's tiles by bulk copies (BoxStage), each stage with an mbarrier (after the stages).
  static constexpr int kBStageElems = Tile::kPersistent ? BoxStage<Tile::BN, Tile::BK>::kElems : BLoader::kStageElems;
  // A persistent tile's output buffer comes first, 1024-byte aligned (the bulk copies' swizzle),
  // with 1024 bytes to align it.
  static constexpr int kBufferBytes = Tile::kPersistent ? Tile::BM * Tile::BN * static_cast<int>(sizeof(float)) : 0;
  static constexpr int kSmemBytes = (Tile::kPersistent ? kBufferBytes + 1024 + Tile::kStages * 8 : 0) +
                                    (kAElems + Tile::kStages * kBStageElems) * static_cast<int>(sizeof(float));
};

// Which TX of one operand's warp-tile indices along x (m for A, n for B) a lane owns: groups of
// 4 consecutive x, read by one 16-byte load per k step, the warp's kLanes lanes side by side
// (lane l: 4 l .. 4 l + 3, then 4 kLanes further on), so a warp's loads at one k read
// consecutive 16-byte chunks of one line: no bank conflicts.
template <int TX, int kLanes>
struct LaneSlice {
  static constexpr int kGroups = TX / 4;
  // Index i of a lane is first(lane_x) + step(i).
  __device__ __forceinline__ static constexpr int first(int lane_x) { return 4 * lane_x; }
  __device__ __forceinline__ static constexpr int step(int i) { return (i / 4) * 4 * kLanes + i % 4; }

  // f[s][r]: the operand at (x0 + step(4 g + r), k0 + s) for s < 4, x0 the lane's first index.
  template <class Stage>
  __device__ __forceinline__ static void load_group(const float* stage, int x0, int k0, int g,
                                                    float (&f)[4][4]) {
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      const float4 v = *reinterpret_cast<const float4*>(stage + Stage::offset(k0 + s, x0 + step(4 * g)));
      f[s][0] = v.x, f[s][1] = v.y, f[s][2] = v.z, f[s][3] = v.w;
    }
  }

  // f[s][i]: the operand at (x0 + step(i), k0 + s) for s < 4: every group.
  template <class Stage>
  __device__ __forceinline__ static void load(const float* stage, int x0, int k0, float (&f)[4][TX]) {
#pragma unroll
    for (int g = 0; g < kGroups; ++g) {
      float group[4][4];
      load_group<Stage>(stage, x0, k0, g, group);
#pragma unroll
      for (int s = 0; s < 4; ++s)
#pragma unroll
        for (int r = 0; r < 4; ++r) f[s][4 * g + r] = group[s][r];
    }
  }
};

// The math of one K tile: acc += its slab of A (stage as) times its slab of B (stage bs), for the
// lane whose first row and column in the block's tile are a_x0 and b_x0.
template <class Tile, class BStage = TiledStage<Tile::BN, Tile::BK>>
__device__ __forceinline__ void multiply_stage(const float* as, const float* bs, int a_x0, int b_x0,
                                               float (&acc)[Tile::TM][Tile::TN]) {
  using ASlice = LaneSlice<Tile::TM, Tile::kLanesM>;
  using BSlice = LaneSlice<Tile::TN, Tile::kLanesN>;
  // Rounds of four k steps: B's values for the round stay in registers, A's come a group of 4
  // rows at a time (fewer registers live than with both whole).
#pragma unroll Tile::kUnrolledRounds
  for (int k0 = 0; k0 < Tile::BK; k0 += 4) {
    float bf[4][Tile::TN];
    BSlice::template load<BStage>(bs, b_x0, k0, bf);
#pragma unroll
    for (int g = 0; g < ASlice::kGroups; ++g) {
      float af[4][4];
      ASlice::template load_group<TiledStage<Tile::BM, Tile::BK>>(as, a_x0, k0, g, af);
#pragma unroll
      for (int s = 0; s < 4; ++s)
#pragma unroll
        for (int r = 0; r < 4; ++r)
#pragma unroll
          for (int j = 0; j < Tile::TN; ++j) {
            float& c = acc[4 * g + r][j];
            c = fmaf(af[s][r], bf[s][j], c);
          }
    }
  }
}

// Writes a lane's outputs of work item w straight from its registers: its groups of 4 adjacent
// columns in one 16-byte store each when rows are 16-byte aligned (n % 4 == 0: a group is then
// all inside or all outside).
template <class Tile, typename Out>
__device__ __forceinline__ void store_tile(const GemmArgs<float, Out>& args, const WorkItem<float>& w, int a_x0,
                                           int b_x0, const float (&acc)[Tile::TM][Tile::TN]) {
  using ASlice = LaneSlice<Tile::TM, Tile::kLanesM>;
  using BSlice = LaneSlice<Tile::TN, Tile::kLanesN>;
  Out* c = args.c + w.z * args.m * args.n;
  const bool vec_out = args.n % 4 == 0 && reinterpret_cast<uintptr_t>(c) % 16 == 0;
#pragma unroll
  for (int i = 0; i < Tile::TM; ++i) {
    const int64_t row = w.m0 + a_x0 + ASlice::step(i);
    if (row >= args.m) continue;
    Out* out = c + row * args.n;
#pragma unroll
    for (int j = 0; j < Tile::TN; j += 4) {
      const int64_t col = w.n0 + b_x0 + BSlice::step(j);
      if (vec_out) {
        if (col < args.n)
          *reinterpret_cast<float4*>(out + col) = make_float4(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]);
      } else {
#pragma unroll
        for (int v = 0; v < 4; ++v)
          if (col + v < args.n) out[col + v] = acc[i][j + v];
      }
    }
  }
}

// Stages a lane's outputs in a persistent block's buffer, as the output's tensor map's boxes
// (bulk_box_offset): a warp's 16-byte stores at one (i, j) cover 4 rows x 128 bytes of one box,
// each quarter warp one row's 8 chunks, which the swizzle keeps in distinct banks. The swizzle
// repeats every 8 rows and a lane's column groups are whole boxes apart, so every store is at a
// constant distance from the lane's offset in one of at most 8 rows: a few address registers
// instead of one per store (staging took 8% of smallK's stall samples, bench/NOTES.md item 101).
template <class Tile>
__device__ __forceinline__ void stage_tile(float* buffer, int a_x0, int b_x0, const float (&acc)[Tile::TM][Tile::TN]) {
  using ASlice = LaneSlice<Tile::TM, Tile::kLanesM>;
  using BSlice = LaneSlice<Tile::TN, Tile::kLanesN>;
  constexpr int kBoxElems = 32;  // a box is 128 bytes of each of BM rows
  static_assert(BSlice::step(4) % kBoxElems == 0, "a lane's groups of 4 columns whole boxes apart");
#pragma unroll
  for (int i = 0; i < Tile::TM; ++i)
#pragma unroll
    for (int j = 0; j < Tile::TN; j += 4) {
      const int dl = ASlice::step(i), row = dl % 8;
      float* const at = buffer + bulk_box_offset<float, Tile::BM>(a_x0 + row, b_x0) + (dl - row) * kBoxElems +
                        BSlice::step(j) / kBoxElems * Tile::BM * kBoxElems;
      *reinterpret_cast<float4*>(at) = make_float4(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]);
    }
}

// output_map, b_map: the output's and B's tensor maps (persistent tiles, which the dispatcher
// launches only on sm_90 with valid maps).
template <class Tile, LoadMode kMode, bool kARowMajor, bool kBRowMajor, typename Out>
__global__ void __launch_bounds__(Tile::kThreads, Tile::kMinBlocks)
    gemm_tiled_kernel(const GemmArgs<float, Out> args, const __grid_constant__ TensorMap output_map,
                      const __grid_constant__ TensorMap b_map) {
  static_assert(std::is_same_v<Out, float>, "float32 outputs (split K's slices are float32 too)");
  constexpr int BM = Tile::BM, BN = Tile::BN, BK = Tile::BK, TM = Tile::TM, TN = Tile::TN;
  using Stages = TiledStages<Tile, kMode, kARowMajor, kBRowMajor>;
  using ALoader = typename Stages::ALoader;
  using BLoader = typename Stages::BLoader;
  using ASlice = LaneSlice<TM, Tile::kLanesM>;
  using BSlice = LaneSlice<TN, Tile::kLanesN>;

  extern __shared__ __align__(16) unsigned char smem_tiled[];
  unsigned char* const buffer_bytes = smem_tiled + (1024 - ptx::smem_address(smem_tiled) % 1024) % 1024;
  float* const buffer = reinterpret_cast<float*>(buffer_bytes);
  float* const a_stages = reinterpret_cast<float*>(Tile::kPersistent ? buffer_bytes + Stages::kBufferBytes : smem_tiled);
  float* const b_stages = a_stages + Stages::kAElems;
  constexpr int kBStageElems = Stages::kBStageElems;

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  // The lane's first row and column in the block's tile.
  const int a_x0 = (warp / Tile::kWarpsN) * Tile::WTM + ASlice::first(lane / Tile::kLanesN);
  const int b_x0 = (warp % Tile::kWarpsN) * Tile::WTN + BSlice::first(lane % Tile::kLanesN);
  ALoader a_loader;
  float acc[TM][TN];
  auto clear = [&] {
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;
  };

  if constexpr (!Tile::kPersistent) {
    BLoader b_loader;
    auto multiply = [&](const float* as, const float* bs) { multiply_stage<Tile>(as, bs, a_x0, b_x0, acc); };
    for_each_work_item<BM, BN, BK>(args, [&](const WorkItem<float>& w) {
      clear();
      a_loader.start(w.a, args.lda, w.m0, w.k_begin, tid);
      b_loader.start(w.b, args.ldb, w.n0, w.k_begin, tid);
      multiply_k_tiles<Tile::kStages, BK>(a_loader, b_loader, a_stages, b_stages, args.m - w.m0, args.n - w.n0,
                                          w.k_len, multiply);
      store_tile<Tile>(args, w, a_x0, b_x0, acc);
    });
  } else if constexpr (!ptx::kBulkCopies) {
    __trap();  // not an sm_90 pass: the dispatcher launches persistent tiles only on sm_90
  } else {
    // A block walks a range of consecutive items (row by row of tiles), so that most share their
    // rows of A with the one before: A's whole K stays in shared memory (a_stages: one band, as
    // ALoader's tile), copied again only when the rows change, after the item before has been
    // staged (a pause of one copy, once or twice per block). B's tiles come by bulk tensor copies
    // that thread 0 asks for, through two stages with an mbarrier each, in one pipeline across
    // items: the last K tile of one item is computed while the next one's first is copied in. An
    // item's output is staged in the buffer once the last tile's copies have read it, and thread
    // 0 sends it out after the next item's second B tile has been asked for: copies queued behind
    // 128 KiB of output would land late. (Both operands copied by every thread, tile by tile: the
    // warps waited for their copies to leave the memory-instruction queue, 12% of smallK's stall
    // samples, bench/NOTES.md item 101.)
    static_assert(Tile::kStages == 2 && Tile::kAsyncTranspose,
                  "A's band holds two K tiles, copied in by cp.async; B's next tile goes to the other stage");
    using BStage = BoxStage<BN, BK>;
    constexpr int kSlabElems = TiledStage<BM, BK>::kElems;  // one K tile of A's band
    uint64_t* const b_full = reinterpret_cast<uint64_t*>(b_stages + Tile::kStages * kBStageElems);
    if (tid == 0) {
      for (int s = 0; s < Tile::kStages; ++s) sync::mbarrier_init(b_full + s, 1);
      sync::fence_mbarrier_init();
    }
    __syncthreads();
    PersistentWalk<BM, BN, BK, true> walk(args);
    if (!walk.valid()) return;
    WorkItem<float> w = walk.item(args);
    auto fetch_band = [&](const WorkItem<float>& x) {
      a_loader.start(x.a, args.lda, x.m0, x.k_begin, tid);
      a_loader.fetch(a_stages, args.m - x.m0, x.k_len);
      ptx::cp_async_commit();
    };
    // B's K tile t of item x into stage s. Slices of K are whole tiles, so a box leaves its slice
    // only past the end of K, where the map reads zeros.
    auto fetch_b = [&](const WorkItem<float>& x, int64_t t, int s) {
      if (tid != 0) return;
      const int64_t matrix = map_matrix(args.batch_stride_b, args, x);
      sync::mbarrier_arrive_expect_tx(b_full + s, kBStageElems * sizeof(float));
      ptx::bulk_tensor_load(&b_map.map, b_stages + s * kBStageElems, b_full + s, static_cast<int>(x.n0),
                            static_cast<int>(x.k_begin + t * BK), static_cast<int>(matrix));
    };
    fetch_band(w);
    if (w.k_tiles > 0) fetch_b(w, 0, 0);
    int stage = 0;         // the stage of the current item's next K tile
    unsigned parity = 0;   // bit s: the parity of stage s's next phase
    WorkItem<float> sent{};  // the item whose staged output awaits its bulk copies (unsent: z < 0)
    sent.z = -1;
    auto send = [&] {
      // Without an L2 hint: marked evict_first, smallK ran 10% slower here (bench/NOTES.md item 88).
      if (tid == 0 && sent.z >= 0) send_bulk_tile<BM, BN, false>(&output_map.map, buffer, sent.n0, sent.m0, sent.z);
      sent.z = -1;
    };
    while (true) {
      walk.advance();
      const bool has_next = walk.valid();
      const WorkItem<float> after = has_next ? walk.item(args) : w;
      clear();
      for (int64_t t = 0; t < w.k_tiles; ++t) {
        ptx::cp_async_wait<0>();  // A's band has landed (this thread's copies) ...
        sync::mbarrier_wait(b_full + stage, (parity >> stage) & 1);  // ... and B's tile t
        parity ^= 1u << stage;
        __syncthreads();  // everyone's band, and everyone is done with tile t - 1's stage
        if (t + 1 < w.k_tiles) fetch_b(w, t + 1, stage ^ 1);
        else if (has_next && after.k_tiles > 0) fetch_b(after, 0, stage ^ 1);
        send();
        multiply_stage<Tile, BStage>(a_stages + t * kSlabElems, b_stages + stage * kBStageElems, a_x0, b_x0, acc);
        stage ^= 1;
      }
      send();  // an item without K tiles
      if (tid == 0) ptx::bulk_wait_read<0>();  // the last tile's copies have read the buffer
      __syncthreads();
      stage_tile<Tile>(buffer, a_x0, b_x0, acc);
      ptx::fence_shared_for_async_proxy();
      __syncthreads();  // the staging is done, and so is every read of A's band
      sent = w;
      if (!has_next) break;
      if (w.k_tiles == 0 && after.k_tiles > 0) fetch_b(after, 0, stage);
      if (after.a != w.a || after.m0 != w.m0 || after.k_begin != w.k_begin) fetch_band(after);
      w = after;
    }
    send();
    finish_bulk_output();
  }
}

}  // namespace tiledmm
