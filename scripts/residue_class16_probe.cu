// The math warps' side of a 16-bit residue-class path for misaligned row-major products
// (bench/NOTES.md item 121): TF32's design (item 119) carried over to 16-bit types, in the C^T
// orientation on 128 x 256 x 64 tiles: B's lines in 8 residue classes of 32 lines, 8 sets of
// register A shifted in k by the classes' shifts (0-7 elements), m64n32k16 wgmmas, two math
// warpgroups taking turns at half a K tile each (64 registers of fragments). Timed alone on
// stages filled once (no copies, no epilogue, garbage operands) over the grid and K tiles of
// 8205 x 2949 x 5921: bf16's 3x target is 0.708 ms. Median of 20 runs after 5.
//  0: A fragments by 2-byte loads, lines shared between the sets (slot q = shift q, as where ld is
//     odd): 34 LDS.U16 + 32 PRMT a k16 step
//  1: the same by 4-byte loads of row pairs (as if every line were 4-byte aligned): 17 LDS + 32 PRMT
//  2: fragments loaded once: the narrow wgmmas alone
//  3: the aligned kernel's m64n256k16, both operands from shared memory (reference)
//  4: variant 0 without sharing: 8 LDS.U16 per set (64 a step)
//  5: variant 0 with classes 4 words past a multiple of 32 apart (the four lines of a load in four bank ranges;
//     the classes overlap: a stride, not a layout)
//  6: variant 0 at addresses in 32 distinct banks, whatever the layout (the 2-byte loads' floor)
//  7: A from shared memory instead (MN-major, unswizzled: k rows 16 bytes apart, so that a shift of
//     q rows is a descriptor 16 q bytes further; as a shift pass over A alone would leave it):
//     8 m64n32k16 wgmmas a k step, both operands by descriptor
//
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o /tmp/rc16 scripts/residue_class16_probe.cu && /tmp/rc16
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>

#define CHECK(x)                                                                     \
  do {                                                                               \
    const cudaError_t e = (x);                                                       \
    if (e != cudaSuccess) {                                                          \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)

constexpr int BM = 128, BN = 256, BK = 64, kStages = 4, kClasses = 8;
constexpr int kALines = BK / 8 + 1, kALineElems = BM + 8;
constexpr int kAClassElems = (kALines * kALineElems + 63) / 64 * 64;
constexpr int kAStage = kClasses * kAClassElems, kBStage = BN * BK;
constexpr int kSmem = kStages * (kAStage + kBStage) * 2 + 1024;

__device__ __forceinline__ uint32_t smem_addr(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ uint64_t desc(const void* p, uint32_t lead, uint32_t stride) {
  uint64_t a = smem_addr(p);
  return ((a & 0x3FFFF) >> 4) | (uint64_t((lead >> 4) & 0x3FFF) << 16) | (uint64_t((stride >> 4) & 0x3FFF) << 32) | (uint64_t(1) << 62);
}
__device__ __forceinline__ uint32_t lds16(const uint16_t* p) {
  uint16_t v; asm volatile("ld.shared.u16 %0, [%1];" : "=h"(v) : "r"(smem_addr(p))); return v;
}
__device__ __forceinline__ uint32_t lds32(const uint16_t* p) {
  uint32_t v; asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(smem_addr(p))); return v;
}
__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t r; asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel)); return r;
}
template <int R> __device__ __forceinline__ void fence_acc(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N> __device__ __forceinline__ void wg_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory"); }
__device__ __forceinline__ void bar_sync(int id) { asm volatile("bar.sync %0, 256;" ::"r"(id) : "memory"); }
__device__ __forceinline__ void bar_arrive(int id) { asm volatile("bar.arrive %0, 256;" ::"r"(id) : "memory"); }

// Unswizzled descriptor (layout type 0): leading and stride byte offsets between core matrices.
__device__ __forceinline__ uint64_t desc_plain(const void* p, uint32_t lead, uint32_t stride) {
  uint64_t a = smem_addr(p);
  return ((a & 0x3FFFF) >> 4) | (uint64_t((lead >> 4) & 0x3FFF) << 16) | (uint64_t((stride >> 4) & 0x3FFF) << 32);
}
__device__ __forceinline__ void mma_n32_ss_mn_a(float (&d)[16], uint64_t a, uint64_t b) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, %16, %17, 1, 1, 1, 1, 0;"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "l"(a), "l"(b));
}
__device__ __forceinline__ void mma_n32_rs(float (&d)[16], const uint32_t (&a)[4], uint64_t b) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, {%16,%17,%18,%19}, %20, 1, 1, 1, 0;"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
}
#define ACC16(o) "+f"(d[o+0]), "+f"(d[o+1]), "+f"(d[o+2]), "+f"(d[o+3]), "+f"(d[o+4]), "+f"(d[o+5]), "+f"(d[o+6]), "+f"(d[o+7]), \
  "+f"(d[o+8]), "+f"(d[o+9]), "+f"(d[o+10]), "+f"(d[o+11]), "+f"(d[o+12]), "+f"(d[o+13]), "+f"(d[o+14]), "+f"(d[o+15])
__device__ __forceinline__ void mma_n256_ss(float (&d)[128], uint64_t a, uint64_t b) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
      "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,"
      "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,"
      "%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127},"
      " %128, %129, 1, 1, 1, 0, 0;"
      : ACC16(0), ACC16(16), ACC16(32), ACC16(48), ACC16(64), ACC16(80), ACC16(96), ACC16(112)
      : "l"(a), "l"(b));
}

template <int kVariant>
__global__ void __launch_bounds__(256, 1) bound(float* out, int k_tiles, int items, uint32_t seed) {
  extern __shared__ unsigned char raw[];
  uint16_t* smem = reinterpret_cast<uint16_t*>(raw + (1024 - smem_addr(raw) % 1024) % 1024);
  uint16_t* a_st = smem;
  uint16_t* b_st = smem + kStages * kAStage;
  const int tid = threadIdx.x, warp = tid / 32, group = warp / 4, lane = tid % 32, g = lane / 4, t4 = lane % 4;
  for (int i = tid; i < kStages * (kAStage + kBStage); i += 256) {
    uint32_t h = (i + seed) * 2654435761u;
    smem[i] = 0x3c00 | (h >> 24 & 0x7f);  // bf16 in [0.0078, 0.0156): finite, nonzero
  }
  __syncthreads();
  // a_shift[d]: a line of class d's first element (5921 = 1 mod 8: every shift once)
  const int r0 = group * 64 + (warp % 4) * 16 + 2 * g;
  int off[8];
  constexpr int kClassStride = kVariant == 5 ? kAClassElems - 120 : kAClassElems;  // 1160 elements: 580 words = 4 mod 32
#pragma unroll
  for (int u = 0; u < 8; ++u) {
    const int L = 2 * t4 + 1 + u, d = L % 8;
    off[u] = kVariant == 6 ? 2 * lane + 64 * u : d * kClassStride + (L / 8) * kALineElems + (d * 5 + 3) % 8 + r0;
  }
  float sum = 0.f;
  for (int item = 0; item < items; ++item) {
    float acc[128];
#pragma unroll
    for (int r = 0; r < 128; ++r) acc[r] = 0.f;
    // One group's turn at the tensor cores: group 0 waits for group 1's last turn (but at its first),
    // group 1 for group 0's; issue() runs the wgmmas, committed as one group and waited for.
    auto turn = [&](bool first, auto issue) {
      if (group == 0 && !first) bar_sync(2);
      if (group == 1) bar_sync(3);
      wg_fence();
      issue();
      wg_commit();
      if (group == 0) bar_arrive(3);
      if (group == 1) bar_arrive(2);
      wg_wait<0>();
      fence_acc(acc);
    };
    uint32_t f[2][8][4];  // half a K tile's fragments (variant 2: loaded once)
    if constexpr (kVariant == 2) {
#pragma unroll
      for (int s = 0; s < 2; ++s)
#pragma unroll
        for (int q = 0; q < 8; ++q)
#pragma unroll
          for (int j = 0; j < 4; ++j) f[s][q][j] = lds32(a_st + 2 * (off[(q + j) % 8] / 2));
    }
    for (int t = 0; t < k_tiles; ++t) {
      const int st = t % kStages;
      const uint16_t* as = a_st + st * kAStage;
      const uint16_t* bs = b_st + st * kBStage;
      if constexpr (kVariant == 7) {
        // A: 8-element column groups of 72 k rows (16 bytes each, k0 - 8 ... k0 + 63), 1152 bytes
        // apart; this group's 64 rows are 8 of them. Slot q's products read k rows from 8 - q.
        turn(t == 0, [&] {
#pragma unroll
          for (int s = 0; s < 4; ++s)
#pragma unroll
            for (int q = 0; q < 8; ++q)
              mma_n32_ss_mn_a(*reinterpret_cast<float(*)[16]>(acc + 16 * q),
                              desc_plain(as + group * 8 * 72 * 8 + (16 * s + 8 - q) * 8, 128, 1152),
                              desc(bs + q * 32 * BK + s * 16, 16, 1024));
        });
      } else if constexpr (kVariant == 3) {
        turn(t == 0, [&] {
#pragma unroll
          for (int s = 0; s < 4; ++s)
            mma_n256_ss(acc, desc(as + group * 64 * BK + s * 16, 16, 1024), desc(bs + s * 16, 16, 1024));
        });
      } else {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          if constexpr (kVariant != 2) {
#pragma unroll
            for (int s = 0; s < 2; ++s) {
              const int line = 2 * (2 * h + s) * kALineElems;  // k16 further: two lines of each class
              if constexpr (kVariant == 4) {
#pragma unroll
                for (int q = 0; q < 8; ++q)
#pragma unroll
                  for (int j = 0; j < 4; ++j) {
                    const int u = 7 - q + (j >= 2 ? 8 : 0);
                    const uint16_t* p0 = as + off[u % 8] + (u / 8) * kALineElems + line + (j & 1);
                    const uint16_t* p1 = as + off[(u + 1) % 8] + ((u + 1) / 8) * kALineElems + line + (j & 1);
                    f[s][q][j] = prmt(lds16(p0), lds16(p1), 0x5410);
                  }
              } else {
                uint32_t x[17], y[17];
#pragma unroll
                for (int u = 0; u < 17; ++u) {
                  const uint16_t* p = as + off[u % 8] + (u / 8) * kALineElems + line;
                  if constexpr (kVariant == 0 || kVariant >= 5) {
                    x[u] = lds16(p);
                    y[u] = lds16(p + 1);
                  } else {
                    x[u] = lds32(as + 2 * ((p - as) / 2));
                  }
                }
#pragma unroll
                for (int q = 0; q < 8; ++q)
#pragma unroll
                  for (int j = 0; j < 4; ++j) {
                    const int u = 7 - q + (j >= 2 ? 8 : 0);
                    if constexpr (kVariant == 0 || kVariant >= 5) f[s][q][j] = prmt((j & 1) ? y[u] : x[u], (j & 1) ? y[u + 1] : x[u + 1], 0x5410);
                    else f[s][q][j] = prmt(x[u], x[u + 1], (j & 1) ? 0x7632 : 0x5410);
                  }
              }
            }
          }
          turn(t == 0 && h == 0, [&] {
#pragma unroll
            for (int s = 0; s < 2; ++s)
#pragma unroll
              for (int q = 0; q < 8; ++q)
                mma_n32_rs(*reinterpret_cast<float(*)[16]>(acc + 16 * q), f[s][q],
                           desc(bs + q * 32 * BK + (2 * h + s) * 16, 16, 1024));
          });
        }
      }
    }
    if (group == 0 && k_tiles > 0) bar_sync(2);
#pragma unroll
    for (int r = 0; r < 128; ++r) sum += acc[r];
  }
  out[blockIdx.x * 256 + tid] = sum;
}

template <int V>
float run(float* out, int blocks, int k_tiles, cudaEvent_t e0, cudaEvent_t e1) {
  CHECK(cudaFuncSetAttribute(bound<V>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  std::vector<float> ts;
  for (int r = 0; r < 25; ++r) {
    CHECK(cudaEventRecord(e0));
    bound<V><<<blocks, 256, kSmem>>>(out, k_tiles, 1, r);
    CHECK(cudaGetLastError());
    CHECK(cudaEventRecord(e1));
    CHECK(cudaEventSynchronize(e1));
    float ms;
    CHECK(cudaEventElapsedTime(&ms, e0, e1));
    if (r >= 5) ts.push_back(ms);
  }
  std::sort(ts.begin(), ts.end());
  return ts[ts.size() / 2];
}

int main() {
  // 8205 x 2949 x 5921 as C^T: 5921 / 128 -> 47 row tiles, 8205 / 256 -> 33 column tiles, K tiles for 2949 + 7
  const int blocks = 47 * 33, k_tiles = (2949 + 7 + 63) / 64;
  float* out;
  CHECK(cudaMalloc(&out, blocks * 256 * sizeof(float)));
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  const double flop = 2.0 * 8205 * 2949 * 5921;
  const char* names[] = {"u16 loads, shared lines", "u32 pair loads (aligned case)", "fragments fixed (wgmmas alone)",
                         "m64n256k16 SS reference", "u16 loads, per set", "u16 loads, classes 4 banks apart",
                         "u16 loads, 32 distinct banks", "A by descriptor, MN-major, unswizzled"};
  float ms[8] = {run<0>(out, blocks, k_tiles, e0, e1), run<1>(out, blocks, k_tiles, e0, e1),
                 run<2>(out, blocks, k_tiles, e0, e1), run<3>(out, blocks, k_tiles, e0, e1),
                 run<4>(out, blocks, k_tiles, e0, e1), run<5>(out, blocks, k_tiles, e0, e1),
                 run<6>(out, blocks, k_tiles, e0, e1), run<7>(out, blocks, k_tiles, e0, e1)};
  for (int v = 0; v < 8; ++v)
    printf("variant %d %-34s %.3f ms  %.0f TFLOP/s  (3x target 0.708 ms)\n", v, names[v], ms[v], flop / ms[v] / 1e9);
  return 0;
}
