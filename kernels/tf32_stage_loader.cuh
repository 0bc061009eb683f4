// Loads float32 B operand tiles for TF32 wgmma, which reads TF32 from shared memory K-major only
// and does not round it itself (it drops the low 13 bits): every element is rounded to nearest
// (ptx::to_tf32, as cuBLAS's TF32 and the mma.sync path do) before wgmma reads it. kSplit (3xTF32):
// the stage holds two tiles, big = x itself, which wgmma reads as trunc(x) (its top 19 bits), and,
// kElems further, small = tf32(x - trunc(x)): big needs no rewrite of the landed copies (a third
// less shared-memory traffic in the split), for a split that holds x to 2^-22 of itself instead
// of 2^-23 (both far below float32's 2^-24 per addition over K).
// Same interface as StageLoader.
//   Tf32CopyLoader: K-major sources, copied by cp.async into the 128-byte-swizzled stage and
//     rounded (or their small parts written) by the thread that copied them once they land (finish).
//   Tf32TransposeCopyLoader: MN-major sources, copied by cp.async into a raw tile behind the
//     K-major one(s), then rounded (and split) and transposed into them by the thread that copied
//     them (finish): cp.async's depth, for one more tile of shared memory per stage. (Through
//     registers instead, 3xTF32 transA measured 1.97x torch against 2.16x: bench/NOTES.md item 76.)
// kStageTiles: the BX x BK tiles one stage holds; kStageElems: its elements.
#pragma once

#include <cstdint>

#include "ptx.cuh"
#include "stage_loader.cuh"

namespace tiledmm {

// 3xTF32's small part of x: what wgmma drops of it, rounded to TF32.
__device__ __forceinline__ uint32_t tf32_small_part(float x) {
  return ptx::to_tf32(x - __uint_as_float(__float_as_uint(x) & 0xffffe000u));
}

// The TF32 parts of x stored at `big` (and at `small`, when kSplit).
template <bool kSplit>
__device__ __forceinline__ void store_tf32_parts(uint32_t* big, uint32_t* small, float x) {
  if constexpr (kSplit) {
    *big = __float_as_uint(x);
    *small = tf32_small_part(x);
  } else {
    *big = ptx::to_tf32(x);
  }
}

template <int BX, int BK, int kThreads, LoadMode kMode, bool kSplit>
struct Tf32CopyLoader : StageLoader<float, BX, BK, kThreads, true, kMode, Swizzle128Tile, kSplit ? 2 : 1> {
  using Base = StageLoader<float, BX, BK, kThreads, true, kMode, Swizzle128Tile, kSplit ? 2 : 1>;
  static constexpr bool kFinishesInPlace = true;
  // Without 16-byte alignment float32 is copied element-wise (WgmmaFamily::mode): this pass
  // rounds, it does not shift windows.
  static_assert(!Base::kWindowed, "TF32 B tiles are not copied as windows");

  // This thread's chunks of the tile in `stage`, after its own cp.async wait (and its warp's,
  // whose element-wise copies land them): no other thread touches them until the barrier. Batches
  // of 8 keep the producer of 128 x 256 tiles from spilling. kSplit: the landed tile is the big
  // one; only the small parts are written.
  __device__ __forceinline__ void finish(float* stage) const {
    if constexpr (Base::kWarpCopies) __syncwarp();
    rewrite_in_batches<Base::kPerThread, 8>(
        [&](int i) { return this->chunk(stage, i); },
        [&](int i, const uint4& v) {
          auto part = [](uint32_t x) {
            return kSplit ? tf32_small_part(__uint_as_float(x)) : ptx::to_tf32(__uint_as_float(x));
          };
          const uint4 r = make_uint4(part(v.x), part(v.y), part(v.z), part(v.w));
          *reinterpret_cast<uint4*>(stage + (kSplit ? Base::Tile::kElems : 0) + this->chunk_offset(i)) = r;
        });
  }
};

// The thread mapping of the transposing loader. A warp owns 16 k rows x 2 chunks (lane =
// 2 kk + cc), so that each of its transposing 4-byte stores (2 lines x 16 k) hits 32 distinct
// banks within the swizzle, and each k row's 32 bytes are one sector of the global load. Blocks
// of warps go along x first.
template <int BX, int BK, int kThreads>
struct Tf32TransposeMap {
  using Tile = Swizzle128Tile<float, BX, BK>;  // line x, element k
  static constexpr int E = 4;                  // floats per 16-byte chunk
  static constexpr int kWarps = kThreads / 32;
  static constexpr int kPerThread = BX * BK / E / kThreads;
  static constexpr int kPairs = BX / 8, kPerKBlock = kPairs / kWarps;
  static_assert(kPairs % kWarps == 0 && BK % 16 == 0, "whole warp blocks");

  const float* base;  // the matrix: the source address of zero-filled (out-of-range) copies
  const float* ptr;   // this thread's first element of the next tile
  int64_t ld;
  int x, k;           // this thread's first (x, k) within a tile

  __device__ __forceinline__ void start(const float* base_, int64_t ld_, int64_t x0, int64_t k0, int tid) {
    base = base_;
    ld = ld_;
    const int lane = tid % 32, warp = tid / 32;
    x = 8 * warp + 4 * (lane % 2);
    k = lane / 2;
    ptr = base + (k0 + k) * ld + x0 + x;
  }

  // Chunk i of this thread: its (x, k) offset from the thread's first.
  __device__ __forceinline__ static int chunk_x(int i) { return 8 * kWarps * (i % kPerKBlock); }
  __device__ __forceinline__ static int chunk_k(int i) { return 16 * (i / kPerKBlock); }

  // Calls load(i, src, ok(e)) for each chunk of the next tile (ok: element e is inside the
  // matrix; with kVector, the chunk is all in or all out), then moves on a tile.
  template <bool kVector, typename Load>
  __device__ __forceinline__ void for_each_chunk(int64_t x_left, int64_t k_left, const Load& load) {
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int xi = x + chunk_x(i), ki = k + chunk_k(i);
      const float* src = ptr + int64_t(chunk_k(i)) * ld + chunk_x(i);
      const bool line_ok = ki < k_left;
      const int64_t elem_left = x_left - xi;  // the chunk's elements run along x
      load(i, src, [&](int e) { return line_ok && (kVector ? elem_left > 0 : e < elem_left); });
    }
    ptr += BK * ld;
  }

  // Element e of chunk i, rounded (and split), into its transposed place in `stage`.
  template <bool kSplit>
  __device__ __forceinline__ void store(float* stage, int i, int e, float v) const {
    uint32_t* words = reinterpret_cast<uint32_t*>(stage);
    const int offset = swizzled_offset<Tile>(x, chunk_x(i) + e, k, chunk_k(i));
    store_tf32_parts<kSplit>(words + offset, words + Tile::kElems + offset, v);
  }
};

template <int BX, int BK, int kThreads, LoadMode kMode, bool kSplit>
struct Tf32TransposeCopyLoader : Tf32TransposeMap<BX, BK, kThreads> {
  using Map = Tf32TransposeMap<BX, BK, kThreads>;
  static constexpr bool kRegisterStaged = false, kFinishesInPlace = true, kFinishNeedsItem = false;
  static constexpr int kStageTiles = kSplit ? 3 : 2;  // the K-major tile(s), then the raw copies
  static constexpr int kStageElems = kStageTiles * Map::Tile::kElems;

  int tid;

  __device__ __forceinline__ void start(const float* base, int64_t ld, int64_t x0, int64_t k0, int tid_) {
    Map::start(base, ld, x0, k0, tid_);
    tid = tid_;
  }

  // Chunk i's raw copy: thread-private, a warp's 16-byte copies side by side (distinct banks).
  __device__ __forceinline__ int raw(int i) const {
    return (kStageTiles - 1) * Map::Tile::kElems + (i * kThreads + tid) * Map::E;
  }

  __device__ __forceinline__ void fetch(float* stage, int64_t x_left, int64_t k_left) {
    this->template for_each_chunk<kMode == LoadMode::kVector>(x_left, k_left, [&](int i, const float* src, auto ok) {
      if constexpr (kMode == LoadMode::kVector) {
        ptx::cp_async<16>(stage + raw(i), ok(0) ? src : this->base, ok(0));
      } else {
#pragma unroll
        for (int e = 0; e < Map::E; ++e) ptx::cp_async<4>(stage + raw(i) + e, ok(e) ? src + e : this->base, ok(e));
      }
    });
  }

  // This thread's copies of the tile, once landed: rounded and transposed into the K-major tile
  // (batches of 4 keep this producer from spilling).
  __device__ __forceinline__ void finish(float* stage) const {
    rewrite_in_batches<Map::kPerThread, 4>(
        [&](int i) { return *reinterpret_cast<const uint4*>(stage + raw(i)); },
        [&](int i, const uint4& v) {
          this->template store<kSplit>(stage, i, 0, __uint_as_float(v.x));
          this->template store<kSplit>(stage, i, 1, __uint_as_float(v.y));
          this->template store<kSplit>(stage, i, 2, __uint_as_float(v.z));
          this->template store<kSplit>(stage, i, 3, __uint_as_float(v.w));
        });
  }
};

}  // namespace tiledmm
