// Shared-memory stages of the tensor-core kernels, and the loads that fill them.
//
// A stage holds one operand's BX x BK tile (x is m for A, n for B) in the operand's own global
// layout: lines along the operand's unit-stride dimension (k for row-major A / column-major B,
// x otherwise), so global memory is copied straight in, 16 bytes at a time, with no transposing
// stores. mma.sync's fragment loads read it either way (ldmatrix / ldmatrix.trans / scalar);
// wgmma reads K-major or MN-major tiles in its own swizzled layout (Swizzle128Tile).
#pragma once

#include <cstdint>
#include <type_traits>

#include "gemm_common.cuh"
#include "ptx.cuh"

namespace tiledmm {

// kLines lines of kLineElems elements. Each line is a whole number of 128-byte rows of eight
// 16-byte chunks; chunk c of line l is stored at c ^ p(l), p = 0,2,4,6,1,3,5,7 over l % 8.
// With that permutation the reads of the kernel hit distinct banks: eight lines at one chunk
// (ldmatrix), four lines at two adjacent chunks (TF32 fragments across lines), and eight lines
// at two chunks or four lines at four chunks (float64) in the minimum two wavefronts.
template <typename T, int kLines_, int kLineElems_>
struct SwizzledTile {
  static constexpr int kLines = kLines_, kLineElems = kLineElems_;
  static constexpr int kChunkElems = 16 / static_cast<int>(sizeof(T));
  static constexpr int kElems = kLines * kLineElems;
  static_assert(kLineElems * sizeof(T) % 128 == 0, "lines must be whole 128-byte rows");

  __host__ __device__ __forceinline__ static constexpr int offset(int line, int e) {
    const int pattern = ((line & 3) << 1) | ((line >> 2) & 1);
    const int chunk = (e / kChunkElems) ^ pattern;
    return line * kLineElems + chunk * kChunkElems + e % kChunkElems;
  }
};

// The layout wgmma reads with 128-byte swizzling (sm_90a): lines of kLineElems elements stored as
// column blocks of 128 bytes, each block kLines rows of 128 bytes (so the rows of one block are
// contiguous, and a block of 8 rows is one 1024-byte swizzle atom); chunk c of line l is stored at
// c ^ (l % 8). The hardware applies the same XOR to address bits 4-6 from bits 7-9, so stages must
// be 1024-byte aligned.
template <typename T, int kLines_, int kLineElems_>
struct Swizzle128Tile {
  static constexpr int kLines = kLines_, kLineElems = kLineElems_;
  static constexpr int kChunkElems = 16 / static_cast<int>(sizeof(T));
  static constexpr int kBlockElems = 128 / static_cast<int>(sizeof(T));  // one 128-byte row
  static constexpr int kElems = kLines * kLineElems;
  static_assert(kLineElems % kBlockElems == 0 && kLines % 8 == 0, "whole swizzle atoms");

  __host__ __device__ __forceinline__ static constexpr int offset(int line, int e) {
    const int block = e / kBlockElems, chunk = (e % kBlockElems) / kChunkElems;
    return (block * kLines + line) * kBlockElems + (chunk ^ (line % 8)) * kChunkElems +
           e % kChunkElems;
  }
};

// How global memory reaches a stage.
enum class LoadMode : int {
  kVector = 0,   // 16-byte cp.async: the operand is 16-byte aligned (base, ld, extents)
  kElement = 1,  // element-wise cp.async (4- and 8-byte types with any alignment)
  kStaged = 2,   // 16-bit types with any alignment (mma.sync kernels): element loads into
                 // registers, one 16-byte shared store per chunk after the math of the current
                 // stage (cp.async has no 2-byte form)
  kWindowed = 3, // any alignment (wgmma kernels): each chunk's aligned 16-byte window copied by
                 // cp.async (the line's last thread also copies the window's last chunk into a
                 // side slot), shifted into place once landed (finish)
};

// Bytes shift to shift + 15 of the 32 bytes lo:hi (shift: 0 to 15, a multiple of kGrain, the
// element size): 8- and 4-byte steps by selects (a register array indexed at run time would go to
// local memory), then 2 or 1 bytes by funnel shifts.
template <int kGrain>
__device__ __forceinline__ uint4 shift_down(const uint4& lo, const uint4& hi, int shift) {
  uint32_t w[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
  for (int j = 0; j < 6; ++j) w[j] = shift & 8 ? w[j + 2] : w[j];
#pragma unroll
  for (int j = 0; j < 5; ++j) w[j] = shift & 4 ? w[j + 1] : w[j];
  if constexpr (kGrain < 4) {
#pragma unroll
    for (int j = 0; j < 4; ++j) w[j] = __funnelshift_r(w[j], w[j + 1], 8 * (shift & 3));
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// Rewrites a thread's kCount 16-byte chunks of a stage: read(i) returns chunk i, write(i, v)
// stores its replacement. Chunks are read in batches of kBatch before any of the batch is
// written: the compiler cannot tell the writes from the next chunk's read, and would otherwise
// wait out each read. The batch bounds the registers it holds.
template <int kCount, int kBatch, typename Read, typename Write>
__device__ __forceinline__ void rewrite_in_batches(const Read& read, const Write& write) {
  constexpr int kSize = kCount < kBatch ? kCount : kBatch;
#pragma unroll
  for (int i0 = 0; i0 < kCount; i0 += kSize) {
    uint4 v[kSize];
#pragma unroll
    for (int i = 0; i < kSize; ++i) v[i] = read(i0 + i);
#pragma unroll
    for (int i = 0; i < kSize; ++i) write(i0 + i, v[i]);
  }
}

// How the mma.sync kernels load operands without 16-byte alignment (the wgmma kernels copy
// windows: WgmmaFamily::mode).
template <typename T>
constexpr LoadMode fallback_load_mode() {
  return sizeof(T) == 2 ? LoadMode::kStaged : LoadMode::kElement;
}

// Loads one operand's tiles into stages. kAlongK: the operand's unit-stride dimension is k.
// A thread owns kPerThread chunks of a tile: one chunk column, lines kLineStep apart, so it keeps
// one running pointer and fixed line offsets. Layout: the stage's tile layout (SwizzledTile for
// mma.sync fragments, Swizzle128Tile for wgmma).
// kStageTiles: the BX x BK tiles a stage holds (loaders that derive from this one write more
// than the copies); kWindowed's side slots, one chunk per line, follow them.
template <typename T, int BX, int BK, int kThreads, bool kAlongK, LoadMode kMode,
          template <typename, int, int> class Layout = SwizzledTile, int kStageTiles_ = 1>
struct StageLoader {
  using Tile = Layout<T, kAlongK ? BX : BK, kAlongK ? BK : BX>;
  static constexpr int E = Tile::kChunkElems;
  static constexpr int kChunksPerLine = Tile::kLineElems / E;
  static constexpr int kLineStep = kThreads / kChunksPerLine;
  static constexpr int kPerThread = Tile::kLines / kLineStep;
  static_assert(kThreads % kChunksPerLine == 0 && Tile::kLines % kLineStep == 0,
                "the block's threads must cover the tile in whole lines");
  static_assert(kMode != LoadMode::kElement || sizeof(T) >= 4, "cp.async copies 4 bytes or more");
  static constexpr bool kRegisterStaged = kMode == LoadMode::kStaged;
  static constexpr bool kWindowed = kMode == LoadMode::kWindowed;
  static_assert(!kWindowed || kChunksPerLine <= 32, "windows: a line's threads within one warp (a shuffle)");
  static constexpr int kStageTiles = kStageTiles_;
  static constexpr int kSideElems = kWindowed ? Tile::kLines * E : 0;
  // A stage's elements: its tiles and side slots, in whole 1024 bytes (the swizzle atom's
  // alignment, which the next stage needs).
  static constexpr int kStageElems =
      (kStageTiles * Tile::kElems + kSideElems + 1024 / sizeof(T) - 1) / (1024 / sizeof(T)) * (1024 / sizeof(T));
  // Work on a tile's copies once they have landed, before the barrier that publishes it (finish):
  // kWindowed shifts them into place.
  static constexpr bool kFinishesInPlace = kWindowed;

  struct alignas(16) Chunk {
    T v[E];
  };
  Chunk staged[kMode == LoadMode::kStaged ? kPerThread : 1];
  const T* base;  // the matrix: the source address of zero-filled (out-of-range) copies
  const T* ptr;   // this thread's first element of the next tile
  int64_t ld;
  int line, e;    // this thread's first line and its chunk's first element within a line

  // The operand's matrix at base with leading dimension ld; its first tile at (x0, k0).
  __device__ __forceinline__ void start(const T* base_, int64_t ld_, int64_t x0, int64_t k0, int tid) {
    base = base_;
    ld = ld_;
    line = tid / kChunksPerLine;
    e = (tid % kChunksPerLine) * E;
    ptr = kAlongK ? base + (x0 + line) * ld + k0 + e : base + (k0 + line) * ld + x0 + e;
  }

  // Where chunk i of this thread goes in a stage. Both layouts permute chunks by line % 8 only,
  // so where kLineStep is a multiple of 8 a thread's chunks are one fixed stride apart (and the
  // compiler need not redo the swizzle for each).
  __device__ __forceinline__ int chunk_offset(int i) const {
    if constexpr (kLineStep % 8 == 0) return Tile::offset(line, e) + i * Tile::offset(kLineStep, 0);
    else return Tile::offset(line + i * kLineStep, e);
  }

  // Starts loading the next tile (into `stage`, or into registers for kStaged). x_left, k_left:
  // the matrix extent left from the tile's origin; zeros are loaded beyond it.
  __device__ __forceinline__ void fetch(T* stage, int64_t x_left, int64_t k_left) {
    const int64_t line_left = kAlongK ? x_left : k_left;
    const int64_t extent_left = kAlongK ? k_left : x_left, elem_left = extent_left - e;
    // checked: bounds tests per chunk; a tile wholly inside the matrix (most) goes without.
    auto copy = [&](auto checked) {
#pragma unroll
      for (int i = 0; i < kPerThread; ++i) {
        const int l = line + i * kLineStep;
        const bool line_ok = !checked || l < line_left;
        const T* src = ptr + i * (kLineStep * ld);
        T* dst = stage + chunk_offset(i);
        if constexpr (kMode == LoadMode::kVector) {
          // Vector loads need the unit-stride extent to be a multiple of E: a chunk is all in or out.
          const bool ok = line_ok && (!checked || elem_left > 0);
          ptx::cp_async<16>(dst, ok ? src : base, ok);
        } else if constexpr (kMode == LoadMode::kElement) {
#pragma unroll
          for (int v = 0; v < E; ++v) {
            const bool ok = line_ok && (!checked || v < elem_left);
            ptx::cp_async<sizeof(T)>(dst + v, ok ? src + v : base, ok);
          }
        } else if constexpr (kMode == LoadMode::kWindowed) {
          // The window: the aligned 16 bytes at or below src, and for the line's last thread the
          // next 16, whose elements [-shift, E - shift) and [E - shift, 2 E - shift) from src are
          // copied where inside the matrix (always reading within 16-byte blocks that hold some
          // of its elements) and zero-filled past it.
          const int shift = static_cast<int>(reinterpret_cast<uintptr_t>(src) % 16) / static_cast<int>(sizeof(T));
          const T* window = src - shift;
          auto inside = [&](int64_t first) {  // elements of a window chunk at `first` inside the matrix
            if (!checked) return E;
            const int64_t left = line_ok ? elem_left - first : 0;
            return static_cast<int>(left < E ? (left > 0 ? left : 0) : E);
          };
          const int in_first = inside(-shift), in_next = shift == 0 ? 0 : inside(E - shift);
          ptx::cp_async_16_partial(dst, in_first > 0 ? window : base, in_first * static_cast<int>(sizeof(T)));
          if (e == Tile::kLineElems - E)
            ptx::cp_async_16_partial(side_slot(stage, i), in_next > 0 ? window + E : base,
                                     in_next * static_cast<int>(sizeof(T)));
        } else {
#pragma unroll
          for (int v = 0; v < E; ++v)
            staged[i].v[v] = line_ok && (!checked || v < elem_left) ? src[v] : from_acc<T>(0.0f);
        }
      }
    };
    if (line_left >= Tile::kLines && extent_left >= Tile::kLineElems) copy(std::false_type{});
    else copy(std::true_type{});
    ptr += kAlongK ? BK : BK * ld;
  }

  // kWindowed: the side slot of chunk i's line.
  __device__ __forceinline__ T* side_slot(T* stage, int i) const {
    return stage + kStageTiles * Tile::kElems + (line + i * kLineStep) * E;
  }

  // kWindowed: chunk i of this thread's tile, from its window chunk `first` (this thread's
  // copy), the next one (the next thread's copy, by a shuffle; the line's last thread has it in
  // its side slot) and the line's shift. Every thread of the warp must call it (the shuffle).
  __device__ __forceinline__ uint4 shifted(T* stage, int i, const uint4& first) const {
    uint4 next;
    next.x = __shfl_down_sync(0xffffffffu, first.x, 1, kChunksPerLine);
    next.y = __shfl_down_sync(0xffffffffu, first.y, 1, kChunksPerLine);
    next.z = __shfl_down_sync(0xffffffffu, first.z, 1, kChunksPerLine);
    next.w = __shfl_down_sync(0xffffffffu, first.w, 1, kChunksPerLine);
    if (e == Tile::kLineElems - E) next = *reinterpret_cast<const uint4*>(side_slot(stage, i));
    // Tiles advance by multiples of 16 bytes (BK elements along a line are 128 bytes; BK lines
    // are 128 x ld bytes), so the pointer of a later tile gives this tile's shift.
    const int shift = static_cast<int>(reinterpret_cast<uintptr_t>(ptr + i * (kLineStep * ld)) % 16);
    return shift_down<sizeof(T)>(first, next, shift);
  }

  __device__ __forceinline__ uint4 chunk(const T* stage, int i) const {
    return *reinterpret_cast<const uint4*>(stage + chunk_offset(i));
  }

  // Once this thread's copies of the tile in `stage` have landed (kWindowed): shifted in place.
  __device__ __forceinline__ void finish(T* stage) const {
    if constexpr (kWindowed) {
      rewrite_in_batches<kPerThread, 8>([&](int i) { return chunk(stage, i); },
                                        [&](int i, const uint4& v) {
                                          *reinterpret_cast<uint4*>(stage + chunk_offset(i)) = shifted(stage, i, v);
                                        });
    }
  }

  // kStaged: writes the registers of the last fetch into `stage`.
  __device__ __forceinline__ void deposit(T* stage) const {
    if constexpr (kMode == LoadMode::kStaged) {
#pragma unroll
      for (int i = 0; i < kPerThread; ++i)
        *reinterpret_cast<Chunk*>(stage + chunk_offset(i)) = staged[i];
    }
  }
};

}  // namespace tiledmm
