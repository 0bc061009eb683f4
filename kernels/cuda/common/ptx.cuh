// Thin wrappers over the PTX instructions of the tensor-core kernels (sm_80 and newer): cp.async
// copies into shared memory, ldmatrix fragment loads, mma.sync products, TF32 rounding; and
// sm_90's bulk copies out of and into shared memory.
#pragma once

#include <cstdint>

namespace tiledmm::ptx {

__device__ __forceinline__ uint32_t smem_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes into shared memory of which only the first src_bytes (0 to 16) are read from global
// memory; the rest are zeros. Bypasses L1 (.cg): each copy is used once per block.
__device__ __forceinline__ void cp_async_16_partial(void* smem, const void* global, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_address(smem)), "l"(global),
               "r"(src_bytes));
}

// Copies kBytes (4, 8 or 16) from global to shared memory without passing through registers;
// when !valid, writes zeros and reads nothing (src-size 0), so out-of-range tiles need no branch
// around the copy.
template <int kBytes>
__device__ __forceinline__ void cp_async(void* smem, const void* global, bool valid) {
  static_assert(kBytes == 4 || kBytes == 8 || kBytes == 16, "cp.async copies 4, 8 or 16 bytes");
  const int src_bytes = valid ? kBytes : 0;
  if constexpr (kBytes == 16) {
    cp_async_16_partial(smem, global, src_bytes);
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(smem_address(smem)),
                 "l"(global), "n"(kBytes), "r"(src_bytes));
  }
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

// Waits until at most kPending of this thread's committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// Makes this thread's shared-memory writes (cp.async, stores) visible to the async proxy (sm_90:
// the tensor cores' wgmma and the bulk copies), which reads shared memory apart from ordinary
// loads. Before the barrier that hands the data over.
__device__ __forceinline__ void fence_shared_for_async_proxy() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// Whether this compilation pass has sm_90's bulk copies (the kernels using them compile to a
// trap elsewhere, and the dispatcher launches them only on sm_90).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
constexpr bool kBulkCopies = true;
#else
constexpr bool kBulkCopies = false;
#endif
// Bulk asynchronous copy (sm_90, the TMA unit) of a box of a 4-d tensor map (in kernel parameter
// space: a __grid_constant__ argument) from shared memory (laid out as the map says) to the tensor
// at coordinates (x0, x1, x2, x3), in the background; parts of the box outside the tensor are not
// written. The thread's copies since its last bulk_commit form one group. kEvictFirst: the written
// lines are marked first to leave the L2 (evict_first), so that the operands' tiles stay there.
template <bool kEvictFirst>
__device__ __forceinline__ void bulk_tensor_store(const void* map, const void* smem, int x0, int x1, int x2, int x3) {
  if constexpr (kEvictFirst) {
    asm volatile(
        "{\n.reg .b64 policy;\ncreatepolicy.fractional.L2::evict_first.b64 policy, 1.0;\n"
        "cp.async.bulk.tensor.4d.global.shared::cta.bulk_group.L2::cache_hint [%0, {%2, %3, %4, %5}], [%1], policy;\n}\n"
        ::"l"(map), "r"(smem_address(smem)), "r"(x0), "r"(x1), "r"(x2), "r"(x3)
        : "memory");
  } else {
    asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n" ::"l"(map),
                 "r"(smem_address(smem)), "r"(x0), "r"(x1), "r"(x2), "r"(x3)
                 : "memory");
  }
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Bulk asynchronous copy (sm_90, the TMA unit) of a box of a 3-d tensor map at coordinates
// (x, y, z) into shared memory (laid out as the map says; 128-byte aligned), zeros where the box
// leaves the tensor; it counts its bytes on the mbarrier as they land (mbarrier_arrive_expect_tx).
__device__ __forceinline__ void bulk_tensor_load(const void* map, void* smem, uint64_t* barrier, int x, int y, int z) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];\n"
      ::"r"(smem_address(smem)), "l"(map), "r"(smem_address(barrier)), "r"(x), "r"(y), "r"(z)
      : "memory");
}
// The same into the shared memory of every block of the cluster in cta_mask (sm_90a; a bit per
// rank), at the same offset in each, counting its bytes on the mbarrier at the same offset there.
__device__ __forceinline__ void bulk_tensor_load_multicast(const void* map, void* smem, uint64_t* barrier, int x, int y,
                                                           int z, uint16_t cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%3, %4, %5}], [%2], %6;\n"
      ::"r"(smem_address(smem)), "l"(map), "r"(smem_address(barrier)), "r"(x), "r"(y), "r"(z), "h"(cta_mask)
      : "memory");
}
// A load of a word that other SMs update atomically (a counter), without caching it in L1; the
// caller orders what follows by a fence.
__device__ __forceinline__ unsigned load_relaxed(const unsigned* p) {
  unsigned v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
// This block's rank in its cluster.
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
  return rank;
}
// A barrier of every thread of every block of the cluster: release of this block's shared-memory
// writes (mbarrier initializations included), acquire of the others'.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
// Programmatic dependent launch (sm_90): waits until the grids this one was launched behind have
// completed and their writes are visible (nothing to wait for on older GPUs, which launch in order).
__device__ __forceinline__ void wait_prior_grids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
// Waits until at most kPending of this thread's bulk groups are still reading shared memory (their
// source may then be written again; the writes to global memory may still be under way).
template <int kPending>
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(kPending) : "memory");
}
// Four 8x8 matrices of 16-bit elements (rows of 16 bytes); lanes 8j..8j+7 give the row addresses
// of matrix j, and lane t receives 32 bits of each: row t/4, word t%4 (kTrans: the transpose).
template <bool kTrans>
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
  if constexpr (kTrans) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_address(row)));
  } else {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_address(row)));
  }
}

// float -> TF32, rounded to nearest, kept in a 32-bit register. NaN stays NaN (an integer
// rounding trick would carry some NaN payloads, the GPU's own 0x7FFFFFFF among them, into the
// sign bit). sm_90 converts in one instruction, ties to even (cvt.rn); older GPUs have only
// ties away from zero (cvt.rna, three instructions there, as on sm_90). The two differ only
// where the 13 dropped bits are exactly half an ulp.
__device__ __forceinline__ uint32_t to_tf32(float x) {
  uint32_t r;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm("cvt.rn.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
#else
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
#endif
  return r;
}

// D = A * B + C; fragments as the PTX ISA lays them out for each shape.
__device__ __forceinline__ void mma_tf32_16x8x8(float (&d)[4], const uint32_t (&a)[4],
                                                const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <bool kBf16>
__device__ __forceinline__ void mma_16bit_16x8x16(float (&d)[4], const uint32_t (&a)[4],
                                                  const uint32_t (&b)[2]) {
  if constexpr (kBf16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
}

__device__ __forceinline__ void mma_f64_8x8x4(double (&d)[2], const double (&a)[1],
                                              const double (&b)[1]) {
  asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0, %1}, {%2}, {%3}, {%0, %1};\n"
               : "+d"(d[0]), "+d"(d[1])
               : "d"(a[0]), "d"(b[0]));
}

// Hopper (sm_90) added m16n8k{4,8,16} shapes for float64, at twice m8n8k4's rate. Its fragments
// are four m8n8k4 fragments (rows +0/+8, k +0/+4), which is how it runs on Ampere.
__device__ __forceinline__ void mma_f64_16x8x8(double (&d)[4], const double (&a)[4],
                                               const double (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  double(&top)[2] = *reinterpret_cast<double(*)[2]>(&d[0]);
  double(&bottom)[2] = *reinterpret_cast<double(*)[2]>(&d[2]);
  mma_f64_8x8x4(top, {a[0]}, {b[0]});
  mma_f64_8x8x4(top, {a[2]}, {b[1]});
  mma_f64_8x8x4(bottom, {a[1]}, {b[0]});
  mma_f64_8x8x4(bottom, {a[3]}, {b[1]});
#else
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f64.f64.f64.f64 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+d"(d[0]), "+d"(d[1]), "+d"(d[2]), "+d"(d[3])
      : "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(b[0]), "d"(b[1]));
#endif
}

}  // namespace tiledmm::ptx
