// How fast one block per SM can write a 4 GiB float32 output tile by tile, the way the persistent
// short-K kernels do (bench/NOTES.md item 89): stores from registers, and tiles staged in shared
// memory and sent by bulk tensor copies (TMA) of several box shapes and orders, or by 1-D bulk
// copies of each tile row. Each row gives the median of 10 runs after 2 and the rate in TB/s.
//
//   nvcc -O3 -std=c++17 -arch=sm_90a -o /tmp/write_ceiling scripts/write_ceiling.cu && /tmp/write_ceiling
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(x)                                                                     \
  do {                                                                               \
    const cudaError_t e = (x);                                                       \
    if (e != cudaSuccess) {                                                          \
      std::printf("%s: %s\n", #x, cudaGetErrorString(e));                            \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)

constexpr int M = 32768, N = 32768;  // smallK's output
constexpr int kThreads = 256;

__device__ __forceinline__ uint32_t smem_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Output tile t of a grid of tm x tn tiles: columns fastest, as PersistentWalk takes them.
struct Tiles {
  int tm, tn;
  __device__ void at(int t, int& mt, int& nt) const { mt = t / tn, nt = t % tn; }
};

__global__ void fill(float4* out, int64_t n4) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n4; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = make_float4(1.f, 2.f, 3.f, float(i & 255));
}

// Each thread stores its 16-byte pieces of the tile, a warp covering whole row segments.
// kStreaming: st.global.cs (evict-first in the caches).
template <int TR, int TC, bool kStreaming>
__global__ void __launch_bounds__(kThreads) store_tiles(float* out, Tiles tiles) {
  for (int t = blockIdx.x; t < tiles.tm * tiles.tn; t += gridDim.x) {
    int mt, nt;
    tiles.at(t, mt, nt);
    for (int v = threadIdx.x; v < TR * TC / 4; v += kThreads) {
      const int r = v / (TC / 4), c = v % (TC / 4) * 4;
      float4* p = reinterpret_cast<float4*>(out + int64_t(mt * TR + r) * N + nt * TC + c);
      const float4 value = make_float4(1.f, float(t & 7), float(r), float(c));
      if (kStreaming) __stcs(p, value);
      else *p = value;
    }
  }
}

// Stages each tile in one of kBuffers shared-memory buffers and sends it: by bulk tensor copies
// of BW x BH boxes (kRowsFirst: each band of BH lines whole before the next, otherwise each
// 128-byte column of boxes whole before the next), or, where BW == 0, by one 1-D bulk copy per
// tile row from the threads of warp 0. kEvictFirst: the copies carry an L2 evict_first policy.
template <int TR, int TC, int BW, int BH, int kBuffers, bool kRowsFirst, bool kEvictFirst>
__global__ void __launch_bounds__(kThreads) send_tiles(float* out, Tiles tiles, const __grid_constant__ CUtensorMap map) {
  constexpr bool kRows = BW == 0;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  float* const smem = reinterpret_cast<float*>(smem_raw + (1024 - smem_address(smem_raw) % 1024) % 1024);
  const bool sender = kRows ? threadIdx.x < 32 : threadIdx.x == 0;
  uint64_t policy = 0;
  if (kEvictFirst) asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  int i = 0;
  for (int t = blockIdx.x; t < tiles.tm * tiles.tn; t += gridDim.x, ++i) {
    int mt, nt;
    tiles.at(t, mt, nt);
    float* const buffer = smem + (i % kBuffers) * TR * TC;
    if (sender) asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(kBuffers - 1) : "memory");
    __syncthreads();
    for (int v = threadIdx.x; v < TR * TC / 4; v += kThreads)
      reinterpret_cast<float4*>(buffer)[v] = make_float4(1.f, float(t & 7), float(v), 3.f);
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
    if (!sender) continue;
    if constexpr (kRows) {
      for (int r = threadIdx.x; r < TR; r += 32) {
        float* const dst = out + int64_t(mt * TR + r) * N + nt * TC;
        if (kEvictFirst)
          asm volatile("cp.async.bulk.global.shared::cta.bulk_group.L2::cache_hint [%0], [%1], %2, %3;\n" ::"l"(dst),
                       "r"(smem_address(buffer + r * TC)), "n"(TC * 4), "l"(policy) : "memory");
        else
          asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(dst),
                       "r"(smem_address(buffer + r * TC)), "n"(TC * 4) : "memory");
      }
    } else {
      constexpr int kBands = TR / BH, kColumns = TC / BW;
      for (int q = 0; q < kBands * kColumns; ++q) {
        const int band = kRowsFirst ? q / kColumns : q % kBands, column = kRowsFirst ? q % kColumns : q / kBands;
        const uint32_t src = smem_address(buffer + (band * kColumns + column) * BW * BH);
        const int x = nt * TC + column * BW, y = mt * TR + band * BH;
        if (kEvictFirst)
          asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group.L2::cache_hint [%0, {%2, %3}], [%1], %4;\n" ::"l"(&map),
                       "r"(src), "r"(x), "r"(y), "l"(policy) : "memory");
        else
          asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];\n" ::"l"(&map), "r"(src),
                       "r"(x), "r"(y) : "memory");
      }
    }
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
  }
  if (sender) asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}

static float* g_out;
static int g_sms;

template <typename Launch>
static void report(const char* label, Launch launch) {
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < 2; ++i) launch();
  std::vector<float> ms;
  for (int i = 0; i < 10; ++i) {
    CHECK(cudaEventRecord(start));
    launch();
    CHECK(cudaEventRecord(stop));
    CHECK(cudaEventSynchronize(stop));
    float x;
    CHECK(cudaEventElapsedTime(&x, start, stop));
    ms.push_back(x);
  }
  CHECK(cudaGetLastError());
  std::sort(ms.begin(), ms.end());
  const double median = ms[ms.size() / 2];
  std::printf("%-62s %7.3f ms %6.2f TB/s\n", label, median, double(M) * N * 4 / median / 1e9);
}

template <int TR, int TC, bool kStreaming>
static void stores() {
  char label[128];
  std::snprintf(label, sizeof label, "registers, %dx%d tiles%s", TR, TC, kStreaming ? ", st.global.cs" : "");
  report(label, [] { store_tiles<TR, TC, kStreaming><<<g_sms, kThreads>>>(g_out, Tiles{M / TR, N / TC}); });
}

template <int TR, int TC, int BW, int BH, int kBuffers, bool kRowsFirst, bool kEvictFirst, bool kSwizzle>
static void sends() {
  CUtensorMap map{};
  if (BW > 0) {
    void* encode = nullptr;
    cudaDriverEntryPointQueryResult found{};
    CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &encode, 12000, cudaEnableDefault, &found));
    const cuuint64_t dims[2] = {N, M}, strides[1] = {cuuint64_t(N) * 4};
    const cuuint32_t box[2] = {BW, BH}, unit[2] = {1, 1};
    if (reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(encode)(
            &map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, g_out, dims, strides, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE,
            kSwizzle ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_NONE,
            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS) {
      std::printf("box %dx%d: no tensor map\n", BW, BH);
      return;
    }
  }
  constexpr int kSmem = kBuffers * TR * TC * 4 + 1024;
  auto kernel = send_tiles<TR, TC, BW, BH, kBuffers, kRowsFirst, kEvictFirst>;
  CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  char label[128];
  if (BW == 0)
    std::snprintf(label, sizeof label, "1-D bulk copies of rows, %dx%d tiles, %d buffers%s", TR, TC, kBuffers,
                  kEvictFirst ? ", evict_first" : "");
  else
    std::snprintf(label, sizeof label, "tensor copies, %dx%d tiles, %dx%d boxes%s, %s, %d buffers%s", TR, TC, BW, BH,
                  kSwizzle ? " (128B swizzle)" : "", kRowsFirst ? "bands first" : "columns first", kBuffers,
                  kEvictFirst ? ", evict_first" : "");
  report(label, [&] { kernel<<<g_sms, kThreads, kSmem>>>(g_out, Tiles{M / TR, N / TC}, map); });
}

int main() {
  CHECK(cudaDeviceGetAttribute(&g_sms, cudaDevAttrMultiProcessorCount, 0));
  CHECK(cudaMalloc(&g_out, size_t(M) * N * 4));
  report("fill (grid-stride 16-byte stores)", [] { fill<<<g_sms * 8, 256>>>(reinterpret_cast<float4*>(g_out), int64_t(M) * N / 4); });
  stores<128, 128, false>();
  stores<128, 128, true>();
  // The kernels' boxes (f6ebd9b): 128 lines of 128 bytes, one column after another.
  sends<128, 128, 32, 128, 2, false, true, true>();
  sends<128, 256, 32, 128, 1, false, false, true>();
  // Shorter boxes, bands first or columns first.
  sends<128, 128, 32, 64, 2, true, true, true>();
  sends<128, 128, 32, 32, 2, true, true, true>();
  sends<128, 128, 32, 16, 2, true, true, true>();
  sends<128, 128, 32, 8, 2, true, true, true>();
  sends<128, 128, 32, 8, 2, false, true, true>();
  // Wide boxes without the swizzle (whose staging stores would conflict in the banks).
  sends<128, 128, 128, 32, 2, true, true, false>();
  sends<128, 128, 64, 64, 2, true, true, false>();
  // 1-D copies of rows.
  sends<128, 128, 0, 0, 2, true, true, false>();
  sends<32, 512, 0, 0, 2, true, true, false>();
  CHECK(cudaFree(g_out));
  return 0;
}
