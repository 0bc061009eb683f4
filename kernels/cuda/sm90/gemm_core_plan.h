// The rule that configures the Hopper GEMM core (gemm_core_sm90.cuh) for a problem: which
// problems it takes, its tile, how K is split and how the persistent walk groups its tiles. The
// dispatcher (gemm_dispatch.cuh) asks it, gemm_core_launch.cuh runs what it says; the rule itself
// is host code in gemm_core_plan.cpp.
#pragma once

#include <cstdint>
#include <string>

#include "plan/gemm_problem.h"

namespace tiledmm {

// The core's tiles: BM x BN a block, in clusters of kCoreCluster blocks above one another that
// share B's tiles. Forced configurations (the _bmm_with_config operator, for tests and sweeps) name
// them as tile kCoreTileBase + index, after the wgmma families' own four (16-bit, TF32).
// kCorePingPong: the block's two math warpgroups take alternate work items, each computing the whole
// tile, so that one's epilogue runs while the other's products keep the tensor cores busy (the other
// 128-row tiles split each tile's rows between their two warpgroups and store their results together).
// The 64-row tiles have one math warpgroup: outputs of few rows (192 x 4096) lose no rows to a
// 128-row tile. Their rate is half 128 x 256's or less (bench/NOTES.md items 194-196), so outputs
// too small to fill the GPU (768 x 768 over a long K) still run 128 x 128 in stream-K. 64 x 32 is
// for outputs of few tiles over a long K (x @ W^T in decoding, 1-32 rows): four times 64 x 128's
// blocks stream the operands, each no slower a K tile than 64 x 128's (bench/NOTES.md item 202).
constexpr int kCoreTileBase = 4;
constexpr int kCoreTiles = 11;
constexpr int kCoreBM[kCoreTiles] = {128, 128, 128, 128, 128, 128, 128, 128, 64, 64, 64};
constexpr int kCoreBN[kCoreTiles] = {256, 128, 64, 256, 128, 192, 160, 128, 96, 128, 32};
constexpr int kCoreCluster[kCoreTiles] = {1, 1, 1, 2, 2, 1, 1, 1, 1, 1, 1};
constexpr bool kCorePingPong[kCoreTiles] = {false, false, false, false, false, false, false, true, false, false, false};
// Producer threads that issue a block's copies, each refilling its own stages. One thread's waits,
// arrivals and copies take ~250-430 ns a stage (scripts/tma_rate.cu, bench/NOTES.md item 199):
// longer than the math of a 128 x 64 or 64 x 128 K tile and than a clustered 128 x 128's stage
// (multicast, released cluster-wide), which ran 3-25% faster with four (two: six stages). The wider
// tiles, whose math hides one thread, and 64 x 96 (its 132 tiles of 768 x 4096 x 1024: 5% slower)
// ran 1-6% slower with more.
constexpr int kCoreIssuers[kCoreTiles] = {1, 1, 4, 1, 2, 1, 1, 1, 1, 4, 4};
// TF32 from this K takes the core; shorter K stays on the wgmma family's persistent short-K tile. On
// an H200 (bench/NOTES.md item 183) TF32 x @ W^T ran 0.94-1.09x torch on the core at K = 128-256
// against the short-K tile's 0.73-0.91x (1.07x against 1.11x at K = 96), 16-bit 1.02-1.08x against
// 0.85-0.98x at K = 80-256. 16-bit operands take the core at any K, where kCoreShortKMaxRounds and
// the plan's fit allow.
constexpr int64_t kCoreMinK = 65;
// 16-bit products of one K tile (K <= 64) stay on the core up to this many rounds of its tiles over
// the GPU; past that the short-K tile's writes, streamed from three buffers a warpgroup, win. On an
// H200 (item 183) 128 x 256 ran 1.02-1.13x torch against the short-K tile's 0.96-1.11x on outputs
// of 6-8 rounds (50-67 MB: attention's 96 x 512 x 64 x 512 among them), level at 11.6, and 1.03-1.04x
// against 1.10-1.18x at 15.5 and 62 (8192^2, 16384^2). Smaller outputs fail the plan's fit and stay
// on the short-K tile too.
constexpr int64_t kCoreShortKMaxRounds = 12;
// The ping-pong tile hides one warpgroup's epilogue behind the other's K loop, which at this many K
// tiles or fewer is too short to: there the cooperative tiles ran 1-11% faster (item 183), and the
// rule leaves the ping-pong tile out.
constexpr int64_t kCorePingPongMaxShortKTiles = 4;

// The core's K tile: one 128-byte row of the operands' elements (64 16-bit ones, 32 float32 ones).
int core_bk(const GemmProblem& p);

// The core takes 16-bit operands, and float32 ones for TF32 products with A row-major (x @ W^T; with
// B row-major too, dy @ W, as C^T = B^T A^T) from K = kCoreMinK, whose tensor maps
// fit (16-byte aligned starts, leading dimensions and batch strides; coordinates within 32 bits),
// and any forced core tile (whose launch says what the operands lack).
bool core_takes(const GemmProblem& p);

struct CorePlan {
  int tile;           // index into kCoreBM, kCoreBN, kCoreCluster, kCorePingPong
  int64_t tiles;      // work items of whole tiles: the output's tiles of the cluster's rows
  int64_t dp_tiles;   // tiles computed whole; the rest by stream-K (CoreWalk)
  int clusters;       // persistent clusters (blocks without clusters)
  int max_parts;      // most K ranges a stream-K tile is cut into
  int group_rows;     // row tiles per group of the walk
  bool fits;          // whether the core should run it (else the wgmma family of its type)
  std::string why;    // why this plan, or why not the core
  double time;        // the rule's estimate of its time, in seconds
  double fit_time;    // the estimate that the fit judged: without the L2's and the HBM's floors
};

// For each tile and cluster: the time of whole tiles in waves over the clusters, each at the tile's
// measured rate plus its epilogue, which the cooperative tiles pay a wave and the ping-pong tile once
// (kEpilogueRate; the ping-pong tile only past kCorePingPongMaxShortKTiles K tiles); where whole tiles
// would leave SMs idle, also that of stream-K (not for the ping-pong tile, whose blocks would hold
// one or two items; every cluster an even share of the K tiles, a tile's K cut into at most about
// kMaxParts ranges, plus what meeting in the workspace costs). The fastest estimate wins. Shares
// under kMinShare K tiles are not tried (a range that short is mostly pipeline fill), nor
// workspaces past kMaxWorkspace. A TF32 A read MN-major (through registers) takes its own tile
// rates; a transposed product (plan_core_run) no ping-pong tile. A plan slower than
// kMaxSlowdown times the GPU's whole rate does not fit (a tile or two over a very long K: the wgmma
// family's K slices run it; over a K of 257 to 32 K tiles, which the family cuts in two at most, past
// kShortKMaxSlowdown), nor one of a single 16-bit K tile past kCoreShortKMaxRounds rounds. No
// split for accuracy: a float32 sum of any K stays far below the 16-bit output's rounding, and below
// TF32's rounding of the inputs. A forced split count S (splits_override) runs every tile by
// stream-K over S times as many clusters as tiles (at most the GPU's): K cut into about S ranges.
CorePlan plan_core(const GemmProblem& p, int num_sms);

// The problem as the core runs it (C = A B, or C^T = B^T A^T: transposed() in gemm_problem.h) and
// its plan. TF32 with B row-major runs transposed (wgmma reads TF32 B K-major only; the product's A,
// B's memory, goes through registers). Operands both K-major (and 16-bit ones both MN-major) keep
// their layouts transposed, so the orientation is the rule's to choose (H200, bench/NOTES.md item 188):
// - the one with the faster estimate: tiles fill the output differently (3072 x 1024 x 1024 tn ran
//   0.82x torch on 96 tiles of 128 x 256, its transpose 0.95x on 128 of 128 x 192, of which 3072 x
//   1024 needs 144; 3000 x 7000 x 2000 nt 0.83x on 128 x 128, transposed 0.99x on 128 x 256);
// - where the two are level, for MN-major operands whose whole tiles all run at once (one round),
//   the orientation whose output is no taller than wide: 3072 x 768 x 8192 tn 0.78-0.94x, transposed
//   0.96-0.97x (0.83x and 0.90x with the L2 evicted); 4000 x 1000 x 8000 0.84x and 0.99x. Over several
//   rounds the transpose ran 0-2.5% slower (14336 x 4096 x 4096, 6144 x 4096 x 4096), and in stream-K
//   3% (2048 x 640 x 16384): there the product runs as it comes.
// A transposed product runs on the cooperative tiles only: on the ping-pong tile its epilogue cost
// 4-5% (2304 x 768 x 8192 tn: 0.93x against 0.98x for the same product not transposed). What the
// core takes is what its plan fits as the problem comes (the fit's limits were measured so).
struct CoreRun {
  GemmProblem problem;
  CorePlan plan;
};
CoreRun plan_core_run(const GemmProblem& p, int num_sms);

}  // namespace tiledmm
