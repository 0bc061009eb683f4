// The Hopper tensor-core matrix-product kernel (wgmma, sm_90a), for fp16/bf16 operands and for
// float32 operands rounded to TF32.
//
// A block of BM / 64 warpgroups computes a BM x BN tile of C[z]: warpgroup w owns rows
// [64 w, 64 w + 64) across all BN columns, one m64nBNk16 (TF32: k8) wgmma per step of K. K
// advances in tiles of BK (one 128-byte row: 64 16-bit elements, 32 floats) through a ring of
// kStages shared-memory stages, filled by 16-byte cp.async (16-bit operands with 16-byte-aligned
// rows) or by loads staged through registers and stored after the wgmmas are issued (16-bit
// operands of any alignment; TF32 operands, rounded and made K-major on the way). At tile t the
// block waits for tile t's copies, publishes them with a barrier, issues tile t's wgmmas, starts
// the copies of tile t + kStages - 2 into the stage of tile t - 2 (whose wgmmas have retired;
// register-staged loads are stored there one iteration later) and lets the wgmmas run while it
// waits for tile t - 1's. 16-bit stages keep each operand's global
// layout in wgmma's 128-byte-swizzled form (Swizzle128Tile): wgmma reads K-major or MN-major
// tiles itself. TF32 wgmma reads K-major tiles only.
#pragma once

#include <cstdint>

#include "gemm_common.cuh"
#include "gemm_epilogue.cuh"
#include "ptx.cuh"
#include "stage_loader.cuh"
#include "tf32_stage_loader.cuh"
#include "wgmma.cuh"

namespace tiledmm {

// BK: one 128-byte row of the operand type (64 for 16-bit types, 32 for float32).
template <int BM_, int BN_, int BK_, int kStages_, int kMinBlocks_ = 1>
struct WgmmaTile {
  static constexpr int BM = BM_, BN = BN_, BK = BK_, kStages = kStages_, kMinBlocks = kMinBlocks_;
  static constexpr int kWarpGroups = BM / 64, kThreads = 128 * kWarpGroups;
  static_assert(BM % 64 == 0 && (BN == 64 || BN == 128 || BN == 256), "wgmma tile shapes");
  // At tile t the stage of tile t - 1 may still be read by running wgmmas, so copies run
  // kStages - 2 tiles ahead.
  static_assert(kStages >= 3, "the pipeline needs three stages or more");
};

// What the kernel needs to know of its operand type: the stage loader, whether stages are
// always K-major, the K of one wgmma, and the instruction.
template <typename T>
struct WgmmaInput;

template <typename Half>
struct WgmmaHalfInput {
  static constexpr int kStepK = 16;
  static constexpr bool kStagesKMajor = false;  // stages keep the source layout; wgmma transposes
  template <int BX, int BK, int kThreads, bool kAlongK, LoadMode kMode>
  using Loader = StageLoader<Half, BX, BK, kThreads, kAlongK, kMode, Swizzle128Tile>;
  template <int N, bool kAKMajor, bool kBKMajor>
  __device__ __forceinline__ static void mma(float (&d)[N / 2], uint64_t a, uint64_t b) {
    wgmma::mma_m64k16<N, std::is_same_v<Half, __nv_bfloat16>, !kAKMajor, !kBKMajor>(d, a, b);
  }
};
template <>
struct WgmmaInput<__half> : WgmmaHalfInput<__half> {};
template <>
struct WgmmaInput<__nv_bfloat16> : WgmmaHalfInput<__nv_bfloat16> {};

// float32 operands run as TF32.
template <>
struct WgmmaInput<float> {
  static constexpr int kStepK = 8;
  static constexpr bool kStagesKMajor = true;
  template <int BX, int BK, int kThreads, bool kAlongK, LoadMode kMode>
  using Loader = Tf32StageLoader<BX, BK, kThreads, kAlongK, kMode == LoadMode::kVector>;
  template <int N, bool, bool>
  __device__ __forceinline__ static void mma(float (&d)[N / 2], uint64_t a, uint64_t b) {
    wgmma::mma_tf32_m64k8<N>(d, a, b);
  }
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
  using Input = WgmmaInput<T>;
  static_assert(Tile::BK * sizeof(T) == 128, "a K tile is one 128-byte row");
  if constexpr (!wgmma::kCompiled) {
    __trap();  // not an sm_90a pass: the dispatcher launches this kernel only on sm_90a images
  } else {
    constexpr int BM = Tile::BM, BN = Tile::BN, BK = Tile::BK, kStages = Tile::kStages;
    constexpr int kRowBytes = 128;  // one row of a swizzle atom: BK elements
    constexpr int kStep = Input::kStepK;
    constexpr bool kAKMajor = kARowMajor || Input::kStagesKMajor;
    constexpr bool kBKMajor = !kBRowMajor || Input::kStagesKMajor;
    using ALoader = typename Input::template Loader<BM, BK, Tile::kThreads, kARowMajor, kMode>;
    using BLoader = typename Input::template Loader<BN, BK, Tile::kThreads, !kBRowMajor, kMode>;
    static_assert(kStages >= 4 || !ALoader::kRegisterStaged,
                  "register-staged tiles are stored a tile after their loads: four stages or more");
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

    // Descriptors of k step s (kStep of K, 32 bytes) of this warpgroup's A rows and of B, in one
    // stage. K-major operands advance 32 bytes along their 128-byte rows; MN-major ones kStep
    // rows. This warpgroup's 64 rows of A start 64 lines (K-major) or one 64-row column block
    // (MN-major: 16-bit only, a 128-byte block row holding 64 elements) after the previous
    // group's: 64 * BK elements either way.
    static_assert(kAKMajor || sizeof(T) == 2, "MN-major stages hold 64 elements per 128-byte row");
    auto a_descriptor = [&](const T* stage, int s) {
      if constexpr (kAKMajor)
        return wgmma::descriptor(stage + group * 64 * BK + s * kStep, 16, 8 * kRowBytes);
      else
        return wgmma::descriptor(stage + group * 64 * BK + s * kStep * BK, BK * kRowBytes, 8 * kRowBytes);
    };
    auto b_descriptor = [&](const T* stage, int s) {
      if constexpr (kBKMajor) return wgmma::descriptor(stage + s * kStep, 16, 8 * kRowBytes);
      else return wgmma::descriptor(stage + s * kStep * BK, BK * kRowBytes, 8 * kRowBytes);
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
        // Register-staged tiles are stored one iteration after they are fetched, so that their
        // loads have a whole tile's wgmmas to land: the prologue keeps its last tile in registers.
#pragma unroll
        for (int s = 0; s < kStages - 2; ++s) {
          if (s < k_tiles) {
            a_loader.fetch(a_stages + s * kAStageElems, args.m - m0, k_len - s * BK);
            b_loader.fetch(b_stages + s * kBStageElems, args.n - n0, k_len - s * BK);
            if (s < kStages - 3) {
              a_loader.deposit(a_stages + s * kAStageElems);
              b_loader.deposit(b_stages + s * kBStageElems);
            }
          }
          ptx::cp_async_commit();
        }

        int stage = 0;  // the stage of tile t
        for (int64_t t = 0; t < k_tiles; ++t) {
          ptx::cp_async_wait<kStages - 3>();  // tile t has landed (this thread's copies) ...
          wgmma::fence_shared_for_async_proxy();
          __syncthreads();  // ... everyone's; and every warpgroup's wgmmas of tile t - 2 retired

          // Tile t's wgmmas first, so that the tensor cores go from tile t - 1's to them with no
          // gap; the loads of later tiles are issued while they run.
          const T* as = a_stages + stage * kAStageElems;
          const T* bs = b_stages + stage * kBStageElems;
          wgmma::fence_operands(acc);
          wgmma::fence();
#pragma unroll
          for (int s = 0; s < BK / kStep; ++s)
            Input::template mma<BN, kAKMajor, kBKMajor>(acc, a_descriptor(as, s), b_descriptor(bs, s));
          wgmma::commit_group();
          wgmma::fence_operands(acc);

          // Register-staged loaders: tile t + kStages - 3, fetched last iteration, goes to its
          // stage (free since tile t - 3 retired; published by the next iteration's barrier,
          // ahead of its use at t + kStages - 3 > t). A no-op for cp.async.
          auto stage_of = [&](int64_t tile_ahead) {
            const int s = stage + static_cast<int>(tile_ahead);
            return s >= kStages ? s - kStages : s;
          };
          if (t + kStages - 3 < k_tiles) {
            a_loader.deposit(a_stages + stage_of(kStages - 3) * kAStageElems);
            b_loader.deposit(b_stages + stage_of(kStages - 3) * kBStageElems);
          }
          // Tile t + kStages - 2 into the stage of tile t - 2, whose wgmmas have retired (or into
          // registers).
          const int64_t next = t + kStages - 2;
          if (next < k_tiles) {
            a_loader.fetch(a_stages + stage_of(kStages - 2) * kAStageElems, args.m - m0, k_len - next * BK);
            b_loader.fetch(b_stages + stage_of(kStages - 2) * kBStageElems, args.n - n0, k_len - next * BK);
          }
          ptx::cp_async_commit();
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
