// How fast one SM's bulk tensor copies land a GEMM core's operand tiles (bench/NOTES.md items
// 196-197, 199). Each block's producer thread copies a K tile's A and B boxes a stage into a ring of
// `stages` stages, as the core does for one tile shape and layout; one consumer thread releases
// each stage as it lands (no math). An operand is K-major (one box of BX lines by 64 bf16, walking
// along its lines' k), MN-major (one 64-line box per 64-column block, walking down k), or MN-major
// as one box of a 3-D map whose dimensions are (element of a column block, line, column block), so
// that a single box lands every column block in the stage's layout. The operands' lines are `pitch`
// bytes apart in a 16 MB matrix that stays in the L2, filled with nonzero bits. In clusters, the
// blocks share both operands' stages by multicast, each issuing its share: alternate boxes
// ("split") or whole alternate stages ("stages"). One JSON line a case: GB/s landed an SM.
//
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -I kernels -o /tmp/tma_rate scripts/tma_rate.cu -lcuda && /tmp/tma_rate
#include <cstdio>
#include <string>
#include <vector>

#include "cuda/common/block_sync.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/common/tensor_maps.h"
using namespace tiledmm;

enum Layout { kKMajor, kMNMajor, kMNMajor3D };

// One operand's copies a stage: `boxes` boxes of box_bytes; box j of stage t (of `period`, then
// again) at c = base + j * box_step + t * stage_step, base = block-group g's (g * group_step) % group_mod.
struct Walk {
  int boxes, box_bytes, period;
  int box_step[3], stage_step[3], group_step[3], group_mod[3];
};

__global__ void __launch_bounds__(256, 1)
    copy_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                const __grid_constant__ Walk a, const __grid_constant__ Walk b, int stages, int iters, int cluster,
                int share_stages, int mode) {
  extern __shared__ unsigned char raw[];
  unsigned char* smem = raw + (1024 - ptx::smem_address(raw) % 1024) % 1024;
  const int stage_bytes = a.boxes * a.box_bytes + b.boxes * b.box_bytes;
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + stages * stage_bytes);
  uint64_t* empty = full + stages;
  const int rank = cluster > 1 ? static_cast<int>(ptx::cluster_rank()) : 0;
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) {
      sync::mbarrier_init(full + s, 1);
      sync::mbarrier_init(empty + s, cluster);
    }
    sync::fence_mbarrier_init();
  }
  if (cluster > 1) ptx::cluster_sync(); else __syncthreads();
  const int group = blockIdx.x / cluster;
  // mode 0: a producer thread and a consumer thread; 1: the producer alone, reusing a stage once
  // its copies have landed; 2 and 3: two or four of each (even warps produce, odd ones consume),
  // each pair owning the stages s with s % lanes == lane (stages a multiple of lanes: a thread
  // that could run two passes ahead on a stage would read its mbarrier's parity wrong).
  const int lanes = mode == 2 ? 2 : mode == 3 ? 4 : 1, lane = threadIdx.x / 64;
  if (threadIdx.x % 64 == 0 && lane < lanes) {
    // The walks' coordinates kept in registers, advanced by additions: the issuing thread's own
    // work a stage stays small (item 199: with a modulo a box it set the rate).
    int base[2][3], at[2][3], t[2] = {0, 0};
    for (int op = 0; op < 2; ++op)
      for (int d = 0; d < 3; ++d) at[op][d] = base[op][d] = group * (op ? b : a).group_step[d] % (op ? b : a).group_mod[d];
    uint32_t phase = 0;
    for (int it = 0, s = 0; it < iters; ++it) {
      if (s % lanes == lane) {
        if (mode == 1) {
          if (it >= stages) sync::mbarrier_wait(full + s, phase ^ 1);
        } else {
          sync::mbarrier_wait(empty + s, phase ^ 1);
        }
        sync::mbarrier_arrive_expect_tx(full + s, stage_bytes);
        unsigned char* to = smem + s * stage_bytes;
        int n = 0;  // the stage's boxes so far, A's then B's
#pragma unroll
        for (int op = 0; op < 2; ++op) {
          const Walk& w = op ? b : a;
          const CUtensorMap* map = op ? &map_b : &map_a;
          for (int j = 0; j < w.boxes; ++j, ++n, to += w.box_bytes) {
            if (cluster > 1 && (share_stages ? it : n) % cluster != rank) continue;
            const int x = at[op][0] + j * w.box_step[0], y = at[op][1] + j * w.box_step[1], z = at[op][2] + j * w.box_step[2];
            if (cluster > 1) ptx::bulk_tensor_load_multicast(map, to, full + s, x, y, z, (1u << cluster) - 1);
            else ptx::bulk_tensor_load(map, to, full + s, x, y, z);
          }
        }
      }
      for (int op = 0; op < 2; ++op) {
        const Walk& w = op ? b : a;
        if (++t[op] == w.period) {
          t[op] = 0;
          for (int d = 0; d < 3; ++d) at[op][d] = base[op][d];
        } else {
          for (int d = 0; d < 3; ++d) at[op][d] += w.stage_step[d];
        }
      }
      if (++s == stages) s = 0, phase ^= 1;
    }
    if (mode == 1)  // the last copies
      for (int it = iters - stages < 0 ? 0 : iters - stages; it < iters; ++it)
        sync::mbarrier_wait(full + it % stages, (it / stages) & 1);
  } else if (threadIdx.x % 64 == 32 && lane < lanes && mode != 1) {
    uint32_t phase = 0;
    for (int it = 0, s = 0; it < iters; ++it) {
      if (s % lanes == lane) {
        sync::mbarrier_wait(full + s, phase);
        if (cluster > 1) for (int r = 0; r < cluster; ++r) sync::mbarrier_arrive_cluster(empty + s, r, 1);
        else sync::mbarrier_arrive(empty + s);
      }
      if (++s == stages) s = 0, phase ^= 1;
    }
  }
  if (cluster > 1) ptx::cluster_sync();
}

__global__ void fill(uint32_t* x, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    x[i] = 0x3c003c00u ^ (uint32_t(i * 2654435761u) & 0x03ff03ffu);
}

constexpr size_t kBytes = 16u << 20;  // stays in the L2

// An operand of `lines` (BX) lines or columns a tile, its lines `pitch` bytes apart, as a map and a walk.
static Walk make_operand(Layout layout, int bx, int pitch, void* base, CUtensorMap* map, bool* ok) {
  auto encode = tensor_map_encoder();
  const cuuint64_t elems = pitch / 2, rows = kBytes / pitch;
  const cuuint32_t unit[3] = {1, 1, 1};
  Walk w{};
  for (int d = 0; d < 3; ++d) w.group_mod[d] = 1;
  CUresult r;
  if (layout == kKMajor) {  // lines along x: box (64 k, bx lines); k advances a stage
    const cuuint64_t dims[3] = {elems, rows, 1}, strides[2] = {cuuint64_t(pitch), 16};
    const cuuint32_t box[3] = {64, cuuint32_t(bx), 1};
    r = encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, base, dims, strides, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE,
               CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    w.boxes = 1, w.box_bytes = 128 * bx, w.period = int(elems / 64);
    w.stage_step[0] = 64, w.group_step[1] = bx, w.group_mod[1] = int(rows - bx);
  } else if (layout == kMNMajor) {  // a box per 64-column block; k (the lines) advances a stage
    const cuuint64_t dims[3] = {elems, rows, 1}, strides[2] = {cuuint64_t(pitch), 16};
    const cuuint32_t box[3] = {64, 64, 1};
    r = encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, base, dims, strides, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE,
               CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    w.boxes = (bx + 63) / 64, w.box_bytes = 8192, w.period = int(rows / 64);
    w.box_step[0] = 64, w.stage_step[1] = 64, w.group_step[0] = 64 * w.boxes, w.group_mod[0] = int(elems - 64 * w.boxes);
  } else {  // one box of (64, 64 lines, column blocks): dimensions (element, line, block)
    const cuuint64_t dims[3] = {64, rows, elems / 64}, strides[2] = {cuuint64_t(pitch), 128};
    const int blocks = (bx + 63) / 64;
    const cuuint32_t box[3] = {64, 64, cuuint32_t(blocks)};
    r = encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, base, dims, strides, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE,
               CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    w.boxes = 1, w.box_bytes = 8192 * blocks, w.period = int(rows / 64);
    w.stage_step[1] = 64, w.group_step[2] = blocks, w.group_mod[2] = int(elems / 64 - blocks);
  }
  *ok = r == CUDA_SUCCESS;
  return w;
}

int main() {
  void *x, *y;
  cudaMalloc(&x, kBytes);
  cudaMalloc(&y, kBytes);
  fill<<<264, 256>>>(static_cast<uint32_t*>(x), kBytes / 4);
  fill<<<264, 256>>>(static_cast<uint32_t*>(y), kBytes / 4);
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  cudaFuncSetAttribute(copy_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 227 * 1024);
  cudaFuncSetAttribute(copy_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  const char* names[3] = {"K", "MN", "MN3D"};
  // A tile: BM x BN, A's layout and B's; the lines' pitch in bytes.
  struct Case { int bm, bn; Layout la, lb; int pitch, stages, blocks, cluster, share_stages, mode = 0; };
  std::vector<Case> cases;
  const int all = sms, some = 16;
  for (int mode : {0, 1, 2, 3})
    for (int blocks : {1, all}) {
      cases.push_back({128, 128, kKMajor, kKMajor, 1536, 4, blocks, 1, 0, mode});
      cases.push_back({128, 128, kMNMajor, kMNMajor, 1536, 4, blocks, 1, 0, mode});
      cases.push_back({128, 128, kMNMajor3D, kMNMajor3D, 1536, 4, blocks, 1, 0, mode});
      cases.push_back({64, 96, kMNMajor, kMNMajor, 1536, 8, blocks, 1, 0, mode});
      cases.push_back({64, 96, kMNMajor3D, kMNMajor3D, 1536, 8, blocks, 1, 0, mode});
      cases.push_back({64, 96, kKMajor, kKMajor, 1536, 8, blocks, 1, 0, mode});
      cases.push_back({128, 64, kKMajor, kKMajor, 1536, 8, blocks, 1, 0, mode});
      cases.push_back({128, 256, kKMajor, kKMajor, 1536, 4, blocks, 1, 0, mode});
      cases.push_back({64, 64, kKMajor, kKMajor, 1536, 8, blocks, 1, 0, mode});
    }
  for (int mode : {0, 2, 3})
    for (int cluster : {2, 4})
      for (int blocks : {some, all / cluster * cluster}) {
        cases.push_back({128, 128, kKMajor, kKMajor, 1536, 4, blocks, cluster, 1, mode});
        cases.push_back({64, 96, kMNMajor3D, kMNMajor3D, 1536, 8, blocks, cluster, 1, mode});
      }
  printf("{\"sms\": %d}\n", sms);
  for (const Case& c : cases) {
    CUtensorMap ma, mb;
    bool oka, okb;
    // B of 96 columns MN-major copies two whole column blocks, as the core does.
    const Walk a = make_operand(c.la, c.bm, c.pitch, x, &ma, &oka), b = make_operand(c.lb, c.bn, c.pitch, y, &mb, &okb);
    const int stage_bytes = a.boxes * a.box_bytes + b.boxes * b.box_bytes;
    const int smem = c.stages * stage_bytes + 16 * c.stages + 1024;
    const int lanes = c.mode == 2 ? 2 : c.mode == 3 ? 4 : 1;
    std::string err = !oka || !okb ? "map" : smem > 227 * 1024 ? "smem" : c.stages % lanes ? "lanes" : "";
    double gbs = 0, ns = 0;
    if (err.empty()) {
      const int iters = int((512ll << 20) / (stage_bytes * 64ll)) + 64;  // ~8 MB a block
      cudaLaunchConfig_t cfg{};
      cfg.gridDim = dim3(c.blocks);
      cfg.blockDim = dim3(256);
      cfg.dynamicSmemBytes = smem;
      cudaLaunchAttribute attr[1];
      attr[0].id = cudaLaunchAttributeClusterDimension;
      attr[0].val.clusterDim.x = c.cluster;
      attr[0].val.clusterDim.y = attr[0].val.clusterDim.z = 1;
      cfg.attrs = attr;
      cfg.numAttrs = 1;
      auto run = [&] { return cudaLaunchKernelEx(&cfg, copy_kernel, ma, mb, a, b, c.stages, iters, c.cluster, c.share_stages, c.mode); };
      run();
      cudaEvent_t e0, e1;
      cudaEventCreate(&e0);
      cudaEventCreate(&e1);
      cudaEventRecord(e0);
      for (int r = 0; r < 3; ++r) run();
      cudaEventRecord(e1);
      cudaError_t e = cudaEventSynchronize(e1);
      float ms = 0;
      cudaEventElapsedTime(&ms, e0, e1);
      if (e != cudaSuccess) err = cudaGetErrorString(e);
      gbs = 3.0 * iters * stage_bytes / (ms * 1e-3) / 1e9;  // landed, each block
      ns = ms * 1e6 / (3.0 * iters);
    }
    printf("{\"tile\": \"%dx%d\", \"a\": \"%s\", \"b\": \"%s\", \"boxes\": %d, \"stage_kib\": %d, \"pitch\": %d, "
           "\"stages\": %d, \"blocks\": %d, \"cluster\": %d, \"share\": \"%s\", \"gb_s_per_sm\": %.1f, "
           "\"ns_per_stage\": %.1f, \"mode\": %d, \"err\": \"%s\"}\n",
           c.bm, c.bn, names[c.la], names[c.lb], a.boxes + b.boxes, stage_bytes / 1024, c.pitch, c.stages, c.blocks,
           c.cluster, c.cluster == 1 ? "-" : c.share_stages ? "stages" : "split", gbs, ns, c.mode, err.c_str());
    fflush(stdout);
  }
  return 0;
}
