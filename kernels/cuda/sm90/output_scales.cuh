// The epilogue's scaling of a product of scaled float16 splits (scaled_split.cuh) back to its
// float32 result: output (i, j) times row i's and column j's powers of two. The split keeps each
// scale within 2^+-63, so their product is a normal power of two and each output is rounded once.
#pragma once

#include <cstdint>

#include "cuda/common/gemm_common.cuh"

namespace tiledmm {

// Off: outputs as they are.
template <bool kOn, int BN>
struct OutputScales {
  template <typename T, typename Out>
  __device__ __forceinline__ OutputScales(const GemmArgs<T, Out>&, const WorkItem<T>&, int, int) {}
  __device__ __forceinline__ float operator()(float v, int, int, int) const { return v; }
};

// On: a thread's scales for the m16n8 layout's rows g and g + 8 (tile_row: g's row in the tile)
// and columns 8 j + 2 t4 + e of a work item, read once an item. The scale arrays are padded to
// whole tiles (scaled_split.cuh), so no read needs a bound.
template <int BN>
struct OutputScales<true, BN> {
  float row[2];
  float2 col[BN / 8];
  template <typename T, typename Out>
  __device__ __forceinline__ OutputScales(const GemmArgs<T, Out>& args, const WorkItem<T>& w, int tile_row, int t4) {
    const float* rows = args.row_scale + w.z * args.row_scale_stride + w.m0 + tile_row;
    const float* cols = args.col_scale + w.z * args.col_scale_stride + w.n0 + 2 * t4;
    row[0] = rows[0];
    row[1] = rows[8];
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) col[j] = *reinterpret_cast<const float2*>(cols + 8 * j);
  }
  __device__ __forceinline__ float operator()(float v, int j, int half, int e) const {
    return v * (row[half] * (e == 0 ? col[j].x : col[j].y));
  }
};

}  // namespace tiledmm
