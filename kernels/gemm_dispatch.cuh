// The one place that chooses a kernel for a problem: tile shape, vector width and operand
// layouts, then launches it. Instantiated once per dtype (gemm_cuda_<dtype>.cu) so the dtypes
// compile in parallel.
#pragma once

#include <cstdint>
#include <type_traits>

#include <cuda_runtime.h>

#include <torch/csrc/stable/macros.h>
#include <torch/headeronly/util/Exception.h>

#include "gemm_problem.h"
#include "gemm_tiled.cuh"

namespace tiledmm {

// Tile shapes per accumulator type, largest first. float64 takes a shallower BK so that two
// shared-memory stages fit the 48 KiB static limit.
template <typename Acc>
struct TileTable;
template <>
struct TileTable<float> {
  using Large = TileShape<128, 128, 16, 8, 8>;
  using Small = TileShape<64, 64, 16, 4, 4>;
};
template <>
struct TileTable<double> {
  using Large = TileShape<128, 128, 8, 8, 8>;
  using Small = TileShape<64, 64, 8, 4, 4>;
};
constexpr int kNumTiles = 2;  // 0: Large, 1: Small

// 16-byte loads need 16-byte-aligned data, leading dimension, batch stride, and a unit-stride
// extent that is a whole number of vectors.
inline bool vectorizable(const MatrixOperand& x, int64_t unit_stride_extent, int64_t vec) {
  return reinterpret_cast<uintptr_t>(x.data) % 16 == 0 && x.ld % vec == 0 &&
         x.batch_stride % vec == 0 && unit_stride_extent % vec == 0;
}

// Large tiles when they alone fill every multiprocessor, else small tiles for more blocks.
template <class Large>
int choose_tile(const GemmProblem& p, int num_sms) {
  if (p.tile_override >= 0) {
    STD_TORCH_CHECK(p.tile_override < kNumTiles, "tiledmm: tile index ", p.tile_override,
                    " out of range [0, ", kNumTiles, ")");
    return p.tile_override;
  }
  const int64_t large_blocks =
      ((p.m + Large::BM - 1) / Large::BM) * ((p.n + Large::BN - 1) / Large::BN) * p.batch;
  return large_blocks >= num_sms ? 0 : 1;
}

template <typename F>
void with_bool(bool value, F&& f) {
  if (value) f(std::true_type{});
  else f(std::false_type{});
}

template <typename T, class Tile, int kVec, bool kARowMajor, bool kBRowMajor>
void launch_tiled(const GemmArgs<T>& args, cudaStream_t stream) {
  const int64_t n_tiles = (args.n + Tile::BN - 1) / Tile::BN;
  const int64_t m_tiles = (args.m + Tile::BM - 1) / Tile::BM;
  STD_TORCH_CHECK(n_tiles <= INT32_MAX, "tiledmm: n = ", args.n, " is too large");
  const dim3 grid(static_cast<unsigned>(n_tiles), static_cast<unsigned>(m_tiles < 65535 ? m_tiles : 65535),
                  static_cast<unsigned>(args.batch < 65535 ? args.batch : 65535));
  gemm_tiled_kernel<T, Tile, kVec, kARowMajor, kBRowMajor><<<grid, Tile::kThreads, 0, stream>>>(args);
  STD_CUDA_KERNEL_LAUNCH_CHECK();
}

// T is the device storage type: float, double, __half or __nv_bfloat16.
template <typename T>
void launch_gemm(const GemmProblem& p, cudaStream_t stream, int num_sms) {
  using Acc = typename Accumulator<T>::type;
  const GemmArgs<T> args{static_cast<const T*>(p.a.data), static_cast<const T*>(p.b.data),
                         static_cast<T*>(p.c), p.a.ld, p.b.ld, p.a.batch_stride,
                         p.b.batch_stride, p.batch, p.m, p.n, p.k};
  constexpr int64_t kVecWidth = 16 / sizeof(T);
  const bool vec = vectorizable(p.a, p.a.row_major ? p.k : p.m, kVecWidth) &&
                   vectorizable(p.b, p.b.row_major ? p.n : p.k, kVecWidth);
  const int tile = choose_tile<typename TileTable<Acc>::Large>(p, num_sms);
  with_bool(tile == 0, [&](auto large) {
    using Tile = std::conditional_t<decltype(large)::value, typename TileTable<Acc>::Large,
                                    typename TileTable<Acc>::Small>;
    with_bool(vec, [&](auto v) {
      constexpr int kVec = decltype(v)::value ? static_cast<int>(kVecWidth) : 1;
      with_bool(p.a.row_major, [&](auto a_row) {
        with_bool(p.b.row_major, [&](auto b_row) {
          launch_tiled<T, Tile, kVec, decltype(a_row)::value, decltype(b_row)::value>(args, stream);
        });
      });
    });
  });
}

}  // namespace tiledmm
