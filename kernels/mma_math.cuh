// How each precision path turns operand fragments into tensor-core products (mma.sync). One
// struct per path: the instruction shape, the fragment registers, how raw fragments read from
// shared memory are prepared (TF32 rounding, the 3xTF32 split), and the product itself.
#pragma once

#include <cstdint>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "ptx.cuh"

namespace tiledmm {

// A fragment's registers as read from shared memory: 32-bit words (TF32 and the 16-bit types,
// two elements per word) or doubles.
template <typename Reg, int kRegs>
struct Fragment {
  Reg r[kRegs];
};

// TF32: float32 inputs rounded to TF32 (10-bit mantissa), products summed in float32 by the
// tensor cores. m16n8k8.
struct Tf32Math {
  using T = float;
  using Acc = float;
  using Reg = uint32_t;
  static constexpr int M = 16, K = 8, kARegs = 4, kBRegs = 2, kStepUnroll = 2;
  static constexpr bool kPromote = false, kRecomputeNaN = false;
  static constexpr const char* kName = "TF32 tensor cores (mma.sync m16n8k8)";
  template <int R>
  using Operand = Fragment<uint32_t, R>;

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
struct Split3xTf32Math {
  using T = float;
  using Acc = float;
  using Reg = uint32_t;
  static constexpr int M = 16, K = 8, kARegs = 4, kBRegs = 2, kStepUnroll = 1;
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
template <typename T_>
struct HalfMath {
  using T = T_;
  using Acc = float;
  using Reg = uint32_t;
  static constexpr bool kBf16 = std::is_same_v<T_, __nv_bfloat16>;
  static constexpr int M = 16, K = 16, kARegs = 4, kBRegs = 2, kStepUnroll = 2;
  static constexpr bool kPromote = false, kRecomputeNaN = false;
  static constexpr const char* kName =
      kBf16 ? "bfloat16 tensor cores (mma.sync m16n8k16, float32 accumulation)"
            : "float16 tensor cores (mma.sync m16n8k16, float32 accumulation)";
  template <int R>
  using Operand = Fragment<uint32_t, R>;

  template <int R>
  __device__ __forceinline__ static Operand<R> prepare(const Fragment<Reg, R>& raw) {
    return raw;
  }
  __device__ __forceinline__ static void mma(float (&c)[4], const Operand<kARegs>& a,
                                             const Operand<kBRegs>& b) {
    ptx::mma_16bit_16x8x16<kBf16>(c, a.r, b.r);
  }
};

// float64 on the FP64 tensor cores (DMMA): IEEE double fused multiply-adds. m16n8k8, the shape
// Hopper runs at twice the rate of m8n8k4 (scripts/mma_peak.cu); four m8n8k4 on Ampere.
struct DoubleMath {
  using T = double;
  using Acc = double;
  using Reg = double;
  static constexpr int M = 16, K = 8, kARegs = 4, kBRegs = 2, kStepUnroll = 2;
  static constexpr bool kPromote = false, kRecomputeNaN = false;
  static constexpr const char* kName = "float64 tensor cores (DMMA, mma.sync m16n8k8)";
  template <int R>
  using Operand = Fragment<double, R>;

  template <int R>
  __device__ __forceinline__ static Operand<R> prepare(const Fragment<Reg, R>& raw) {
    return raw;
  }
  __device__ __forceinline__ static void mma(double (&c)[4], const Operand<kARegs>& a,
                                             const Operand<kBRegs>& b) {
    ptx::mma_f64_16x8x8(c, a.r, b.r);
  }
};

}  // namespace tiledmm
