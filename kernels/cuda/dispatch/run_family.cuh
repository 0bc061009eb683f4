// The generic driver of a kernel family: for a problem, the tile role, K splits and load width
// (plan_launch), the operands' layout as the family runs it (orient), the launch of the template
// instance for the layout and load width (launch_plan), the split-K workspace and the sum of its
// slices (run_family), and what tiledmm.explain prints of it all (describe_family). Paths that
// plan themselves (CorePath, ScaledSplitPath: gemm_dispatch.cuh) specialize run_family and
// describe_family instead.
#pragma once

#include <algorithm>
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

#include "cuda/common/gemm_common.cuh"
#include "cuda/dispatch/family.cuh"
#include "plan/gemm_problem.h"

namespace tiledmm {

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

struct TileInfo {
  int64_t bm, bn, bk;
  int smem;           // bytes of shared memory a block needs
  int blocks_per_sm;  // blocks that share an SM
};

// The wave-timed plan (families with a kPsPerOperandElement: the wgmma ones). A block computes
// one tile, or one K slice of it, and the grid runs in waves of blocks_per_sm x num_sms blocks, so
// a last wave of few blocks leaves the other SMs idle for a block's whole time (144 tiles on 132
// SMs take two waves for 1.09 waves' work). The plan takes the tile and K split of least modelled
// time: a block's time is its operand elements, (BM + BN) a K step over its slice plus two K tiles
// of pipeline fill, at the family's rate (blocks sharing an SM share its time); a split adds its
// slices' round trip through the workspace, and its time is divided by kSplitGain, so that it must
// beat one slice by 10%. Fitted to H100 sweeps of TF32 and 3xTF32 within 10% (bench/NOTES.md item
// 161). info(tile): the tile's TileInfo.
template <class Family, typename Info>
void plan_by_waves(const GemmProblem& p, const DeviceLimits& device, bool vec, bool large_fits, Info&& info,
                   LaunchPlan& plan) {
  const int num_sms = device.num_sms;
  const int64_t outputs = p.batch * p.m * p.n, for_accuracy = accuracy_splits<typename Family::Acc>(p);
  const int64_t for_small_output = Family::min_splits(p, num_sms);
  const int64_t fewest = std::max(for_small_output, for_accuracy);
  const int64_t budget = std::max<int64_t>(1, kMaxAccuracyWorkspace / (outputs * int64_t(sizeof(typename Family::Acc))));
  double best = 0;
  int64_t best_blocks = 0, best_waves = 0, best_per_wave = 0;
  for (const int tile : {kLarge, kMedium, kSmall}) {
    const TileInfo t = info(tile);
    if ((tile == kLarge && !large_fits) || t.smem > device.max_smem) continue;
    const int64_t tiles = output_tiles(p, t.bm, t.bn), per_wave = int64_t(t.blocks_per_sm) * num_sms;
    const int64_t slabs = (p.k + t.bk - 1) / t.bk;
    int64_t most = std::min({slabs / kMinSlabsPerSplit, budget, std::max<int64_t>(16, 2 * ((per_wave + tiles - 1) / tiles))});
    // Without 16-byte alignment a split gives up TF32's residue-class boxes (class_grid_fits), which
    // whole tiles take (item 122: 1.92x torch against 1.11x): K is split for speed only where whole
    // tiles cannot fill the GPU, as before the wave model.
    if (!vec && tiles >= per_wave) most = 1;
    most = std::max(most, fewest);
    for (int64_t s = fewest; s <= most; ++s) {
      const int64_t k_chunk = ((p.k + s - 1) / s + t.bk - 1) / t.bk * t.bk, slices = (p.k + k_chunk - 1) / k_chunk;
      if (slices < fewest) continue;
      const int64_t waves = (tiles * slices + per_wave - 1) / per_wave;
      double time = double(waves) * t.blocks_per_sm * double(t.bm + t.bn) * double(k_chunk + 2 * t.bk) *
                    Family::kPsPerOperandElement;
      if (slices > 1) time = (time + double(slices) * 8 * double(outputs) * kWorkspacePsPerByte) / kSplitGain;
      if (best == 0 || time < best) {
        best = time;
        plan.tile = tile;
        plan.splits = slices;
        best_blocks = tiles * slices, best_waves = waves, best_per_wave = per_wave;
      }
    }
  }
  STD_TORCH_CHECK(best > 0, "tiledmm: internal error: no tile of ", Family::kName, " fits this GPU");
  plan.why = "the tile and K split of least modelled time: " + std::to_string(best_blocks) + " blocks in " +
             std::to_string(best_waves) + " wave(s) of " + std::to_string(best_per_wave);
  if (for_small_output > 1)
    plan.why += "; an output too small to fill the GPU: at least " + std::to_string(for_small_output) +
                " K slices, for accuracy";
  if (for_accuracy > 1) plan.why += "; K > " + std::to_string(kMaxSliceK) + " is split for accuracy";
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
  auto info = [&](int tile) {
    TileInfo t{};
    with_table<Family>(vec, [&](auto v, auto tiles) {
      with_tile<decltype(tiles)>(tile, [&](auto s) {
        using S = decltype(s);
        t = {S::BM, S::BN, S::BK, Family::template smem_bytes<S, decltype(v)::value>(p), S::kMinBlocks};
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
  } else if constexpr (Family::kPsPerOperandElement > 0) {
    plan_by_waves<Family>(p, device, vec, large_fits, info, plan);
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
    // Whether to split keeps the longer minimum slice (where K is too short for two of them, the small
    // tile unsplit ran faster: TF32 300 x 700 x 300 on mma.sync 1.31x torch against 0.74x in slices);
    // how finely, the shorter one.
    plan.splits = slabs / kMinSlabsPerSplit >= 2 ? std::min(want, slabs / kMinSlabsPerSmallOutputSplit) : 1;
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
  if (p.splits_override >= 1) {
    plan.splits = p.splits_override;
    plan.why += "; K splits forced by the caller";
  }
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
  return transposed(p);
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

}  // namespace tiledmm
