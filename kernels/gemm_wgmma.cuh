// The Hopper tensor-core matrix-product kernel (wgmma, sm_90a), for fp16/bf16 operands.
//
// A block of BM / 64 warpgroups computes a BM x BN tile of C[z]: warpgroup w owns rows
// [64 w, 64 w + 64) across all BN columns, one m64nBNk16 wgmma per 16 of K. K advances in tiles of
// 64 (one 128-byte row of 16-bit elements) through a ring of kStages shared-memory stages filled
// by 16-byte cp.async (operands with 16-byte-aligned rows) or by element loads staged through
// registers and stored after the wgmmas are issued (any alignment): at tile t the block waits for tile t's copies, publishes them with a
// barrier, issues tile t's wgmmas, starts the copies of tile t + kStages - 2 into the stage of
// tile t - 2 (whose wgmmas have retired) and lets the wgmmas run while it waits for tile t - 1's. Stages
// keep each operand's global layout in wgmma's 128-byte-swizzled form (Swizzle128Tile), so no
// operand is transposed on the way: wgmma reads K-major or MN-major tiles itself.
#pragma once

#include <cstdint>

#include "gemm_common.cuh"
#include "gemm_epilogue.cuh"
#include "ptx.cuh"
#include "stage_loader.cuh"
#include "wgmma.cuh"

namespace tiledmm {

template <int BM_, int BN_, int kStages_, int kMinBlocks_ = 1>
struct WgmmaTile {
  static constexpr int BM = BM_, BN = BN_, BK = 64, kStages = kStages_, kMinBlocks = kMinBlocks_;
  static constexpr int kWarpGroups = BM / 64, kThreads = 128 * kWarpGroups;
  static_assert(BM % 64 == 0 && (BN == 64 || BN == 128 || BN == 256), "wgmma tile shapes");
  // At tile t the stage of tile t - 1 may still be read by running wgmmas, so copies run
  // kStages - 2 tiles ahead.
  static_assert(kStages >= 3, "the pipeline needs three stages or more");
};

// Shared memory of one block: kStages stages of A, then of B, and 1024 bytes to align them (the
// swizzle is a function of the address).
template <typename T, class Tile>
constexpr int wgmma_smem_bytes() {
  return Tile::kStages * (Tile::BM + Tile::BN) * Tile::BK * static_cast<int>(sizeof(T)) + 1024;
}

template <typename T, class Tile, LoadMode kMode, bool kARowMajor, bool kBRowMajor, typename Out>
__global__ void __launch_bounds__(Tile::kThreads, Tile::kMinBlocks)
    gemm_wgmma_kernel(const GemmArgs<T, Out> args) {
  static_assert(sizeof(T) == 2, "16-bit operands");
  if constexpr (!wgmma::kCompiled) {
    __trap();  // not an sm_90a pass: the dispatcher launches this kernel only on sm_90a images
  } else {
    constexpr int BM = Tile::BM, BN = Tile::BN, BK = Tile::BK, kStages = Tile::kStages;
    constexpr int kRowBytes = 128;  // one row of a swizzle atom
    using ALoader = StageLoader<T, BM, BK, Tile::kThreads, kARowMajor, kMode, Swizzle128Tile>;
    using BLoader = StageLoader<T, BN, BK, Tile::kThreads, !kBRowMajor, kMode, Swizzle128Tile>;
    constexpr int kAStageElems = ALoader::Tile::kElems, kBStageElems = BLoader::Tile::kElems;
    constexpr bool kStagedEpilogue =
        staged_output_fits<BM, BN, Out>(wgmma_smem_bytes<T, Tile>() - 1024);

    extern __shared__ unsigned char smem_raw[];
    unsigned char* const smem = smem_raw + (1024 - ptx::smem_address(smem_raw) % 1024) % 1024;
    T* const a_stages = reinterpret_cast<T*>(smem);
    T* const b_stages = a_stages + kStages * kAStageElems;

    const int tid = threadIdx.x, warp = tid / 32, group = warp / 4;
    const int64_t m_tiles = (args.m + BM - 1) / BM;
    const int64_t n0 = static_cast<int64_t>(blockIdx.x) * BN;
    ALoader a_loader;
    BLoader b_loader;

    // Descriptors of k step s (16 of K) of this warpgroup's A rows and of B, in one stage.
    // K-major operands advance 32 bytes along their 128-byte rows; MN-major ones 16 rows.
    auto a_descriptor = [&](const T* stage, int s) {
      if constexpr (kARowMajor)
        return wgmma::descriptor(stage + group * 64 * BK + s * 16, 16, 8 * kRowBytes);
      else  // column blocks of 64 rows of A: this warpgroup's is block `group`
        return wgmma::descriptor(stage + group * 64 * BK + s * 16 * 64, BK * kRowBytes, 8 * kRowBytes);
    };
    auto b_descriptor = [&](const T* stage, int s) {
      if constexpr (!kBRowMajor) return wgmma::descriptor(stage + s * 16, 16, 8 * kRowBytes);
      else return wgmma::descriptor(stage + s * 16 * 64, BK * kRowBytes, 8 * kRowBytes);
    };

    // z enumerates (matrix of the batch, slice of K). Grid-stride over z and row tiles: gridDim.y
    // and .z are capped at 65535.
    for (int64_t z = blockIdx.z; z < args.batch * args.splits; z += gridDim.z) {
      const int64_t matrix = z / args.splits;
      const int64_t k_begin = (z % args.splits) * args.k_chunk;
      const int64_t k_len = min(args.k, k_begin + args.k_chunk) - k_begin;
      const int64_t k_tiles = (k_len + BK - 1) / BK;
      const T* a = args.a + matrix * args.batch_stride_a;
      const T* b = args.b + matrix * args.batch_stride_b;
      for (int64_t mt = blockIdx.y; mt < m_tiles; mt += gridDim.y) {
        const int64_t m0 = mt * BM;
        float acc[BN / 2];
#pragma unroll
        for (int r = 0; r < BN / 2; ++r) acc[r] = 0.0f;

        __syncthreads();  // the previous work item's threads are done with the stages
        a_loader.start(a, args.lda, m0, k_begin, tid);
        b_loader.start(b, args.ldb, n0, k_begin, tid);
#pragma unroll
        for (int s = 0; s < kStages - 2; ++s) {
          if (s < k_tiles) {
            a_loader.fetch(a_stages + s * kAStageElems, args.m - m0, k_len - s * BK);
            b_loader.fetch(b_stages + s * kBStageElems, args.n - n0, k_len - s * BK);
            a_loader.deposit(a_stages + s * kAStageElems);
            b_loader.deposit(b_stages + s * kBStageElems);
          }
          ptx::cp_async_commit();
        }

        int stage = 0;  // the stage of tile t
        for (int64_t t = 0; t < k_tiles; ++t) {
          ptx::cp_async_wait<kStages - 3>();  // tile t has landed (this thread's copies) ...
          wgmma::fence_shared_for_async_proxy();
          __syncthreads();  // ... everyone's; and every warpgroup's wgmmas of tile t - 2 retired

          // Tile t's wgmmas first, so that the tensor cores go from tile t - 1's to them with no
          // gap; the copies of a later tile are issued while they run.
          const T* as = a_stages + stage * kAStageElems;
          const T* bs = b_stages + stage * kBStageElems;
          wgmma::fence_operands(acc);
          wgmma::fence();
#pragma unroll
          for (int s = 0; s < BK / 16; ++s)
            wgmma::mma_m64k16<BN, std::is_same_v<T, __nv_bfloat16>, !kARowMajor, kBRowMajor>(
                acc, a_descriptor(as, s), b_descriptor(bs, s));
          wgmma::commit_group();
          wgmma::fence_operands(acc);

          const int64_t next = t + kStages - 2;
          int next_stage = stage + kStages - 2;
          if (next_stage >= kStages) next_stage -= kStages;
          if (next < k_tiles) {
            a_loader.fetch(a_stages + next_stage * kAStageElems, args.m - m0, k_len - next * BK);
            b_loader.fetch(b_stages + next_stage * kBStageElems, args.n - n0, k_len - next * BK);
          }
          ptx::cp_async_commit();
          if (next < k_tiles) {  // register-staged loads (kStaged) land while the wgmmas run
            a_loader.deposit(a_stages + next_stage * kAStageElems);
            b_loader.deposit(b_stages + next_stage * kBStageElems);
          }
          wgmma::wait_group<1>();  // tile t - 1's wgmmas have retired
          wgmma::fence_operands(acc);
          stage = stage + 1 == kStages ? 0 : stage + 1;
        }
        wgmma::wait_group<0>();
        wgmma::fence_operands(acc);

        // The m64nN result is the m16n8 layout repeated: warp w of the group holds rows
        // 16 w ... 16 w + 15 of its 64, and tile j of 8 columns in registers 4 j ... 4 j + 3.
        auto value = [&](int, int j, int half, int e) { return acc[4 * j + 2 * half + e]; };
        store_output_tile<BM, BN, Tile::kThreads, 1, BN / 8, kStagedEpilogue>(
            value, args.c + z * args.m * args.n, args.m, args.n, m0, n0, group * 64 + (warp % 4) * 16,
            0, smem);
      }
    }
  }
}

}  // namespace tiledmm
