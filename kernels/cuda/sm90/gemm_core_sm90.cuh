// The general Hopper GEMM core (sm_90a): persistent, warp-specialized blocks that walk the output
// tiles in groups of rows (so that the tiles running at once share their operands' lines in the
// L2), both operands by bulk tensor copies (TMA), and wgmma reading them from shared memory. It
// takes 16-bit operands in any of the four layouts, and float32 ones as TF32 with B K-major: wgmma
// reads TF32 from shared memory K-major only, and the TMA, which cannot transpose 4-byte elements,
// rounds them to nearest TF32 on the way (a TFLOAT32 tensor map). An MN-major TF32 A is read into
// registers by the math warps (kARegisters); so a product with a row-major B (dy @ W) runs as
// C^T = B^T A^T, written back transposed (kTransposedOut). Products whose operands are both K-major
// (and 16-bit ones both MN-major) run transposed where the rule finds that orientation faster.
//
// A block is one producer warpgroup and BM / 64 math warpgroups. Its first thread (on 128 x 64,
// 64 x 128 and the clustered 128 x 128, lane 0 of two or four of its warps, each refilling its own
// stages: kCoreIssuers) issues each K tile's two copies into a ring of kStages shared-memory
// stages, each stage published by its full mbarrier as the copies' bytes land, and refilled once
// the math warps have released it on its empty mbarrier. Math warpgroup g computes rows
// [64 g, 64 g + 64) of the BM x BN tile (in ping-pong, CoreTile::kPingPong, every row of every
// other work item): four wgmmas a K tile and m64 row block (m64nBNk16, or k8 for TF32: a K tile is
// one 128-byte row of either), one tile's wgmmas left in flight while the next tile's are issued,
// the stage of the tile before released as they retire. The producer runs on into the next work
// item while the math warps stage the last one's result for TMA stores (OutputPass), so each item's
// first stages are ready when its math starts and the stores run beside the next item's products.
// 16-bit operands reach wgmma in either orientation: a K-major operand's tile is one box of its
// lines, an MN-major one's a box per 64-element column block (BulkTileLoader), both in the 128-byte
// swizzle wgmma's descriptors name. In clusters of two (CoreTile::kCluster), the blocks take row
// tiles above one another and each copies half of their common B tile into both (multicast).
//   A work item is one output tile of one matrix of the batch over a range of its K tiles (CoreWalk:
// whole tiles first, then stream-K's even shares of the rest). The ranges of a tile meet in a
// workspace (CoreParts): each leaves its float32 accumulators there, and the one that finishes last
// adds them, in range order, and writes the output (no second kernel). The tile, the cluster, how
// many tiles are whole and the walk's group size come from one rule (gemm_core_plan.h).
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/common/block_sync.cuh"
#include "cuda/sm90/bulk_tile_loader.cuh"
#include "cuda/common/gemm_common.cuh"
#include "cuda/common/gemm_epilogue.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/common/tensor_maps.h"
#include "cuda/sm90/wgmma.cuh"

namespace tiledmm {

// A math warpgroup's 64 x BN outputs (of kOutBytes bytes each) leave in passes of kWidth columns,
// each staged in the group's buffer of kBufferBytes as the output map's boxes want it
// (bulk_box_offset: 128-byte rows swizzled by row, conflict-free for the fragment's stores) and sent
// by one thread's bulk tensor copies, which skip what lies past the matrix. Before a pass writes the
// buffer, the last pass's copies have read it: the wait is as late as can be, so that they read it
// while the math warps compute.
//   Registers: warp w of the group holds rows 16 w ... 16 w + 15 of its 64, and column block j (8
// columns) in registers 4 j ... 4 j + 3: (row g, columns 2 t4, 2 t4 + 1), then row g + 8.
//   A pass is the widest that divides BN in whole boxes and fits the buffer (BN 192 in 16 bits:
// three passes of 64 columns). The buffer holds 16 KiB, or a whole 64 x BN of up to 20 KiB where no
// pass of 16 KiB would be a whole number of 128-byte boxes: BN 160 in 16 bits, whose 320-byte rows
// leave in one pass of boxes one 64-byte chunk wide (kChunkBytes, the 64-byte swizzle).
template <int BN, int kOutBytes>
struct OutputPass {
  static constexpr int kChunkBytes = BN * kOutBytes % 128 == 0 ? 128 : 64;
  static constexpr int kBufferBytes = BN * kOutBytes % 128 != 0 && 64 * BN * kOutBytes <= 20 * 1024
                                          ? 64 * BN * kOutBytes : 16 * 1024;
  static constexpr int width() {
    for (int w = BN; w > 0; --w)
      if (BN % w == 0 && w * kOutBytes % kChunkBytes == 0 && 64 * w * kOutBytes <= kBufferBytes) return w;
    return 0;
  }
  static constexpr int kWidth = width(), kPasses = BN / kWidth;
  static_assert(kWidth > 0, "whole boxes of the output map");
  // Transposed (kTransposedOut): the group's 64 rows are 64 outputs along C's lines and its BN
  // columns are C's lines, kLines of them a pass: the most of 128, 64 or 32 that divide BN and fill
  // the buffer at most (boxes of one 128-byte chunk, 64 16-bit outputs or 32 float32 ones, by kLines).
  static constexpr int lines() {
    for (int l = 128; l >= 32; l /= 2)
      if (BN % l == 0 && 64 * l * kOutBytes <= kBufferBytes) return l;
    return 0;
  }
  static constexpr int kLines = lines();
};

// BM x BN outputs per block and work item, K in tiles of one 128-byte row (64 16-bit elements, 32
// float32 ones: kElemBytes), as many stages as 192 KiB of shared memory holds, 8 at most, or 16
// where a stage is 16 KiB or less (4 of 128 x 256 or 128 x 192 or 128 x 160, 6 of 128 x 128, 8 of
// 128 x 64, 64 x 96 and 64 x 128, 12 of 64 x 32 in 16 bits and 16 in TF32).
// kCluster > 1: clusters of that many blocks take kCluster row tiles above one another as one work
// item, each block copying its part of their common B tile into every block's stage (multicast), so
// that B's tiles cross the L2 once per cluster rather than once per block.
// kPingPong: the two math warpgroups take the block's work items in turn, each computing a whole tile
// (two m64 row blocks) from the stages the producer fills in item order: while one stores a tile,
// the other's wgmmas keep the tensor cores busy, so a tile's epilogue, the drain of its last wgmmas
// and the start of the next cost no tensor time (the others' warpgroups compute 64 rows each of
// every tile and pay those together, ~1-3 us a tile, bench/NOTES.md item 180).
// BM 64: one math warpgroup, computing the whole tile (outputs of few tiles: gemm_core_plan.h).
// An operand's box, in lines: a K-major operand of fewer lines than the tile's (A's rows, or B's
// columns where no cluster shares its tile) is copied `extent` lines to a box, rounded up to whole
// swizzle atoms of 8, not the tile's: the TMA writes the zeros of a box's lines past the matrix
// about as slowly as copied ones: 1 x 4096 x 128256 on 64 x 128 tiles read B at 3.5 TB/s with A's
// boxes of 64 rows, 3.9 at 32 rows, 4.2 with boxes of 8 (H200, L2 evicted, bench/NOTES.md item 201).
// The stage's other lines keep whatever they held: their outputs are past the matrix, never stored
// (C's map clips them, and the threads' stores check the rows and columns).
__host__ __device__ constexpr int core_box_lines(int64_t extent, int tile_lines, bool shrinks) {
  return shrinks && extent < tile_lines ? static_cast<int>((extent + 7) / 8 * 8) : tile_lines;
}

template <int BM_, int BN_, int kCluster_ = 1, int kElemBytes = 2, bool kPingPong_ = false, int kIssuers_ = 1>
struct CoreTile {
  static constexpr int BM = BM_, BN = BN_, BK = 128 / kElemBytes, kCluster = kCluster_, kIssuers = kIssuers_;
  static constexpr bool kPingPong = kPingPong_;
  static constexpr int kMathGroups = BM / 64;
  static constexpr int kMathThreads = 128 * kMathGroups;
  static constexpr int kThreads = kMathThreads + 128;  // and one producer warpgroup
  // The m64 row blocks of a tile that a math warpgroup computes, and the warps that read a stage.
  static constexpr int kGroupBlocks = kPingPong ? BM / 64 : 1;
  static constexpr int kStageReaders = kPingPong ? 4 : kMathThreads / 32;
  // B's stage holds BN lines K-major, or whole 128-byte column blocks of BN MN-major (BulkTileLoader).
  static constexpr int kAStageElems = BM * BK, kBStageElems = (BN + BK - 1) / BK * BK * BK;
  static constexpr int kStageBytes = (kAStageElems + kBStageElems) * kElemBytes;
  // One SM's K tiles from the HBM take 0.21-0.23 us whatever their bytes (9 or 17 KiB; bench/NOTES.md
  // item 201), so a narrow tile's small stages go up to 16 deep, the others 8 (64 x 32: 189 ns a K
  // tile with 12 stages of 16 bits, 173 with 16 of TF32, item 202).
  static constexpr int kMaxStages = kStageBytes <= 16 * 1024 ? 16 : 8;
  // Each math warpgroup stages its rows' outputs for the bulk copies in a buffer of its own (OutputPass).
  using Pass = OutputPass<BN, kElemBytes>;
  static constexpr int kOutputBytes = kMathGroups * Pass::kBufferBytes;
  static constexpr int kStages = (192 * 1024 / kStageBytes) < kMaxStages ? 192 * 1024 / kStageBytes : kMaxStages;
  // Linear's bias for a tile's BN columns (CoreBias), as float32: one slice the block (the math
  // warpgroups of a cooperative tile share its columns), or one a warpgroup in ping-pong.
  static constexpr int kBiasSlices = kPingPong ? kMathGroups : 1;
  static constexpr int kBiasBytes = kBiasSlices * BN * 4;
  // The stages, the output buffers, the bias, a full and an empty mbarrier a stage, and 1024 bytes
  // to align the stages and buffers (the swizzles are functions of the address).
  static constexpr int kSmemBytes = kStages * kStageBytes + kOutputBytes + kBiasBytes + 16 * kStages + 1024;
  // Registers per thread (setmaxnreg, out of the block's 168 a thread): the math warps' 128
  // accumulators (BN 256, or two row blocks of BN 128 in ping-pong) and addresses; the producer's
  // walk and copies (at 40 the cluster variants' producers spilled 8-64 bytes). Blocks of two
  // warpgroups (BM 64) keep what they are compiled with: up to 255 a thread, no reallocation.
  static constexpr bool kReallocates = kMathGroups > 1;
  static constexpr int kMathRegisters = 216, kProducerRegisters = 72;
  static_assert(BM == 64 || BM == 128, "one or two m64 row blocks");
  static_assert(!kPingPong || BM == 128, "ping-pong: two math warpgroups");
  static_assert(BN == 32 || BN == 64 || BN == 96 || BN == 128 || BN == 160 || BN == 192 || BN == 256, "wgmma widths");
  static_assert(kGroupBlocks * BN <= 256, "a math warpgroup's accumulators: at most 128 a thread");
  static_assert(kStages >= 3, "a stage being filled, one computed, one in flight");
  // Stage s has one issuer (s % kIssuers), which refills it in order and so never waits on its
  // empty mbarrier two passes ahead, where the parity would read wrong (tiles taken in turn
  // across the ring would: bench/NOTES.md item 199); the stages divide evenly among them.
  static_assert(kStages % kIssuers == 0 && kIssuers <= 4, "as many stages for every issuer");
  static_assert(kMathThreads * kMathRegisters + 128 * kProducerRegisters <= 65536, "the register file");
  static_assert(kSmemBytes <= 227 * 1024, "one block's shared memory on sm_90");
};

// A cluster's work: a tile of the output (of its matrix of the batch) over a range of its K tiles.
// tile: the tile's index in the walk; part, parts: the range's place among the ranges that cover the
// tile (parts 1: the whole of K); first: the first item of its cluster's stream-K share.
template <typename T>
struct CoreItem {
  WorkItem<T> w;
  int64_t tile;
  int part, parts;
  bool first;
};

// The work of a persistent grid of `clusters` clusters (one block each without clusters), in two
// phases. First whole tiles, cluster c taking tiles c, c + clusters, ... of the first dp_tiles; then
// the remaining tiles' K tiles as one sequence of units (stream-K), cluster c taking units
// [c U / clusters, (c + 1) U / clusters): every cluster the same share of the products, a tile's K
// covered by the ranges of up to a few clusters, which meet in a workspace (CoreParts). With all
// tiles in the first phase it is the plain persistent walk; with none, K split as evenly as the
// clusters allow, however few tiles there are.
//   Tiles are numbered (matrix, then groups of group_rows row tiles walked column by column): the
// tiles that the clusters run at once then cover a group's rows and a few of its columns, whose
// operand lines stay in the L2 while the group's other tiles read them again; a plain row-by-row
// walk reads all of B once per row of tiles (4096 x 4096 x 28672: 7.5 GB through HBM for an output
// that needs 0.3 GB of operands).
struct CoreWalk {
  int m_tiles, n_tiles;  // one output matrix's tiles (of the cluster's rows)
  int group_rows;        // row tiles per group
  int k_tiles;           // K tiles of a whole tile
  int64_t dp_tiles;      // tiles computed whole, one a work item
  int64_t sk_units;      // K tiles of the other tiles: (tiles - dp_tiles) * k_tiles

  template <int BM, int BN, int BK, typename T>
  __device__ __forceinline__ WorkItem<T> tile_item(const GemmArgs<T, T>& args, int64_t t, int kb, int ke) const {
    const int64_t per_matrix = static_cast<int64_t>(m_tiles) * n_tiles;
    const int64_t z = t / per_matrix;
    const int r = static_cast<int>(t - z * per_matrix);
    const int band = group_rows * n_tiles, g = r / band, in_band = r - g * band;
    const int first = g * group_rows, rows = min(group_rows, m_tiles - first);
    const int mt = first + in_band % rows, nt = in_band / rows;
    const int64_t k_begin = static_cast<int64_t>(kb) * BK, k_end = min(args.k, static_cast<int64_t>(ke) * BK);
    return WorkItem<T>{z, static_cast<int64_t>(mt) * BM, static_cast<int64_t>(nt) * BN, k_begin, k_end - k_begin,
                       ke - kb, args.a + z * args.batch_stride_a, args.b + z * args.batch_stride_b};
  }
  // The cluster that takes unit x of the second phase. Every cluster has a unit at least (the plan
  // runs no more clusters than units), so the clusters that cover a tile are consecutive and each
  // writes a part.
  __device__ __forceinline__ int64_t owner(int64_t x, int clusters) const {
    return ((x + 1) * clusters - 1) / sk_units;
  }
  // Calls body(CoreItem) for each work item of cluster c, in order.
  //   Stream-K's shares start at the same offset into a tile's K every `period` tiles of the
  // sequence (period * k_tiles units are a whole number of shares), and only there: elsewhere the
  // clusters read K at offsets that drift apart. So the sequence visits the walk's tiles in phase
  // classes: tiles [r q, r q + q) of the walk, q = tiles / period, sit at sequence positions r,
  // r + period, ...: tiles next to one another in the walk, which share operand lines, read each
  // line at the same time (3072 x 8192 x 768 read 206 MB of HBM for 63 MB of operands without).
  template <int BM, int BN, int BK, typename T, typename Body>
  __device__ __forceinline__ void for_each(const GemmArgs<T, T>& args, int c, int clusters, const Body& body) const {
    for (int64_t t = c; t < dp_tiles; t += clusters)
      body(CoreItem<T>{tile_item<BM, BN, BK>(args, t, 0, k_tiles), t, 0, 1, false});
    if (sk_units == 0) return;
    int64_t q = sk_units / k_tiles, x = clusters;  // q: gcd(stream-K tiles, clusters)
    while (x != 0) {
      const int64_t r = q % x;
      q = x, x = r;
    }
    const int64_t period = sk_units / k_tiles / q;
    const int64_t start = c * sk_units / clusters, end = (c + 1) * sk_units / clusters;
    for (int64_t u = start; u < end;) {
      const int64_t s = u / k_tiles, first = s * k_tiles, t = dp_tiles + s % period * q + s / period;
      const int kb = static_cast<int>(u - first), ke = static_cast<int>(min(static_cast<int64_t>(k_tiles), kb + (end - u)));
      const int64_t head = owner(first, clusters);
      body(CoreItem<T>{tile_item<BM, BN, BK>(args, t, kb, ke), t,
                       static_cast<int>(owner(u, clusters) - head),
                       static_cast<int>(owner(first + k_tiles - 1, clusters) - head + 1), u == start});
      u += ke - kb;
    }
  }
};

// Where the ranges of a stream-K tile meet: each m64 row block of a block's tile is BN / 8 chunks of
// four floats (a math warpgroup's registers 4 j ... 4 j + 3) by the group's 128 threads, so that a
// warp's stores and loads of a chunk are 512 consecutive bytes; max_parts of them a tile, in range
// order. arrivals: the K tiles done, a counter per tile, block of the cluster and row block, zero
// when the launch starts and again when it ends (the last range resets it).
struct CoreParts {
  float* parts;
  unsigned* arrivals;
  int max_parts;
};

// Meets the other K ranges of stream-K item `item`'s tile for row block `row_block` (of the
// kRowBlocks a block's tile has), which math warpgroup `group` holds; returns whether this range was
// the last to finish, in which case acc now holds the sum of every range's part, added in range order (the
// result does not depend on which range finished last). A range that is not last leaves its row
// block's part in the workspace. A tile's head (part 0) that comes after another item of its
// cluster's share usually finishes last (its later ranges are the first items of the next shares):
// where the count already says so, its part stays in registers, where the sum starts (a block's
// 128 KiB neither written nor read back on a 128 x 256 tile). Parts are read through the L2 (__ldcg:
// other SMs wrote them), part 0's chunks all in flight at once, then each further part's in rounds
// of 16.
template <int BN, int kRowBlocks, int kCluster, typename T>
__device__ __forceinline__ bool gather_parts(float (&acc)[BN / 2], const CoreParts& ws, const CoreItem<T>& item,
                                             int64_t dp_tiles, int k_tiles, int rank, int row_block, int group,
                                             int tid_in_group) {
  // Rounds of at most 16 chunks that divide a part (BN 192: two of 12).
  constexpr int kChunks = BN / 8, kBatch = kChunks <= 16 ? kChunks : kChunks % 16 == 0 ? 16 : kChunks / 2;
  static_assert(kChunks % kBatch == 0 && kBatch <= 16, "whole rounds of chunks");
  const int64_t slot = ((item.tile - dp_tiles) * kCluster + rank) * kRowBlocks + row_block;
  float4* const parts = reinterpret_cast<float4*>(ws.parts) + slot * ws.max_parts * kChunks * 128 + tid_in_group;
  const unsigned done = static_cast<unsigned>(item.w.k_tiles);
  bool kept = false;  // part 0 in registers, the others all in
  if (item.part == 0 && !item.first) {
    if (tid_in_group == 0) kept = ptx::load_relaxed(ws.arrivals + slot) + done == static_cast<unsigned>(k_tiles);
    kept = sync::warps_or<128>(kept, 1 + group);
  }
  if (!kept) {
    float4* const own = parts + static_cast<int64_t>(item.part) * kChunks * 128;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) own[c * 128] = make_float4(acc[4 * c], acc[4 * c + 1], acc[4 * c + 2], acc[4 * c + 3]);
    __threadfence();  // this thread's part is visible before the group's arrival is counted
    sync::warps<128>(1 + group);
    bool last = false;
    if (tid_in_group == 0) last = atomicAdd(ws.arrivals + slot, done) + done == static_cast<unsigned>(k_tiles);
    if (!sync::warps_or<128>(last, 1 + group)) return false;
  }
  __threadfence();  // the other ranges' parts, counted before this range saw the count, are visible
  if (tid_in_group == 0) ws.arrivals[slot] = 0;  // every range has counted: zero for the next launch
  if (!kept) {  // every part from the L2, part 0 too (the accumulators are free once written out)
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const float4 v = __ldcg(parts + c * 128);
      acc[4 * c] = v.x, acc[4 * c + 1] = v.y, acc[4 * c + 2] = v.z, acc[4 * c + 3] = v.w;
    }
  }
  for (int p = 1; p < item.parts; ++p) {
#pragma unroll
    for (int c0 = 0; c0 < kChunks; c0 += kBatch) {
      float4 v[kBatch];
#pragma unroll
      for (int j = 0; j < kBatch; ++j) v[j] = __ldcg(parts + (static_cast<int64_t>(p) * kChunks + c0 + j) * 128);
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        const int c = c0 + j;
        acc[4 * c] += v[j].x, acc[4 * c + 1] += v[j].y, acc[4 * c + 2] += v[j].z, acc[4 * c + 3] += v[j].w;
      }
    }
  }
  return true;
}

// Adds linear's bias to a math warpgroup's 64 x BN sums of a transposed product (registers as
// store_core_rows reads them), whose rows are C's columns: rows first0 + ... of the group, each a
// bias of its own, two a thread.
template <int BN, typename T>
__device__ __forceinline__ void add_core_bias_along_rows(float (&acc)[BN / 2], const T* bias, int64_t stride, int64_t n,
                                                         int64_t first0, int tid_in_group) {
  const int g = tid_in_group % 32 / 4, warp_row = (tid_in_group / 32) * 16;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t x = first0 + warp_row + g + 8 * half;
    const float v = x < n ? to_acc<float>(bias[x * stride]) : 0.0f;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
      acc[4 * j + 2 * half] += v;
      acc[4 * j + 2 * half + 1] += v;
    }
  }
}

// Linear's bias along a tile's columns (C's, where the product is not transposed), staged in shared
// memory: read at its item's start by the warps that share the slice (kThreads: the block's math
// warps, or in ping-pong one warpgroup's), one element or so a thread into registers, so that the
// loads' latency passes under the K loop, and written to the slice only at the epilogue. There
// each thread's BN / 4 columns come from shared memory: read from global memory one by one at the
// epilogue, they cost 3-4 us a 128 x 128 ping-pong item (its 4096 x 2304 x 768 product 31.7 us
// against 23.8 without a bias, bench/NOTES.md item 207).
template <int BN, int kThreads, typename T>
struct CoreBias {
  static constexpr int kPerThread = (BN + kThreads - 1) / kThreads;
  float next[kPerThread];

  // Thread `index` of the kThreads loads its columns of the tile starting at column n0.
  __device__ __forceinline__ void load(const T* bias, int64_t stride, int64_t n, int64_t n0, int index) {
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int col = index + i * kThreads;
      next[i] = col < BN && n0 + col < n ? to_acc<float>(bias[(n0 + col) * stride]) : 0.0f;
    }
  }
  // Writes the loaded columns to the slice, between two passes of the kThreads' named barrier: the
  // slice's last readers are done, and then every column is there.
  __device__ __forceinline__ void stage(float* slice, int index, int barrier) const {
    sync::warps<kThreads>(barrier);
#pragma unroll
    for (int i = 0; i < kPerThread; ++i)
      if (index + i * kThreads < BN) slice[index + i * kThreads] = next[i];
    sync::warps<kThreads>(barrier);
  }
  // Adds the slice to a math warpgroup's 64 x BN sums (column block j's pair (2 t4, 2 t4 + 1) serves
  // rows g and g + 8 alike).
  __device__ __forceinline__ static void add(float (&acc)[BN / 2], const float* slice, int tid_in_group) {
    const int t4 = tid_in_group % 4;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float v = slice[8 * j + 2 * t4 + e];
        acc[4 * j + e] += v;
        acc[4 * j + 2 + e] += v;
      }
    }
  }
};

// kTransposed: the product is C^T (m x n) and C (n x m, row-major) is written, a pass of
// OutputPass::kLines of its lines at a time: a store's lanes (g, t4) write lines 2 t4 + e (four
// swizzle phases) at outputs g (float32: two 16-byte chunks, 32 distinct banks; 16-bit: one, 16
// banks, lanes g and g + 1 halves of a word), without conflicts.
template <int BN, bool kTransposed, typename Out>
__device__ __forceinline__ void store_core_rows(const float (&acc)[BN / 2], Out* c, int64_t m, int64_t n, int64_t z,
                                                int64_t row0, int64_t col0, const TensorMap& map,
                                                unsigned char* buffer, int group, int tid_in_group) {
  using Pass = OutputPass<BN, sizeof(Out)>;
  const int lane = tid_in_group % 32, warp_row = (tid_in_group / 32) * 16, g = lane / 4, t4 = lane % 4;
  if constexpr (kTransposed) {
    constexpr int kLines = Pass::kLines;
    static_assert(kLines > 0 && 64 * kLines * sizeof(Out) <= Pass::kBufferBytes, "passes of whole boxes");
    if (map.valid) {
      Out* const staged = reinterpret_cast<Out*>(buffer);
      const bool issuer = tid_in_group == 0;
#pragma unroll
      for (int pass = 0; pass < BN / kLines; ++pass) {
        if (issuer) ptx::bulk_wait_read<0>();
        sync::warps<128>(1 + group);  // the buffer is free
#pragma unroll
        for (int j = 0; j < kLines / 8; ++j) {
          const int r = 4 * (pass * kLines / 8 + j);
#pragma unroll
          for (int half = 0; half < 2; ++half)
#pragma unroll
            for (int e = 0; e < 2; ++e)
              staged[bulk_box_offset<Out, kLines>(8 * j + 2 * t4 + e, warp_row + g + 8 * half)] =
                  from_acc<Out>(acc[r + 2 * half + e]);
        }
        ptx::fence_shared_for_async_proxy();
        sync::warps<128>(1 + group);  // the pass is staged
        if (issuer) send_bulk_tile<kLines, 64, false>(&map.map, staged, row0, col0 + pass * kLines, z);
      }
      return;
    }
    Out* const matrix = c + z * m * n;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int64_t line = col0 + 8 * j + 2 * t4 + e;
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int64_t x = row0 + warp_row + g + 8 * half;
          if (line < n && x < m) matrix[line * m + x] = from_acc<Out>(acc[4 * j + 2 * half + e]);
        }
      }
    return;
  }
  if (map.valid) {
    Out* const staged = reinterpret_cast<Out*>(buffer);
    const bool issuer = tid_in_group == 0;
#pragma unroll
    for (int pass = 0; pass < Pass::kPasses; ++pass) {
      if (issuer) ptx::bulk_wait_read<0>();
      sync::warps<128>(1 + group);  // the buffer is free
#pragma unroll
      for (int j = 0; j < Pass::kWidth / 8; ++j) {
        const int col = 8 * j + 2 * t4, r = 4 * (pass * Pass::kWidth / 8 + j);
#pragma unroll
        for (int half = 0; half < 2; ++half)
          store_pair(staged + bulk_box_offset<Out, 64, 1, Pass::kChunkBytes>(warp_row + g + 8 * half, col),
                     acc[r + 2 * half], acc[r + 2 * half + 1]);
      }
      ptx::fence_shared_for_async_proxy();
      sync::warps<128>(1 + group);  // the pass is staged
      if (issuer)
        send_bulk_tile<64, Pass::kWidth, false, 1, Pass::kChunkBytes>(&map.map, staged, col0 + pass * Pass::kWidth,
                                                                       row0, z);
    }
    return;
  }
  // Without a map (a row of a length that breaks 16-byte alignment): straight from registers,
  // pairs in one store where the row's length keeps them aligned.
  const bool pairs = n % 2 == 0;
  Out* const matrix = c + z * m * n;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t r = row0 + warp_row + g + 8 * half;
    if (r >= m) continue;
    Out* line = matrix + r * n;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
      const int64_t x = col0 + 8 * j + 2 * t4;
      const float v0 = acc[4 * j + 2 * half], v1 = acc[4 * j + 2 * half + 1];
      if (pairs && x < n) {
        store_pair(line + x, v0, v1);
      } else {
        if (x < n) line[x] = from_acc<Out>(v0);
        if (x + 1 < n) line[x + 1] = from_acc<Out>(v1);
      }
    }
  }
}

// T: a 16-bit type, or float (TF32 products, B K-major). kAKMajor: A's tiles K-major (A row-major);
// kBKMajor: B's tiles K-major (B column-major, x @ W^T). maps: both operands' tensor maps
// (make_operand_map, 128-byte swizzle; boxes of BK x BM and BK x BN K-major, A's and B's of fewer
// lines where m or n is (core_box_lines), 128-byte column blocks by BK lines MN-major; TFLOAT32 for float);
// output_map: C's (make_output_map, boxes
// of one 128-byte chunk by 64 rows, or by OutputPass::kLines lines kTransposedOut), where C's
// layout allows one; ws: stream-K's workspace. kTransposedOut: the product computed is C^T, and
// args.c holds C (args.n x args.m, row-major).
template <typename T, class Tile, bool kAKMajor, bool kBKMajor, bool kTransposedOut = false>
__global__ void __launch_bounds__(Tile::kThreads, 1)
    gemm_core_kernel(const GemmArgs<T, T> args, const __grid_constant__ OperandMaps maps,
                     const __grid_constant__ TensorMap output_map, const CoreWalk walk, const CoreParts ws) {
  // An MN-major TF32 A goes through registers: two sets of half a K tile's fragments a math
  // warpgroup (one in flight, one being loaded), on the cooperative tiles (the ping-pong tile's
  // two row blocks a group would double them: not built).
  constexpr bool kARegisters = sizeof(T) == 4 && !kAKMajor;
  static_assert(!(kTransposedOut && Tile::kPingPong) &&
                    (sizeof(T) == 2 ? !kTransposedOut || kAKMajor == kBKMajor : kBKMajor && !(kARegisters && Tile::kPingPong)),
                "16-bit operands (transposed: both K-major or both MN-major), or TF32 with B K-major (A MN-major "
                "in the cooperative tiles); transposed products in the cooperative tiles");
  if constexpr (!wgmma::kCompiled) {
    __trap();  // not an sm_90a pass: the dispatcher launches this kernel only on sm_90a images
  } else {
    constexpr int BM = Tile::BM, BN = Tile::BN, BK = Tile::BK, kStages = Tile::kStages;
    constexpr int kStep = 32 / static_cast<int>(sizeof(T)), kSteps = BK / kStep, kRowBytes = 128;  // a wgmma's k: 32 bytes
    constexpr int kCluster = Tile::kCluster;
    using ALoader = BulkTileLoader<T, BM, BK, kAKMajor>;
    using BLoader = BulkTileLoader<T, BN, BK, kBKMajor, kCluster>;

    extern __shared__ unsigned char smem_raw[];
    unsigned char* const smem = smem_raw + (1024 - ptx::smem_address(smem_raw) % 1024) % 1024;
    T* const a_stages = reinterpret_cast<T*>(smem);
    T* const b_stages = a_stages + kStages * Tile::kAStageElems;
    unsigned char* const output_buffers = reinterpret_cast<unsigned char*>(b_stages + kStages * Tile::kBStageElems);
    float* const bias_slices = reinterpret_cast<float*>(output_buffers + Tile::kOutputBytes);
    uint64_t* const full = reinterpret_cast<uint64_t*>(output_buffers + Tile::kOutputBytes + Tile::kBiasBytes);
    uint64_t* const empty = full + kStages;

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, group = warp / 4;
    // The cluster's work items are walked by all its blocks alike; this block takes row tile `rank`
    // of each.
    const int rank = kCluster > 1 ? static_cast<int>(ptx::cluster_rank()) : 0;
    auto for_each_item = [&](const auto& body) {
      walk.for_each<BM * kCluster, BN, BK>(args, blockIdx.x / kCluster, gridDim.x / kCluster, [&](CoreItem<T> item) {
        item.w.m0 += rank * BM;
        body(item);
      });
    };
    // full[s]: the producer's one arrival and the copies' bytes (of every block's part of B);
    // empty[s]: the lane 0 of each math warp that reads the stage (every math warp, or in ping-pong
    // those of the item's warpgroup), of every block of the cluster (the stage's B part is copied
    // into all of them), once the warp's wgmmas reading the stage have retired.
    if (tid == 0) {
      for (int s = 0; s < kStages; ++s) {
        sync::mbarrier_init(full + s, 1);
        sync::mbarrier_init(empty + s, kCluster * Tile::kStageReaders);
      }
      sync::fence_mbarrier_init();
    }
    if constexpr (kCluster > 1) ptx::cluster_sync();  // the other blocks' mbarriers, before any copy
    else __syncthreads();
    // Launched behind the stream's last grid (programmatic dependent launch): the set-up above ran
    // beside its end; its outputs, which may be this grid's operands, are read only now.
    ptx::wait_prior_grids();

    if (group == Tile::kMathGroups) {
      // The producer. Its first pass over the ring waits for nothing: a new mbarrier reports the
      // phase before its first as complete (parity 1).
      if constexpr (Tile::kReallocates) sync::set_registers<Tile::kProducerRegisters, false>();
      // The first threads of kIssuers warps (kCoreIssuers) each refill their own stages (stage %
      // kIssuers), all walking the items. The warp's index is read from lane 0 so that the
      // compiler knows it uniform (one issuer, a constant: a thread index there moved the walk off
      // the uniform datapath, and 128 x 128 and 128 x 160 ran 7-18% slower, item 199).
      constexpr bool kOne = Tile::kIssuers == 1;
      const int issuer = kOne ? 0 : __shfl_sync(0xffffffffu, (tid - Tile::kMathThreads) / 32, 0);
      if (kOne ? tid == Tile::kMathThreads : lane == 0 && issuer < Tile::kIssuers) {
        ALoader a_loader;
        BLoader b_loader;
        // A K-major operand of fewer lines than the tile arrives in a box of its own (core_box_lines);
        // an MN-major one in whole column blocks, the loaders' default.
        if constexpr (kAKMajor) a_loader.bytes = core_box_lines(args.m, BM, true) * BK * static_cast<int>(sizeof(T));
        if constexpr (kBKMajor && kCluster == 1)
          b_loader.bytes = core_box_lines(args.n, BN, true) * BK * static_cast<int>(sizeof(T));
        int stage = 0;
        uint32_t phase = 0;
        for_each_item([&](const CoreItem<T>& item) {
          const WorkItem<T>& w = item.w;
          a_loader.start(&maps.a.map, w.m0, w.k_begin, args.batch_stride_a == 0 ? 0 : w.z, 0);
          b_loader.start(&maps.b.map, w.n0, w.k_begin, args.batch_stride_b == 0 ? 0 : w.z, 0, rank);
          for (int64_t t = 0; t < w.k_tiles; ++t) {
            if (kOne || stage % Tile::kIssuers == issuer) {
              sync::mbarrier_wait(empty + stage, phase ^ 1);
              a_loader.fetch(a_stages + stage * Tile::kAStageElems, full + stage);
              b_loader.fetch(b_stages + stage * Tile::kBStageElems, full + stage);
              sync::mbarrier_arrive(full + stage);
            } else {
              a_loader.skip();
              b_loader.skip();
            }
            if (++stage == kStages) stage = 0, phase ^= 1;
          }
        });
      }
    } else {
      if constexpr (Tile::kReallocates) sync::set_registers<Tile::kMathRegisters, true>();
      // This group's m64 row blocks of a tile: its own 64 rows, or in ping-pong all of them.
      constexpr int kBlocks = Tile::kGroupBlocks;
      const int first_block = Tile::kPingPong ? 0 : group;
      // Descriptors of k step s of row block `block` of A and of B in a stage. K-major tiles advance
      // 32 bytes along their 128-byte rows a step; MN-major ones (16-bit) 16 k rows (BK elements
      // each), their 64-element column blocks BK rows of 128 bytes apart (BN 160 reads two and a
      // half of its three).
      auto a_descriptor = [&](int stage, int s, int block) {
        const T* tile = a_stages + stage * Tile::kAStageElems + block * 64 * BK;
        if constexpr (kAKMajor) return wgmma::descriptor(tile + s * kStep, 16, 8 * kRowBytes);
        else return wgmma::descriptor(tile + s * kStep * 64, BK * kRowBytes, 8 * kRowBytes);
      };
      auto b_descriptor = [&](int stage, int s) {
        const T* tile = b_stages + stage * Tile::kBStageElems;
        if constexpr (kBKMajor) return wgmma::descriptor(tile + s * kStep, 16, 8 * kRowBytes);
        else return wgmma::descriptor(tile + s * kStep * 64, BK * kRowBytes, 8 * kRowBytes);
      };
      // A stage whose wgmmas have retired is released to the producers of every block of the cluster.
      auto release = [&](int stage) {
        if (lane == 0) {
          sync::mbarrier_arrive(empty + stage);
          if constexpr (kCluster > 1) {
#pragma unroll
            for (int other = 1; other < kCluster; ++other)
              sync::mbarrier_arrive_cluster(empty + stage, (rank + other) % kCluster, 1);
          }
        }
      };
      auto fence_accumulators = [](float (&acc)[kBlocks][BN / 2]) {
#pragma unroll
        for (int b = 0; b < kBlocks; ++b) wgmma::fence_operands(acc[b]);
      };
      // kARegisters: a K tile's wgmmas go in two groups of half its k steps each, each half's A
      // fragments (the m16n8k8 TF32 A fragment of each k8 step, for the group's m64 row block: warp
      // w's rows 16 w + g (+ 8) at k = t4 (+ 4)) in a register set of its own, refilled once its
      // wgmmas have retired, a half later: one half stays in flight while the next is loaded. In
      // the stage's column blocks of 32 rows (ALoader's Swizzle128Tile, k along its lines) a
      // thread's four elements sit at fixed offsets, a step 8 lines further; a load's lanes hit 16
      // banks twice.
      constexpr int kHalfSteps = kARegisters ? kSteps / 2 : 1;
      uint32_t a_sets[2][kHalfSteps][4];
      int a_offset[4] = {};
      if constexpr (kARegisters) {
        static_assert(kBlocks == 1 && kSteps % 2 == 0, "one m64 row block a group, two halves a K tile");
        const int row = 64 * group + 16 * (warp % 4) + lane / 4, k = lane % 4;
#pragma unroll
        for (int i = 0; i < 4; ++i) a_offset[i] = ALoader::Tile::offset(k + 4 * (i / 2), row + 8 * (i % 2));
      }
      auto load_a = [&](uint32_t (&set)[kHalfSteps][4], int stage, int first_step) {
        if constexpr (kARegisters) {
          const float* tile = a_stages + stage * Tile::kAStageElems;
#pragma unroll
          for (int s = 0; s < kHalfSteps; ++s)
#pragma unroll
            for (int i = 0; i < 4; ++i)
              set[s][i] = __float_as_uint(tile[a_offset[i] + (first_step + s) * kStep * ALoader::Tile::kBlockElems]);
        }
      };
      auto fence_a = [](uint32_t (&set)[kHalfSteps][4]) {
#pragma unroll
        for (int s = 0; s < kHalfSteps; ++s) wgmma::fence_operands(set[s]);
      };
      // Ping-pong: a group waits for the other's K loop of the item before its own to have passed its
      // last full-stage wait (named barrier 3 + the other's group, 3 + its own to signal). A full
      // mbarrier names its phase by parity alone: had the other's stages not all completed, this
      // group, which steps over them, could take a phase two behind for the one it waits for.
      auto other_loop_done = [&] {
        if (group == 0) sync::warps_anywhere<Tile::kMathThreads, 4>();
        else sync::warps_anywhere<Tile::kMathThreads, 3>();
      };
      auto own_loop_done = [&] {
        if (group == 0) sync::arrive<Tile::kMathThreads, 3>();
        else sync::arrive<Tile::kMathThreads, 4>();
      };
      int stage = 0;
      uint32_t phase = 0;
      int64_t items = 0;  // the block's work items so far (ping-pong: the groups take them in turn)
      float acc[kBlocks][BN / 2];
      // Linear's bias along C's columns (CoreBias): the block's math warps share a slice (named
      // barrier 5), or in ping-pong each warpgroup has its own (barrier 1 + group, as store_core_rows').
      constexpr int kBiasThreads = Tile::kPingPong ? 128 : Tile::kMathThreads;
      using Bias = CoreBias<BN, kBiasThreads, T>;
      const int bias_index = tid % kBiasThreads, bias_barrier = Tile::kPingPong ? 1 + group : 5;
      float* const bias_slice = bias_slices + (Tile::kPingPong ? group * BN : 0);
      const bool column_bias = !kTransposedOut && args.bias != nullptr;
      for_each_item([&](const CoreItem<T>& item) {
        const WorkItem<T>& w = item.w;
        if constexpr (Tile::kPingPong) {
          const int64_t index = items++;
          if ((index & 1) != group) {  // the other group's: step over its stages
            const int64_t next = stage + w.k_tiles;
            phase ^= static_cast<uint32_t>(next / kStages) & 1;
            stage = static_cast<int>(next % kStages);
            return;
          }
          if (index > 0) other_loop_done();
        }
#pragma unroll
        for (int b = 0; b < kBlocks; ++b)
#pragma unroll
          for (int r = 0; r < BN / 2; ++r) acc[b][r] = 0.0f;
        Bias bias;
        if (column_bias) bias.load(args.bias, args.bias_stride, args.n, w.n0, bias_index);
        int held = -1;  // the stage whose wgmmas are still in flight
        for (int64_t t = 0; t < w.k_tiles; ++t) {
          sync::mbarrier_wait(full + stage, phase);
          fence_accumulators(acc);
          if constexpr (kARegisters) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              load_a(a_sets[h], stage, h * kHalfSteps);
              wgmma::fence();
#pragma unroll
              for (int s = 0; s < kHalfSteps; ++s)
                wgmma::mma_tf32_m64k8_rs<BN>(acc[0], a_sets[h][s], b_descriptor(stage, h * kHalfSteps + s));
              wgmma::commit_group();
              wgmma::wait_group<1>();  // the half before has retired (h = 0: the previous tile's last)
              fence_accumulators(acc);
              fence_a(a_sets[h ^ 1]);
              if (h == 0 && held >= 0) release(held);
            }
          } else {
            wgmma::fence();
#pragma unroll
            for (int s = 0; s < kSteps; ++s) {
#pragma unroll
              for (int b = 0; b < kBlocks; ++b) {
                if constexpr (sizeof(T) == 4)
                  wgmma::mma_tf32_m64k8<BN>(acc[b], a_descriptor(stage, s, first_block + b), b_descriptor(stage, s));
                else
                  wgmma::mma_m64k16<BN, std::is_same_v<T, __nv_bfloat16>, !kAKMajor, !kBKMajor>(
                      acc[b], a_descriptor(stage, s, first_block + b), b_descriptor(stage, s));
              }
            }
            wgmma::commit_group();
            wgmma::wait_group<1>();  // the previous tile's wgmmas have retired
            fence_accumulators(acc);
            if (held >= 0) release(held);
          }
          held = stage;
          if (++stage == kStages) stage = 0, phase ^= 1;
        }
        if constexpr (Tile::kPingPong) own_loop_done();
        wgmma::wait_group<0>();
        fence_accumulators(acc);
        if constexpr (kARegisters) {
          fence_a(a_sets[0]);
          fence_a(a_sets[1]);
        }
        if (held >= 0) release(held);
        unsigned char* const buffer = output_buffers + group * (Tile::kOutputBytes / Tile::kMathGroups);
        if (column_bias) bias.stage(bias_slice, bias_index, bias_barrier);
#pragma unroll
        for (int b = 0; b < kBlocks; ++b) {
          const int block = first_block + b;
          if (item.parts > 1 && !gather_parts<BN, BM / 64, kCluster>(acc[b], ws, item, walk.dp_tiles, walk.k_tiles,
                                                                     rank, block, group, tid % 128))
            continue;
          // Linear's bias: along C's columns from the staged slice; a transposed product's rows are
          // C's columns, their bias read here (two a thread).
          if (column_bias)
            Bias::add(acc[b], bias_slice, tid % 128);
          else if (kTransposedOut && args.bias != nullptr)
            add_core_bias_along_rows<BN>(acc[b], args.bias, args.bias_stride, args.m, w.m0 + block * 64, tid % 128);
          store_core_rows<BN, kTransposedOut>(acc[b], args.c, args.m, args.n, w.z, w.m0 + block * 64, w.n0, output_map,
                                              buffer, group, tid % 128);
        }
      });
      if (tid % 128 == 0) ptx::bulk_wait_read<0>();  // the last copies have read the buffer
    }
    // The other blocks may copy into this one's stages and arrive on its mbarriers until they are done.
    if constexpr (kCluster > 1) ptx::cluster_sync();
  }
}

}  // namespace tiledmm
