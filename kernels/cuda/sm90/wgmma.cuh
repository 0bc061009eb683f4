// Thin wrappers over Hopper's warpgroup tensor-core instructions (wgmma, sm_90a only): shared-memory
// matrix descriptors, the asynchronous product, and the fences and waits around it. A warpgroup
// is four consecutive warps starting at a multiple of four; all 128 threads issue each call.
#pragma once

#include <cstdint>

#include "cuda/common/ptx.cuh"
#include "cuda/sm90/wgmma_operands.h"

namespace tiledmm::wgmma {

// Whether this compilation pass targets sm_90a (the only target with wgmma); elsewhere the
// wgmma kernels compile to a trap and the dispatcher never launches them.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
constexpr bool kCompiled = true;
#else
constexpr bool kCompiled = false;
#endif

// The descriptor of an operand in shared memory laid out with 128-byte swizzling
// (Swizzle128Tile): start address, then the leading and stride byte offsets, each in 16-byte
// units. K-major (k unit-stride): stride = 1024 bytes between 8-row atoms; the leading offset is
// unused. MN-major: leading = bytes between 64-element column blocks, stride = 1024 bytes between
// groups of 8 k rows.
__device__ __forceinline__ uint64_t descriptor(const void* smem, uint32_t leading_bytes,
                                               uint32_t stride_bytes) {
  const uint64_t address = ptx::smem_address(smem);
  return ((address & 0x3FFFF) >> 4) | (uint64_t((leading_bytes >> 4) & 0x3FFF) << 16) |
         (uint64_t((stride_bytes >> 4) & 0x3FFF) << 32) | (uint64_t(1) << 62);  // 1: 128-byte swizzle
}

// Orders this thread's earlier accesses to the accumulator registers before the next wgmma.
__device__ __forceinline__ void fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }

// Closes the group of wgmmas issued since the last commit.
__device__ __forceinline__ void commit_group() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

// Waits until at most kPending committed groups are still running.
template <int kPending>
__device__ __forceinline__ void wait_group() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

// Keeps the compiler from moving accesses of the accumulators across a wgmma, which writes them
// asynchronously.
template <int R>
__device__ __forceinline__ void fence_operands(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// The same for registers a wgmma reads (A from registers): they stay live, and hold their values,
// until this point (after the wait that retires the wgmma), so that nothing else is put in them.
template <int R>
__device__ __forceinline__ void fence_operands(uint32_t (&a)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+r"(a[i])::"memory");
}

#define TILEDMM_WGMMA_ASM(N, TYPE)                                                              \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " TILEDMM_WGMMA_N##N##_SCALE_D ", 0;\n"        \
               "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TYPE "." TYPE " "              \
               TILEDMM_WGMMA_N##N##_ACC ", " TILEDMM_WGMMA_N##N##_REST "\n}\n"                   \
               : TILEDMM_WGMMA_N##N##_ACC_OPERANDS                                               \
               : "l"(a), "l"(b), "n"(1), "n"(kTransA), "n"(kTransB))

#define TILEDMM_WGMMA_TF32_ASM(N)                                                              \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " TILEDMM_WGMMA_N##N##_SCALE_D ", 0;\n"        \
               "wgmma.mma_async.sync.aligned.m64n" #N "k8.f32.tf32.tf32 "                        \
               TILEDMM_WGMMA_N##N##_ACC ", " TILEDMM_WGMMA_N##N##_REST_NO_TRANSPOSE "\n}\n"      \
               : TILEDMM_WGMMA_N##N##_ACC_OPERANDS                                               \
               : "l"(a), "l"(b), "n"(1))

#define TILEDMM_WGMMA_RS_ASM(N, TYPE)                                                          \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " TILEDMM_WGMMA_N##N##_SCALE_D_RS ", 0;\n"     \
               "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TYPE "." TYPE " "              \
               TILEDMM_WGMMA_N##N##_ACC ", " TILEDMM_WGMMA_N##N##_REST_RS_K_MAJOR_B "\n}\n"    \
               : TILEDMM_WGMMA_N##N##_ACC_OPERANDS                                               \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate))

#define TILEDMM_WGMMA_TF32_RS_ASM(N)                                                           \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " TILEDMM_WGMMA_N##N##_SCALE_D_RS ", 0;\n"     \
               "wgmma.mma_async.sync.aligned.m64n" #N "k8.f32.tf32.tf32 "                        \
               TILEDMM_WGMMA_N##N##_ACC ", " TILEDMM_WGMMA_N##N##_REST_RS "\n}\n"               \
               : TILEDMM_WGMMA_N##N##_ACC_OPERANDS                                               \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate))

// d (64 x N, float32, accumulated) += A (64 x 16) * B (16 x N), 16-bit inputs from shared memory.
// kTransA: A is M-major (column-major) in shared memory rather than K-major; kTransB: B is
// N-major (row-major) rather than K-major. d: the m64nN accumulator fragment, N / 2 registers.
template <int N, bool kBf16, int kTransA, int kTransB>
__device__ __forceinline__ void mma_m64k16(float (&d)[N / 2], uint64_t a, uint64_t b) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  static_assert(N == 32 || N == 64 || N == 96 || N == 128 || N == 160 || N == 192 || N == 256,
                "wgmma widths instantiated here");
  if constexpr (N == 32) {
    if constexpr (kBf16) TILEDMM_WGMMA_ASM(32, "bf16");
    else TILEDMM_WGMMA_ASM(32, "f16");
  } else if constexpr (N == 64) {
    if constexpr (kBf16) TILEDMM_WGMMA_ASM(64, "bf16");
    else TILEDMM_WGMMA_ASM(64, "f16");
  } else if constexpr (N == 96) {
    if constexpr (kBf16) TILEDMM_WGMMA_ASM(96, "bf16");
    else TILEDMM_WGMMA_ASM(96, "f16");
  } else if constexpr (N == 128) {
    if constexpr (kBf16) TILEDMM_WGMMA_ASM(128, "bf16");
    else TILEDMM_WGMMA_ASM(128, "f16");
  } else if constexpr (N == 160) {
    if constexpr (kBf16) TILEDMM_WGMMA_ASM(160, "bf16");
    else TILEDMM_WGMMA_ASM(160, "f16");
  } else if constexpr (N == 192) {
    if constexpr (kBf16) TILEDMM_WGMMA_ASM(192, "bf16");
    else TILEDMM_WGMMA_ASM(192, "f16");
  } else {
    if constexpr (kBf16) TILEDMM_WGMMA_ASM(256, "bf16");
    else TILEDMM_WGMMA_ASM(256, "f16");
  }
#endif
}

// d (64 x N, float32, accumulated) += A (64 x 8) * B (8 x N), TF32 inputs (float32 storage, the
// low 13 mantissa bits ignored) from K-major shared memory: TF32 has no transposed forms.
template <int N>
__device__ __forceinline__ void mma_tf32_m64k8(float (&d)[N / 2], uint64_t a, uint64_t b) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  static_assert(N == 32 || N == 64 || N == 96 || N == 128 || N == 160 || N == 192 || N == 256,
                "wgmma widths instantiated here");
  if constexpr (N == 32) TILEDMM_WGMMA_TF32_ASM(32);
  else if constexpr (N == 64) TILEDMM_WGMMA_TF32_ASM(64);
  else if constexpr (N == 96) TILEDMM_WGMMA_TF32_ASM(96);
  else if constexpr (N == 128) TILEDMM_WGMMA_TF32_ASM(128);
  else if constexpr (N == 160) TILEDMM_WGMMA_TF32_ASM(160);
  else if constexpr (N == 192) TILEDMM_WGMMA_TF32_ASM(192);
  else TILEDMM_WGMMA_TF32_ASM(256);
#endif
}

// The same with A from registers: warp w of the group holds rows 16 w ... 16 w + 15 of A as the
// mma.sync m16n8k8 TF32 A fragment (lane (g, t4): rows g, g + 8 at columns t4, t4 + 4). The
// registers must not change until the wgmma retires (wait_group). accumulate = 0: d = A * B.
template <int N>
__device__ __forceinline__ void mma_tf32_m64k8_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t b,
                                                  int accumulate = 1) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  static_assert(N == 32 || N == 64 || N == 96 || N == 128 || N == 160 || N == 192 || N == 256,
                "wgmma widths instantiated here");
  if constexpr (N == 32) TILEDMM_WGMMA_TF32_RS_ASM(32);
  else if constexpr (N == 64) TILEDMM_WGMMA_TF32_RS_ASM(64);
  else if constexpr (N == 96) TILEDMM_WGMMA_TF32_RS_ASM(96);
  else if constexpr (N == 128) TILEDMM_WGMMA_TF32_RS_ASM(128);
  else if constexpr (N == 160) TILEDMM_WGMMA_TF32_RS_ASM(160);
  else if constexpr (N == 192) TILEDMM_WGMMA_TF32_RS_ASM(192);
  else TILEDMM_WGMMA_TF32_RS_ASM(256);
#endif
}

// d (64 x N, float32) += A (64 x 16) * B (16 x N), 16-bit inputs, A from registers: warp w of the
// group holds rows 16 w ... 16 w + 15 as the mma.sync m16n8k16 A fragment (lane (g, t4): register
// 0 rows g, columns 2 t4 and 2 t4 + 1, the lower half the first; 1 row g + 8; 2 and 3 the same
// at columns + 8); B K-major in shared memory. The registers must not change until the wgmma
// retires (wait_group). accumulate = 0: d = A * B.
template <int N, bool kBf16>
__device__ __forceinline__ void mma_m64k16_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t b,
                                              int accumulate = 1) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  static_assert(N == 64 || N == 128 || N == 256, "wgmma widths instantiated here");
  if constexpr (N == 64) {
    if constexpr (kBf16) TILEDMM_WGMMA_RS_ASM(64, "bf16");
    else TILEDMM_WGMMA_RS_ASM(64, "f16");
  } else if constexpr (N == 128) {
    if constexpr (kBf16) TILEDMM_WGMMA_RS_ASM(128, "bf16");
    else TILEDMM_WGMMA_RS_ASM(128, "f16");
  } else {
    if constexpr (kBf16) TILEDMM_WGMMA_RS_ASM(256, "bf16");
    else TILEDMM_WGMMA_RS_ASM(256, "f16");
  }
#endif
}

#undef TILEDMM_WGMMA_ASM
#undef TILEDMM_WGMMA_RS_ASM
#undef TILEDMM_WGMMA_TF32_ASM
#undef TILEDMM_WGMMA_TF32_RS_ASM

}  // namespace tiledmm::wgmma
