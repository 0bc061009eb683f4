// The rule that configures the Hopper GEMM core (gemm_core_sm90.cuh) for a problem: which
// problems it takes, its tile, how K is split and how the persistent walk groups its tiles. The
// dispatcher (gemm_dispatch.cuh) asks it, gemm_core_launch.cuh runs what it says; the rule itself
// is host code in gemm_core_plan.cpp.
#pragma once

#include <cstdint>
#include <string>

#include "plan/gemm_problem.h"

namespace tiledmm {

// The core's tiles: 128 x BN a block, in clusters of kCoreCluster blocks above one another that
// share B's tiles. Forced configurations (the _bmm_with_config operator, for tests and sweeps) name
// them as tile kCoreTileBase + index, after the wgmma families' own four (16-bit, TF32).
// kCorePingPong: the block's two math warpgroups take alternate work items, each computing the whole
// tile, so that one's epilogue runs while the other's products keep the tensor cores busy (the
// others split each tile's rows between them and store their results together).
constexpr int kCoreTileBase = 4;
constexpr int kCoreTiles = 8;
constexpr int kCoreBM = 128;
constexpr int kCoreBN[kCoreTiles] = {256, 128, 64, 256, 128, 192, 160, 128};
constexpr int kCoreCluster[kCoreTiles] = {1, 1, 1, 2, 2, 1, 1, 1};
constexpr bool kCorePingPong[kCoreTiles] = {false, false, false, false, false, false, false, true};
// K from here takes the core; shorter K stays on the wgmma family's persistent short-K tile. On an
// H200 (bench/NOTES.md item 183) the core's 128 x 256 tile ran 1.02-1.08x torch at K = 80-256 where
// the short-K tile ran 0.85-0.98x (16-bit; TF32 x @ W^T 0.94-1.09x against 0.73-0.91x at K = 128-256,
// 1.07x against 1.11x at K = 96); at K = 64 the short-K tile stays ahead on large outputs (smallK
// 1.22x against 1.02x).
constexpr int64_t kCoreMinK = 65;
// The ping-pong tile hides one warpgroup's epilogue behind the other's K loop, which at this many K
// tiles or fewer is too short to: there the cooperative tiles ran 1-11% faster (item 183), and the
// rule leaves the ping-pong tile out.
constexpr int64_t kCorePingPongMaxShortKTiles = 4;

// The core's K tile: one 128-byte row of the operands' elements (64 16-bit ones, 32 float32 ones).
int core_bk(const GemmProblem& p);

// The core takes 16-bit operands, and float32 ones for TF32 products with both operands K-major (A
// row-major, B column-major: x @ W^T), whose tensor maps fit (16-byte aligned starts, leading
// dimensions and batch strides; coordinates within 32 bits) and K past the short-K tile's range,
// and any forced core tile (whose launch says what the operands lack).
bool core_takes(const GemmProblem& p);

struct CorePlan {
  int tile;           // index into kCoreBN, kCoreCluster, kCorePingPong
  int64_t tiles;      // work items of whole tiles: the output's tiles of the cluster's rows
  int64_t dp_tiles;   // tiles computed whole; the rest by stream-K (CoreWalk)
  int clusters;       // persistent clusters (blocks without clusters)
  int max_parts;      // most K ranges a stream-K tile is cut into
  int group_rows;     // row tiles per group of the walk
  bool fits;          // whether the core should run it (else the wgmma family of its type)
  std::string why;
};

// For each tile and cluster: the time of whole tiles in waves over the clusters, each at the tile's
// measured rate plus its epilogue, which the cooperative tiles pay a wave and the ping-pong tile once
// (kEpilogueRate; the ping-pong tile only past kCorePingPongMaxShortKTiles K tiles); where whole tiles
// would leave SMs idle, also that of stream-K (not for the
// ping-pong tile, whose blocks would hold one or two items; every cluster an even
// share of the K tiles, a tile's K cut into at most about kMaxParts ranges, plus what meeting in the
// workspace costs). The fastest estimate wins. Shares under kMinShare K tiles are not tried (a
// range that short is mostly pipeline fill), nor workspaces past kMaxWorkspace. A plan slower than
// kMaxSlowdown times the GPU's whole rate does not fit (a tile or two over a very long K: the wgmma
// family's K slices run it). No split for accuracy: a float32 sum of any K stays far below the
// 16-bit output's rounding, and below TF32's rounding of the inputs. A forced split count S (splits_override) runs every tile by stream-K
// over S times as many clusters as tiles (at most the GPU's): K cut into about S ranges.
CorePlan plan_core(const GemmProblem& p, int num_sms);

}  // namespace tiledmm
