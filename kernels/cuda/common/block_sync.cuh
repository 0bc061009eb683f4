// Synchronization inside a block beyond __syncthreads: a barrier among some of its warps, the
// shared-memory mbarriers that let warps wait on each other's progress (sm_90's phase waits),
// and the register reallocation between warpgroups of sm_90a (setmaxnreg).
#pragma once

#include <cstdint>

#include "cuda/common/ptx.cuh"

namespace tiledmm::sync {

// Named barrier kId (0 is __syncthreads') among kThreads threads, whole warps: a block whose
// warps do different work synchronizes the warps of one role with it.
template <int kThreads, int kId = 1>
__device__ __forceinline__ void warps() {
  static_assert(kThreads % 32 == 0 && kId > 0 && kId < 16, "barriers count whole warps");
  asm volatile("bar.sync %0, %1;\n" ::"n"(kId), "n"(kThreads) : "memory");
}

// The same at a barrier chosen at run time: each of several groups of warps at its own.
template <int kThreads>
__device__ __forceinline__ void warps(int id) {
  static_assert(kThreads % 32 == 0, "barriers count whole warps");
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "n"(kThreads) : "memory");
}

// The same for warps that reach barrier kId from different code (each role of a warp-specialized
// block from its own branch, or one group from two places): bar.sync is barrier.sync.aligned,
// which PTX defines only where every participating thread runs the same instruction; this is
// the form without .aligned.
template <int kThreads, int kId>
__device__ __forceinline__ void warps_anywhere() {
  static_assert(kThreads % 32 == 0 && kId > 1 && kId < 16, "barriers count whole warps");
  asm volatile("barrier.sync %0, %1;\n" ::"n"(kId), "n"(kThreads) : "memory");
}

// Arrives at named barrier kId without waiting (the form without .aligned): counts towards the
// kThreads that release the warps waiting there (warps_anywhere<kThreads, kId>).
template <int kThreads, int kId>
__device__ __forceinline__ void arrive() {
  static_assert(kThreads % 32 == 0 && kId > 0 && kId < 16, "barriers count whole warps");
  asm volatile("barrier.arrive %0, %1;\n" ::"n"(kId), "n"(kThreads) : "memory");
}

// Named barrier `id` (by default 1) among kThreads threads, returning whether any of them passed
// true.
template <int kThreads>
__device__ __forceinline__ bool warps_or(bool value, int id = 1) {
  static_assert(kThreads % 32 == 0, "barriers count whole warps");
  uint32_t any;
  asm volatile(
      "{\n.reg .pred p, q;\nsetp.ne.u32 p, %1, 0;\nbar.red.or.pred q, %2, %3, p;\nselp.u32 %0, 1, 0, q;\n}\n"
      : "=r"(any)
      : "r"(static_cast<uint32_t>(value)), "r"(id), "n"(kThreads)
      : "memory");
  return any != 0;
}

// An mbarrier in shared memory: it completes a phase when `count` arrivals have been made, and
// a waiter names the phase by its parity (0, 1, 0, ...).
__device__ __forceinline__ void mbarrier_init(uint64_t* barrier, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(ptx::smem_address(barrier)), "r"(count)
               : "memory");
}

// Arrives with release semantics: this thread's earlier memory accesses are visible to a thread
// that sees the phase complete.
__device__ __forceinline__ void mbarrier_arrive(uint64_t* barrier) {
  asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];\n" ::"r"(ptx::smem_address(barrier))
               : "memory");
}

// Arrives `count` times on the mbarrier at the same offset as `barrier` in the shared memory of
// the cluster's block of rank `rank`, releasing at CTA scope: for a stage whose reads (wgmma's,
// retired) the other block's bulk copies may now overwrite: nothing written here needs to be seen
// there, only the order after the retired reads, as CUTLASS's cluster barriers arrive. (Released
// at cluster scope, the arrival waited on a memory barrier: a third of TF32 irregular's stall
// samples, item 119.)
__device__ __forceinline__ void mbarrier_arrive_cluster(uint64_t* barrier, uint32_t rank, uint32_t count) {
  asm volatile(
      "{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, %0, %1;\n"
      "mbarrier.arrive.release.cta.shared::cluster.b64 _, [remote], %2;\n}\n" ::"r"(ptx::smem_address(barrier)),
      "r"(rank), "r"(count)
      : "memory");
}

// Makes barriers just initialized visible to the async proxy (bulk copies that complete on them).
__device__ __forceinline__ void fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// Arrives and adds `bytes` to the transfers the current phase waits for (bulk copies that
// complete on this barrier).
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* barrier, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;\n" ::"r"(
                   ptx::smem_address(barrier)),
               "r"(bytes)
               : "memory");
}

// Adds `bytes` to the transfers the current phase waits for, without arriving (a bulk copy issued
// by one of the threads whose arrivals the phase counts).
__device__ __forceinline__ void mbarrier_expect_tx(uint64_t* barrier, uint32_t bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(ptx::smem_address(barrier)),
               "r"(bytes)
               : "memory");
}

// Waits (acquire) until the phase of the given parity has completed.
__device__ __forceinline__ void mbarrier_wait(uint64_t* barrier, uint32_t parity) {
  uint32_t done = 0;
  while (!done) {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(ptx::smem_address(barrier)), "r"(parity)
        : "memory");
  }
}

// Sets this warpgroup's registers per thread to kRegs (a multiple of 8 in [24, 256]): a
// warpgroup that needs few gives them back (kIncrease false) for the others to take (true). The
// kernel must start with a register cap (__launch_bounds__(threads, 1)).
template <int kRegs, bool kIncrease>
__device__ __forceinline__ void set_registers() {
  static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256, "setmaxnreg's range");
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  if constexpr (kIncrease) asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
  else asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
#endif
}

}  // namespace tiledmm::sync
