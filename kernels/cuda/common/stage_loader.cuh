// Shared-memory stages of the cp.async kernels, and the loads that fill them.
//
// A stage holds one operand's BX x BK tile (x is m for A, n for B) in the operand's own global
// layout: lines along the operand's unit-stride dimension (k for row-major A / column-major B,
// x otherwise), so global memory is copied straight in, 16 bytes at a time, with no transposing
// stores. mma.sync's fragment loads read it either way (ldmatrix / ldmatrix.trans / scalar);
// wgmma reads K-major or MN-major tiles in its own swizzled layout (Swizzle128Tile); the CUDA-core
// kernel reads 16-byte vectors along either dimension (PaddedTile).
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/common/gemm_common.cuh"
#include "cuda/common/ptx.cuh"

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
  static constexpr int kStageAlign = 1024;  // bytes: the permutation repeats every 8 rows
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
  static constexpr int kStageAlign = 1024;  // bytes: the swizzle atom
  static_assert(kLineElems % kBlockElems == 0 && kLines % 8 == 0, "whole swizzle atoms");

  __host__ __device__ __forceinline__ static constexpr int offset(int line, int e) {
    const int block = e / kBlockElems, chunk = (e % kBlockElems) / kChunkElems;
    return (block * kLines + line) * kBlockElems + (chunk ^ (line % 8)) * kChunkElems +
           e % kChunkElems;
  }
};

// Lines of kLineElems elements, each padded by one 16-byte chunk (the CUDA-core kernel's stages,
// gemm_tiled.cuh): unswizzled, so that a thread's reads sit at fixed offsets from one address,
// and with the padding, consecutive lines' chunks at one offset fall in distinct banks (lines of
// 16 or 32 words are 20 or 36 words apart: eight of them cover all 32 banks).
template <typename T, int kLines_, int kLineElems_>
struct PaddedTile {
  static constexpr int kLines = kLines_, kLineElems = kLineElems_;
  static constexpr int kChunkElems = 16 / static_cast<int>(sizeof(T));
  static constexpr int kLineStride = kLineElems + kChunkElems;
  static constexpr int kElems = kLines * kLineStride;
  static constexpr int kStageAlign = 128;  // bytes: every stage starts at bank 0
  static_assert(kLineElems % kChunkElems == 0, "lines of whole 16-byte chunks");

  __host__ __device__ __forceinline__ static constexpr int offset(int line, int e) {
    return line * kLineStride + e;
  }
};

// Tile::offset(line + dl, e + de) in a swizzled layout (SwizzledTile, Swizzle128Tile) for a
// thread's own (line, e) and a constant (dl, de). Both permutations repeat every 8 lines and every
// 128 bytes along a line, so only dl mod 8 and de mod 128 bytes go through one; the rest is a
// fixed distance, added as an immediate. A thread's fragment loads or transposing stores then
// share a few offsets, computed once, instead of each redoing the permutation (which also held a
// register per load: float64's 128 x 128 tile spilled).
template <class Tile>
__host__ __device__ __forceinline__ constexpr int swizzled_offset(int line, int dl, int e, int de) {
  constexpr int kRowElems = 8 * Tile::kChunkElems;
  return Tile::offset(line + dl % 8, e + de % kRowElems) + Tile::offset(dl - dl % 8, de - de % kRowElems);
}

// swizzled_offset's premise, checked over every line and element of one tile and a range of
// (dl, de), at compile time.
template <class Tile>
constexpr bool swizzle_repeats() {
  for (int line = 0; line < 16; ++line)
    for (int e = 0; e < Tile::kLineElems; e += 3)
      for (int dl = 0; line + dl < Tile::kLines; dl += 3)
        for (int de = 0; e + de < Tile::kLineElems; de += 5)
          if (swizzled_offset<Tile>(line, dl, e, de) != Tile::offset(line + dl, e + de)) return false;
  return true;
}
static_assert(swizzle_repeats<SwizzledTile<double, 24, 32>>() && swizzle_repeats<SwizzledTile<float, 24, 64>>() &&
              swizzle_repeats<SwizzledTile<uint16_t, 24, 64>>() && swizzle_repeats<Swizzle128Tile<float, 24, 64>>() &&
              swizzle_repeats<Swizzle128Tile<uint16_t, 24, 128>>(),
              "swizzled layouts repeat every 8 lines and 128 bytes");

// Elements of a stage holding `elems` elements of T in Tile's layout, rounded up to the layout's
// alignment (which the next stage needs: 1024 bytes for the swizzled ones).
template <typename T, class Tile>
constexpr int stage_elems(int elems) {
  constexpr int kAlign = Tile::kStageAlign / static_cast<int>(sizeof(T));
  return (elems + kAlign - 1) / kAlign * kAlign;
}

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
  kWarpElement = 4,  // element-wise cp.async by a warp's runs of consecutive elements (float32 on
                     // wgmma; StageLoader::kWarpCopies)
};

// Calls f(std::integral_constant<int, v>) for a run-time v in [I, N): one branch per value,
// taken by a whole warp where v is the same across it.
template <int N, int I = 0, typename F>
__device__ __forceinline__ void with_constant(int v, const F& f) {
  if constexpr (I < N) {
    if (v == I) f(std::integral_constant<int, I>{});
    else with_constant<N, I + 1>(v, f);
  }
}

// Rewrites a thread's kCount 16-byte chunks of a stage: read(i) returns what chunk i's
// replacement is made of, write(i, v) stores the replacement. Chunks are read in batches of
// kBatch before any of the batch is written: the compiler cannot tell the writes from the next
// chunk's read, and would otherwise wait out each read. The batch bounds the registers it holds.
// kSyncWarp: reads reach chunks that other lanes of the warp write, so the warp meets between.
template <int kCount, int kBatch, bool kSyncWarp = false, typename Read, typename Write>
__device__ __forceinline__ void rewrite_in_batches(const Read& read, const Write& write) {
  constexpr int kSize = kCount < kBatch ? kCount : kBatch;
#pragma unroll
  for (int i0 = 0; i0 < kCount; i0 += kSize) {
    decltype(read(0)) v[kSize];
#pragma unroll
    for (int i = 0; i < kSize; ++i) v[i] = read(i0 + i);
    if constexpr (kSyncWarp) __syncwarp();
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
// A thread owns kPerThread chunks of a tile: one chunk column, in lines first_line + line_offset(i)
// at fixed offsets, so it keeps one running pointer. Layout: the stage's tile layout (SwizzledTile
// for mma.sync fragments, Swizzle128Tile for wgmma).
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
  static_assert((kMode != LoadMode::kElement && kMode != LoadMode::kWarpElement) || sizeof(T) >= 4,
                "cp.async copies 4 bytes or more");
  static constexpr bool kRegisterStaged = kMode == LoadMode::kStaged;
  static constexpr bool kWindowed = kMode == LoadMode::kWindowed;
  static_assert(!kWindowed || kChunksPerLine <= 32,
                "windows: a line's threads within one warp (the shift pass reads the next lane's copy)");

  static constexpr int kWarps = kThreads / 32;

  // kWarpElement: a warp copies the chunks its threads own (in each slot i) by E cp.async
  // instructions, each of kSegLanes consecutive elements in each of its lines: the thread's
  // element of instruction v is at (line, copy_e + kSegLanes v). Each instruction then reads whole
  // sectors and writes whole 16-byte chunks; with a warp's lines kCopyLineStride apart, the
  // swizzle puts them in distinct banks (copies_conflict_free). A thread copying the E elements of its own
  // chunk (kElement) wrote words 16 bytes apart across a warp: four-way bank conflicts, which held
  // the shared-memory pipe at 88% on irregular float32 (bench/NOTES.md). So a thread's chunks land
  // by its warp's copies: work on them in place (finish) first needs __syncwarp. (The mma.sync
  // kernels keep kElement: there every thread also computes, and the per-element offsets cost
  // them registers and spills.)
  static constexpr bool kWarpCopies = kMode == LoadMode::kWarpElement;
  static constexpr int kSegLanes = kChunksPerLine < 32 ? kChunksPerLine : 32;  // a warp's lanes per line
  static constexpr int kCopyWarpLines = 32 / kSegLanes;

  // Thread tid's line (in slot 0) at line stride s: a warp's kCopyWarpLines lines s apart, s
  // warps interleaved. And the first element it copies: its lane within its warp's segment of
  // the line (the chunks its warp owns there start at 32 w % kChunksPerLine).
  __host__ __device__ __forceinline__ static constexpr int copy_line(int tid, int s) {
    const int w = tid / 32, q = tid % 32 / kSegLanes;
    return (kCopyWarpLines == 1 ? 32 * w / kChunksPerLine : w / s * kCopyWarpLines * s + w % s) + s * q;
  }
  __host__ __device__ __forceinline__ static constexpr int copy_elem(int tid) {
    return 32 * (tid / 32) % kChunksPerLine * E + tid % 32 % kSegLanes;
  }
  // Whether every copy instruction of every warp, at line stride s, writes each bank at most
  // sizeof(T) / 4 times (the fewest wavefronts: one per 128 bytes).
  static constexpr bool copies_conflict_free(int s) {
    if (kWarps % s != 0) return false;
    for (int w = 0; w < kWarps; ++w)
      for (int i = 0; i < kPerThread; ++i)
        for (int v = 0; v < E; ++v) {
          int words[32] = {};
          for (int tid = 32 * w; tid < 32 * w + 32; ++tid) {
            const int l = copy_line(tid, s) + i * kLineStep, elem = copy_elem(tid) + kSegLanes * v;
            const int word = Tile::offset(l, elem) * static_cast<int>(sizeof(T)) / 4;
            for (int k = 0; k < static_cast<int>(sizeof(T)) / 4; ++k) ++words[(word + k) % 32];
          }
          for (int b = 0; b < 32; ++b)
            if (words[b] > static_cast<int>(sizeof(T)) / 4) return false;
        }
    return true;
  }
  static constexpr int kCopyLineStride =
      !kWarpCopies || kCopyWarpLines == 1 || copies_conflict_free(1) ? 1
      : copies_conflict_free(2)                                       ? 2
      : copies_conflict_free(4)                                       ? 4
                                                                      : 0;
  static_assert(!kWarpCopies || 32 % kChunksPerLine == 0 || kChunksPerLine % 32 == 0,
                "element copies: a warp's chunks in whole lines or within one");
  static_assert(kCopyLineStride > 0, "element copies: no line stride without bank conflicts");

  // Which lines a thread copies. Normally a warp's lines are adjacent (kWarpElement:
  // kCopyLineStride apart), and a thread's kLineStep apart. kWindowed: the lines of a warp are
  // congruent mod 8, so that they share one misalignment (8 lines are 8 ld elements apart, a
  // multiple of 16 bytes) and the shift pass branches on it without diverging. Warp w's slot i
  // (of kPerThread) takes the kWarpLines lines of residue g % 8 in block g / 8, g = w + kWarps i:
  // with 8 warps or a multiple that is one residue per warp; with fewer, a thread's chunks fall
  // in kShiftClasses residues, chunk i in class i % kShiftClasses.
  static constexpr int kWarpLines = kWindowed ? 32 / kChunksPerLine : 1;
  static constexpr int kShiftClasses = kWindowed && kWarps % 8 != 0 ? 8 / kWarps : 1;
  static_assert(!kWindowed || kWarps % 8 == 0 || (8 % kWarps == 0 && kPerThread % kShiftClasses == 0),
                "windows: every warp's lines in whole residues mod 8");
  // kWindowed: the first line of warp `warp`'s line q (of kWarpLines).
  __device__ __forceinline__ static int window_line(int warp, int q) {
    return warp % 8 + 8 * (kWarpLines * (warp / 8) + q);
  }
  __device__ __forceinline__ static int first_line(int tid) {
    if constexpr (kWarpCopies) return copy_line(tid, kCopyLineStride);
    if constexpr (!kWindowed) return tid / kChunksPerLine;
    return window_line(tid / 32, tid % 32 / kChunksPerLine);
  }
  __host__ __device__ __forceinline__ static constexpr int line_offset(int i) {
    if constexpr (kShiftClasses > 1) return kWarps * (i % kShiftClasses) + 8 * kWarpLines * (i / kShiftClasses);
    else return i * kLineStep;
  }

  // kWindowed: the side slots are copied by one instruction a warp, lane q < kSideCopies taking
  // that of slot q / kWarpLines of the warp's line q % kWarpLines (copied by each line's last
  // lane, they took kPerThread instructions a warp, each of kWarpLines lanes).
  static constexpr int kSideCopies = kWindowed ? kPerThread * kWarpLines : 0;
  static_assert(kSideCopies <= 32, "side slots: one copy a lane");

  static constexpr int kStageTiles = kStageTiles_;
  static constexpr int kSideElems = kWindowed ? Tile::kLines * E : 0;
  // A stage's elements: its tiles and side slots.
  static constexpr int kStageElems = stage_elems<T, Tile>(kStageTiles * Tile::kElems + kSideElems);
  // Work on a tile's copies once they have landed, before the barrier that publishes it (finish):
  // kWindowed shifts them into place, by its work item's shifts (start: the misalignment of its
  // matrix). Other loaders' finish needs only the thread's own place in the tile.
  static constexpr bool kFinishesInPlace = kWindowed;
  static constexpr bool kFinishNeedsItem = kWindowed;
  static constexpr int kRingElems = 0;  // nothing kept outside the stages

  struct alignas(16) Chunk {
    T v[E];
  };
  Chunk staged[kMode == LoadMode::kStaged ? kPerThread : 1];
  const T* base;  // the matrix: the source address of zero-filled (out-of-range) copies
  const T* ptr;   // this thread's first element of the next tile (kWindowed: its first window)
  int64_t ld;
  int line, e;    // this thread's first line and its chunk's first element within a line
  int copy_e;     // kWarpCopies: the first element it copies within a line
  // kWindowed: the misalignment (in elements) of each class's lines; the same in every tile,
  // which advances by multiples of 16 bytes (BK elements along a line are 128 bytes; BK lines
  // are 128 x ld bytes).
  int shift[kShiftClasses];
  // kWindowed: this lane's side copy: its source (the window after its line's last chunk's, in
  // the next tile), its line, and that line's shift (no copy where 0, or past kSideCopies).
  const T* side_ptr;
  int side_line, side_shift;

  // The operand's matrix at base with leading dimension ld; its first tile at (x0, k0).
  __device__ __forceinline__ void start(const T* base_, int64_t ld_, int64_t x0, int64_t k0, int tid) {
    base = base_;
    ld = ld_;
    line = first_line(tid);
    e = (tid % kChunksPerLine) * E;
    copy_e = kWarpCopies ? copy_elem(tid) : e;
    ptr = kAlongK ? base + (x0 + line) * ld + k0 + copy_e : base + (k0 + line) * ld + x0 + copy_e;
    if constexpr (kWindowed) {
      const int first = static_cast<int>(reinterpret_cast<uintptr_t>(ptr) % 16) / static_cast<int>(sizeof(T));
#pragma unroll
      for (int c = 0; c < kShiftClasses; ++c) shift[c] = (first + line_offset(c) * static_cast<int>(ld % E)) % E;
      ptr -= shift[0];  // the aligned 16 bytes at or below the chunk (of class 0's lines)
      const int q = tid % 32, slot = q / kWarpLines;
      side_line = window_line(tid / 32, q % kWarpLines) + line_offset(slot % kPerThread);
      side_shift = q < kSideCopies ? shift[slot % kShiftClasses] : 0;
      side_ptr = ptr + (side_line - line) * ld + (Tile::kLineElems - e) + (shift[0] - side_shift);
    }
  }

  // Where chunk i of this thread goes in a stage. Both layouts permute chunks by line % 8 only,
  // so lines a multiple of 8 apart are one fixed stride apart (and the compiler need not redo the
  // swizzle for each): chunk i is at such a distance from chunk i % kShiftClasses where
  // kShiftClasses > 1 or kLineStep is a multiple of 8. de: elements further along the line (the
  // next chunk, for kWindowed's pass).
  __device__ __forceinline__ int chunk_offset(int i, int de = 0) const {
    if constexpr (kShiftClasses > 1 || kLineStep % 8 == 0) {
      const int c = i % kShiftClasses;
      return Tile::offset(line + line_offset(c), e + de) + Tile::offset(line_offset(i) - line_offset(c), 0);
    } else {
      return Tile::offset(line + line_offset(i), e + de);
    }
  }

  // kWarpCopies: where this thread's copy v for chunk slot i goes (chunk_offset's decomposition).
  __device__ __forceinline__ int element_offset(int i, int v) const {
    if constexpr (kLineStep % 8 == 0)
      return Tile::offset(line, copy_e + kSegLanes * v) + Tile::offset(line_offset(i), 0);
    else
      return Tile::offset(line + line_offset(i), copy_e + kSegLanes * v);
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
        const bool line_ok = !checked || line + line_offset(i) < line_left;
        // Element v of the chunk (any v, also outside [0, E)) is inside the matrix.
        auto ok = [&](int v) { return !checked || (line_ok && v < elem_left); };
        const T* src = ptr + line_offset(i) * ld;
        T* dst = stage + chunk_offset(i);
        if constexpr (kMode == LoadMode::kVector) {
          // Vector loads need the unit-stride extent to be a multiple of E: a chunk is all in or out.
          ptx::cp_async<16>(dst, ok(0) ? src : base, ok(0));
        } else if constexpr (kMode == LoadMode::kElement) {
#pragma unroll
          for (int v = 0; v < E; ++v) ptx::cp_async<sizeof(T)>(dst + v, ok(v) ? src + v : base, ok(v));
        } else if constexpr (kMode == LoadMode::kWarpElement) {
#pragma unroll
          for (int v = 0; v < E; ++v) {
            const bool in = !checked || (line_ok && copy_e + kSegLanes * v < extent_left);
            ptx::cp_async<sizeof(T)>(stage + element_offset(i, v), in ? src + kSegLanes * v : base, in);
          }
        } else if constexpr (kMode == LoadMode::kWindowed) {
          // The window: the aligned 16 bytes at or below the chunk (src: that of class 0's lines),
          // and for the line's last thread, where the line is misaligned, the next 16. Its elements
          // [-s, E - s) and [E - s, 2 E - s) from the chunk are copied where inside the matrix
          // (always reading within 16-byte blocks that hold some of its elements) and zero-filled
          // past it. inside(first): how many of elements [first, first + E) are inside (they are
          // in a row from `first`).
          auto inside = [&](int first) {
            if (!checked) return E;
            const int64_t left = line_ok ? elem_left - first : 0;
            return static_cast<int>(left < E ? (left > 0 ? left : 0) : E);
          };
          const int s = shift[i % kShiftClasses];
          const T* window = kShiftClasses == 1 ? src : src + (shift[0] - s);
          const int in_first = inside(-s);
          ptx::cp_async_16_partial(dst, in_first > 0 ? window : base, in_first * static_cast<int>(sizeof(T)));
        } else {
#pragma unroll
          for (int v = 0; v < E; ++v) staged[i].v[v] = ok(v) ? src[v] : from_acc<T>(0.0f);
        }
      }
    };
    if (line_left >= Tile::kLines && extent_left >= Tile::kLineElems) copy(std::false_type{});
    else copy(std::true_type{});
    if constexpr (kWindowed) {
      // The side window: elements [E - s, 2 E - s) from its line's last chunk.
      if (side_shift != 0) {
        const int64_t left = side_line < line_left ? extent_left - (Tile::kLineElems - side_shift) : 0;
        const int in_side = static_cast<int>(left < E ? (left > 0 ? left : 0) : E);
        ptx::cp_async_16_partial(stage + side_offset(side_line), in_side > 0 ? side_ptr : base,
                                 in_side * static_cast<int>(sizeof(T)));
      }
      side_ptr += kAlongK ? BK : BK * ld;
    }
    ptr += kAlongK ? BK : BK * ld;
  }

  // kWindowed: the side slot of line l of the tile.
  __device__ __forceinline__ static constexpr int side_offset(int l) { return kStageTiles * Tile::kElems + l * E; }

  __device__ __forceinline__ uint4 chunk(const T* stage, int i) const {
    return *reinterpret_cast<const uint4*>(stage + chunk_offset(i));
  }

  // kWindowed: the words of the next window that chunk i's shift by kShift elements takes in
  // (kNextWords of them, none for aligned lines): the next lane's copy, or, for the line's last
  // chunk, its side slot. Read from shared memory before the warp rewrites any chunk.
  template <int kShift>
  static constexpr int kNextWords = (kShift * static_cast<int>(sizeof(T)) + 3) / 4;
  struct Window {
    uint4 first;  // this thread's copy
    uint32_t next[4];
  };
  template <int kShift>
  __device__ __forceinline__ Window window(const T* stage, int i) const {
    Window v{chunk(stage, i), {0u, 0u, 0u, 0u}};
    const T* next = e == Tile::kLineElems - E ? stage + side_offset(line + line_offset(i)) : stage + chunk_offset(i, E);
    if constexpr (kNextWords<kShift> > 2) {
      const uint4 w = *reinterpret_cast<const uint4*>(next);
      v.next[0] = w.x, v.next[1] = w.y, v.next[2] = w.z, v.next[3] = w.w;
    } else {
      const uint2 w = *reinterpret_cast<const uint2*>(next);
      v.next[0] = w.x, v.next[1] = w.y;
    }
    return v;
  }

  // kWindowed: chunk i of this thread's tile from its window: shifted down by kShift elements,
  // by word moves and at most four funnel shifts.
  template <int kShift>
  __device__ __forceinline__ static uint4 shifted(const Window& v) {
    constexpr int kBytes = kShift * static_cast<int>(sizeof(T)), kWords = kBytes / 4, kRem = kBytes % 4;
    const uint32_t w[8] = {v.first.x, v.first.y, v.first.z, v.first.w, v.next[0], v.next[1], v.next[2], v.next[3]};
    uint32_t r[4];
#pragma unroll
    for (int j = 0; j < 4; ++j)
      r[j] = kRem == 0 ? w[j + kWords] : __funnelshift_r(w[j + kWords], w[j + kWords + 1], 8 * kRem);
    return make_uint4(r[0], r[1], r[2], r[3]);
  }

  // Once the warp's copies of the tile in `stage` have landed (kWindowed; each thread waited for
  // its own): shifted in place, each class of chunks on the branch of its shift (aligned lines
  // need nothing). A chunk takes in words of the next lane's copy, which that lane rewrites: the
  // warp reads a batch, meets, then writes it. Batches of two chunks: with four, the two-block
  // short-K tile (128 registers) spilled in its K loop (bench/NOTES.md item 106).
  __device__ __forceinline__ void finish(T* stage) const {
    if constexpr (kWindowed) {
      __syncwarp();  // every lane's copies, landed for their own lanes, visible to the warp
#pragma unroll
      for (int c = 0; c < kShiftClasses; ++c) {
        with_constant<E>(shift[c], [&](auto s) {
          constexpr int kShift = decltype(s)::value;
          if constexpr (kShift != 0) {
            rewrite_in_batches<kPerThread / kShiftClasses, 2, true>(
                [&](int j) { return window<kShift>(stage, c + j * kShiftClasses); },
                [&](int j, const Window& v) {
                  *reinterpret_cast<uint4*>(stage + chunk_offset(c + j * kShiftClasses)) = shifted<kShift>(v);
                });
          }
        });
      }
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
