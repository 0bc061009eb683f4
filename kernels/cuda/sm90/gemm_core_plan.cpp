// The Hopper GEMM core's rule (gemm_core_plan.h): host code, in a file of its own so that tuning it
// rebuilds nothing else.
#include "cuda/sm90/gemm_core_plan.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <optional>
#include <utility>
#include <vector>

namespace tiledmm {

namespace {
// Each tile's rate relative to 128 x 256 where both fill the GPU alike (H100, scripts/core_sweep.py,
// bench/NOTES.md items 151 and 170): 128 x 128 at 0.70-0.95 of it, 128 x 64 at 0.54-0.64 on 98-128
// blocks; clusters of two 0.98-1.08 of the same tile alone (B's tiles cross the L2 once for both
// blocks). The narrower tiles read more operand bytes from shared memory and the L2 per product and
// issue smaller wgmmas; m64n64k16's operands are 4 KiB a 32-cycle wgmma, the rate of shared memory.
// 128 x 192 (items 171, 174: H200, 14 shapes) runs at 0.86-0.89 of 128 x 256 by the least regret: it
// wins where whole tiles of it fill the SMs and 128 x 256's would not (3072 x 768 over a long K: 96
// tiles, where the others run stream-K; 6144 x 1536), and loses to 128 x 128 at a width of 768.
// 128 x 160 (item 176: H200, 22 shapes) at 0.78-0.85 by the least regret (0.83): 120 whole tiles of
// 768 x 3072 and 3072 x 768 over a long K, where 128 x 192 has 96; an MN-major B's tile copies three
// 128-byte column blocks (192 columns) for its 160, so it rarely wins elsewhere.
// 128 x 128 in ping-pong (item 180: H200, the benchmark's timing): its K loop at 0.95 of 128 x 256's,
// its epilogues free but a block's last (kEpilogueRate charges the others theirs). It wins over K =
// 768 (8192 x 768 x 2304-50304: 1.02-1.08 of the best other tile) and loses 1-3% at K >= 2048 on
// outputs that 128 x 256 fills as well (4096 x 4096 x 4096). At 0.99, the least regret over
// core_sweep's 22 shapes, it also took Llama-3-8B's products, whose suite then read 1-4% lower on
// the 4096-wide outputs and 2-4% higher on the widest (4096 x 4096 x 28672 and 128256).
// The 64-row tiles, one math warpgroup each (item 194: H200, whole tiles of 4096 x 4096 x 4096 and
// 2048 x 4096 x 8192 forced): 64 x 96 at 0.43-0.55 of 128 x 256, 64 x 128 at 0.64-0.70. They win
// where 128-row tiles would leave rows idle (192 x 4096 x 4096: 0.99x torch against 0.72x), not at
// 768 x 768 over a long K (0.58x against stream-K's 0.78x on 128 x 128): their operand rows per
// product (and the L2's reads, below) are what a narrow tile pays.
// With four producer threads (kCoreIssuers, item 199) 64 x 128 ran 8-25% faster: 0.73 by the least
// regret over 71 shapes (scripts/core_sweep.py, each tile forced; 66 of random sizes and layouts).
// 128 x 64 and the clustered 128 x 128 gained 3-19% there too; their rates did not change a plan.
// 64 x 32 (item 202: H200, 152 shapes of 1-4096 rows, 16-bit and TF32, every tile forced, L2 evicted
// up to 64 rows): 0.25 by the least regret (0.2-0.35 within 0.5% of it), about its K tile's time
// on one SM, 170 ns, where 64 x 128's takes 205: its wgmmas are small, and the math warps' loop
// around them is what bounds it (ncu, item 202).
constexpr double kCoreTileRate[kCoreTiles] = {1.0, 0.92, 0.63, 1.01, 0.85, 0.88, 0.83, 0.95, 0.5, 0.73, 0.25};
// The same for TF32 with A through registers (dy @ W computed transposed; H200, 11 shapes forced on
// each tile, bench/NOTES.md item 185): the math warps' fragment loads share shared memory's
// bandwidth with wgmma's reads of B, which the narrow tiles already use up (128 x 128 at 0.68-0.85
// of 128 x 256, 128 x 64 at 0.5), while 128 x 192 runs as fast as 128 x 256 (768 x 8192 outputs:
// 1.02-1.20x torch on its 258 tiles against 0.77-0.99x). The ping-pong tile is not built for it
// (a transposed product: plan_core leaves it out). The 64-row tiles' were not measured through
// registers: 0.5 and 0.55, at or under their 16-bit rates before item 199's issuers (0.5, 0.62),
// and not measured again with them (TF32 p @ v ran 1.07-1.14x on 64 x 128). 64 x 32's 0.25 fitted
// 6 such shapes of 8 and 128 rows as well as its own rate (item 202).
constexpr double kCoreRegisterATileRate[kCoreTiles] = {1.0, 0.74, 0.5, 0.99, 0.74, 0.99, 0.86, 0.0, 0.5, 0.55, 0.25};
}  // namespace

int core_bk(const GemmProblem& p) { return p.dtype == torch::headeronly::ScalarType::Float ? 32 : 64; }

bool core_takes(const GemmProblem& p) {
  const int64_t size = 128 / core_bk(p);
  auto aligned = [&](const MatrixOperand& x) {
    return reinterpret_cast<uintptr_t>(x.data) % 16 == 0 && x.ld * size % 16 == 0 && x.batch_stride * size % 16 == 0;
  };
  // The walk numbers one matrix's tiles in 32 bits; K tiles too.
  const int64_t m_tiles = (p.m + 63) / 64, n_tiles = (p.n + 63) / 64;
  const bool fits = p.k > 0 && p.k < INT32_MAX && p.batch < INT32_MAX && m_tiles * n_tiles < INT32_MAX;
  // A forced core tile runs the core (which says what its operands lack); other forced tiles do not.
  if (p.tile_override >= 0) return p.tile_override >= kCoreTileBase && fits;
  // TF32: wgmma reads B from shared memory K-major only (and the TMA cannot transpose 4-byte
  // elements); a row-major B is run as C^T = B^T A^T (plan_core_run: its A through registers).
  const bool layout = size == 2 || p.a.row_major;
  return aligned(p.a) && aligned(p.b) && layout && (size == 2 || p.k >= kCoreMinK) && fits;
}

CorePlan plan_core(const GemmProblem& p, int num_sms) {
  // FLOP/s of one SM on 128 x 256 tiles (about 860 TFLOP/s a GPU in 16 bits; TF32's tensor cores
  // run at half the rate, on a K tile of half the elements: the same time a K tile).
  const int bk = core_bk(p);
  const double sm_rate = bk == 64 ? 6.5e12 : 3.25e12;
  // What a stream-K item's meeting costs, fitted to H100 runs of ranges cut evenly (bench/NOTES.md
  // item 153): every block writes its float32 part at once (kPartWriteRate, the L2's), and the last
  // range reads the others' (kPartReadRate, one SM's). 768 x 8192 x 768 on 128 x 256 tiles took
  // 3.7, 6.5, 10 and 16 us past its products in 2, 3, 4 and 6 ranges a tile; 2304 x 8192 x 768 on
  // 256 x 256 clusters in 2 ranges 10 us.
  constexpr double kPartWriteRate = 3e12, kPartReadRate = 40e9;
  constexpr int64_t kMinShare = 4, kMaxParts = 8, kMaxWorkspace = int64_t(256) << 20;
  // Plans slower than kMaxSlowdown times the GPU's whole rate go to the wgmma family, which cuts a
  // long K into slices (of 24 such give-backs over longer K timed on the core, H200, bench/NOTES.md
  // item 190, 13 ran 0.73-0.98x of the family, 7 faster). Over a K of 257 to kShortKMaxTiles K
  // tiles, which it cuts in two at most, the core keeps them up to kShortKMaxSlowdown: the 9 of 21 such
  // give-backs within it ran 1.06-1.45x faster on the core (TF32 attention's p @ v, 512 x 64
  // outputs, 1.10x, since well within 3x on a 64-row tile); past it, 16-bit outputs of 32 rows ran
  // 0.81-1.00x.
  constexpr double kMaxSlowdown = 3.0, kShortKMaxSlowdown = 4.0;
  constexpr int64_t kShortKMaxTiles = 32;
  // What stream-K costs past its products and its meeting model, beyond what whole tiles cost past
  // theirs: 360 forced stream-K plans of outputs of 1-32 rows (64-row and 128 x 64 tiles, 2-6 ranges a
  // tile, L2 evicted, H200) ran 6.3 us past their estimates at 3 us, whole tiles of the same outputs
  // 7.0 (bench/NOTES.md item 201; H100 sweeps of larger outputs had put it at 7 us, item 170, and a
  // refit over 12 shapes was as good anywhere from 1 to 7 us, item 190).
  constexpr double kWorkspaceCost = 3e-6;
  // What whole tiles in clusters cost beyond the same tiles alone (H100: 128 x 256 tiles, one a
  // block or cluster, K from 64 to 8192: 2-3 us more in clusters of two at every K; bench/NOTES.md
  // item 153). Stream-K's clusters keep what multicast saves them (3072 x 8192 x 768: 75 us in
  // clusters, 84 alone), so it is not charged there.
  constexpr double kClusterCost = 2.5e-6;
  // What a tile's epilogue costs where it stops the tensor cores: the math warpgroups drain their
  // last wgmmas and stage the tile's output together before the next tile's products start, at about
  // this many bytes of output a second an SM (H200: 128 x 128 16-bit tiles ran 0.2-0.6 us a tile slower
  // than the same tiles in ping-pong at K = 384-6144, bench/NOTES.md item 180). A ping-pong tile's
  // epilogues run beside the other warpgroup's products, but for a block's last.
  constexpr double kEpilogueRate = 80e9;
  // What the tiles read through the L2 puts a floor under their products' time: each block's K tile
  // reads a 128-byte row of each of its lines of A and B (B's once a cluster: multicast), at about
  // kL2Rate bytes a second over the GPU, and kSplitRowReads times as much where an operand's lines
  // are not whole 128-byte rows apart (each row then spans two of the L2's lines). Fitted on an H200
  // to 122 shapes and dtypes with each tile forced (bench/NOTES.md item 194): large outputs of such
  // operands ran 128 x 128 tiles at 0.6-0.75x torch where 128 x 256 ran 0.78-0.99x; the model
  // suites' outputs (whole 128-byte rows) stay bound by their products, their plans unchanged.
  constexpr double kL2Rate = 14e12, kSplitRowReads = 1.5;
  const int elem_bytes = 128 / bk;
  // The operands and the output cross the HBM once at least, at about kHbmRate (what an H200 reads):
  // a floor under 16-bit stream-K plans, whose shares spread the K tiles over the GPU. Whole tiles'
  // estimates already run at about the rate one SM streams a tile's operands from the HBM (0.21-0.23
  // us a K tile of 64 x 128, 128 x 64 or 64 x 96 over 1 x 4096 x 14336), and a floor under them
  // would level all the tiles of a memory-bound output. 1 x 4096 x 14336 ran 45 us in stream-K on
  // every tile (its 117 MB at 2.6 TB/s), 1 x 4096 x 6144 level with whole tiles at 26-29 us (H200, L2
  // evicted, bench/NOTES.md item 201). Like the L2's, the floor picks among plans and the fit judges
  // the estimate without it, so a plan it picks may fail the fit where another would not (64 x 4096
  // x 14336 with A MN-major: not measured).
  constexpr double kHbmRate = 4e12;
  const auto matrices = [&](const MatrixOperand& x) { return x.batch_stride == 0 ? 1.0 : static_cast<double>(p.batch); };
  const double bytes = elem_bytes * (matrices(p.a) * p.m * p.k + matrices(p.b) * p.k * p.n +
                                     static_cast<double>(p.batch) * p.m * p.n);
  auto line_reads = [&](const MatrixOperand& x) { return (x.ld * elem_bytes) % 128 == 0 ? 1.0 : kSplitRowReads; };
  const double a_reads = line_reads(p.a), b_reads = line_reads(p.b);
  const int64_t k_tiles = std::max<int64_t>(1, (p.k + bk - 1) / bk);
  CorePlan best{};
  double best_time = 0, best_unfloored = 0;
  // dp_tiles == tiles: whole tiles only; 0: stream-K over `clusters` clusters, each an even share of
  // the K tiles, a tile's K cut into at most `ranges` ranges. floored: what the floors (the L2's,
  // the HBM's) add to time.
  auto consider = [&](int tile, int64_t tiles, int64_t dp_tiles, int64_t clusters, int64_t ranges, double time,
                      double floored) {
    const int64_t share = (tiles - dp_tiles) * k_tiles / std::max<int64_t>(1, clusters);
    const int64_t workspace = (tiles - dp_tiles) * kCoreCluster[tile] * kCoreBM[tile] * kCoreBN[tile] * 4 * ranges;
    if (dp_tiles < tiles && (share < kMinShare || workspace > kMaxWorkspace) && p.splits_override < 2) return;
    if (best.clusters == 0 || time < best_time) {
      best = CorePlan{tile, tiles, dp_tiles, static_cast<int>(clusters), static_cast<int>(ranges), 1, true, ""};
      best_time = time;
      best_unfloored = time - floored;
    }
  };
  const int first = p.tile_override >= kCoreTileBase ? p.tile_override - kCoreTileBase : 0;
  const int last = p.tile_override >= kCoreTileBase ? first + 1 : kCoreTiles;
  // A TF32 A read MN-major goes through registers, on the cooperative tiles only (gemm_core_sm90.cuh).
  const bool a_registers = bk == 32 && !p.a.row_major;
  for (int tile = first; tile < last; ++tile) {
    if (kCorePingPong[tile] && p.tile_override < kCoreTileBase &&
        (k_tiles <= kCorePingPongMaxShortKTiles || p.c_transposed))
      continue;
    const int64_t bm = kCoreBM[tile], bn = kCoreBN[tile], rows = bm * kCoreCluster[tile];
    const int64_t gpu = std::max(1, num_sms / kCoreCluster[tile]);
    const int64_t tiles = ((p.m + rows - 1) / rows) * ((p.n + bn - 1) / bn) * p.batch;
    const double rate = a_registers ? kCoreRegisterATileRate[tile] : kCoreTileRate[tile];
    const double unit = 2.0 * bm * bn * bk / (sm_rate * rate);  // one K tile of a block
    // All the tiles' K tiles through the L2 (a tile's rows over the cluster's blocks, B's lines once).
    const double l2_time = static_cast<double>(tiles * k_tiles) * 128.0 *
                           (rows * a_reads + bn * b_reads) / kL2Rate;
    const double epilogue = bm * bn * (bk == 64 ? 2.0 : 4.0) / kEpilogueRate;
    // Stream-K over `clusters` clusters. Where they are a multiple S of the tiles, every tile's K is
    // cut into the same S ranges and each cluster runs one; otherwise a cluster's share spans two
    // tiles' ranges, so it meets others twice, and a tile has one range more. Every cluster has a
    // unit of K at least, so that the clusters covering a tile are consecutive.
    auto stream_k = [&](int64_t clusters) {
      clusters = std::min(clusters, tiles * k_tiles);
      const int64_t shortest = tiles * k_tiles / clusters, longest = (tiles * k_tiles + clusters - 1) / clusters;
      const bool even = clusters % tiles == 0;
      // The workspace holds one range more than an even cut makes: a launch that gets fewer clusters
      // than planned (the GPU shared) lengthens the shares, which then fall across tiles.
      const int64_t most = std::min(k_tiles, (k_tiles + shortest - 1) / shortest + 1);
      const int64_t ranges = even ? clusters / tiles : most;
      const double part = 4.0 * bm * bn;  // a block's float32 part
      const double meet = (even ? 1.0 : 2.0) * (clusters * kCoreCluster[tile] * part / kPartWriteRate +
                                                (ranges - 1) * part / kPartReadRate);
      const double products = static_cast<double>(longest) * unit;
      const double floor_time = bk == 64 ? std::max(l2_time, bytes / kHbmRate) : l2_time;
      consider(tile, tiles, 0, clusters, most, kWorkspaceCost + std::max(products, floor_time) + meet,
               std::max(0.0, floor_time - products));
    };
    if (p.splits_override >= 2) {  // forced: stream-K alone, the forced tile or the best estimate's
      stream_k(std::min(gpu, tiles * p.splits_override));
      continue;
    }
    const int64_t rounds = (tiles + gpu - 1) / gpu;
    const double products = static_cast<double>(rounds * k_tiles) * unit;
    consider(tile, tiles, tiles, std::min(gpu, tiles), 1,
             (kCoreCluster[tile] > 1 ? kClusterCost : 0.0) + std::max(products, l2_time) +
                 static_cast<double>(kCorePingPong[tile] ? 1 : rounds) * epilogue,
             std::max(0.0, l2_time - products));
    // Stream-K where whole tiles would leave SMs idle: every even cut of up to kMaxParts ranges a
    // tile that fits the clusters, and shares over all of them (at most about kMaxParts ranges a tile).
    // Not in ping-pong: a block's one or two items leave its other warpgroup idle.
    if (p.splits_override == 1 || tiles >= gpu || kCorePingPong[tile]) continue;
    for (int64_t ranges = 2; ranges <= kMaxParts && tiles * ranges <= gpu; ++ranges) stream_k(tiles * ranges);
    if (gpu % tiles != 0) stream_k(std::min(gpu, tiles * kMaxParts));
  }
  // Where even the best plan leaves most of the GPU idle (a tile or two over a very long K), the
  // wgmma family's K slices, summed by a kernel of their own across the GPU, do better; a single
  // 16-bit K tile over many rounds (kCoreShortKMaxRounds) goes to the family's short-K tile.
  // The GPU's whole rate is its tensor cores', or for 16-bit whole tiles over more than one K tile
  // its memory's where the operands and the output take longer to cross it (kHbmRate, about what
  // an H200 reads): such outputs of 1-96 rows (x @ W^T in decoding) cost the 64-row tiles and the
  // family's alike, and ran 4-56% faster on the core (L2 evicted, H200, bench/NOTES.md item 200).
  // Stream-K's plans too where A is K-major and their clusters cover half the GPU or more, whose
  // shares then stream at the HBM's rate: decoding's 1-32 x 4096 x 14336 and 1-32 x 8192 x 1024 (A's
  // box of m rows: gemm_core_sm90.cuh) ran 0.85-0.99x torch against the family's 0.64-0.95x, and 29
  // products of 65-2940 rows that this and the lower kWorkspaceCost moved ran 1.19x faster (L2
  // evicted; item 201). With fewer clusters (a tile or two over a very long K, kMaxParts ranges each)
  // the family's K slices, summed across the GPU, run faster; with A MN-major, whose boxes keep the
  // tile's rows, so do outputs of 8-16 rows (0.78-0.94x of it). A single K tile (the short-K tile's)
  // and TF32 were not measured: not for them.
  const double compute = 2.0 * p.m * p.n * p.k * p.batch / (num_sms * sm_rate);
  const bool spread = p.a.row_major && 2 * best.clusters * kCoreCluster[best.tile] >= num_sms;
  const bool memory_rate = bk == 64 && k_tiles > 1 && (best.dp_tiles == best.tiles || spread);
  // No kernel runs a product over more than one K tile in less than about kLaunchFloor with its
  // operands in HBM (a launch, the first loads' latency, the last stores; torch took 7-8 us for its
  // smallest decoding products, L2 evicted), so the ideal is that at least: a product of a few
  // microseconds is judged by what it costs, not by its ratio to a rate: the family's K slices cost
  // a second kernel. On 47 shapes that it moved to the core (1-1397 rows, K = 76-7232) they ran 1.35x
  // faster (L2 warm) and 1.37x (evicted) in 16 bits, 1.30x and 1.24x in TF32 (H200, bench/NOTES.md
  // item 201). A single K tile keeps the rates alone: the family's short-K tile was fitted against them.
  constexpr double kLaunchFloor = 5e-6;
  const double rates = memory_rate ? std::max(compute, bytes / kHbmRate) : compute;
  const double ideal = k_tiles > 1 ? std::max(kLaunchFloor, rates) : rates;
  const bool forced = p.tile_override >= kCoreTileBase;
  const int64_t rounds = (best.tiles + best.clusters - 1) / std::max(1, best.clusters);
  const bool streamed = bk == 64 && k_tiles == 1 && best.dp_tiles == best.tiles && rounds > kCoreShortKMaxRounds;
  const bool short_k = p.k > 256 && k_tiles <= kShortKMaxTiles;
  // Stream-K over so few tiles that its clusters (kMaxParts ranges a tile) cover less than half the
  // GPU, on a product long enough that the family's K slices across all of it pay for their second
  // kernel (kIdleMaxSlowdown of its rates, at least kIdleMinTime; shorter ones ran faster on the
  // core, item 201). largeK (256 x 256 x 524288, 16 bits) took 64 x 128 in 64 clusters, 0.63x torch
  // and as slow as estimated (236 us: 1.76x its memory's rate, 2.9x the tensor cores'); on the family
  // it ran 0.94x (H200, bench/NOTES.md item 205).
  constexpr double kIdleMaxSlowdown = 1.5, kIdleMinTime = 20e-6;
  const bool idle = best.dp_tiles < best.tiles && 2 * best.clusters * kCoreCluster[best.tile] < num_sms &&
                    best_unfloored > std::max(kIdleMinTime, kIdleMaxSlowdown * std::max(compute, bytes / kHbmRate));
  // The slowdown limits were fitted to estimates without the floors: they judge the chosen plan's
  // estimate without them (fit_time).
  best.fits = forced || (best_unfloored <= (short_k ? kShortKMaxSlowdown : kMaxSlowdown) * ideal && !streamed && !idle);
  best.time = best_time;
  best.fit_time = best_unfloored;
  const int64_t bn = kCoreBN[best.tile], cluster = kCoreCluster[best.tile], rows = kCoreBM[best.tile] * cluster;
  const int64_t m_tiles = (p.m + rows - 1) / rows;
  // Whole tiles: a group as tall in rows as the running clusters' columns are wide; the square
  // footprint needs the fewest operand lines in the L2 for the tiles in flight (in work items of
  // `rows` rows). Stream-K: the clusters' ranges meet K at the same offsets only every few tiles of
  // the walk (CoreWalk's phase classes), so consecutive tiles should share the larger operand: row
  // by row where A is the larger (its lines then cross the HBM once), else column by column.
  const double side = std::sqrt(static_cast<double>(best.clusters) * bn / rows);
  best.group_rows = best.dp_tiles < best.tiles ? (p.m >= p.n ? 1 : static_cast<int>(m_tiles))
                                               : static_cast<int>(std::clamp<int64_t>(std::llround(side), 1, m_tiles));
  if (!best.fits) {
    best.why = streamed ? "a single K tile over " + std::to_string(rounds) + " rounds of its tiles (more than " +
                              std::to_string(kCoreShortKMaxRounds) +
                              "), whose writes the short-K tile streams faster"
                        : "its best plan leaves most of the GPU idle (a tile or two over a very long K, or a small "
                          "output)";
    return best;
  }
  best.why = forced || p.splits_override >= 1
                 ? "forced by the caller"
                 : "the fastest of the core's tiles and clusters by its estimate (waves of whole tiles over " +
                       std::to_string(num_sms) + " SMs at each tile's measured rate; stream-K where whole tiles "
                       "would leave SMs idle)";
  return best;
}

namespace {

// What of a problem the rule reads: everything but where its matrices are (pointers, device, bias).
struct PlanKey {
  int64_t w[16];

  PlanKey(const GemmProblem& p, int num_sms)
      : w{p.batch, p.m, p.n, p.k, p.a.ld, p.a.batch_stride, p.a.row_major, p.b.ld, p.b.batch_stride, p.b.row_major,
          static_cast<int64_t>(p.dtype), static_cast<int64_t>(p.precision), p.tile_override, p.splits_override,
          p.c_transposed, num_sms} {}
  bool operator==(const PlanKey& o) const { return std::equal(std::begin(w), std::end(w), std::begin(o.w)); }
  size_t hash() const {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the words
    for (const int64_t x : w) h = (h ^ static_cast<uint64_t>(x)) * 1099511628211ull;
    return static_cast<size_t>(h ^ (h >> 29));
  }
};

// The plan, and whether it runs p transposed (C^T = B^T A^T).
std::pair<CorePlan, bool> plan_core_oriented(const GemmProblem& p, int num_sms) {
  if (core_bk(p) == 32 && p.b.row_major) return {plan_core(transposed(p), num_sms), true};
  const CorePlan direct = plan_core(p, num_sms);
  // nn and tt change layouts transposed (into tt and nn): not chosen here; nor the ping-pong tile.
  // What the core takes stays what its plan in the given orientation fits (its limits were measured so).
  const bool ping_pong = p.tile_override >= kCoreTileBase && p.tile_override < kCoreTileBase + kCoreTiles &&
                         kCorePingPong[p.tile_override - kCoreTileBase];
  if (p.a.row_major == p.b.row_major || ping_pong || !direct.fits) return {direct, false};
  const CorePlan turned = plan_core(transposed(p), num_sms);
  const bool level = std::abs(turned.time - direct.time) <= 1e-9 * direct.time;
  const bool one_round = direct.dp_tiles == direct.tiles && direct.tiles <= direct.clusters;
  const bool better = level ? !p.a.row_major && p.m > p.n && one_round : turned.time < direct.time;
  return turned.fits && better ? std::pair{turned, true} : std::pair{direct, false};
}

}  // namespace

CoreRun plan_core_run(const GemmProblem& p, int num_sms) {
  // The plans of the last problems this host thread ran, one slot a hash: the rule weighs every tile
  // and split (0.6-3.5 us a call on a CPU, most for small outputs), and a training step asks for the
  // same few problems every step. A hit keeps only the plan and orientation; the problem is p's.
  struct Slot {
    PlanKey key;
    std::pair<CorePlan, bool> plan;
  };
  constexpr size_t kSlots = 256;
  thread_local std::vector<std::optional<Slot>> slots(kSlots);
  const PlanKey key(p, num_sms);
  std::optional<Slot>& slot = slots[key.hash() % kSlots];
  if (!slot || !(slot->key == key)) slot = Slot{key, plan_core_oriented(p, num_sms)};
  const auto& [plan, turned] = slot->plan;
  return {turned ? transposed(p) : p, plan};
}

}  // namespace tiledmm
