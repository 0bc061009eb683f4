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
//   Tf32TransposeCopyLoader: MN-major sources, copied by cp.async into raw tiles, then rounded
//     (and split) and transposed into the stage's K-major tile(s) by the warp that copied them
//     (finish): cp.async's depth, for more shared memory. (Through registers instead, 3xTF32
//     transA measured 1.97x torch against 2.16x: bench/NOTES.md item 76.) The raw tiles have a
//     ring of their own after the stages, of kRawSlots tiles: the kernels' pipelines have at
//     most kStages - 1 tiles copied and not yet finished, so a raw tile in every stage left one
//     unused, and TF32's 128 x 256 tile without room for three stages.
//   K-major sources with 16-byte alignment in the warp-specialized kernels come instead by bulk
//     tensor copies through a TFLOAT32 tensor map, which rounds every element to nearest TF32 on
//     the way (BulkTileLoader, bulk_tile_loader.cuh): the stage needs no pass, and the producer's
//     threads no copies. (The pass's shared-memory traffic was the gap between TF32 and cuBLAS's
//     speed on aligned problems, bench/NOTES.md items 90, 112.)
// kStageTiles: the BX x BK tiles one stage holds; kStageElems: its elements; kRingElems: the
// elements the loader keeps after the stages.
#pragma once

#include <cstdint>

#include <cuda.h>

#include "cuda/common/block_sync.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/common/stage_loader.cuh"

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

// The thread mapping of the transposing loader. Warp w owns a kWX x kWK block of the tile
// (blocks along x first), which it copies into a raw block of its own and then transposes, its
// lanes reading one another's copies (after __syncwarp).
//   Copies: 8 lanes along x in each of 4 k rows, so that an instruction reads four whole 128-byte
// lines, each landing in one shared-memory wavefront. (Lanes along 16 k rows of 32 bytes landed
// each row's sector in a wavefront of its own: four times the ideal, a third of TF32 transA's
// shared-memory wavefronts, where those set the pace; bench/NOTES.md item 100.)
//   Transposing: a thread's raw chunk (4 x at one k) goes to 4 lines of the K-major tile; a
// warp's lanes take 16 k x 2 chunks (lane = kk + 16 cc), so that each 4-byte store (2 lines x
// 16 k) hits 32 distinct banks within the swizzle.
//   The raw block's rows (k) hold kWX / 4 chunks, chunk q of row k at q ^ (k % 8), so that the 8
// chunks of a copy's row and the 8 rows of a quarter warp's transposing reads fall in distinct
// bank groups, each copied line in one 128-byte row. (Rows padded by a chunk instead, which put a
// line across two rows: 2.5 wavefronts a line, and 1.5 times the sectors.)
template <int BX, int BK, int kThreads>
struct Tf32TransposeMap {
  using Tile = Swizzle128Tile<float, BX, BK>;  // line x, element k
  static constexpr int E = 4;                  // floats per 16-byte chunk
  static constexpr int kWarps = kThreads / 32;
  static constexpr int kPerThread = BX * BK / E / kThreads;  // chunks a thread copies, and transposes
  static constexpr int kWK = BX * BK / kWarps >= 32 * 32 ? 32 : 16, kWX = BX * BK / kWarps / kWK;
  static constexpr int kRawElems = kWarps * kWK * kWX;
  static_assert(kWX % 32 == 0 && BX % kWX == 0 && BK % kWK == 0, "whole warp blocks of whole lines");

  const float* base;  // the matrix: the source address of zero-filled (out-of-range) copies
  const float* ptr;   // this thread's first copy of the next tile
  int64_t ld;
  int copy_x, copy_k;      // this thread's first copy: (x, k) within the tile
  int finish_x, finish_k;  // this thread's first transposed chunk: (x, k) within the tile
  int copy_row, finish_row;  // the raw rows of the two, as offsets in the raw tile
  int copy_swizzle, finish_swizzle;  // their chunks' positions in those rows, before each chunk's own part

  __device__ __forceinline__ void start(const float* base_, int64_t ld_, int64_t x0, int64_t k0, int tid) {
    base = base_;
    ld = ld_;
    const int lane = tid % 32, warp = tid / 32;
    const int warp_x = kWX * (warp % (BX / kWX)), warp_k = kWK * (warp / (BX / kWX));
    const int warp_raw = warp * kWK * kWX;
    copy_x = warp_x + E * (lane % 8);
    copy_k = warp_k + lane / 8;
    copy_row = warp_raw + (lane / 8) * kWX;
    copy_swizzle = (lane % 8) ^ (lane / 8);
    finish_x = warp_x + E * (lane / 16);
    finish_k = warp_k + lane % 16;
    finish_row = warp_raw + (lane % 16) * kWX;
    finish_swizzle = (lane / 16) ^ (lane % 8);
    ptr = base + (k0 + copy_k) * ld + x0 + copy_x;
  }

  // Copy j of this thread, and transposed chunk i: offsets from the thread's first (x, k).
  __device__ __forceinline__ static int copy_dx(int j) { return 32 * (j % (kWX / 32)); }
  __device__ __forceinline__ static int copy_dk(int j) { return 4 * (j / (kWX / 32)); }
  __device__ __forceinline__ static int finish_dx(int i) { return 8 * (i % (kWX / 8)); }
  __device__ __forceinline__ static int finish_dk(int i) { return 16 * (i / (kWX / 8)); }

  // Calls load(j, src, raw, ok(e)) for each copy of the next tile (raw: its offset in the raw
  // tile; ok: element e is inside the matrix; with kVector, the chunk is all in or all out), then
  // moves on a tile.
  template <bool kVector, typename Load>
  __device__ __forceinline__ void for_each_copy(int64_t x_left, int64_t k_left, const Load& load) {
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      const float* src = ptr + int64_t(copy_dk(j)) * ld + copy_dx(j);
      // Row copy_k + dk (dk a multiple of 4: its row's k % 8 differs from copy_k's by dk % 8),
      // chunk copy_x / 4 + dx / 4 (dx a multiple of 32: whole groups of 8 chunks).
      const int raw = copy_row + copy_dk(j) * kWX + copy_dx(j) + E * (copy_swizzle ^ (copy_dk(j) % 8));
      const bool line_ok = copy_k + copy_dk(j) < k_left;
      const int64_t elem_left = x_left - (copy_x + copy_dx(j));  // the chunk's elements run along x
      load(j, src, raw, [&](int e) { return line_ok && (kVector ? elem_left > 0 : e < elem_left); });
    }
    ptr += BK * ld;
  }

  // Chunk i's offset in the raw tile, and its element e, rounded (and split), into its
  // transposed place in `stage`.
  __device__ __forceinline__ int finish_offset(int i) const {
    // Row finish_k + dk (dk a multiple of 16: the same k % 8), chunk (finish_x + dx) / 4, whose
    // bits below 8 chunks (32 elements) are swizzled.
    const int dq = finish_dx(i) / E;
    return finish_row + finish_dk(i) * kWX + E * (dq - dq % 8) + E * (finish_swizzle ^ (dq % 8));
  }
  template <bool kSplit>
  __device__ __forceinline__ void store(float* stage, int i, int e, float v) const {
    uint32_t* words = reinterpret_cast<uint32_t*>(stage);
    const int offset = swizzled_offset<Tile>(finish_x, finish_dx(i) + e, finish_k, finish_dk(i));
    store_tf32_parts<kSplit>(words + offset, words + Tile::kElems + offset, v);
  }
};

template <int BX, int BK, int kThreads, LoadMode kMode, bool kSplit, int kRawSlots>
struct Tf32TransposeCopyLoader : Tf32TransposeMap<BX, BK, kThreads> {
  using Map = Tf32TransposeMap<BX, BK, kThreads>;
  static constexpr bool kRegisterStaged = false, kFinishesInPlace = true, kFinishNeedsItem = false;
  static constexpr int kStageTiles = kSplit ? 2 : 1;  // the K-major tile(s)
  static constexpr int kStageElems = kStageTiles * Map::Tile::kElems;
  static constexpr int kRingElems = kRawSlots * Map::kRawElems;

  float* ring;  // the raw tiles (set by the kernel)
  int fetch_slot = 0, finish_slot = 0;  // the ring slots of the next tiles fetched and finished

  __device__ __forceinline__ float* raw_tile(int slot) const { return ring + slot * Map::kRawElems; }
  __device__ __forceinline__ static int next_slot(int slot) { return slot + 1 == kRawSlots ? 0 : slot + 1; }

  // The next tile's copies, into the ring (the stage is written by finish).
  __device__ __forceinline__ void fetch(float* /*stage*/, int64_t x_left, int64_t k_left) {
    float* const raw = raw_tile(fetch_slot);
    this->template for_each_copy<kMode == LoadMode::kVector>(
        x_left, k_left, [&](int, const float* src, int offset, auto ok) {
          if constexpr (kMode == LoadMode::kVector) {
            ptx::cp_async<16>(raw + offset, ok(0) ? src : this->base, ok(0));
          } else {
#pragma unroll
            for (int e = 0; e < Map::E; ++e)
              ptx::cp_async<4>(raw + offset + e, ok(e) ? src + e : this->base, ok(e));
          }
        });
    fetch_slot = next_slot(fetch_slot);
  }

  // The oldest unfinished tile, once this thread's copies have landed: its warp's copies,
  // rounded and transposed into the K-major tile of `stage` (batches of 4 keep this producer from
  // spilling).
  __device__ __forceinline__ void finish(float* stage) {
    __syncwarp();  // the warp's copies, each landed for its own thread, are visible to all
    const float* const raw = raw_tile(finish_slot);
    rewrite_in_batches<Map::kPerThread, 4>(
        [&](int i) { return *reinterpret_cast<const uint4*>(raw + this->finish_offset(i)); },
        [&](int i, const uint4& v) {
          this->template store<kSplit>(stage, i, 0, __uint_as_float(v.x));
          this->template store<kSplit>(stage, i, 1, __uint_as_float(v.y));
          this->template store<kSplit>(stage, i, 2, __uint_as_float(v.z));
          this->template store<kSplit>(stage, i, 3, __uint_as_float(v.w));
        });
    __syncwarp();  // the warp's reads are done before any of its lanes copies into the slot again
    finish_slot = next_slot(finish_slot);
  }
};

}  // namespace tiledmm
