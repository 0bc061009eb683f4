// The one place that chooses a kernel for a problem (tile shape, K splits, load width, operand
// layouts), launches it, and says what it chose and why (tiledmm.explain). Instantiated once per
// dtype (gemm_cuda_<dtype>.cu) so that the dtypes compile in parallel.
#pragma once

#include <cstdint>
#include <sstream>
#include <string>
#include <tuple>
#include <type_traits>

#include <cuda_runtime.h>

#include <torch/csrc/stable/device.h>
#include <torch/csrc/stable/macros.h>
#include <torch/csrc/stable/ops.h>
#include <torch/headeronly/util/Exception.h>

#include "gemm_problem.h"
#include "gemm_tiled.cuh"

namespace tiledmm {

// Tile shapes per accumulator type, by role. Chosen from a sweep on an H200 (bench/NOTES.md).
enum TileRole : int {
  kLarge = 0,   // outputs that fill the GPU twice over with 128 x 256 tiles: the most reuse
  kMedium = 1,  // 128 x 128: fewer, smaller blocks; also the tile of split-K
  kShortK = 2,  // K <= 256: two blocks per SM, so one block's loads and stores overlap another's math
  kSmall = 3,   // outputs too small to fill the GPU, with K too short to split
};
template <typename Acc>
struct TileTable;
template <>
struct TileTable<float> {
  using Tiles = std::tuple<TileShape<128, 256, 8, 8, 16>, TileShape<128, 128, 16, 8, 8>,
                           TileShape<128, 64, 16, 8, 8, 2>, TileShape<64, 64, 16, 4, 4>>;
};
// float64: shallower slabs, so that two shared-memory stages stay within 48 KiB.
template <>
struct TileTable<double> {
  using Tiles = std::tuple<TileShape<128, 128, 8, 8, 8>, TileShape<128, 128, 8, 8, 8>,
                           TileShape<128, 64, 8, 8, 8, 2>, TileShape<64, 64, 8, 4, 4>>;
};

constexpr int64_t kMinSlabsPerSplit = 16;  // each slice of a split K runs at least this many slabs
// Longest K one accumulator sums before its slice is added to the others: rounding error grows
// with the length of a sequential sum, so longer K is split for accuracy as well as for speed.
// Done only while the slices' workspace stays under kMaxAccuracyWorkspace bytes.
constexpr int64_t kMaxSliceK = 8192;
constexpr int64_t kMaxAccuracyWorkspace = int64_t(256) << 20;

template <typename F>
void with_bool(bool value, F&& f) {
  if (value) f(std::true_type{});
  else f(std::false_type{});
}

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

// 16-byte loads need 16-byte-aligned data, leading dimension, batch stride, and a unit-stride
// extent that is a whole number of vectors.
inline bool vectorizable(const MatrixOperand& x, int64_t unit_stride_extent, int64_t vec) {
  return reinterpret_cast<uintptr_t>(x.data) % 16 == 0 && x.ld % vec == 0 &&
         x.batch_stride % vec == 0 && unit_stride_extent % vec == 0;
}

struct LaunchPlan {
  int tile;
  int64_t splits, k_chunk;
  bool vec;
  std::string why;
};

template <typename T>
LaunchPlan plan_launch(const GemmProblem& p, int num_sms) {
  using Tiles = typename TileTable<typename Accumulator<T>::type>::Tiles;
  constexpr int kNumTiles = static_cast<int>(std::tuple_size_v<Tiles>);
  auto blocks = [&](int tile) {
    int64_t count = 0;
    with_tile<Tiles>(tile, [&](auto shape) {
      using S = decltype(shape);
      count = ((p.m + S::BM - 1) / S::BM) * ((p.n + S::BN - 1) / S::BN) * p.batch;
    });
    return count;
  };
  constexpr int64_t kVecWidth = 16 / sizeof(T);
  LaunchPlan plan{kMedium, 1, 0, false, ""};
  plan.vec = vectorizable(p.a, p.a.row_major ? p.k : p.m, kVecWidth) &&
             vectorizable(p.b, p.b.row_major ? p.n : p.k, kVecWidth);
  if (p.tile_override >= 0) {
    STD_TORCH_CHECK(p.tile_override < kNumTiles, "tiledmm: tile index ", p.tile_override,
                    " out of range [0, ", kNumTiles, ")");
    plan.tile = p.tile_override;
    plan.why = "forced by the caller";
  } else if (p.k <= 256) {
    plan.tile = kShortK;
    plan.why = "short K (<= 256): two blocks per SM overlap one block's loads and stores with "
               "another's arithmetic";
  } else if (blocks(kLarge) >= 2 * num_sms) {
    plan.tile = kLarge;
    plan.why = "large output: 128x256 tiles fill every SM at least twice and reuse each load most";
  } else if (blocks(kMedium) >= num_sms) {
    plan.tile = kMedium;
    plan.why = "medium output: 128x128 tiles still fill every SM";
  } else {
    int bk = 0;
    with_tile<Tiles>(kMedium, [&](auto shape) { bk = decltype(shape)::BK; });
    const int64_t slabs = (p.k + bk - 1) / bk;
    const int64_t want = (2 * num_sms + blocks(kMedium) - 1) / blocks(kMedium);
    plan.splits = std::min(want, slabs / kMinSlabsPerSplit);
    if (plan.splits >= 2) {
      plan.why = "small output, long K: K is split so that about two blocks per SM run";
    } else {
      plan.tile = kSmall;
      plan.why = "small output, short K: 64x64 tiles for more blocks";
    }
  }
  const int64_t accuracy_splits = (p.k + kMaxSliceK - 1) / kMaxSliceK;
  using Acc = typename Accumulator<T>::type;
  if (p.tile_override < 0 && accuracy_splits > plan.splits &&
      accuracy_splits * p.batch * p.m * p.n * int64_t(sizeof(Acc)) <= kMaxAccuracyWorkspace) {
    plan.splits = accuracy_splits;
    plan.why += "; K > " + std::to_string(kMaxSliceK) + " is split for accuracy";
  }
  if (p.splits_override >= 1) plan.splits = p.splits_override;
  plan.splits = std::max<int64_t>(plan.splits, 1);
  with_tile<Tiles>(plan.tile, [&](auto shape) {
    constexpr int64_t bk = decltype(shape)::BK;
    const int64_t per_split = (p.k + plan.splits - 1) / plan.splits;
    plan.k_chunk = std::max<int64_t>(bk, (per_split + bk - 1) / bk * bk);
  });
  plan.splits = std::max<int64_t>(1, (p.k + plan.k_chunk - 1) / plan.k_chunk);  // no empty slice
  return plan;
}

template <typename T, typename Out, class Tile, int kVec, bool kARowMajor, bool kBRowMajor>
void launch_tiled(const GemmArgs<T, Out>& args, cudaStream_t stream) {
  const int64_t n_tiles = (args.n + Tile::BN - 1) / Tile::BN;
  const int64_t m_tiles = (args.m + Tile::BM - 1) / Tile::BM;
  const int64_t z = args.batch * args.splits;
  STD_TORCH_CHECK(n_tiles <= INT32_MAX, "tiledmm: n = ", args.n, " is too large");
  const dim3 grid(static_cast<unsigned>(n_tiles), static_cast<unsigned>(std::min<int64_t>(m_tiles, 65535)),
                  static_cast<unsigned>(std::min<int64_t>(z, 65535)));
  gemm_tiled_kernel<T, Out, Tile, kVec, kARowMajor, kBRowMajor>
      <<<grid, Tile::kThreads, 0, stream>>>(args);
  STD_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename T, typename Out>
void launch_plan(const GemmProblem& p, const LaunchPlan& plan, Out* out, cudaStream_t stream) {
  using Tiles = typename TileTable<typename Accumulator<T>::type>::Tiles;
  const GemmArgs<T, Out> args{static_cast<const T*>(p.a.data), static_cast<const T*>(p.b.data),
                              out, p.a.ld, p.b.ld, p.a.batch_stride, p.b.batch_stride,
                              p.batch, p.m, p.n, p.k, plan.splits, plan.k_chunk};
  with_tile<Tiles>(plan.tile, [&](auto shape) {
    using Tile = decltype(shape);
    with_bool(plan.vec, [&](auto v) {
      constexpr int kVec = decltype(v)::value ? static_cast<int>(16 / sizeof(T)) : 1;
      with_bool(p.a.row_major, [&](auto a_row) {
        with_bool(p.b.row_major, [&](auto b_row) {
          launch_tiled<T, Out, Tile, kVec, decltype(a_row)::value, decltype(b_row)::value>(args, stream);
        });
      });
    });
  });
}

// T is the device storage type: float, double, __half or __nv_bfloat16.
template <typename T>
void launch_gemm(const GemmProblem& p, cudaStream_t stream, int num_sms) {
  using Acc = typename Accumulator<T>::type;
  const LaunchPlan plan = plan_launch<T>(p, num_sms);
  if (plan.splits == 1) return launch_plan<T, T>(p, plan, static_cast<T*>(p.c), stream);

  // Each slice writes its partial product in the accumulator type; a second kernel sums them.
  const int64_t mn = p.m * p.n, total = p.batch * mn;
  torch::stable::Tensor partial = torch::stable::empty(
      {total * plan.splits},
      std::is_same_v<Acc, double> ? torch::headeronly::ScalarType::Double
                                  : torch::headeronly::ScalarType::Float,
      std::nullopt, torch::stable::Device(torch::headeronly::DeviceType::CUDA, p.device_index));
  Acc* workspace = static_cast<Acc*>(partial.mutable_data_ptr());
  launch_plan<T, Acc>(p, plan, workspace, stream);
  const int64_t blocks = std::min<int64_t>((total + 255) / 256, 65535);
  splitk_reduce_kernel<T, Acc><<<static_cast<unsigned>(blocks), 256, 0, stream>>>(
      workspace, static_cast<T*>(p.c), mn, plan.splits, total);
  STD_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename T>
std::string describe_gemm(const GemmProblem& p, int num_sms) {
  using Tiles = typename TileTable<typename Accumulator<T>::type>::Tiles;
  const LaunchPlan plan = plan_launch<T>(p, num_sms);
  std::ostringstream s;
  with_tile<Tiles>(plan.tile, [&](auto shape) {
    using S = decltype(shape);
    s << "kernel: gemm_tiled (CUDA cores, exact "
      << (std::is_same_v<T, double> ? "float64" : "float32") << " fused multiply-adds"
      << (sizeof(T) == 2 ? ", inputs widened to float32" : "") << ")\n"
      << "tile " << plan.tile << ": " << S::BM << "x" << S::BN << "x" << S::BK << " (m x n x k per "
      << "block), " << S::TM << "x" << S::TN << " outputs per thread, " << S::kThreads
      << " threads, " << S::kMinBlocks << " block(s) per SM, double-buffered shared memory\n"
      << "loads: " << (plan.vec ? "16-byte vectors" : "one element at a time (the operands' "
                                                        "alignment or extents rule out 16-byte vectors)")
      << "\n";
  });
  if (plan.splits > 1)
    s << "split K: " << plan.splits << " slices of " << plan.k_chunk
      << ", partial products summed in the accumulator type by a second kernel (workspace "
      << plan.splits * p.batch * p.m * p.n * int64_t(sizeof(typename Accumulator<T>::type))
      << " bytes)\n";
  s << "why: " << plan.why << " (" << num_sms << " SMs)";
  return s.str();
}

}  // namespace tiledmm
