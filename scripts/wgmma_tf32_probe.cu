// The TF32 wgmma ceilings of a K loop shaped like 3xTF32's short-K tile (gemm_wgmma.cuh): each
// math warpgroup issues a group of m64nNk8 wgmmas (A from registers or shared memory, B from
// shared memory), commits it and waits for it, optionally prepares its next A operands (the
// split's conversions) and promotes the sums, optionally taking turns with the other warpgroup
// at named barriers. No global memory traffic: the rate is the loop's own. Reported as the
// fraction of the tensor cores' dense TF32 peak (1024 multiply-adds per clock per SM).
//
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Ikernels -o /tmp/wgmma_tf32_probe \
//     scripts/wgmma_tf32_probe.cu && /tmp/wgmma_tf32_probe
#include <cstdio>
#include <cstdint>

#include <cuda_runtime.h>

#include "../kernels/cuda/sm90/wgmma.cuh"

using namespace tiledmm;

constexpr int kRounds = 2048;
constexpr int kBlocks = 132;  // one per SM of an H100 SXM or H200

template <int kGroups, int N, int kPerCommit, bool kSS, bool kTurns, bool kWork, int kInFlight>
__global__ void __launch_bounds__(128 * kGroups) probe(long long* cycles, float* sink) {
  extern __shared__ __align__(1024) unsigned char smem[];
  const int tid = threadIdx.x, group = tid / 128;
  for (int i = tid; i < 96 * 1024 / 4; i += blockDim.x) reinterpret_cast<float*>(smem)[i] = 1.0f / (1 + i % 7);
  __syncthreads();
  float acc[N / 2], sum[N / 2];
  for (int r = 0; r < N / 2; ++r) acc[r] = sum[r] = 0.0f;
  uint32_t a[4][4];
  float x[16];
  for (int i = 0; i < 16; ++i) x[i] = 1.0f + tid * 1e-3f + i;
  for (int s = 0; s < 4; ++s)
    for (int j = 0; j < 4; ++j) a[s][j] = __float_as_uint(x[4 * s + j]);
  // B: 4 k steps of an N x 32 K-major tile (N rows of 128 bytes); A (kSS): 64 rows per group.
  const unsigned char* b_tile = smem;
  const unsigned char* a_tile = smem + 64 * 1024 + group * 64 * 128;
  const long long start = clock64();
  for (int round = 0; round < kRounds; ++round) {
    // The split of the next A fragments: two conversions and a subtraction each, folded into one
    // fragment (the probe times the work, not the products' values).
    if constexpr (kWork) {
#pragma unroll
      for (int s = 0; s < 4; ++s)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const uint32_t big = ptx::to_tf32(x[4 * s + j]);
          a[s][j] = ptx::to_tf32(x[4 * s + j] - __uint_as_float(big)) ^ big;
          x[4 * s + j] += 1.0f;
        }
    }
    if constexpr (kTurns) {
      if (group == 0 && round > 0) asm volatile("bar.sync 2, 256;" ::: "memory");
      if (group == 1) asm volatile("bar.sync 3, 256;" ::: "memory");
    }
    wgmma::fence_operands(acc);
    wgmma::fence();
#pragma unroll
    for (int i = 0; i < kPerCommit; ++i) {
      const int s = i % 4;
      const uint64_t b = wgmma::descriptor(b_tile + s * 32 + (i / 4 % 2) * 16 * 1024, 16, 1024);
      if constexpr (kSS)
        wgmma::mma_tf32_m64k8<N>(acc, wgmma::descriptor(a_tile + s * 32, 16, 1024), b);
      else
        wgmma::mma_tf32_m64k8_rs<N>(acc, a[s], b, i == 0 && kWork ? 0 : 1);
    }
    wgmma::commit_group();
    wgmma::fence_operands(acc);
    if constexpr (kTurns) {
      if (group == 0) asm volatile("bar.arrive 3, 256;" ::: "memory");
      if (group == 1) asm volatile("bar.arrive 2, 256;" ::: "memory");
    }
    wgmma::wait_group<kInFlight>();
    wgmma::fence_operands(acc);
    if constexpr (kWork) {
#pragma unroll
      for (int r = 0; r < N / 2; ++r) sum[r] += acc[r];
    }
  }
  wgmma::wait_group<0>();
  wgmma::fence_operands(acc);
  if constexpr (kTurns) {
    if (group == 0) asm volatile("bar.sync 2, 256;" ::: "memory");
  }
  const long long stop = clock64();
  float total = 0.0f;
  for (int r = 0; r < N / 2; ++r) total += acc[r] + sum[r];
  sink[blockIdx.x * blockDim.x + tid] = total;
  if (tid == 0) cycles[blockIdx.x] = stop - start;
}

template <int kGroups, int N, int kPerCommit, bool kSS, bool kTurns, bool kWork, int kInFlight = 0>
void run(const char* name) {
  auto kernel = probe<kGroups, N, kPerCommit, kSS, kTurns, kWork, kInFlight>;
  const int smem = 100 * 1024;
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  long long* cycles;
  float* sink;
  cudaMalloc(&cycles, kBlocks * sizeof(long long));
  cudaMalloc(&sink, kBlocks * 128 * kGroups * sizeof(float));
  kernel<<<kBlocks, 128 * kGroups, smem>>>(cycles, sink);  // warm-up
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  cudaEventRecord(e0);
  kernel<<<kBlocks, 128 * kGroups, smem>>>(cycles, sink);
  cudaEventRecord(e1);
  cudaEventSynchronize(e1);
  float ms = 0.0f;
  cudaEventElapsedTime(&ms, e0, e1);
  long long host[kBlocks];
  cudaMemcpy(host, cycles, sizeof(host), cudaMemcpyDeviceToHost);
  long long worst = 0;
  for (long long c : host) worst = c > worst ? c : worst;
  const double fma = double(kRounds) * kGroups * kPerCommit * 64.0 * N * 8.0;  // per block
  const cudaError_t err = cudaGetLastError();
  std::printf("%-58s %5.1f%% of peak per clock, %6.1f TFLOP/s, %.1f GHz  %s\n", name, 100.0 * fma / worst / 1024.0,
              2.0 * fma * kBlocks / (ms * 1e-3) / 1e12, worst / (ms * 1e6),
              err == cudaSuccess ? "" : cudaGetErrorString(err));
  cudaFree(cycles);
  cudaFree(sink);
}

int main() {
  run<2, 128, 12, false, false, false>("RS n128, 2 groups, 12 a commit");
  run<2, 128, 12, false, true, false>("RS n128, 2 groups, 12 a commit, turns");
  run<2, 128, 12, false, true, true>("RS n128, 2 groups, 12 a commit, turns, split+promote");
  run<2, 128, 12, false, false, true>("RS n128, 2 groups, 12 a commit, split+promote");
  run<2, 128, 24, false, true, true>("RS n128, 2 groups, 24 a commit, turns, split+promote");
  run<2, 256, 6, false, true, false>("RS n256, 2 groups, 6 a commit, turns");
  run<2, 256, 12, false, false, false>("RS n256, 2 groups, 12 a commit");
  run<1, 128, 12, false, false, false>("RS n128, 1 group, 12 a commit");
  run<3, 128, 12, false, false, false>("RS n128, 3 groups, 12 a commit");
  run<3, 128, 12, false, false, true>("RS n128, 3 groups, 12 a commit, split+promote");
  run<2, 128, 12, true, false, false>("SS n128, 2 groups, 12 a commit");
  run<2, 128, 12, true, false, false, 1>("SS n128, 2 groups, 12 a commit, one in flight");
  run<2, 256, 12, true, false, false, 1>("SS n256, 2 groups, 12 a commit, one in flight");
  return 0;
}
