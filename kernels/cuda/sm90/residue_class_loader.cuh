// TF32 wgmma's operands without 16-byte alignment, by bulk tensor copies (the TMA) of each residue
// class of their lines, rounded to TF32 on the way (bench/NOTES.md item 119).
//   A tensor map needs 16-byte aligned lines, and a box cannot start mid-16-byte block (item 80).
// But lines 4 apart of a float32 matrix share their misalignment (4 ld floats are a multiple of 16
// bytes), so each class of lines (index mod 4) is a tensor of its own: its start aligned down by
// the class's shift (0-3 elements) and a line stride of 4 ld (make_class_maps). A box at an
// aligned coordinate holds the class's lines from `shift` elements before the wanted one.
//   B (K-major, lines n): class c's box lands the k window [k0 - shift_c, k0 - shift_c + BK) of the
// tile's BN / 4 lines of the class, 128-byte swizzled, as rows c BN / 4 ... of the stage. The
// wgmma's columns are the tile's lines permuted by class (column c BN / 4 + j is line 4 j + c: the
// epilogue writes them back in order, Lines), and the products of class c take A's k shifted by shift_c:
// four sets of register A fragments, four m64n(BN / 4) wgmmas per k step.
//   A, dense lines without swizzle, each element read where its class put it. MN-major (lines k;
// row-major products): class d's box holds kALines of its lines (the tile's, and the line below
// k0 that the shifted windows of B reach) by BM + 4 elements from m0 - shift_d. K-major (lines m,
// kAKMajor; x @ W^T products): class d's box holds the tile's BM / 4 lines of the class by BK + 12
// elements from k0 - 4 - shift_d (B's windows reach 3 before k0).
//   Blocks run in clusters of two whose tiles share B's lines (rows m0 and m0 + BM of the output's
// transpose): each copies two of B's four classes into both blocks' stages (TMA multicast), which
// halves B's requests to the L2, whose tag lookups set the pace (bench/NOTES.md item 119). A
// stage is free again once the math warps of both blocks are done with it (their kernel arrives
// on both blocks' empty mbarriers).
//   One work item a block (the dispatcher's grid holds them all): were there a next one, the other
// block of the cluster could copy its first tiles into stages that this block's staged epilogue
// still writes over.
//   The first tile's windows of B start before k = 0: the elements there belong to the line before
// (or precede the matrix) and are zeroed once landed (finish_first), before the tile is published;
// so are a K-major A's (a value there, inf or NaN, times B's zeros would not vanish).
#pragma once

#include <cstdint>

#include <cuda.h>

#include "cuda/common/block_sync.cuh"
#include "cuda/common/gemm_epilogue.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/common/stage_loader.cuh"
#include "cuda/common/tensor_maps.h"
#include "cuda/sm90/wgmma.cuh"

namespace tiledmm {

constexpr int kResidueClasses = 4;  // float32 lines 4 apart share their misalignment

template <int BM, int BN, int BK, bool kAKMajor = false>
struct ResidueClassLoader {
  using Maps = ResidueClassMaps;
  static constexpr int kClusterBlocks = 2;  // blocks sharing B's tiles
  // A read by 32-bit loads from several lines at once (an MN-major A's four, a K-major A's eight):
  // pairs spread across the warps, so that the loads fill 32 banks.
  static constexpr FragmentRows kRows = FragmentRows::kSpread;
  static constexpr int kClassLines = BN / kResidueClasses;  // B lines of a class in a tile
  // A lines of a class in a stage, and their elements (the box, from the class's aligned start):
  // MN-major, m0 - shift ... m0 - shift + BM + 3; K-major, k0 - 4 - shift ... k0 + BK + 7 - shift
  // (k0 + BK + 2 - shift would do: 44 elements are 12 words past a multiple of 32, so that a load's
  // rows 4 apart, on consecutive lines of one class, start in 8 distinct groups of 4 banks).
  static constexpr int kALines = kAKMajor ? BM / kResidueClasses : BK / kResidueClasses + 1;
  static constexpr int kALineElems = kAKMajor ? BK + 12 : BM + 4;
  // Where A's element k0 + i of a line of class d lies in its line: kAFirstK + shift_d + i (K-major).
  static constexpr int kAFirstK = 4;
  // A class's lines, rounded up to 128 bytes (a box's alignment in shared memory).
  static constexpr int kAClassElems = (kALines * kALineElems + 31) / 32 * 32;
  using BTile = Swizzle128Tile<float, BN, BK>;  // line n (permuted by class), element k
  static constexpr int kAStageElems = stage_elems<float, BTile>(kResidueClasses * kAClassElems);
  static constexpr int kBStageElems = BTile::kElems;
  static constexpr uint32_t kABytes = kResidueClasses * kALines * kALineElems * sizeof(float);
  static constexpr uint32_t kBBytes = BTile::kElems * sizeof(float);
  // Boxes of one 128-byte row of k by whole swizzle atoms (B), of the tile's rows shared evenly by
  // the classes (a K-major A), at most 256 elements a side.
  static constexpr bool kFits = BK == 32 && BN % (8 * kResidueClasses) == 0 && BM % kResidueClasses == 0 &&
                                kClassLines <= 256 && kALineElems <= 256;

  const ResidueClassMaps* maps = nullptr;
  int m0 = 0, n_line0 = 0, a_matrix = 0, b_matrix = 0;
  int64_t k = 0;        // the next tile's k0 (passes the maps' end after the last tile)
  bool issuer = false;  // this thread issues the copies
  int first_class = 0;  // the first of the B classes this block copies for its cluster

  __device__ __forceinline__ void start(const ResidueClassMaps* maps_, int64_t m0_, int64_t n0, int64_t k0,
                                        int64_t a_matrix_, int64_t b_matrix_, int tid) {
    maps = maps_;
    m0 = static_cast<int>(m0_);
    n_line0 = static_cast<int>(n0 / kResidueClasses);
    k = k0;
    a_matrix = static_cast<int>(a_matrix_);
    b_matrix = static_cast<int>(b_matrix_);
    issuer = tid == 0;
    first_class = static_cast<int>(ptx::cluster_rank()) * (kResidueClasses / kClusterBlocks);
  }
  // The next tile's boxes into the stages (1024-byte aligned), landing on `landed` (arrives: with
  // the issuer's arrival, else counted among the producer's arrivals): A's, and this block's
  // classes of B into both blocks of the cluster, whose `landed` counts all of B.
  __device__ __forceinline__ void fetch(float* a_stage, float* b_stage, uint64_t* landed, bool arrives) {
    if (issuer) {
      if (arrives) sync::mbarrier_arrive_expect_tx(landed, kABytes + kBBytes);
      else sync::mbarrier_expect_tx(landed, kABytes + kBBytes);
      const int kk = static_cast<int>(k);
#pragma unroll
      for (int c = 0; c < kResidueClasses; ++c) {
        // MN-major: A's lines k0 - 4 ... k0 + BK - 1 of class c, 4 j + c from j = k0 / 4 - 1; K-major:
        // the tile's lines m0 + 4 j + c, from the class's coordinate k0 - kAFirstK (element
        // k0 - kAFirstK - shift_c of the line).
        if constexpr (kAKMajor)
          ptx::bulk_tensor_load(&maps->a[c], a_stage + c * kAClassElems, landed, kk - kAFirstK, m0 / kResidueClasses,
                                a_matrix);
        else
          ptx::bulk_tensor_load(&maps->a[c], a_stage + c * kAClassElems, landed, m0, kk / kResidueClasses - 1,
                                a_matrix);
      }
      constexpr uint16_t kCluster = (1u << kClusterBlocks) - 1;
#pragma unroll
      for (int q = 0; q < kResidueClasses / kClusterBlocks; ++q) {
        const int c = first_class + q;
        ptx::bulk_tensor_load_multicast(&maps->b[c], b_stage + c * kClassLines * BK, landed, kk, n_line0, b_matrix,
                                        kCluster);
      }
    }
    k += BK;
  }
  // The most elements a class's window of B starts early: K needs that much more in tiles.
  __host__ __device__ __forceinline__ static int lead(const ResidueClassMaps& maps, int64_t /*n0*/) {
    int s = 0;
    for (int c = 0; c < kResidueClasses; ++c) s = maps.b_shift[c] > s ? maps.b_shift[c] : s;
    return s;
  }
  // A work item's first tile (k0 = 0), landed: each B line's elements before k = 0 zeroed, and a
  // K-major A's (an MN-major A's lines before k = 0 are outside its maps: zeros already).
  __device__ __forceinline__ void finish_first(float* a_stage, float* b_stage, int tid, int threads) const {
    for (int l = tid; l < BN; l += threads) {
      const int shift = maps->b_shift[l / kClassLines];
      for (int e = 0; e < shift; ++e) b_stage[BTile::offset(l, e)] = 0.0f;
    }
    if constexpr (kAKMajor) {
      for (int l = tid; l < kResidueClasses * kALines; l += threads) {
        const int d = l / kALines;
        float* line = a_stage + d * kAClassElems + l % kALines * kALineElems;
        for (int e = 0; e < kAFirstK + maps->a_shift[d]; ++e) line[e] = 0.0f;
      }
    }
  }

  // The tile-relative line of the output that wgmma column `col` of the tile computes.
  struct Lines {
    __device__ __forceinline__ int operator()(int col) const {
      return kResidueClasses * (col % kClassLines) + col / kClassLines;
    }
  };
  __device__ __forceinline__ static Lines lines(int64_t /*n0*/) { return Lines{}; }

  // Register A for the products of B's class c, k step s: this warp's slice of the m64k8 TF32
  // fragment (mma.sync m16n8k8's A layout), this thread's rows m_row and m_row + 1 at
  // k = 8 s + t4 - shift_c (+ 4), rows FragmentRows::kSpread (a warp's pairs 4 rows apart). MN-major:
  // the eight pairs of one line and the four lines of a load, whose classes' shifts differ where ld
  // is odd, fall in 32 distinct banks. K-major: a row's elements lie along its own line (the two rows
  // of a pair in consecutive classes), a load's eight rows on consecutive lines of one class, each
  // in 4 banks of its own (kALineElems).
  // Offsets::row[c][h]: this thread's element (row m_row + h, k = t4 - shift_c) in the A stage, from
  // class_offsets (MN-major: row m_row only; row m_row + 1 follows it).
  template <int kSteps>
  struct Fragments {
    uint32_t r[kSteps][kResidueClasses][4];
  };
  struct Offsets {
    int row[kResidueClasses][kAKMajor ? 2 : 1];
  };
  // row0: the first of the warp's 16 rows (kRows's pairs spread them).
  __device__ __forceinline__ static void class_offsets(Offsets& offset, const ResidueClassMaps& maps, int64_t /*n0*/,
                                                      int row0, int lane) {
    const int m_row = fragment_row<kRows>(row0, lane / 4, 0), t4 = lane % 4;
#pragma unroll
    for (int c = 0; c < kResidueClasses; ++c) {
      if constexpr (kAKMajor) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = m_row + h, d = row % kResidueClasses;
          offset.row[c][h] = d * kAClassElems + row / kResidueClasses * kALineElems + kAFirstK + maps.a_shift[d] + t4 -
                             maps.b_shift[c];
        }
      } else {
        const int kr = t4 - maps.b_shift[c];  // -3 ... 3
        const int d = kr & (kResidueClasses - 1), line = (kr >> 2) + 1;  // A's class and line within its box
        offset.row[c][0] = d * kAClassElems + line * kALineElems + maps.a_shift[d] + m_row;
      }
    }
  }
  template <int kSteps>
  __device__ __forceinline__ static void load(Fragments<kSteps>& f, const float* a_stage, const Offsets& offset) {
    const uint32_t* words = reinterpret_cast<const uint32_t*>(a_stage);
    // k + 8 s and k + 4 along a K-major line; MN-major: two lines of the class further, and one.
    constexpr int kStepK = kAKMajor ? 8 : 2 * kALineElems, kHalfStepK = kStepK / 2;
#pragma unroll
    for (int s = 0; s < kSteps; ++s)
#pragma unroll
      for (int c = 0; c < kResidueClasses; ++c) {
        const uint32_t* p0 = words + offset.row[c][0] + s * kStepK;
        const uint32_t* p1 = kAKMajor ? words + offset.row[c][kAKMajor ? 1 : 0] + s * kStepK : p0 + 1;
        f.r[s][c][0] = p0[0];
        f.r[s][c][1] = p1[0];
        f.r[s][c][2] = p0[kHalfStepK];
        f.r[s][c][3] = p1[kHalfStepK];
      }
  }
  // One K tile's products: class c's BN / 4 columns (accumulators BN / 8 c ...) from its rows of
  // the B stage, b(stage, s) their descriptor.
  template <int N, int kSteps, class BDescriptor>
  __device__ __forceinline__ static void issue(float (&acc)[N / 2], const Fragments<kSteps>& f, const float* b_stage,
                                               const BDescriptor& b) {
    constexpr int kClassN = N / kResidueClasses;
#pragma unroll
    for (int s = 0; s < kSteps; ++s)
#pragma unroll
      for (int c = 0; c < kResidueClasses; ++c)
        wgmma::mma_tf32_m64k8_rs<kClassN>(*reinterpret_cast<float(*)[kClassN / 2]>(acc + c * (kClassN / 2)),
                                          f.r[s][c], b(b_stage + c * kClassN * BK, s));
  }
};

}  // namespace tiledmm
