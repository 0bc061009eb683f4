// Writing a block's output tile (both tensor-core kernels). The accumulators are laid out as the
// mma.sync m16n8 result, which wgmma's m64nN result repeats: each warp holds MT x NT tiles of
// 16 x 8 at (warp_m + 16 i, warp_n + 8 j), lane (g, t4) rows g and g + 8, columns 2 t4 and 2 t4 + 1.
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/common/block_sync.cuh"
#include "cuda/common/gemm_common.cuh"
#include "cuda/common/ptx.cuh"

namespace tiledmm {

// Which rows of the tile a warp's m16 fragment rows g + 8 half (g = lane / 4) hold. Register-A
// wgmma's accumulator rows follow A's fragment rows, which its kernel may order as it reads A best.
enum class FragmentRows : int {
  kPlain,   // g + 8 half of the warp's 16 rows
  kPaired,  // 2 g + half: a thread's two rows adjacent (an A stage contiguous along m: one 8-byte
            // load, load_a; one 8-byte store of a column-major output tile)
  kSpread,  // paired, but the pairs of a warpgroup's four warps interleaved: warp w's pair g at rows
            // 32 (w / 2) + 4 g + 2 (w % 2) of the group's 64, so that a warp's pairs are 4 rows apart
            // (ResidueClassLoader: a warp's 32-bit loads from the lines of A in distinct banks)
};
// The row that fragment row (g, half) of the warp whose first row would be row0 (kPlain's: a
// multiple of 16; the group's 64 rows start at a multiple of 64) holds.
template <FragmentRows kRows>
__host__ __device__ __forceinline__ constexpr int fragment_row(int row0, int g, int half) {
  if constexpr (kRows == FragmentRows::kPlain) return row0 + g + 8 * half;
  if constexpr (kRows == FragmentRows::kPaired) return row0 + 2 * g + half;
  const int w = row0 / 16 % 4;
  return row0 - 16 * w + 32 * (w / 2) + 4 * g + 2 * (w % 2) + half;
}

// Row padding of the staged tile: one 16-byte chunk, so that the rows start in different banks.
template <int BN, typename Out>
constexpr int kStagedOutLd = BN + 16 / static_cast<int>(sizeof(Out));

// Whether a BM x BN tile of Out (staged as BN lines of BM when kColumnMajor) fits in smem_bytes
// of shared memory for the staged epilogue.
template <int BM, int BN, typename Out, bool kColumnMajor = false>
constexpr bool staged_output_fits(int smem_bytes) {
  constexpr int kLines = kColumnMajor ? BN : BM, kLineLen = kColumnMajor ? BM : BN;
  return kLines * kStagedOutLd<kLineLen, Out> * static_cast<int>(sizeof(Out)) <= smem_bytes;
}

// Outputs recomputed in the staged tile (3xTF32's NaN outputs, gemm_wgmma.cuh): where `active`
// (the same in every calling thread), each NaN of the tile is replaced by exact(row, col), the
// output's row and column.
template <class Exact>
struct NanRepair {
  bool active;
  Exact exact;
};
struct NoRepair {};

// Where output (line l, element e) of a tile of kLines lines is staged for bulk tensor copies:
// in the boxes of the output's tensor map (tensor_maps.h), each kBoxChunks 128-byte chunks along
// a line by the tile's kLines lines, laid out line by line as rows of 128 bytes whose 16-byte
// chunks are swizzled by the row (its index % 8), as the map's 128-byte swizzle wants. One chunk
// a box: rows l of a box in distinct swizzle phases for l % 8, bank-conflict-free for 16-byte
// stores along a line and for stores across lines alike. Two: a box writes 256 bytes of each
// line at once (the writes nearer a fill's rate, bench/NOTES.md item 139), and a line's two rows
// are in phases 2 l and 2 l + 1: lines 4 apart share a phase.
//   kChunkBytes 64 (one chunk a box, for tiles whose lines 128-byte chunks do not divide): rows of
// 64 bytes in the map's 64-byte swizzle, their four 16-byte chunks swizzled by (row / 2) % 4. The
// fragment's stores (rows g and g + 8, a pair of columns a lane) still hit distinct banks: rows g
// of one parity share a phase only with rows 8 apart.
template <typename Out, int kChunkBytes = 128>
constexpr int kChunkElems = kChunkBytes / static_cast<int>(sizeof(Out));  // a chunk of a line (a swizzle row)
template <typename Out, int kLines, int kBoxChunks = 1, int kChunkBytes = 128>
__device__ __forceinline__ int bulk_box_offset(int l, int e) {
  static_assert(kChunkBytes == 128 || (kChunkBytes == 64 && kBoxChunks == 1), "the 128-byte swizzle, or 64-byte boxes");
  constexpr unsigned kVec = 16 / sizeof(Out), kChunk = kChunkElems<Out, kChunkBytes>, kBoxElems = kBoxChunks * kChunk;
  constexpr unsigned kPhases = kChunkBytes / 16, kRowsAPhase = 128 / kChunkBytes;
  // Unsigned, so that the divisions by powers of two are shifts.
  const unsigned ul = l, ue = e, x = ue % kChunk;
  const unsigned row = ((ue / kBoxElems) * kLines + ul) * kBoxChunks + ue % kBoxElems / kChunk;
  return static_cast<int>(row * kChunk + ((x / kVec) ^ (row / kRowsAPhase % kPhases)) * kVec + x % kVec);
}

// The lines of a box of a tile of kLines lines: all of them, or 64 for boxes of several chunks
// (16 KiB boxes of float32).
template <int kLines, int kBoxChunks>
constexpr int kBulkBoxLines = kBoxChunks > 1 && kLines > 64 ? 64 : kLines;

// Sends a staged tile (bulk_box_offset's layout, kLines lines of kLineLen elements) to the
// output at element e0 of line line0 of matrix z, by one bulk tensor copy per box (sm_90; parts
// outside the output are not written), committed as one group. One thread calls it, after a
// fence for the async proxy and a barrier behind every thread's staging stores. kEvictFirst: the
// output leaves the L2 before the operands (ptx::bulk_tensor_store). e0 is a multiple of a box.
template <int kLines, int kLineLen, bool kEvictFirst, int kBoxChunks = 1, int kChunkBytes = 128, typename Out>
__device__ __forceinline__ void send_bulk_tile(const void* map, const Out* tile, int64_t e0, int64_t line0,
                                               int64_t z) {
  constexpr int kChunk = kChunkElems<Out, kChunkBytes>, kBoxElems = kBoxChunks * kChunk;
  constexpr int kBoxLines = kBulkBoxLines<kLines, kBoxChunks>;
  const int x = static_cast<int>(e0), y = static_cast<int>(line0), w = static_cast<int>(z);
#pragma unroll
  for (int q = 0; q < kLineLen / kBoxElems; ++q)
#pragma unroll
    for (int l = 0; l < kLines; l += kBoxLines) {
      const Out* box = tile + (q * kLines + l) * kBoxElems;
      // The map's coordinates: (element, line, matrix), or (element of a chunk, chunk, line, matrix).
      if constexpr (kBoxChunks == 1) ptx::bulk_tensor_store<kEvictFirst>(map, box, x + q * kBoxElems, y + l, w, 0);
      else ptx::bulk_tensor_store<kEvictFirst>(map, box, 0, (x + q * kBoxElems) / kChunk, y + l, w);
    }
  ptx::bulk_commit();
}

// The kThreads threads that write a tile together: by default the block's first kThreads,
// meeting at named barrier 1 (BlockWriters); or one warpgroup of a block whose warpgroups each
// write their own rows (GroupWriters: ranked from its first thread, meeting at its own barrier),
// so that one group's writing runs beside another's products.
struct BlockWriters {
  __device__ __forceinline__ int rank() const { return threadIdx.x; }
  template <int kThreads>
  __device__ __forceinline__ void sync() const { sync::warps<kThreads>(); }
};
struct GroupWriters {
  int group;    // the warpgroup: threads 128 group ... 128 group + 127
  int barrier;  // its named barrier, used by no other threads
  __device__ __forceinline__ int rank() const { return static_cast<int>(threadIdx.x) - 128 * group; }
  template <int kThreads>
  __device__ __forceinline__ void sync() const {
    static_assert(kThreads == 128, "one warpgroup");
    sync::warps<kThreads>(barrier);
  }
};

// The output lines of a tile in the order its staged lines hold them: the same (SameLines), or
// permuted (ResidueClassLoader::Lines, ClassTileLoader::Lines). line_of(l): the tile-relative output line of staged line l.
struct SameLines {
  __device__ __forceinline__ int operator()(int l) const { return l; }
};

// value(i, j, half, e): the accumulator of row fragment_row<kRows>(warp_m + 16 i, g, half), column
// 2 t4 + e of tile (i, j).
// c: the m x n output, row-major (or column-major: kColumnMajor); (m0, n0): the block's tile; its
// staged lines go to the output's lines line_of says (kStaged, without bulk copies).
// kStaged: through shared memory at smem, so that global memory sees whole 16-byte segments of
// its lines (rows, or columns); otherwise straight from the registers (pairs of adjacent outputs
// in one store where the layout allows). The kThreads threads calling it (the block's, or its
// math warps', numbered from 0; or `writers`) synchronize among themselves.
//   smem is the stages (every warp must be done with them), or, with kBulkBuffers > 0, one of
// that many buffers that the caller's tiles take in turn (each 1024-byte aligned, BM x BN
// outputs), staged as boxes of the output's tensor map (tensor_maps.h): where `map` is
// given (its address in kernel parameter space; z the output matrix's index), thread 0 sends the
// tile out by bulk tensor copies (sm_90; marked to leave the L2 first: TF32 smallK 1.62 -> 1.40 ms,
// its operands no longer read again from memory, bench/NOTES.md item 88) and the threads return
// without waiting for them; a call waits until the copies of the tile kBulkBuffers calls before
// it have read its buffer, and the block must call finish_bulk_output() before it exits.
// kBoxChunks: the 128-byte chunks of a line in one box of the map (bulk_box_offset), as the map
// was made with.
template <int BM, int BN, int kThreads, int MT, int NT, bool kStaged, bool kColumnMajor = false,
          int kBulkBuffers = 0, FragmentRows kRows = FragmentRows::kPlain, int kBoxChunks = 1, typename Out,
          typename Value, typename Repair = NoRepair,
          typename Writers = BlockWriters, typename LineOf = SameLines>
__device__ __forceinline__ void store_output_tile(const Value& value, Out* c, int64_t m, int64_t n,
                                                  int64_t m0, int64_t n0, int warp_m, int warp_n,
                                                  unsigned char* smem, const Repair& repair = {},
                                                  const void* map = nullptr, int64_t z = 0,
                                                  const Writers& writers = {}, const LineOf& line_of = {}) {
  constexpr bool kRepairs = !std::is_same_v<Repair, NoRepair>;
  constexpr bool kBulk = kBulkBuffers > 0;
  constexpr bool kSameLines = std::is_same_v<LineOf, SameLines>;
  constexpr bool kPairedRows = kRows != FragmentRows::kPlain;  // half 1 is the row after half 0
  static_assert(kStaged || !(kBulk || kRepairs), "bulk copies and repairs work on the staged tile");
  static_assert(kSameLines || (kStaged && !kBulk), "permuted lines: a staged tile written by the threads");
  const int tid = writers.rank(), lane = tid % 32, g = lane / 4, t4 = lane % 4;
  // Lines of the output in memory: rows of n outputs, or columns of m.
  const int64_t line_len = kColumnMajor ? m : n;
  if constexpr (kStaged) {
    // The tile is staged in the output's own orientation: kLines lines of kLineLen outputs.
    constexpr int kLines = kColumnMajor ? BN : BM, kLineLen = kColumnMajor ? BM : BN;
    constexpr int kOutLd = kStagedOutLd<kLineLen, Out>;
    const int64_t line0 = kColumnMajor ? n0 : m0, lines = kColumnMajor ? n : m;
    const int64_t e0 = kColumnMajor ? m0 : n0;
    ptx::cp_async_wait<0>();
    if constexpr (kBulk) {
      // The copies of the tile last staged in this buffer have read it.
      if (tid == 0) ptx::bulk_wait_read<kBulkBuffers - 1>();
    }
    writers.template sync<kThreads>();  // every warp is done with the memory the tile is written over
    Out* tile = reinterpret_cast<Out*>(smem);
    // Where output (line l, element e) is staged: padded lines, or (kBulk) the tensor map's boxes.
    constexpr int kVec = 16 / static_cast<int>(sizeof(Out));
    auto at = [&](int l, int e) -> Out& {
      if constexpr (kBulk) return tile[bulk_box_offset<Out, kLines, kBoxChunks>(l, e)];
      else return tile[l * kOutLd + e];
    };
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = fragment_row<kRows>(warp_m + i * 16, g, half);
        if constexpr (kColumnMajor) {
          // Column (line) col + 8 j is 8 j lines after col, in the same box and swizzle phase: one
          // address per (i, half, e) and constant offsets (computed per j, the swizzled addresses
          // spilled 236 bytes in the 3xTF32 tile). Padded: lanes (g, t4) hit banks g + 8 t4
          // (mod 32), 2 kOutLd being 8 words past a multiple of 32. kPairedRows: a thread's two
          // rows are adjacent along its lines, one 8-byte store (the second half adds nothing).
          constexpr int kLineStride = kBulk ? kBoxChunks * kChunkElems<Out> : kOutLd;  // a box line
          if (kPairedRows && half == 1) continue;
          // Boxes of several chunks put lines 2 apart 4 swizzle phases apart (bulk_box_offset), so
          // lanes t4 >= 2 store the other column of their pair first: a store's lines 2 t4 + (e ^
          // flip) then cover four phases, and a half warp's stores hit distinct banks.
          const int flip = kBulk && kBoxChunks > 1 ? t4 / 2 : 0;
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int col = e ^ flip;
            Out* const first = &at(warp_n + 2 * t4 + col, r);
            auto of = [&](int j, int h) { return col ? value(i, j, h, 1) : value(i, j, h, 0); };
#pragma unroll
            for (int j = 0; j < NT; ++j) {
              if constexpr (kPairedRows) store_pair(first + 8 * j * kLineStride, of(j, 0), of(j, 1));
              else first[8 * j * kLineStride] = from_acc<Out>(of(j, half));
            }
          }
        } else {
#pragma unroll
          for (int j = 0; j < NT; ++j)
            store_pair(&at(r, warp_n + j * 8 + 2 * t4), value(i, j, half, 0), value(i, j, half, 1));
        }
      }
    if constexpr (kRepairs) {
      if (repair.active) {
        writers.template sync<kThreads>();
        // Consecutive threads walk a line.
        for (int i = tid; i < kLines * kLineLen; i += kThreads) {
          const int l = i / kLineLen, e = i % kLineLen;
          Out& out = at(l, e);
          const int64_t line = line0 + line_of(l), x = e0 + e;
          if (isnan(static_cast<float>(out)) && line < lines && x < line_len)
            out = from_acc<Out>(kColumnMajor ? repair.exact(x, line) : repair.exact(line, x));
        }
      }
    }
    if constexpr (kBulk) ptx::fence_shared_for_async_proxy();
    writers.template sync<kThreads>();
    int64_t from = 0;  // the tile's first element (along its lines) that the threads write
    if constexpr (kBulk) {
      if (map) {
        if (tid == 0) send_bulk_tile<kLines, kLineLen, true, kBoxChunks>(map, tile, e0, line0, z);
        // Boxes of several chunks write a line's whole chunks: the rest of it, where the tile
        // reaches it, is the threads'.
        from = kBoxChunks == 1 ? kLineLen : line_len / kChunkElems<Out> * kChunkElems<Out> - e0;
        if (from >= kLineLen) return;
      }
    }
    const bool vec = line_len % kVec == 0 && reinterpret_cast<uintptr_t>(c) % 16 == 0;
    if (vec) {
      constexpr int kLineVecs = kLineLen / kVec;
      for (int v = tid; v < kLines * kLineVecs; v += kThreads) {
        const int l = v / kLineVecs, e = (v % kLineVecs) * kVec;
        const int64_t line = line0 + line_of(l);
        if (line >= lines || e < from || e0 + e >= line_len) continue;
        *reinterpret_cast<uint4*>(c + line * line_len + e0 + e) = *reinterpret_cast<const uint4*>(&at(l, e));
      }
    } else {
      // Lines without 16-byte alignment, element by element: each warp a line at a time, its
      // lanes on consecutive outputs, so that a store instruction writes whole sectors (a thread
      // per 16-byte chunk wrote one or two elements per 32-byte sector: 8x the ideal sectors for
      // 16-bit outputs; bench/NOTES.md item 109).
      static_assert(kThreads % 32 == 0 && kLineLen % 32 == 0, "whole warps along whole lines");
      for (int l = tid / 32; l < kLines && (!kSameLines || line0 + l < lines); l += kThreads / 32) {
        const int64_t line = line0 + line_of(l);
        if (!kSameLines && line >= lines) continue;
        const int64_t rest = line_len - e0;  // the line's outputs inside the matrix, from e0
        Out* const dst = c + line * line_len + e0;
#pragma unroll
        for (int e = lane; e < kLineLen; e += 32)
          if (e >= from && e < rest) dst[e] = at(l, e);
      }
    }
  } else {
    const bool pairs = !kColumnMajor && n % 2 == 0;  // two adjacent outputs make one aligned store
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int64_t row = m0 + fragment_row<kRows>(warp_m + i * 16, g, half);
        if (row >= m) continue;
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          const int64_t col = n0 + warp_n + j * 8 + 2 * t4;
          auto at = [&](int64_t cc) { return kColumnMajor ? c + cc * m + row : c + row * n + cc; };
          if (pairs && col < n) {
            store_pair(at(col), value(i, j, half, 0), value(i, j, half, 1));
          } else {
            if (col < n) *at(col) = from_acc<Out>(value(i, j, half, 0));
            if (col + 1 < n) *at(col + 1) = from_acc<Out>(value(i, j, half, 1));
          }
        }
      }
  }
}

// Before a block that stored tiles with kBulk exits: its copies have read its shared memory
// (waited for by each thread that sent some: rank 0 of their writers).
template <typename Writers = BlockWriters>
__device__ __forceinline__ void finish_bulk_output(const Writers& writers = {}) {
  if (writers.rank() == 0) ptx::bulk_wait_read<0>();
}

}  // namespace tiledmm
