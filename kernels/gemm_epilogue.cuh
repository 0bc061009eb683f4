// Writing a block's output tile (both tensor-core kernels). The accumulators are laid out as the
// mma.sync m16n8 result, which wgmma's m64nN result repeats: each warp holds MT x NT tiles of
// 16 x 8 at (warp_m + 16 i, warp_n + 8 j), lane (g, t4) rows g and g + 8, columns 2 t4 and 2 t4 + 1.
#pragma once

#include <cstdint>

#include "block_sync.cuh"
#include "gemm_common.cuh"
#include "ptx.cuh"

namespace tiledmm {

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

// value(i, j, half, e): the accumulator of row g + 8 half, column 2 t4 + e of tile (i, j).
// c: the m x n output, row-major (or column-major: kColumnMajor); (m0, n0): the block's tile.
// kStaged: through shared memory (over the stages, which every warp must be done with), so that
// global memory sees whole 16-byte segments of its lines (rows, or columns); otherwise straight
// from the registers (pairs of adjacent outputs in one store where the layout allows). The
// kThreads threads calling it (the block's, or its math warps') synchronize among themselves.
template <int BM, int BN, int kThreads, int MT, int NT, bool kStaged, bool kColumnMajor = false,
          typename Out, typename Value>
__device__ __forceinline__ void store_output_tile(const Value& value, Out* c, int64_t m, int64_t n,
                                                  int64_t m0, int64_t n0, int warp_m, int warp_n,
                                                  unsigned char* smem) {
  const int tid = threadIdx.x, lane = tid % 32, g = lane / 4, t4 = lane % 4;
  // Lines of the output in memory: rows of n outputs, or columns of m.
  const int64_t line_len = kColumnMajor ? m : n;
  if constexpr (kStaged) {
    // The tile is staged in the output's own orientation: kLines lines of kLineLen outputs.
    constexpr int kLines = kColumnMajor ? BN : BM, kLineLen = kColumnMajor ? BM : BN;
    constexpr int kOutLd = kStagedOutLd<kLineLen, Out>;
    ptx::cp_async_wait<0>();
    sync::warps<kThreads>();  // every warp is done with the stages the tile is written over
    Out* tile = reinterpret_cast<Out*>(smem);
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
      for (int half = 0; half < 2; ++half)
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          const int r = warp_m + i * 16 + g + 8 * half, col = warp_n + j * 8 + 2 * t4;
          if constexpr (kColumnMajor) {
            // Lanes (g, t4) hit banks g + 8 t4 (mod 32): 2 kOutLd is 8 words past a multiple of 32.
            tile[col * kOutLd + r] = from_acc<Out>(value(i, j, half, 0));
            tile[(col + 1) * kOutLd + r] = from_acc<Out>(value(i, j, half, 1));
          } else {
            store_pair(tile + r * kOutLd + col, value(i, j, half, 0), value(i, j, half, 1));
          }
        }
    sync::warps<kThreads>();
    constexpr int kVec = 16 / static_cast<int>(sizeof(Out)), kLineVecs = kLineLen / kVec;
    const int64_t line0 = kColumnMajor ? n0 : m0, lines = kColumnMajor ? n : m;
    const int64_t e0 = kColumnMajor ? m0 : n0;
    const bool vec = line_len % kVec == 0 && reinterpret_cast<uintptr_t>(c) % 16 == 0;
    for (int v = tid; v < kLines * kLineVecs; v += kThreads) {
      const int l = v / kLineVecs, e = (v % kLineVecs) * kVec;
      const int64_t line = line0 + l;
      if (line >= lines || e0 + e >= line_len) continue;
      const Out* src = tile + l * kOutLd + e;
      Out* dst = c + line * line_len + e0 + e;
      if (vec) {
        *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
      } else {
        for (int x = 0; x < kVec && e0 + e + x < line_len; ++x) dst[x] = src[x];
      }
    }
  } else {
    const bool pairs = !kColumnMajor && n % 2 == 0;  // two adjacent outputs make one aligned store
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int64_t row = m0 + warp_m + i * 16 + g + 8 * half;
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

}  // namespace tiledmm
