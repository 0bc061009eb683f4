// The Hopper tensor-core matrix-product kernel (wgmma, sm_90a), for fp16/bf16 operands and for
// float32 operands rounded to TF32.
//
// A block of BM / 64 warpgroups computes a BM x BN tile of C[z]: warpgroup w owns rows
// [64 w, 64 w + 64) across all BN columns, one m64nBNk16 (TF32: k8) wgmma per step of K. K
// advances in tiles of BK (one 128-byte row: 64 16-bit elements, 32 floats) through a ring of
// kStages shared-memory stages, filled by cp.async (16-byte, or element-wise for float32
// without 16-byte alignment) or by loads staged through registers and stored after the wgmmas
// are issued (16-bit operands of any alignment; MN-major 3xTF32 B operands). At tile t the block
// waits for tile t's copies, publishes them with a barrier, issues tile t's wgmmas, starts the
// copies of tile t + kAhead into the stage of the oldest tile whose wgmmas have retired
// (register-staged loads are stored there one iteration later) and lets the wgmmas run while it
// waits for the previous tile's (16-bit) or for its own (TF32; see kInFlight).
//   16-bit operands: stages keep each operand's global layout in wgmma's 128-byte-swizzled form
// (Swizzle128Tile); wgmma reads K-major or MN-major tiles itself, both from shared memory.
//   TF32: wgmma reads TF32 from shared memory K-major only, and does not round it. So A comes
// from registers: its raw float32 stage (mma.sync's layout, any orientation) is read as
// fragments and rounded there; B's stage is K-major, rounded in place (tf32_stage_loader.cuh).
// The dispatcher runs row-major A x row-major B (whose B is MN-major) as C^T = B^T A^T, which
// makes the shared-memory operand K-major; the result is then written column-major
// (kTransposedOut).
#pragma once

#include <cstdint>
#include <type_traits>

#include "gemm_common.cuh"
#include "gemm_epilogue.cuh"
#include "gemm_mma.cuh"
#include "mma_math.cuh"
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
  // Copies run kStages - 2 tiles ahead, or kStages - 1 where each tile waits for its own wgmmas
  // (kAhead, kInFlight in the kernel).
  static_assert(kStages >= 3, "the pipeline needs three stages or more");
};

// What the kernel needs to know of its inputs (one struct per path): the storage type, the
// stage loaders, whether A comes from registers, whether B's stages are always K-major and how
// many tiles a B stage holds, the K of one wgmma, and the products of one K step.
//   WgmmaHalfInput: fp16/bf16, both operands from shared memory.
//   WgmmaTf32Input<Math>: float32 with A from registers as Math's fragments (mma_math.cuh):
// Tf32Math (one product) or Split3xTf32Math (3xTF32: big and small parts of both operands, three
// products, the tensor-core sums promoted into float32 every kPromoteTiles K tiles).
template <typename Half>
struct WgmmaHalfInput {
  using T = Half;
  static constexpr int kStepK = 16, kPromoteTiles = 0;
  static constexpr bool kARegisters = false, kRecomputeNaN = false;
  static constexpr bool kBStagesKMajor = false;  // stages keep the source layout; wgmma transposes
  template <int BX, int BK, int kThreads, bool kAlongK, LoadMode kMode>
  using ALoader = StageLoader<Half, BX, BK, kThreads, kAlongK, kMode, Swizzle128Tile>;
  template <int BX, int BK, int kThreads, bool kAlongK, LoadMode kMode>
  using BLoader = ALoader<BX, BK, kThreads, kAlongK, kMode>;
  template <int kSteps>
  struct AOperands {};  // descriptors, computed per wgmma
  template <int N, bool kAKMajor, bool kBKMajor>
  __device__ __forceinline__ static void mma(float (&d)[N / 2], uint64_t a, uint64_t b) {
    wgmma::mma_m64k16<N, std::is_same_v<Half, __nv_bfloat16>, !kAKMajor, !kBKMajor>(d, a, b);
  }
};

template <class Math_>
struct WgmmaTf32Input {
  using T = float;
  using Math = Math_;
  static constexpr bool kSplit = Math::kPromote;  // 3xTF32
  static constexpr int kStepK = 8;
  // The tensor cores' float32 additions truncate (Split3xTf32Math), so 3xTF32's sums are moved
  // into float32 after every K tile, each tile's products starting from zero. Within a tile the
  // two small products of every step go first and the big ones last: only the additions onto a
  // sum of full size lose bits that matter, four per tile (a product order of small, small, big
  // per step had eleven: 3.2x torch's error at K = 64).
  static constexpr int kPromoteTiles = kSplit ? 1 : 0;
  static constexpr bool kARegisters = true, kRecomputeNaN = Math::kRecomputeNaN;
  static constexpr bool kBStagesKMajor = true;
  template <int BX, int BK, int kThreads, bool kAlongK, LoadMode kMode>
  using ALoader = StageLoader<float, BX, BK, kThreads, kAlongK, kMode>;  // raw, mma.sync's layout
  // An MN-major B is transposed through a raw cp.async tile (TF32) or, where the stage has no
  // room for one next to the big and small tiles (3xTF32), through registers.
  template <int BX, int BK, int kThreads, bool kAlongK, LoadMode kMode>
  using BLoader = std::conditional_t<
      kAlongK, Tf32CopyLoader<BX, BK, kThreads, kMode, kSplit>,
      std::conditional_t<kSplit, Tf32TransposingLoader<BX, BK, kThreads, kMode == LoadMode::kVector, kSplit>,
                         Tf32TransposeCopyLoader<BX, BK, kThreads, kMode>>>;
  using AOperand = typename Math::template Operand<Math::kARegs>;
  template <int kSteps>
  struct AOperands {
    AOperand step[kSteps];
  };
  // One K tile's products: b(s), b_small(s): descriptors of step s's big and small B tiles.
  // fresh: the first product overwrites d rather than adding to it.
  template <int N, int kSteps, class BDescriptor, class BSmallDescriptor>
  __device__ __forceinline__ static void mma_tile(float (&d)[N / 2], const AOperands<kSteps>& a,
                                                  const BDescriptor& b, const BSmallDescriptor& b_small,
                                                  bool fresh) {
    int accumulate = fresh ? 0 : 1;
    if constexpr (kSplit) {
#pragma unroll
      for (int s = 0; s < kSteps; ++s) {
        wgmma::mma_tf32_m64k8_rs<N>(d, a.step[s].small, b(s), accumulate);
        wgmma::mma_tf32_m64k8_rs<N>(d, a.step[s].big, b_small(s));
        accumulate = 1;
      }
#pragma unroll
      for (int s = 0; s < kSteps; ++s) wgmma::mma_tf32_m64k8_rs<N>(d, a.step[s].big, b(s));
    } else {
#pragma unroll
      for (int s = 0; s < kSteps; ++s) {
        wgmma::mma_tf32_m64k8_rs<N>(d, a.step[s].r, b(s), accumulate);
        accumulate = 1;
      }
    }
  }
};

// Shared memory of one block: kStages stages of A, then of B (as many tiles as B's loader needs
// for B's layout), and 1024 bytes to align them (the swizzle is a function of the address).
template <class Input, class Tile, bool kBRowMajor>
constexpr int wgmma_smem_bytes() {
  using BLoader = typename Input::template BLoader<Tile::BN, Tile::BK, Tile::kThreads, !kBRowMajor,
                                                  LoadMode::kVector>;
  return Tile::kStages * (Tile::BM + Tile::BN * BLoader::kStageTiles) * Tile::BK *
             static_cast<int>(sizeof(typename Input::T)) + 1024;
}

// kTransposedOut: the kernel's m x n result is C^T (see above), written column-major.
template <class Input, class Tile, LoadMode kMode, bool kARowMajor, bool kBRowMajor, typename Out,
          bool kTransposedOut = false>
__global__ void __launch_bounds__(Tile::kThreads, Tile::kMinBlocks)
    gemm_wgmma_kernel(const GemmArgs<typename Input::T, Out> args) {
  using T = typename Input::T;
  static_assert(Tile::BK * sizeof(T) == 128, "a K tile is one 128-byte row");
  if constexpr (!wgmma::kCompiled) {
    __trap();  // not an sm_90a pass: the dispatcher launches this kernel only on sm_90a images
  } else {
    constexpr int BM = Tile::BM, BN = Tile::BN, BK = Tile::BK, kStages = Tile::kStages;
    constexpr int kRowBytes = 128;  // one row of a swizzle atom: BK elements
    constexpr int kStep = Input::kStepK;
    constexpr int kSteps = BK / kStep;
    constexpr bool kAKMajor = kARowMajor;
    constexpr bool kBKMajor = !kBRowMajor || Input::kBStagesKMajor;
    using ALoader = typename Input::template ALoader<BM, BK, Tile::kThreads, kARowMajor, kMode>;
    using BLoader = typename Input::template BLoader<BN, BK, Tile::kThreads, !kBRowMajor, kMode>;
    using AOperands = typename Input::template AOperands<kSteps>;
    constexpr bool kRoundsInPlace = BLoader::kRoundsInPlace;  // A's stage is read raw
    // Groups of wgmmas left running at the end of a step: one (the next step's loads overlap
    // them), except with register A: were the next tile's A registers written while wgmmas are in
    // flight, ptxas would serialize every wgmma (its C7513 advisory). Copies run kAhead tiles
    // ahead, into the stage of the oldest tile whose wgmmas have retired.
    constexpr int kInFlight = Input::kARegisters ? 0 : 1;
    constexpr int kAhead = kStages - 1 - kInFlight;
    static_assert(kAhead >= 2 || !(ALoader::kRegisterStaged || BLoader::kRegisterStaged),
                  "register-staged tiles are stored a tile after their loads: two tiles ahead or more");
    // A B stage holds the loader's tiles (3xTF32: big, then small; raw copies last).
    constexpr int kAStageElems = ALoader::Tile::kElems, kBTileElems = BLoader::Tile::kElems;
    constexpr int kBStageElems = kBTileElems * BLoader::kStageTiles;
    constexpr bool kStagedEpilogue = staged_output_fits<BM, BN, Out, kTransposedOut>(
        wgmma_smem_bytes<Input, Tile, kBRowMajor>() - 1024);
    constexpr bool kPromote = Input::kPromoteTiles > 0;

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
    static_assert(kAKMajor || sizeof(T) == 2 || Input::kARegisters,
                  "MN-major stages hold 64 elements per 128-byte row");
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
    // Register A: this warp's 16 rows of the stage, every k step, as Math's (rounded) fragments.
    auto load_a_operands = [&](AOperands& ops, const T* stage) {
      if constexpr (Input::kARegisters) {
        using Math = typename Input::Math;
#pragma unroll
        for (int s = 0; s < kSteps; ++s)
          ops.step[s] = Math::prepare(load_a<Math, typename ALoader::Tile, kARowMajor>(
              stage, group * 64 + (warp % 4) * 16, s * kStep, tid % 32));
      }
    };
    auto issue_wgmmas = [&](float (&acc)[BN / 2], const AOperands& ops, const T* as, const T* bs,
                            bool fresh) {
      if constexpr (Input::kARegisters) {
        Input::template mma_tile<BN>(
            acc, ops, [&](int s) { return b_descriptor(bs, s); },
            [&](int s) { return b_descriptor(bs + kBTileElems, s); }, fresh);
      } else {
#pragma unroll
        for (int s = 0; s < kSteps; ++s)
          Input::template mma<BN, kAKMajor, kBKMajor>(acc, a_descriptor(as, s), b_descriptor(bs, s));
      }
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
        float acc[BN / 2], sum[kPromote ? BN / 2 : 1];  // sum: the promoted float32 sums
#pragma unroll
        for (int r = 0; r < BN / 2; ++r) acc[r] = 0.0f;
#pragma unroll
        for (int r = 0; r < (kPromote ? BN / 2 : 1); ++r) sum[r] = 0.0f;

        __syncthreads();  // the previous work item's threads are done with the stages
        a_loader.start(a, args.lda, m0, k_begin, tid);
        b_loader.start(b, args.ldb, n0, k_begin, tid);
        // Register-staged tiles are stored one iteration after they are fetched, so that their
        // loads have a whole tile's wgmmas to land: the prologue keeps its last tile in registers.
#pragma unroll
        for (int s = 0; s < kAhead; ++s) {
          if (s < k_tiles) {
            a_loader.fetch(a_stages + s * kAStageElems, args.m - m0, k_len - s * BK);
            b_loader.fetch(b_stages + s * kBStageElems, args.n - n0, k_len - s * BK);
            if (s < kAhead - 1) {
              a_loader.deposit(a_stages + s * kAStageElems);
              b_loader.deposit(b_stages + s * kBStageElems);
            }
          }
          ptx::cp_async_commit();
        }

        // Tiles rounded in place (TF32 B) are rounded by each thread once its copies of them have
        // landed, a tile ahead, while the current tile's wgmmas run: tile 0 here, tile t + 1 in
        // step t. Published by the barrier of the step that uses them.
        auto finish = [&](int s) {
          if constexpr (kRoundsInPlace) {
            ptx::cp_async_wait<kAhead - 1>();
            a_loader.finish(a_stages + s * kAStageElems);
            b_loader.finish(b_stages + s * kBStageElems);
          }
        };
        if (k_tiles > 0) finish(0);

        int stage = 0;  // the stage of tile t
        AOperands ops;
        for (int64_t t = 0; t < k_tiles; ++t) {
          ptx::cp_async_wait<kAhead - 1>();  // tile t has landed (this thread's copies) ...
          const T* as = a_stages + stage * kAStageElems;
          const T* bs = b_stages + stage * kBStageElems;
          wgmma::fence_shared_for_async_proxy();
          __syncthreads();  // ... everyone's; and every warpgroup's wgmmas of tile t - 1 - kInFlight retired

          // Tile t's wgmmas first, so that the tensor cores go from tile t - 1's to them with as
          // small a gap as can be; the loads of later tiles are issued while they run.
          load_a_operands(ops, as);
          wgmma::fence_operands(acc);
          wgmma::fence();
          // Promoted sums start each period of kPromoteTiles from zero.
          issue_wgmmas(acc, ops, as, bs, kPromote && t % (kPromote ? Input::kPromoteTiles : 1) == 0);
          wgmma::commit_group();
          wgmma::fence_operands(acc);

          // Register-staged loaders: tile t + kAhead - 1, fetched last iteration, goes to its
          // stage (that of tile t - 2 - kInFlight, retired; published by the next iteration's
          // barrier, ahead of its use at t + kAhead - 1 > t). A no-op for cp.async.
          auto stage_of = [&](int64_t tile_ahead) {
            const int s = stage + static_cast<int>(tile_ahead);
            return s >= kStages ? s - kStages : s;
          };
          if (t + kAhead - 1 < k_tiles) {
            a_loader.deposit(a_stages + stage_of(kAhead - 1) * kAStageElems);
            b_loader.deposit(b_stages + stage_of(kAhead - 1) * kBStageElems);
          }
          // Tile t + kAhead into the stage of tile t - 1 - kInFlight, whose wgmmas have retired
          // (or into registers).
          const int64_t next = t + kAhead;
          if (next < k_tiles) {
            a_loader.fetch(a_stages + stage_of(kAhead) * kAStageElems, args.m - m0, k_len - next * BK);
            b_loader.fetch(b_stages + stage_of(kAhead) * kBStageElems, args.n - n0, k_len - next * BK);
          }
          ptx::cp_async_commit();
          if (t + 1 < k_tiles) finish(stage_of(1));
          wgmma::wait_group<kInFlight>();  // tile t - 1's wgmmas have retired (register A: tile t's)
          wgmma::fence_operands(acc);
          if constexpr (kPromote) {
            static_assert(kInFlight == 0, "promotion reads the accumulators of retired wgmmas");
            if ((t + 1) % Input::kPromoteTiles == 0 || t + 1 == k_tiles) {
#pragma unroll
              for (int r = 0; r < BN / 2; ++r) sum[r] += acc[r];
            }
          }
          stage = stage + 1 == kStages ? 0 : stage + 1;
        }
        wgmma::wait_group<0>();
        wgmma::fence_operands(acc);

        // The m64nN result is the m16n8 layout repeated: warp w of the group holds rows
        // 16 w ... 16 w + 15 of its 64, and tile j of 8 columns in registers 4 j ... 4 j + 3.
        const float* result = kPromote ? sum : acc;
        auto value = [&](int, int j, int half, int e) { return result[4 * j + 2 * half + e]; };
        Out* const c = args.c + z * args.m * args.n;
        store_output_tile<BM, BN, Tile::kThreads, 1, BN / 8, kStagedEpilogue, kTransposedOut>(
            value, c, args.m, args.n, m0, n0, group * 64 + (warp % 4) * 16, 0, smem);

        // Split inputs turn non-finite values into NaN (inf - inf): a block with NaN outputs
        // recomputes them with exact float32 arithmetic, reading its tile back (a cold path:
        // inline in the store, it cost every 3xTF32 kernel hundreds of bytes of spills).
        if constexpr (Input::kRecomputeNaN) {
          bool has_nan = false;
#pragma unroll
          for (int r = 0; r < BN / 2; ++r) has_nan |= isnan(result[r]);
          if (__syncthreads_or(has_nan)) {  // also orders the tile's stores before the reads
            for (int i = tid; i < BM * BN; i += Tile::kThreads) {
              // Consecutive threads walk the output's unit-stride dimension.
              const int64_t row = m0 + (kTransposedOut ? i % BM : i / BN);
              const int64_t col = n0 + (kTransposedOut ? i / BM : i % BN);
              if (row >= args.m || col >= args.n) continue;
              Out* p = kTransposedOut ? c + col * args.m + row : c + row * args.n + col;
              if (isnan(*p))
                *p = exact_dot<kARowMajor, kBRowMajor>(a, args.lda, b, args.ldb, row, col, k_begin,
                                                       k_begin + k_len);
            }
          }
        }
      }
    }
  }
}

}  // namespace tiledmm
