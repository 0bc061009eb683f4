// How fast one SM's bulk tensor copies land operand tiles (bench/NOTES.md items 196-197): a
// producer thread copies `boxes` boxes a stage (64 bf16 by box_lines lines, 128-byte swizzle, from a
// 16 MB matrix that stays in the L2) into a ring of `stages` stages, and a consumer thread releases
// each stage as it lands; printed per case (one JSON line): GB/s an SM over `blocks` blocks, with
// the map's L2 promotion (none / 128B / 256B), one or two issuing threads, the tensor map
// prefetched or not, and in clusters of 2 or 4 sharing each stage by multicast (each block issuing
// its share of the boxes).
//
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -I kernels -o /tmp/tma_rate scripts/tma_rate.cu && /tmp/tma_rate
#include <cstdio>
#include <vector>
#include "cuda/common/block_sync.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/common/tensor_maps.h"
using namespace tiledmm;

__global__ void __launch_bounds__(128, 1) copy_kernel(const __grid_constant__ CUtensorMap map, int stages, int boxes,
                                                      int box_lines, int iters, int cluster, int row_tiles,
                                                      int col_tiles, int issuers, int prefetch) {
  extern __shared__ unsigned char raw[];
  unsigned char* smem = raw + (1024 - ptx::smem_address(raw) % 1024) % 1024;
  const int box_bytes = 128 * box_lines, stage_bytes = box_bytes * boxes;
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + stages * stage_bytes);
  uint64_t* empty = full + stages;
  const int rank = cluster > 1 ? static_cast<int>(ptx::cluster_rank()) : 0;
  if (threadIdx.x == 0) {
    if (prefetch) asm volatile("prefetch.tensormap [%0];\n" ::"l"(&map) : "memory");
    for (int s = 0; s < stages; ++s) {
      sync::mbarrier_init(full + s, 1);
      sync::mbarrier_init(empty + s, cluster);
    }
    sync::fence_mbarrier_init();
  }
  if (cluster > 1) ptx::cluster_sync(); else __syncthreads();
  const int group = blockIdx.x / cluster;
  // Issuers: threads 0 and 64 (warps 0 and 2) take alternate boxes; thread 0 counts the bytes.
  if (threadIdx.x == 0 || (issuers > 1 && threadIdx.x == 64)) {
    const int issuer = threadIdx.x / 64;
    uint32_t phase = 0;
    for (int it = 0, s = 0; it < iters; ++it) {
      sync::mbarrier_wait(empty + s, phase ^ 1);
      if (issuer == 0) sync::mbarrier_expect_tx(full + s, stage_bytes);
      for (int j = 0; j < boxes; ++j) {
        if (cluster > 1 && j % cluster != rank) continue;
        if (j % issuers != issuer) continue;
        const int tile = (group * 7 + it * boxes + j);
        const int x = (tile % col_tiles) * 64, y = (tile / col_tiles % row_tiles) * box_lines;
        unsigned char* to = smem + s * stage_bytes + j * box_bytes;
        if (cluster > 1) ptx::bulk_tensor_load_multicast(&map, to, full + s, x, y, 0, (1u << cluster) - 1);
        else ptx::bulk_tensor_load(&map, to, full + s, x, y, 0);
      }
      if (issuer == 0) sync::mbarrier_arrive(full + s);
      if (++s == stages) s = 0, phase ^= 1;
    }
  } else if (threadIdx.x == 32) {
    uint32_t phase = 0;
    for (int it = 0, s = 0; it < iters; ++it) {
      sync::mbarrier_wait(full + s, phase);
      for (int r = 0; r < cluster; ++r) sync::mbarrier_arrive_cluster(empty + s, r, 1);
      if (++s == stages) s = 0, phase ^= 1;
    }
  }
  if (cluster > 1) ptx::cluster_sync();
}

int main() {
  const int rows = 4096, cols = 2048;  // 16 MB of bf16: stays in the L2
  __nv_bfloat16* x;
  cudaMalloc(&x, size_t(rows) * cols * 2);
  cudaMemset(x, 0, size_t(rows) * cols * 2);
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  auto encode = tensor_map_encoder();
  cudaFuncSetAttribute(copy_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 227 * 1024);
  cudaFuncSetAttribute(copy_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  const CUtensorMapL2promotion promos[3] = {CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B};
  const char* promo_names[3] = {"none", "128B", "256B"};
  struct Case { int box_lines, boxes, stages, blocks, cluster, promo, issuers = 1, prefetch = 0; };
  std::vector<Case> cases;
  for (int promo : {1, 2, 0})
    for (int blocks : {1, sms})
      for (auto bs : std::vector<std::pair<int, int>>{{64, 1}, {64, 2}, {64, 3}, {64, 4}, {128, 2}, {256, 1}, {256, 2}})
        for (int stages : {4, 8}) cases.push_back({bs.first, bs.second, stages, blocks, 1, promo});
  for (int blocks : {1, sms})
    for (auto bs : std::vector<std::pair<int, int>>{{64, 2}, {64, 4}, {128, 2}})
      cases.push_back({bs.first, bs.second, 8, blocks, 1, 1, 2});
  for (int blocks : {1, sms})
    for (auto bs : std::vector<std::pair<int, int>>{{64, 1}, {64, 4}, {128, 2}, {256, 1}})
      for (int prefetch : {0, 1}) cases.push_back({bs.first, bs.second, 8, blocks, 1, 1, 1, prefetch});
  for (int cluster : {2, 4})
    for (int blocks : {16, sms / cluster * cluster})
      for (auto bs : std::vector<std::pair<int, int>>{{64, 2}, {64, 4}, {128, 2}, {256, 2}})
        cases.push_back({bs.first, bs.second, 8, blocks, cluster, 1});
  printf("{\"sms\": %d}\n", sms);
  for (const Case& c : cases) {
    const int stage_bytes = 128 * c.box_lines * c.boxes;
    const int smem = c.stages * stage_bytes + 16 * c.stages + 1024;
    if (smem > 227 * 1024) continue;
    CUtensorMap map;
    const cuuint64_t dims[3] = {cuuint64_t(cols), cuuint64_t(rows), 1};
    const cuuint64_t strides[2] = {cuuint64_t(cols) * 2, 16};
    const cuuint32_t box[3] = {64, cuuint32_t(c.box_lines), 1}, unit[3] = {1, 1, 1};
    encode(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, x, dims, strides, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE,
           CU_TENSOR_MAP_SWIZZLE_128B, promos[c.promo], CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    const int iters = int((512ll << 20) / (stage_bytes * 64ll)) + 64;  // ~8 MB a block
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(c.blocks);
    cfg.blockDim = dim3(128);
    cfg.dynamicSmemBytes = smem;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = c.cluster;
    attr[0].val.clusterDim.y = attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    const int row_tiles = rows / c.box_lines, col_tiles = cols / 64;
    auto run = [&] {
      return cudaLaunchKernelEx(&cfg, copy_kernel, map, c.stages, c.boxes, c.box_lines, iters, c.cluster, row_tiles,
                                col_tiles, c.issuers, c.prefetch);
    };
    run();
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    cudaEventRecord(a);
    for (int r = 0; r < 3; ++r) run();
    cudaEventRecord(b);
    cudaError_t err = cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    const double bytes = 3.0 * c.blocks * double(iters) * stage_bytes;  // landed, every block
    printf("{\"box_lines\": %d, \"boxes\": %d, \"stage_kib\": %d, \"stages\": %d, \"blocks\": %d, \"cluster\": %d, "
           "\"promotion\": \"%s\", \"issuers\": %d, \"prefetch\": %d, \"gb_s_per_sm\": %.1f, \"total_tb_s\": %.2f, \"err\": \"%s\"}\n",
           c.box_lines, c.boxes, stage_bytes / 1024, c.stages, c.blocks, c.cluster, promo_names[c.promo], c.issuers, c.prefetch,
           bytes / (ms * 1e-3) / c.blocks / 1e9, bytes / (ms * 1e-3) / 1e12, cudaGetErrorString(err));
    fflush(stdout);
  }
  return 0;
}
