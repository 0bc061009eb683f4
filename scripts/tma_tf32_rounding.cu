// Does a bulk tensor copy (the TMA) through a TFLOAT32 tensor map round float32 to TF32, and how
// (bench/NOTES.md item 112)? One 32 x 64 box of randn values and crafted ones (exact ties with an
// even and an odd kept bit, near-ties, subnormals, the largest finite values, infinities, NaNs)
// copied through FLOAT32, TFLOAT32 and TFLOAT32_FTZ maps; each result classified as unchanged,
// truncated, rounded to nearest with ties to even (RNE, cvt.rn.tf32.f32) or ties away (RNA).
// nvcc -arch=sm_90a -o /tmp/tma_tf32_rounding scripts/tma_tf32_rounding.cu && /tmp/tma_tf32_rounding
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <cmath>
#include <random>
#include <vector>

constexpr int W = 32, H = 64;  // 32 floats a line (128 bytes), 64 lines

__global__ void copy_kernel(const __grid_constant__ CUtensorMap map, float* out) {
  __shared__ alignas(128) float tile[H * W];
  __shared__ alignas(8) uint64_t bar;
  const uint32_t b = static_cast<uint32_t>(__cvta_generic_to_shared(&bar));
  const uint32_t t = static_cast<uint32_t>(__cvta_generic_to_shared(tile));
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(b));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(b), "r"(H * W * 4));
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
        ::"r"(t), "l"(&map), "r"(0), "r"(0), "r"(b) : "memory");
    asm volatile(
        "{ .reg .pred p; W: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], 0; @!p bra W; }" ::"r"(b) : "memory");
  }
  __syncthreads();
  for (int i = threadIdx.x; i < H * W; i += blockDim.x) out[i] = tile[i];
}

static uint32_t bits(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }
static float fl(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }
static uint32_t trunc13(uint32_t u) { return u & 0xffffe000u; }
static uint32_t rna(uint32_t u) {  // ties away (magnitude), as cvt.rna
  if ((u & 0x7f800000u) == 0x7f800000u) return u;
  return (u + 0x1000u) & 0xffffe000u;
}
static uint32_t rne(uint32_t u) {
  if ((u & 0x7f800000u) == 0x7f800000u) return u;
  uint32_t lsb = (u >> 13) & 1u;
  return (u + 0xfffu + lsb) & 0xffffe000u;
}

int main() {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q{};
  cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q);
  auto encode = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  std::vector<uint32_t> in(H * W);
  std::mt19937 g(1);
  std::normal_distribution<float> nd;
  for (int i = 0; i < H * W; ++i) in[i] = bits(nd(g));
  // crafted: exact ties with even and odd kept lsb, both signs; near-ties; denormals; specials
  int c = 0;
  for (uint32_t lsb = 0; lsb < 2; ++lsb)
    for (uint32_t s = 0; s < 2; ++s)
      for (int j = 0; j < 8; ++j) in[c++] = (s << 31) | ((127u + j) << 23) | (lsb << 13) | 0x1000u | (j * 0x20000u & 0x7fc000u);
  in[c++] = 0x3f800fffu; in[c++] = 0x3f801001u; in[c++] = 0x00001000u; in[c++] = 0x00003000u; in[c++] = 0x00400fffu;
  in[c++] = 0x007fffffu; in[c++] = 0x80001000u; in[c++] = 0x7f7fffffu; in[c++] = 0xff7ff000u; in[c++] = 0x7f800000u;
  in[c++] = 0xff800000u; in[c++] = 0x7fc00000u; in[c++] = 0x7f800001u; in[c++] = 0xffc01234u; in[c++] = 0x00000001u;
  int crafted = c;
  float *d_in, *d_out;
  cudaMalloc(&d_in, H * W * 4); cudaMalloc(&d_out, H * W * 4);
  cudaMemcpy(d_in, in.data(), H * W * 4, cudaMemcpyHostToDevice);
  for (auto type : {CU_TENSOR_MAP_DATA_TYPE_FLOAT32, CU_TENSOR_MAP_DATA_TYPE_TFLOAT32, CU_TENSOR_MAP_DATA_TYPE_TFLOAT32_FTZ}) {
    CUtensorMap map;
    cuuint64_t dims[2] = {W, H}, strides[1] = {W * 4};
    cuuint32_t box[2] = {W, H}, unit[2] = {1, 1};
    CUresult r = encode(&map, type, 2, d_in, dims, strides, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE,
                        CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    cudaMemset(d_out, 0xff, H * W * 4);
    copy_kernel<<<1, 128>>>(map, d_out);
    cudaError_t e = cudaDeviceSynchronize();
    std::vector<uint32_t> out(H * W);
    cudaMemcpy(out.data(), d_out, H * W * 4, cudaMemcpyDeviceToHost);
    int same = 0, t = 0, ne = 0, na = 0, none = 0;
    for (int i = crafted; i < H * W; ++i) {
      same += out[i] == in[i]; t += out[i] == trunc13(in[i]); ne += out[i] == rne(in[i]); na += out[i] == rna(in[i]);
      none += out[i] != in[i] && out[i] != trunc13(in[i]) && out[i] != rne(in[i]) && out[i] != rna(in[i]);
    }
    printf("type %d encode %d run %s: randn %d: unchanged %d trunc %d rne %d rna %d other %d\n", int(type), int(r),
           cudaGetErrorString(e), H * W - crafted, same, t, ne, na, none);
    for (int i = 0; i < crafted; ++i)
      printf("  in %08x (%-14g) out %08x  trunc %08x rne %08x rna %08x %s\n", in[i], fl(in[i]), out[i], trunc13(in[i]),
             rne(in[i]), rna(in[i]),
             out[i] == in[i] ? "same" : out[i] == rne(in[i]) && out[i] == rna(in[i]) ? "rn" : out[i] == rne(in[i]) ? "RNE" : out[i] == rna(in[i]) ? "RNA" : out[i] == trunc13(in[i]) ? "TRUNC" : "?");
  }
  return 0;
}
