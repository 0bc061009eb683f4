// Does a global load's return (from the L2) share the SM's shared-memory data path (bench/NOTES.md
// item 92)? One block of 512 threads per SM: warps 0-7 stream 16-byte shared loads and stores,
// warps 8-15 stream 16-byte global loads of an L2-resident buffer (mode 0) or cp.async copies of
// it into shared memory (mode 1). Each side alone, then both: if both together take the sum of
// their times, they share one path; if the larger, they do not.
//
//   nvcc -O3 -std=c++17 -arch=sm_90a -o /tmp/l1_paths scripts/l1_paths.cu && /tmp/l1_paths
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

constexpr int kThreads = 512;
constexpr int kGlobalBytes = 16 << 20;  // fits the L2

__global__ void __launch_bounds__(kThreads, 1) probe(const uint4* g, uint4* sink, int smem_iters, int glob_iters, int mode) {
  extern __shared__ uint4 sm[];  // 2 x 32 KiB
  const int tid = threadIdx.x, warp = tid / 32;
  uint4 acc = make_uint4(0, 0, 0, 0);
  if (warp < 8) {
    // 256 threads x 16 B = 4 KiB per step; 8 steps cover 32 KiB, read half -> write other half.
    for (int it = 0; it < smem_iters; ++it) {
      const int src = (it & 1) * 2048, dst = 2048 - src;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        uint4 v = sm[src + j * 256 + tid];
        v.x += 1;
        sm[dst + j * 256 + tid] = v;
      }
    }
  } else {
    const int t = tid - 256;
    const int n = kGlobalBytes / 16;
    int base = (blockIdx.x * 4096 + t) % n;
    if (mode == 0) {
      for (int it = 0; it < glob_iters; ++it) {
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          uint4 v;
          asm volatile("ld.global.cg.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(g + (base + j * 256) % n));
          acc.x ^= v.x; acc.y ^= v.y; acc.z ^= v.z; acc.w ^= v.w;
        }
        base = (base + 2048) % n;
      }
    } else {
      // cp.async 16 bytes into a third shared region (after the 32 KiB the other warps use).
      for (int it = 0; it < glob_iters; ++it) {
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(sm + 4096 + j * 256 + t));
          asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(g + (base + j * 256) % n));
        }
        asm volatile("cp.async.commit_group;");
        asm volatile("cp.async.wait_group 2;");
        base = (base + 2048) % n;
      }
      asm volatile("cp.async.wait_group 0;");
    }
  }
  if (acc.x == 0x12345678u) sink[0] = acc;
  if (warp < 8 && sm[tid].x == 0x12345678u) sink[1] = sm[tid];
}

int main() {
  int sms;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  uint4 *g, *sink;
  cudaMalloc(&g, kGlobalBytes);
  cudaMemset(g, 1, kGlobalBytes);
  cudaMalloc(&sink, 64);
  const int smem = 3 * 32 * 1024;
  cudaFuncSetAttribute(probe, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  auto run = [&](int si, int gi, int mode) {
    std::vector<float> ms;
    for (int r = 0; r < 7; ++r) {
      cudaEventRecord(a);
      probe<<<sms, kThreads, smem>>>(g, sink, si, gi, mode);
      cudaEventRecord(b);
      cudaEventSynchronize(b);
      float x;
      cudaEventElapsedTime(&x, a, b);
      ms.push_back(x);
    }
    std::sort(ms.begin(), ms.end());
    return ms[3];
  };
  const int S = 20000;
  for (int mode = 0; mode < 2; ++mode) {
    const char* what = mode == 0 ? "LDG.128 (ld.global.cg)" : "cp.async 16 B";
    for (int G : {5000, 10000, 20000}) {
      const float t_s = run(S, 0, mode), t_g = run(0, G, mode), t_b = run(S, G, mode);
      const double s_bytes = double(S) * 2 * 32768 * sms, g_bytes = double(G) * 32768 * sms;
      std::printf("%-24s shared %5.3f ms (%5.1f B/clk/SM at 1.98 GHz)  global %5.3f ms (%5.1f)  both %5.3f ms  [sum %5.3f, max %5.3f]\n",
                  what, t_s, s_bytes / sms / (t_s * 1e-3) / 1.98e9, t_g, g_bytes / sms / (t_g * 1e-3) / 1.98e9, t_b, t_s + t_g,
                  std::max(t_s, t_g));
    }
  }
  printf("%s\n", cudaGetErrorString(cudaGetLastError()));
  return 0;
}
