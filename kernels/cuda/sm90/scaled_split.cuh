// float32 products with float32 accuracy from float16 tensor-core products (the 'highest'
// precision's short-K path on Hopper, gemm_cuda_scaled_split_sm90.cu).
//
// float16 has TF32's 11 significant bits at twice its tensor-core rate. Each row of A and each
// column of B is scaled by a power of two that puts its largest magnitude in [2^14, 2^15), and
// each scaled value x is split into a float16 "big" part hi = fp16(x) and a float16 remainder
// lo = fp16(x - hi), as 3xTF32 splits into TF32 parts: A B = lo_A hi_B + hi_A lo_B + hi_A hi_B to
// 2^-22, one float16 product of three times K, A' = [lo_A | hi_A | hi_A] by B' = [hi_B ; lo_B ;
// hi_B], whose remainder products go first so that the tensor cores' truncating additions of the
// big products start from a small sum. The epilogue scales each output back (output_scales.cuh).
//   Where a line's range defeats the float16 parts, the line is left out of the split (its parts
// zero) and its outputs are recomputed exactly afterwards (exact_lines_kernel): non-finite
// values (NaN and Inf give IEEE's outputs), a largest magnitude whose scale would pass 2^+-63, or
// a nonzero value more than 2^19 below the line's largest. Down to there a value's big part and
// remainder hold it to 2^-20 (to 2^-22 above 2^-17 of the largest, where the scaled remainder is
// a normal float16; below, a subnormal remainder's absolute error, 2^-25, is 2^-20 of a value at
// 2^-5): a quarter of float32 summation's bound at K = 33, 2 K 2^-24, for an output made of one
// such product alone. Randn's 64-element lines are left out at a rate of ~2e-4 (~1e-3 at 2^17).
#pragma once

#include <cfloat>
#include <cstdint>

#include <cuda_fp16.h>

#include "cuda/common/ptx.cuh"


namespace tiledmm {

// The largest power-of-two scale exponent of a line: the product of a row's and a column's
// inverse scales stays a normal float32 (2^-126 ... 2^127).
constexpr int kMaxSplitScaleExp = 63;
// A line's scaled largest magnitude lies in [2^kSplitTop, 2^(kSplitTop + 1)).
constexpr int kSplitTop = 14;
// Nonzero magnitudes down to 2^-kSplitRange below the largest are held to 2^-20 by their parts
// (scaled: 2^(kSplitTop - kSplitRange) = 2^-5 and up).
constexpr int kSplitRange = 19;
// The split's block (128: smallK's 32768 lines of a thread a line spread over every SM).
constexpr int kSplitThreads = 128;
// Where a line's elements lie along memory: kSplitLanes threads a line, each taking kSplitPair
// neighbouring elements in turn (a group's store is then 32 contiguous bytes of a line).
// A warp a line, a value a lane in turn, spent 130 instructions a line, issue-bound (item 193).
constexpr int kSplitLanes = 8, kSplitPair = 2;

// Lines of a float32 operand (rows of A or columns of B): element k of line l of matrix z at
// src[z * batch_stride + l * line_stride + k * k_stride]. Written as float16 values with K padded to
// kp (zeros after K) in `segments` segments, the remainder in segment lo_segment and the big part in
// the others: element k of segment g at dst[z * dst_batch_stride + l * dst_line_stride + (g kp + k)
// * dst_k_stride], and one inverse scale per line (scales: `scale_lines` a matrix). Three segments
// are A' and B' as the product reads them; two ([lo | hi] of A, [hi ; lo] of B) where the product
// reads the big parts' segment a second time (GemmArgs::reread_k).
struct SplitLines {
  const float* src;
  int64_t batch_stride, line_stride, k_stride;
  int64_t batches, lines, k, kp;
  int segments, lo_segment;
  __half* dst;
  int64_t dst_batch_stride, dst_line_stride, dst_k_stride;
  float* scales;
  int64_t scale_lines;
  int* left_out_count;  // lines left out of the split (zeroed before), listed as z * lines + l
  int64_t* left_out;
};

// Splits every line of s with K <= kMaxK by `blocks` blocks (this one: `block`), kLanes threads a
// line: 1 for lines whose elements lie a line apart (a warp's loads and stores then cover 32
// neighbouring lines), kSplitLanes for lines along memory (a group's loads and stores then cover
// neighbouring elements; kPair 2 only there, where the output is K-major: dst_k_stride 1). A line's
// values are held in registers while its range is found.
template <int kMaxK, int kLanes, int kPair>
__device__ __forceinline__ void split_lines(const SplitLines& s, int64_t block, int64_t blocks) {
  constexpr int kValues = kMaxK / kLanes;  // a thread's elements of its line
  static_assert(kMaxK % (kLanes * kPair) == 0 && 32 % kLanes == 0, "whole lines a warp");
  const int lane = threadIdx.x % kLanes;
  // Element of the line that value i of this thread is: kPair neighbours a lane in turn.
  auto element = [&](int i) { return (lane + i / kPair * kLanes) * kPair + i % kPair; };
  const int64_t per_block = blockDim.x / kLanes, stride = blocks * per_block, total = s.batches * s.lines;
  const bool narrow = total <= INT32_MAX;  // line / lines in 32 bits (64: ~70 instructions)
  // The whole warp takes every turn that any of its lines has (its groups meet in the shuffles).
  const int64_t warp_first = block * per_block + threadIdx.x / 32 * (32 / kLanes);
  for (int64_t turn = 0; warp_first + turn < total; turn += stride) {
    const int64_t line = warp_first + turn + threadIdx.x % 32 / kLanes;
    const bool mine = line < total;
    const int64_t z = narrow ? static_cast<uint32_t>(line) / static_cast<uint32_t>(s.lines) : line / s.lines;
    const int64_t l = line - z * s.lines;
    const float* x = s.src + z * s.batch_stride + l * s.line_stride;
    float v[kValues];
#pragma unroll
    for (int i = 0; i < kValues; ++i) {
      const int k = element(i);
      v[i] = mine && k < s.k ? x[k * s.k_stride] : 0.0f;  // every load issued before the first use
    }
    // Non-finite values (NaN too) count as an infinite largest magnitude.
    float largest = 0.0f, smallest = INFINITY;
#pragma unroll
    for (int i = 0; i < kValues; ++i) {
      const float a = fabsf(v[i]);
      largest = fmaxf(largest, a <= FLT_MAX ? a : INFINITY);
      if (a > 0.0f) smallest = fminf(smallest, a);
    }
#pragma unroll
    for (int offset = kLanes / 2; offset > 0; offset /= 2) {
      largest = fmaxf(largest, __shfl_xor_sync(0xffffffffu, largest, offset));
      smallest = fminf(smallest, __shfl_xor_sync(0xffffffffu, smallest, offset));
    }
    if (!mine) continue;
    int exponent = 0;  // largest = f 2^exponent, f in [0.5, 1): its top bit is 2^(exponent - 1)
    frexpf(largest, &exponent);
    const int up = kSplitTop + 1 - exponent;  // the scale's exponent
    const bool left_out =
        largest > FLT_MAX || (largest > 0.0f && (abs(up) > kMaxSplitScaleExp ||
                                                 smallest < ldexpf(1.0f, exponent - 1 - kSplitRange)));
    if (lane == 0) {
      s.scales[z * s.scale_lines + l] = left_out ? 0.0f : ldexpf(1.0f, -up);
      if (left_out) s.left_out[atomicAdd(s.left_out_count, 1)] = line;
    }
    const float scale = left_out ? 0.0f : ldexpf(1.0f, up);
    __half* out = s.dst + z * s.dst_batch_stride + l * s.dst_line_stride;
#pragma unroll
    for (int i = 0; i < kValues; i += kPair) {
      const int k = element(i);
      if (k >= s.kp) break;
      __half hi[kPair], lo[kPair];
#pragma unroll
      for (int j = 0; j < kPair; ++j) {
        // Exact: a power of two, and v normal (0 for a line left out, whose values may be non-finite).
        const float scaled = left_out ? 0.0f : v[i + j] * scale;
        hi[j] = __float2half_rn(scaled);
        lo[j] = __float2half_rn(scaled - __half2float(hi[j]));
      }
#pragma unroll
      for (int segment = 0; segment < 3; ++segment) {
        const bool is_lo = segment == s.lo_segment;
        if (segment == 2 && s.segments == 2) continue;  // (a break here spilled: the loops stay unrolled)
        if constexpr (kPair == 2)  // K-major: kp is even, so the pair is 4-byte aligned
          *reinterpret_cast<__half2*>(out + segment * s.kp + k) =
              is_lo ? __halves2half2(lo[0], lo[1]) : __halves2half2(hi[0], hi[1]);
        else
          out[(segment * s.kp + k) * s.dst_k_stride] = is_lo ? lo[0] : hi[0];
      }
    }
  }
}

// Both operands' lines in one launch (A's by the first a_blocks blocks), so that neither waits for
// the other's last blocks; kAlong: lines along memory (kSplitLanes threads a line), else a thread a line.
template <int kMaxK, bool kAAlong, bool kBAlong, int kLanesAlong = kSplitLanes, int kPairAlong = kSplitPair>
__global__ void __launch_bounds__(kSplitThreads) split_lines_kernel(const SplitLines a, const SplitLines b,
                                                                    int64_t a_blocks) {
  const int64_t block = blockIdx.x;
  if (block < a_blocks)
    split_lines<kMaxK, kAAlong ? kLanesAlong : 1, kAAlong ? kPairAlong : 1>(a, block, a_blocks);
  else
    split_lines<kMaxK, kBAlong ? kLanesAlong : 1, kBAlong ? kPairAlong : 1>(b, block - a_blocks, gridDim.x - a_blocks);
}

// The exact recomputation's operands (the original float32 A and B) and output, and the split's
// lists: index d 0 for the listed rows of A, 1 for the listed columns of B.
struct ExactLines {
  const float* a;
  const float* b;
  float* c;  // batch m x n matrices, row-major
  int64_t lda, ldb, batch_stride_a, batch_stride_b;
  int64_t batch, m, n, k;
  const int* counts;         // lines listed by split_lines_kernel
  const int64_t* listed[2];  // z * lines + line, z the operand's matrix (0 for a broadcast operand)
};

// Recomputes every output of the listed rows (kRows) or columns with exact float32 fused
// multiply-adds in k order (exact_dot's arithmetic; K <= kMaxK). A work item is kThreads lines of
// the other operand (kRows: columns of B), one a thread, held in registers, against a group of
// kGroup listed lines copied into shared memory: the group's kGroup sums are independent chains
// (a thread an output in turn left each chain's latency exposed), and the items are as many as
// chunks of lines times groups, so that a few dozen listed lines still fill the GPU. A thread's
// line whose elements lie along memory (a row of a row-major A) comes through shared memory, so
// that the block's loads are whole rows. The padding past K adds -0 (+0 times -0): no sum changes,
// signed zeros included. A listed line of a broadcast operand is every matrix's.
//   An item's loads are one round trip: items go group by group, a block reading the entries of a
// group once where its strided items share the group (a group of more items than blocks), and
// every value the item reads is in flight before the first is stored, the own lines by cp.async
// (in rounds of 16 loads after the entries, attention's scores with a few listed lines took 18 us,
// now 10: item 193).
template <int kMaxK, bool kARowMajor, bool kBRowMajor, bool kRows, int kThreads, int kGroup>
__device__ __forceinline__ void exact_lines(const ExactLines& e, float (&listed_lines)[kGroup][kMaxK],
                                            float (&own_lines)[kThreads][kMaxK + 1],
                                            int64_t (&group_lines)[2][kGroup], int64_t (&group_matrices)[2][kGroup]) {
  constexpr int d = kRows ? 0 : 1;
  constexpr bool kOwnAlongMemory = kRows ? !kBRowMajor : kARowMajor;
  constexpr int kListedValues = kGroup * kMaxK / kThreads;
  static_assert(kGroup * kMaxK % kThreads == 0 && kGroup <= kThreads, "whole rounds of the listed lines");
  static_assert(kThreads % kMaxK == 0, "whole own lines a round of copies");
  const int64_t count = e.counts[d];
  if (count == 0) return;
  const int64_t lines = kRows ? e.m : e.n, across = kRows ? e.n : e.m;
  const bool listed_broadcast = (kRows ? e.batch_stride_a : e.batch_stride_b) == 0;
  const int64_t chunks = (across + kThreads - 1) / kThreads, groups = (count + kGroup - 1) / kGroup;
  const int64_t* const listed = e.listed[d];
  auto a_at = [&](const float* a, int64_t row, int k) { return a[kARowMajor ? row * e.lda + k : k * e.lda + row]; };
  auto b_at = [&](const float* b, int k, int64_t col) { return b[kBRowMajor ? k * e.ldb + col : col * e.ldb + k]; };
  // The group's entries (line and matrix, -1 past the count) in buffer `buf`, written by threads
  // 0 ... kGroup - 1; the two buffers take turns, so that the block's barrier between two reads
  // of a group keeps its readers of the last one apart from the writers of the next.
  int64_t entry_group = -1, entry_matrix = -1;
  int buf = 0;
  const int64_t per_group = e.batch * chunks, items = groups * per_group;
  // An item's indices by 32-bit divisions where they fit (a 64-bit one is ~70 instructions).
  const bool narrow = items <= INT32_MAX;
  auto divide = [&](int64_t x, int64_t y) {
    return narrow ? static_cast<int64_t>(static_cast<uint32_t>(x) / static_cast<uint32_t>(y)) : x / y;
  };
  for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
    const int64_t group = divide(item, per_group), matrix_chunk = item - group * per_group;
    const int64_t z = divide(matrix_chunk, chunks), first = (matrix_chunk - z * chunks) * kThreads;
    const int64_t first_listed = group * kGroup, other = first + threadIdx.x;
    if (group != entry_group) {
      const int64_t q = first_listed + threadIdx.x;
      entry_group = group;
      buf ^= 1;
      if (threadIdx.x < kGroup) {
        const int64_t entry = q < count ? listed[q] : -1;
        entry_matrix = entry < 0 ? -1 : entry / lines;  // 0 for a broadcast operand's
        group_lines[buf][threadIdx.x] = entry < 0 ? -1 : entry % lines;
        group_matrices[buf][threadIdx.x] = entry_matrix;
      }
    }
    // A group without a line of matrix z has nothing to write there: skipped (a batch's few listed
    // lines fall in few of its matrices; 96 x 512 x 64 x 512 took 30 us without, 18 with: item 186).
    // (Also the barrier after which the last item's lines are read and the entries are written.)
    if (!__syncthreads_or(listed_broadcast ? entry_matrix >= 0 : entry_matrix == z)) continue;
    const float* a = e.a + z * e.batch_stride_a;
    const float* b = e.b + z * e.batch_stride_b;
    // Element k of line o of the other operand (kRows: column o of B, else row o of A).
    auto own_at = [&](int64_t o, int k) { return kRows ? b_at(b, k, o) : a_at(a, o, k); };
    // The padding past K: -0 in the listed lines, +0 in the own (the copies' zero fill).
    float listed_values[kListedValues], mine[kMaxK];
#pragma unroll
    for (int j = 0; j < kListedValues; ++j) {  // of matrix z (lines of other matrices: outputs skipped)
      const int i = threadIdx.x + j * kThreads, k = i % kMaxK;
      const int64_t line = group_lines[buf][i / kMaxK];
      listed_values[j] = line < 0 ? 0.0f : k < e.k ? (kRows ? a_at(a, line, k) : b_at(b, k, line)) : -0.0f;
    }
    if constexpr (kOwnAlongMemory) {  // the chunk's lines copied whole, element k by thread k % kMaxK
      const float* const base = kRows ? b : a;
      const int64_t ld = kRows ? e.ldb : e.lda;
      const int k = threadIdx.x % kMaxK;
#pragma unroll 4
      for (int r = threadIdx.x / kMaxK; r < kThreads; r += kThreads / kMaxK) {
        const bool valid = first + r < across && k < e.k;
        ptx::cp_async<4>(&own_lines[r][k], valid ? base + (first + r) * ld + k : base, valid);
      }
      ptx::cp_async_commit();
    } else {
#pragma unroll
      for (int j = 0; j < kMaxK; ++j) mine[j] = other < across && j < e.k ? own_at(other, j) : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < kListedValues; ++j) {
      const int i = threadIdx.x + j * kThreads;
      listed_lines[i / kMaxK][i % kMaxK] = listed_values[j];
    }
    if constexpr (kOwnAlongMemory) ptx::cp_async_wait<0>();
    __syncthreads();
    if (other >= across) continue;
    if constexpr (kOwnAlongMemory) {
#pragma unroll
      for (int k = 0; k < kMaxK; ++k) mine[k] = own_lines[threadIdx.x][k];
    }
    float sum[kGroup];
#pragma unroll
    for (int q = 0; q < kGroup; ++q) sum[q] = 0.0f;
#pragma unroll
    for (int k = 0; k < kMaxK; ++k)
#pragma unroll
      for (int q = 0; q < kGroup; ++q)
        sum[q] = kRows ? fmaf(listed_lines[q][k], mine[k], sum[q]) : fmaf(mine[k], listed_lines[q][k], sum[q]);
#pragma unroll
    for (int q = 0; q < kGroup; ++q) {
      const int64_t line = group_lines[buf][q];
      if (line < 0) break;
      if (!listed_broadcast && group_matrices[buf][q] != z) continue;
      e.c[(z * e.m + (kRows ? line : other)) * e.n + (kRows ? other : line)] = sum[q];
    }
  }
}

// The listed rows (blockIdx.y 0) and columns (1) of exact_lines, in one launch (behind the product:
// programmatic dependent launch, ScaledSplitPath). Three blocks an SM
// (at most 168 registers): 2% of attention's lines listed took 255 us against two blocks' 334 (194
// registers) in one build, one line in 10^4 11 us against 12 (item 193).
template <int kMaxK, bool kARowMajor, bool kBRowMajor>
__global__ void __launch_bounds__(128, 3) exact_lines_kernel(const ExactLines e) {
  constexpr int kThreads = 128, kGroup = 8;
  __shared__ __align__(16) float listed_lines[kGroup][kMaxK];
  __shared__ float own_lines[kThreads][kMaxK + 1];  // + 1: its rows in different banks
  __shared__ int64_t group_lines[2][kGroup], group_matrices[2][kGroup];
  ptx::wait_prior_grids();  // launched behind the product, whose outputs of the listed lines it rewrites
  if (blockIdx.y == 0)
    exact_lines<kMaxK, kARowMajor, kBRowMajor, true>(e, listed_lines, own_lines, group_lines, group_matrices);
  else
    exact_lines<kMaxK, kARowMajor, kBRowMajor, false>(e, listed_lines, own_lines, group_lines, group_matrices);
}

}  // namespace tiledmm
