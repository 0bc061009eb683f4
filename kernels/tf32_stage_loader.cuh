// Loads float32 operand tiles for TF32 wgmma. wgmma reads TF32 operands K-major only, and uses
// only their top 19 bits (it truncates), so the tiles pass through registers: each element is
// rounded to nearest (cvt.rna, the rounding of cuBLAS's TF32 and of the mma.sync path) and
// MN-major sources are transposed on the way into the K-major, 128-byte-swizzled stage
// (Swizzle128Tile with lines along x). Same interface as StageLoader: start, fetch (global
// memory into registers), deposit (registers into a stage, after the current tile's wgmmas are
// issued).
#pragma once

#include <cstdint>

#include "ptx.cuh"
#include "stage_loader.cuh"

namespace tiledmm {

// kAlongK: the source's unit-stride dimension is k. kVector: 16-byte loads (the operand is
// 16-byte aligned, with extents that are whole chunks); else element loads.
template <int BX, int BK, int kThreads, bool kAlongK, bool kVector>
struct Tf32StageLoader {
  using Tile = Swizzle128Tile<float, BX, BK>;  // line x, element k
  static constexpr int E = 4;                  // floats per 16-byte chunk
  static constexpr bool kRegisterStaged = true;
  static constexpr int kWarps = kThreads / 32;
  static constexpr int kPerThread = BX * BK / E / kThreads;
  // K-major source: a thread owns one chunk column of lines kLineStep apart (as StageLoader).
  static constexpr int kChunksPerLine = BK / E, kLineStep = kThreads / kChunksPerLine;
  // MN-major source: a warp owns 16 k rows x 2 chunks (lane = 2 kk + cc), so that each of its
  // transposing 4-byte stores hits 32 distinct banks (8 lines x 4 k within the swizzle), and
  // each k row's 32 bytes are one sector of the global load. Blocks of warps go along x first.
  static constexpr int kPairs = BX / 8, kPerKBlock = kPairs / kWarps;
  static_assert(kThreads % kChunksPerLine == 0 && BX % kLineStep == 0, "whole lines (K-major)");
  static_assert(kPairs % kWarps == 0 && BK % 16 == 0, "whole warp blocks (MN-major)");

  uint32_t staged[kPerThread][E];
  // Only start() reads it, but the 64 x 128 element-load kernel sits at 250-255 registers, and
  // without this member ptxas allocated it differently: irregular TF32 4.7 ms -> 11.3 ms on an H200.
  const float* base;
  const float* ptr;  // this thread's first element of the next tile
  int64_t ld;
  int x, k;          // this thread's first (x, k) within a tile

  __device__ __forceinline__ void start(const float* base_, int64_t ld_, int64_t x0, int64_t k0, int tid) {
    base = base_;
    ld = ld_;
    if constexpr (kAlongK) {
      x = tid / kChunksPerLine;
      k = (tid % kChunksPerLine) * E;
      ptr = base + (x0 + x) * ld + k0 + k;
    } else {
      const int lane = tid % 32, warp = tid / 32;
      x = 8 * warp + 4 * (lane % 2);
      k = lane / 2;
      ptr = base + (k0 + k) * ld + x0 + x;
    }
  }

  // Chunk i of this thread: its (x, k) offset from the thread's first, and its source offset.
  __device__ __forceinline__ static int chunk_x(int i) {
    return kAlongK ? i * kLineStep : 8 * kWarps * (i % kPerKBlock);
  }
  __device__ __forceinline__ static int chunk_k(int i) { return kAlongK ? 0 : 16 * (i / kPerKBlock); }

  __device__ __forceinline__ void fetch(float*, int64_t x_left, int64_t k_left) {
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int xi = x + chunk_x(i), ki = k + chunk_k(i);
      const float* src = ptr + (kAlongK ? int64_t(chunk_x(i)) * ld : int64_t(chunk_k(i)) * ld + chunk_x(i));
      // Elements v of the chunk run along k (K-major source) or x (MN-major).
      const bool line_ok = kAlongK ? xi < x_left : ki < k_left;
      const int64_t elem_left = (kAlongK ? k_left - ki : x_left - xi);
      float v[E];
      if constexpr (kVector) {
        const float4 q = line_ok && elem_left > 0 ? *reinterpret_cast<const float4*>(src)
                                                  : make_float4(0.f, 0.f, 0.f, 0.f);
        v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
      } else {
#pragma unroll
        for (int e = 0; e < E; ++e) v[e] = line_ok && e < elem_left ? src[e] : 0.0f;
      }
#pragma unroll
      for (int e = 0; e < E; ++e) staged[i][e] = ptx::to_tf32(v[e]);
    }
    ptr += kAlongK ? BK : BK * ld;
  }

  __device__ __forceinline__ void deposit(float* stage) const {
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int xi = x + chunk_x(i), ki = k + chunk_k(i);
      if constexpr (kAlongK) {
        *reinterpret_cast<uint4*>(stage + Tile::offset(xi, ki)) =
            make_uint4(staged[i][0], staged[i][1], staged[i][2], staged[i][3]);
      } else {
#pragma unroll
        for (int e = 0; e < E; ++e)
          reinterpret_cast<uint32_t*>(stage)[Tile::offset(xi + e, ki)] = staged[i][e];
      }
    }
  }
};

}  // namespace tiledmm
