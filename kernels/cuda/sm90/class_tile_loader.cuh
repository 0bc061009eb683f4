// 16-bit wgmma operands without 16-byte alignment, by bulk tensor copies (the TMA), one residue
// class of the output's lines per tile (bench/NOTES.md item 126).
//   A box cannot start mid-16-byte block (item 80), but 16-bit lines 8 apart share their
// misalignment, so each class of lines (index mod 8) is a tensor of its own
// (make_class_maps): a box at an aligned coordinate holds the class's lines from `shift`
// (0-7) elements before the wanted one. TF32's residue classes (residue_class_loader.cuh) put
// every class in each tile and pay for it with a set of A fragments and a narrow wgmma per class;
// for 16-bit types that cost more than the shift pass it replaces (item 121). Here a tile takes
// its BN lines all from one class, so they share one shift:
//   B (K-major, lines n: the product's A rows): one 128-byte swizzled box of the class's lines
// 8 j + c, j in [j0, j0 + BN), lands the k window [k0 - shift, k0 - shift + BK) of every line,
// whole (no pass, one descriptor, one m64nBNk16 wgmma per k step). The epilogue writes column
// col of the tile to line c + 8 (j0 + col) (Lines); column tile x of the grid is class x % 8,
// band x / 8, so that a grid of n / BN column tiles covers n lines when n is a multiple of 8 BN
// (the dispatcher runs the rest of the lines on the windowed path).
//   A (MN-major, lines k: the product's B rows), from registers: its window shifted by the same
// `shift` (register A takes any k order and offset), each element read where its own class's box
// put it: class d's box holds the window's lines of class d (and pad(d) lines before them) by BM
// + 16 elements from m0 - shift_d, unswizzled. A lane's pairs of k are two lines of consecutive
// classes, so 16-bit loads and a PRMT per register: 32 loads a K tile, conflict-free (see
// kALineElems and pad).
//   The first tile's window of B starts before k = 0: the elements there belong to the line before
// (or precede the matrix) and are zeroed once landed (finish_first), before the tile is
// published; A's lines before k = 0 are outside its maps (zeros).
#pragma once

#include <cstdint>
#include <type_traits>

#include <cuda.h>
#include <cuda_bf16.h>

#include "cuda/common/block_sync.cuh"
#include "cuda/common/gemm_epilogue.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/common/stage_loader.cuh"
#include "cuda/common/tensor_maps.h"
#include "cuda/sm90/wgmma.cuh"

namespace tiledmm {

template <typename T, int BM, int BN, int BK>
struct ClassTileLoader {
  static_assert(sizeof(T) == 2, "16-bit operands");
  using Maps = ClassTileMaps;
  static constexpr int kClasses = kClassTileClasses;
  // Blocks in clusters of two whose tiles share B's lines (rows m0 and m0 + BM of the output's
  // transpose), each copying half of B's box into both (TMA multicast): a misaligned 128-byte
  // line of B takes two of the L2's tag lookups, whose rate set the pace without (item 119, item 126).
  static constexpr int kClusterBlocks = 2;
  static constexpr int kBBoxLines = BN / kClusterBlocks;
  static constexpr FragmentRows kRows = FragmentRows::kPlain;
  // A's lines: BM + 16 elements from m0 - shift_d (BM + 8 would do: a box's lines are whole 16
  // bytes), 72 words, 8 banks past a multiple of 32. A load of a warp reads 8 consecutive elements
  // of one line for each of four classes d, d + 2, d + 4, d + 6 (lanes t4 = 0-3: k = 2 t4 + e); box
  // d's first line of the window lies pad(d) lines into its region (the box starts that many lines
  // early), whose start is 128-byte aligned (bank 0), so the four land 8 banks apart, each in 5
  // words at most: conflict-free.
  static constexpr int kALineElems = BM + 16;
  static constexpr int kAWindowLines = BK / kClasses;  // a class's lines in a window of BK
  __host__ __device__ static constexpr int pad(int d) { return d / 2; }
  __host__ __device__ static constexpr int a_box_lines(int d) { return kAWindowLines + pad(d); }
  // Class d's box, rounded up to 128 bytes (a box's alignment in shared memory), and where it starts.
  __host__ __device__ static constexpr int a_region_elems(int d) {
    constexpr int kAlign = 128 / static_cast<int>(sizeof(T));
    return (a_box_lines(d) * kALineElems + kAlign - 1) / kAlign * kAlign;
  }
  __host__ __device__ static constexpr int a_region(int d) {
    int offset = 0;
    for (int q = 0; q < d; ++q) offset += a_region_elems(q);
    return offset;
  }
  using BTile = Swizzle128Tile<T, BN, BK>;  // line n (of the tile's class), element k
  static constexpr int kAStageElems = stage_elems<T, BTile>(a_region(kClasses));
  static constexpr int kBStageElems = BTile::kElems;
  __host__ __device__ static constexpr int a_lines() {
    int lines = 0;
    for (int d = 0; d < kClasses; ++d) lines += a_box_lines(d);
    return lines;
  }
  static constexpr uint32_t kABytes = a_lines() * kALineElems * sizeof(T);
  static constexpr uint32_t kBBytes = BTile::kElems * sizeof(T);
  // Boxes of at most 256 elements a side; K tiles of one 128-byte row.
  static constexpr bool kFits = BK * sizeof(T) == 128 && BN <= 256 && kALineElems <= 256 && BM % 64 == 0;

  // Column tile x of the grid (n0 = x BN): its class, and its first line.
  __host__ __device__ static int tile_class(int64_t n0) { return static_cast<int>(n0 / BN % kClasses); }
  __host__ __device__ static int64_t first_line(int64_t n0) {
    const int64_t x = n0 / BN;
    return x % kClasses + kClasses * BN * (x / kClasses);
  }
  // K tiles start up to the tile's shift early: K needs that much more in tiles.
  __host__ __device__ static int lead(const Maps& maps, int64_t n0) { return maps.b_shift[tile_class(n0)]; }
  // The tile-relative output line of the tile's column col.
  struct Lines {
    int base;
    __device__ __forceinline__ int operator()(int col) const { return base + kClasses * col; }
  };
  __device__ __forceinline__ static Lines lines(int64_t n0) { return Lines{static_cast<int>(first_line(n0) - n0)}; }

  const Maps* maps = nullptr;
  int m0 = 0, b_line0 = 0, cls = 0, shift = 0;
  int64_t k = 0;        // the next tile's k0
  bool issuer = false;  // this thread issues the copies
  int b_half = 0;       // the half of B's lines this block copies for its cluster

  __device__ __forceinline__ void start(const Maps* maps_, int64_t m0_, int64_t n0, int64_t k0, int64_t /*a_matrix*/,
                                        int64_t /*b_matrix*/, int tid) {
    maps = maps_;
    m0 = static_cast<int>(m0_);
    cls = tile_class(n0);
    b_line0 = static_cast<int>(first_line(n0) / kClasses);
    shift = maps->b_shift[cls];
    k = k0;
    issuer = tid == 0;
    b_half = static_cast<int>(ptx::cluster_rank());
  }
  // The next tile's boxes into the stages (1024-byte aligned), landing on `landed` (arrives: with
  // the issuer's arrival, else counted among the producer's arrivals): A's, and this block's half
  // of B into both blocks of the cluster, whose `landed` counts all of B.
  __device__ __forceinline__ void fetch(T* a_stage, T* b_stage, uint64_t* landed, bool arrives) {
    if (issuer) {
      if (arrives) sync::mbarrier_arrive_expect_tx(landed, kABytes + kBBytes);
      else sync::mbarrier_expect_tx(landed, kABytes + kBBytes);
      const int window = static_cast<int>(k) - shift;  // the window's first k
#pragma unroll
      for (int d = 0; d < kClasses; ++d) {
        // Class d's first line in the window, k = window + ((d - window) mod 8), is line
        // (k - d) / 8 of its map (negative before k = 0: zeros); pad(d) more lines before it.
        const int first = window + ((d - window) & (kClasses - 1));
        ptx::bulk_tensor_load(&maps->a[d], a_stage + a_region(d), landed, m0, (first - d) / kClasses - pad(d), 0);
      }
      constexpr uint16_t kCluster = (1u << kClusterBlocks) - 1;
      ptx::bulk_tensor_load_multicast(&maps->b[cls], b_stage + b_half * kBBoxLines * BK, landed, static_cast<int>(k),
                                      b_line0 + b_half * kBBoxLines, 0, kCluster);
    }
    k += BK;
  }
  // A work item's first tile (k0 = 0: K is never split here), landed: each B line's elements
  // before k = 0 zeroed.
  __device__ __forceinline__ void finish_first(T* /*a_stage*/, T* b_stage, int tid, int threads) const {
    uint16_t* const elems = reinterpret_cast<uint16_t*>(b_stage);  // +0.0 in either 16-bit type
    for (int l = tid; l < BN; l += threads)
      for (int e = 0; e < shift; ++e) elems[BTile::offset(l, e)] = 0;
  }

  // Register A of k step s: this warp's slice of the m64k16 fragment (mma.sync m16n8k16's A),
  // rows row0 + g (+ 8), window positions p = 16 s + 2 t4 + e (+ 8): class (p - shift) mod 8,
  // line pad + p / 8 of its box. Offsets::e[e]: this thread's element (row row0 + g, p = 2 t4 + e).
  template <int kSteps>
  struct Fragments {
    uint32_t r[kSteps][4];
  };
  struct Offsets {
    int e[2];
  };
  __device__ __forceinline__ static void class_offsets(Offsets& offset, const Maps& maps, int64_t n0, int row0,
                                                      int lane) {
    const int shift = maps.b_shift[tile_class(n0)];
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int d = (2 * (lane % 4) + e - shift) & (kClasses - 1);
      offset.e[e] = a_region(d) + pad(d) * kALineElems + maps.a_shift[d] + row0 + lane / 4;
    }
  }
  template <int kSteps>
  __device__ __forceinline__ static void load(Fragments<kSteps>& f, const T* a_stage, const Offsets& offset) {
    const uint16_t* elems = reinterpret_cast<const uint16_t*>(a_stage);
#pragma unroll
    for (int s = 0; s < kSteps; ++s)
#pragma unroll
      for (int u = 0; u < 2; ++u)     // k + 8: the next line of the same class
#pragma unroll
        for (int h = 0; h < 2; ++h) {  // row + 8
          const int at = (2 * s + u) * kALineElems + 8 * h;
          const uint32_t lo = elems[offset.e[0] + at], hi = elems[offset.e[1] + at];
          f.r[s][h + 2 * u] = lo | hi << 16;
        }
  }
  // One K tile's products: one m64nNk16 a step, b(stage, s) its B descriptor.
  template <int N, int kSteps, class BDescriptor>
  __device__ __forceinline__ static void issue(float (&acc)[N / 2], const Fragments<kSteps>& f, const T* b_stage,
                                               const BDescriptor& b) {
#pragma unroll
    for (int s = 0; s < kSteps; ++s) wgmma::mma_m64k16_rs<N, std::is_same_v<T, __nv_bfloat16>>(acc, f.r[s], b(b_stage, s));
  }
};

}  // namespace tiledmm
