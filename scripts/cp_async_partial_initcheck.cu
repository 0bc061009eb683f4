// Does compute-sanitizer initcheck count the bytes past src-size of a partial cp.async as read?
// It does (H100, CUDA 13.0): one "Uninitialized __global__ memory read of size 16 bytes" for a
// copy of 4 initialized bytes, whose result is right. The windowed 16-bit loads (stage_loader.cuh)
// copy partial windows at a matrix's end, so initcheck reports them where the rest of that 16-byte
// block was never written.  nvcc -arch=sm_90a -o cp scripts/cp_async_partial_initcheck.cu &&
//   compute-sanitizer --tool initcheck ./cp
#include <cstdio>
#include <cuda_runtime.h>
__global__ void k(const unsigned char* g, int* out, int src_bytes) {
  __shared__ alignas(16) unsigned char s[16];
  unsigned sa = static_cast<unsigned>(__cvta_generic_to_shared(s));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(sa), "l"(g), "r"(src_bytes));
  asm volatile("cp.async.wait_all;\n" ::);
  __syncthreads();
  int sum = 0;
  for (int i = 0; i < 16; ++i) sum += s[i];
  *out = sum;
}
int main() {
  unsigned char* g; int* out;
  cudaMalloc(&g, 256); cudaMalloc(&out, 4);
  cudaMemset(g, 1, 4);  // only the first 4 bytes are initialized
  k<<<1, 1>>>(g, out, 4);
  int h = 0; cudaMemcpy(&h, out, 4, cudaMemcpyDeviceToHost);
  printf("partial (4 of 16 bytes) sum=%d (expect 4)\n", h);
  k<<<1, 1>>>(g, out, 0);
  cudaMemcpy(&h, out, 4, cudaMemcpyDeviceToHost);
  printf("empty (0 of 16 bytes) sum=%d (expect 0)\n", h);
  return 0;
}
