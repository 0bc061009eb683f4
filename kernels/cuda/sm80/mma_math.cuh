// How each precision path turns operand fragments into tensor-core products (mma.sync). One
// struct per path: the instruction shape, the fragment registers, how raw fragments read from
// shared memory are prepared (TF32 rounding, the 3xTF32 split), and the product itself.
#pragma once

#include <cstdint>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/common/ptx.cuh"

namespace tiledmm {

// A fragment's registers as read from shared memory: 32-bit words (TF32 and the 16-bit types,
// two elements per word) or doubles.
template <typename Reg, int kRegs>
struct Fragment {
  Reg r[kRegs];
};

// What every path declares: storage, accumulator and fragment-register types, the instruction
// shape (M x 8 x K), registers per A and B fragment, and how many K steps are unrolled together
// (further, ptxas hoists every step's fragment loads at once and runs out of registers). By
// default fragments feed the instruction as read, into the result's accumulators.
template <typename T_, typename Acc_, typename Reg_, int M_, int K_, int kARegs_, int kBRegs_,
          int kStepUnroll_>
struct MmaPath {
  using T = T_;
  using Acc = Acc_;
  using Reg = Reg_;
  static constexpr int M = M_, K = K_, kARegs = kARegs_, kBRegs = kBRegs_, kStepUnroll = kStepUnroll_;
  static constexpr bool kPromote = false, kRecomputeNaN = false;
  template <int R>
  using Operand = Fragment<Reg, R>;

  template <int R>
  __device__ __forceinline__ static Operand<R> prepare(const Fragment<Reg, R>& raw) {
    return raw;
  }
};

// TF32: float32 inputs rounded to TF32 (10-bit mantissa), products summed in float32 by the
// tensor cores. m16n8k8.
struct Tf32Math : MmaPath<float, float, uint32_t, 16, 8, 4, 2, 2> {
  static constexpr const char* kName = "TF32 tensor cores (mma.sync m16n8k8)";

  template <int R>
  __device__ __forceinline__ static Operand<R> prepare(const Fragment<Reg, R>& raw) {
    Operand<R> out;
#pragma unroll
    for (int i = 0; i < R; ++i) out.r[i] = ptx::to_tf32(__uint_as_float(raw.r[i]));
    return out;
  }
  __device__ __forceinline__ static void mma(float (&c)[4], const Operand<kARegs>& a,
                                             const Operand<kBRegs>& b) {
    ptx::mma_tf32_16x8x8(c, a.r, b.r);
  }
};

// 3xTF32: x = big + small with big = tf32(x) and small = tf32(x - big), so that
// a * b ~ a_big * b_big + a_big * b_small + a_small * b_big (the dropped a_small * b_small is
// below float32's rounding). The small products go first, while the partial sum is small.
// The tensor cores' float32 additions truncate rather than round, so a chain of products
// accumulated in them drifts (by up to an ulp per instruction, always toward zero: on
// all-positive data the error grows with K). So each K step's three products start from zero
// and their sum is added to the result on the CUDA cores, rounded (kPromote). Non-finite inputs
// break the split (inf - inf), so NaN results are recomputed exactly (kRecomputeNaN).
struct Split3xTf32Math : MmaPath<float, float, uint32_t, 16, 8, 4, 2, 1> {
  static constexpr bool kPromote = true, kRecomputeNaN = true;
  static constexpr const char* kName =
      "3xTF32 tensor cores (mma.sync m16n8k8, three products per step, float32 partial sums)";
  template <int R>
  struct Operand {
    uint32_t big[R], small[R];
  };

  template <int R>
  __device__ __forceinline__ static Operand<R> prepare(const Fragment<Reg, R>& raw) {
    Operand<R> out;
#pragma unroll
    for (int i = 0; i < R; ++i) {
      const float x = __uint_as_float(raw.r[i]);
      out.big[i] = ptx::to_tf32(x);
      out.small[i] = ptx::to_tf32(x - __uint_as_float(out.big[i]));
    }
    return out;
  }
  __device__ __forceinline__ static void mma(float (&c)[4], const Operand<kARegs>& a,
                                             const Operand<kBRegs>& b) {
    ptx::mma_tf32_16x8x8(c, a.small, b.big);
    ptx::mma_tf32_16x8x8(c, a.big, b.small);
    ptx::mma_tf32_16x8x8(c, a.big, b.big);
  }
};

// float16 / bfloat16 inputs, float32 products and sums. m16n8k16.
template <typename Half>
struct HalfMath : MmaPath<Half, float, uint32_t, 16, 16, 4, 2, 2> {
  static constexpr bool kBf16 = std::is_same_v<Half, __nv_bfloat16>;
  static constexpr const char* kName =
      kBf16 ? "bfloat16 tensor cores (mma.sync m16n8k16, float32 accumulation)"
            : "float16 tensor cores (mma.sync m16n8k16, float32 accumulation)";
  __device__ __forceinline__ static void mma(float (&c)[4], const Fragment<uint32_t, 4>& a,
                                             const Fragment<uint32_t, 2>& b) {
    ptx::mma_16bit_16x8x16<kBf16>(c, a.r, b.r);
  }
};

// float64 on the FP64 tensor cores (DMMA): IEEE double fused multiply-adds. m16n8k8, the shape
// Hopper runs at twice the rate of m8n8k4 (scripts/mma_peak.cu); four m8n8k4 on Ampere.
struct DoubleMath : MmaPath<double, double, double, 16, 8, 4, 2, 2> {
  static constexpr const char* kName = "float64 tensor cores (DMMA, mma.sync m16n8k8)";
  __device__ __forceinline__ static void mma(double (&c)[4], const Fragment<double, 4>& a,
                                             const Fragment<double, 2>& b) {
    ptx::mma_f64_16x8x8(c, a.r, b.r);
  }
};

}  // namespace tiledmm
