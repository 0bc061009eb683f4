// The tensor-core instruction ceilings of this GPU for mma.sync (the instruction tiledmm's
// tensor-core kernels use): each warp runs independent chains of one instruction on registers
// only, no memory traffic, so the rate is the instruction's own throughput. Reported in TFLOP/s.
//
//   nvcc -O3 -arch=sm_90 -o /tmp/mma_peak scripts/mma_peak.cu && /tmp/mma_peak
#include <cstdio>
#include <cstdint>

#include <cuda_runtime.h>

#include "../kernels/cuda/common/ptx.cuh"

constexpr int kChains = 8;  // independent accumulators per warp: enough to cover the latency
constexpr int kIters = 4096;

template <int kKind>
__global__ void probe(float* sink) {
  float acc[kChains][4] = {};
  double dacc[kChains][4] = {};
  const uint32_t x = threadIdx.x * 0x9e3779b9u;
  const uint32_t a[4] = {x, x ^ 1u, x ^ 2u, x ^ 3u}, b[2] = {x ^ 5u, x ^ 7u};
  const double da[4] = {1.0 + threadIdx.x, 1.0, 2.0, 3.0}, db[2] = {0.5, 0.25};
  for (int it = 0; it < kIters; ++it) {
#pragma unroll
    for (int c = 0; c < kChains; ++c) {
      if constexpr (kKind == 0) tiledmm::ptx::mma_16bit_16x8x16<true>(acc[c], a, b);
      if constexpr (kKind == 1) tiledmm::ptx::mma_tf32_16x8x8(acc[c], a, b);
      if constexpr (kKind == 2) {
        double(&d2)[2] = *reinterpret_cast<double(*)[2]>(dacc[c]);
        const double(&a1)[1] = *reinterpret_cast<const double(*)[1]>(da);
        const double(&b1)[1] = *reinterpret_cast<const double(*)[1]>(db);
        tiledmm::ptx::mma_f64_8x8x4(d2, a1, b1);
      }
      if constexpr (kKind == 3) tiledmm::ptx::mma_f64_16x8x8(dacc[c], da, db);
    }
  }
  float s = 0;
  for (int c = 0; c < kChains; ++c) s += acc[c][0] + acc[c][3] + static_cast<float>(dacc[c][1]);
  if (s == 12345.0f) *sink = s;  // keeps the work
}

template <int kKind>
double tflops(int sms, double flop_per_instruction) {
  float* sink;
  cudaMalloc(&sink, 4);
  const dim3 grid(sms * 8), block(256);
  probe<kKind><<<grid, block>>>(sink);
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  cudaEventRecord(start);
  probe<kKind><<<grid, block>>>(sink);
  cudaEventRecord(stop);
  cudaEventSynchronize(stop);
  float ms = 0;
  cudaEventElapsedTime(&ms, start, stop);
  cudaFree(sink);
  const double instructions = double(grid.x) * (block.x / 32) * kIters * kChains;
  return instructions * flop_per_instruction / (ms * 1e-3) / 1e12;
}

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  std::printf("mma.sync m16n8k16 bf16: %.0f TFLOP/s\n", tflops<0>(sms, 2.0 * 16 * 8 * 16));
  std::printf("mma.sync m16n8k8 tf32:  %.0f TFLOP/s\n", tflops<1>(sms, 2.0 * 16 * 8 * 8));
  std::printf("mma.sync m8n8k4 f64:    %.1f TFLOP/s\n", tflops<2>(sms, 2.0 * 8 * 8 * 4));
  std::printf("mma.sync m16n8k8 f64:   %.1f TFLOP/s\n", tflops<3>(sms, 2.0 * 16 * 8 * 8));
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
