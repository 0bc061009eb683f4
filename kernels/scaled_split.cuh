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
// a nonzero value more than 2^17 below the line's largest (its scaled remainder would be
// subnormal in float16, losing the split's 2^-22).
#pragma once

#include <cstdint>

#include <cuda_fp16.h>


namespace tiledmm {

// The largest power-of-two scale exponent of a line: the product of a row's and a column's
// inverse scales stays a normal float32 (2^-126 ... 2^127).
constexpr int kMaxSplitScaleExp = 63;
// A line's scaled largest magnitude lies in [2^kSplitTop, 2^(kSplitTop + 1)).
constexpr int kSplitTop = 14;
// Nonzero magnitudes down to 2^-kSplitRange below the largest keep their remainder normal in
// float16 (scaled: 2^kSplitTop - kSplitRange = 2^-3 and up, whose remainder is 2^-14 and up).
constexpr int kSplitRange = 17;

// Lines of a float32 operand (rows of A or columns of B): element k of line l of matrix z at
// src[z * batch_stride + l * line_stride + k * k_stride]. Written as lines of 3 kp float16 values
// (kp: K rounded up to 8, zeros after K) in three segments, the remainder in segment lo_segment and
// the big part in the other two, and one inverse scale per line (scales: `scale_lines` a matrix).
struct SplitLines {
  const float* src;
  int64_t batch_stride, line_stride, k_stride;
  int64_t batches, lines, k, kp;
  int lo_segment;
  __half* dst;
  float* scales;
  int64_t scale_lines;
  int* left_out_count;  // lines left out of the split (zeroed before), listed as z * lines + l
  int64_t* left_out;
};

// One warp a line: its largest and smallest nonzero magnitudes, then its scaled parts.
__global__ void __launch_bounds__(256) split_lines_kernel(const SplitLines s) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  for (int64_t line = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;
       line < s.batches * s.lines; line += warps) {
    const int64_t z = line / s.lines, l = line % s.lines;
    const float* x = s.src + z * s.batch_stride + l * s.line_stride;
    float largest = 0.0f, smallest = INFINITY;
    bool finite = true;
    for (int64_t k = lane; k < s.k; k += 32) {
      const float v = fabsf(x[k * s.k_stride]);
      finite = finite && isfinite(v);
      largest = fmaxf(largest, v);
      if (v > 0.0f) smallest = fminf(smallest, v);
    }
    for (int offset = 16; offset > 0; offset /= 2) {
      largest = fmaxf(largest, __shfl_xor_sync(0xffffffffu, largest, offset));
      smallest = fminf(smallest, __shfl_xor_sync(0xffffffffu, smallest, offset));
    }
    finite = __all_sync(0xffffffffu, finite);
    int exponent = 0;  // largest = f 2^exponent, f in [0.5, 1): its top bit is 2^(exponent - 1)
    frexpf(largest, &exponent);
    const int up = kSplitTop + 1 - exponent;  // the scale's exponent
    const bool left_out = !finite || (largest > 0.0f && (abs(up) > kMaxSplitScaleExp ||
                                                          smallest < ldexpf(1.0f, exponent - 1 - kSplitRange)));
    if (lane == 0) {
      s.scales[z * s.scale_lines + l] = left_out ? 0.0f : ldexpf(1.0f, -up);
      if (left_out) s.left_out[atomicAdd(s.left_out_count, 1)] = line;
    }
    const float scale = ldexpf(1.0f, up);
    __half* out = s.dst + line * 3 * s.kp;
    for (int64_t k = lane; k < s.kp; k += 32) {
      // Exact: a power of two, and v normal (0 for a line left out, whose values may be non-finite).
      const float v = k < s.k && !left_out ? x[k * s.k_stride] * scale : 0.0f;
      const __half hi = __float2half_rn(v);
      const __half lo = __float2half_rn(v - __half2float(hi));
#pragma unroll
      for (int segment = 0; segment < 3; ++segment) out[segment * s.kp + k] = segment == s.lo_segment ? lo : hi;
    }
  }
}

// The product's operands as the exact recomputation reads them: the original float32 A and B.
struct ExactLines {
  const float* a;
  const float* b;
  float* c;  // batch m x n matrices, row-major
  int64_t lda, ldb, batch_stride_a, batch_stride_b;
  int64_t batch, m, n, k;
  const int* count;       // lines listed by split_lines_kernel: rows of A (kRows) or columns of B
  const int64_t* listed;  // z * lines + line, z the operand's matrix (0 for a broadcast operand)
};

// Recomputes every output of the listed rows (kRows) or columns with exact float32 fused
// multiply-adds in k order (exact_dot's arithmetic; K <= kMaxK). Each thread keeps one line of the
// other operand in registers (kRows: a column of B); the block copies the listed lines into shared
// memory kBatch at a time, every element's load at once, and each thread then walks them without a
// load in its chain of additions. A thread a listed output, reading both lines with exact_dot,
// took 0.44 ms for smallK's ~33 listed columns, each of whose 64 strided loads waited for the last
// (bench/NOTES.md item 148). The padding past K adds -0 (+0 times -0): no sum changes, signed
// zeros included. A listed line of a broadcast operand is every matrix's.
template <int kMaxK, bool kARowMajor, bool kBRowMajor, bool kRows>
__global__ void __launch_bounds__(128) exact_lines_kernel(const ExactLines e) {
  constexpr int kBatch = 32;
  __shared__ float listed_lines[kBatch][kMaxK];
  const int count = *e.count;
  if (count == 0) return;
  const int64_t lines = kRows ? e.m : e.n, across = kRows ? e.n : e.m;
  const bool listed_broadcast = (kRows ? e.batch_stride_a : e.batch_stride_b) == 0;
  const int64_t chunks = (across + blockDim.x - 1) / blockDim.x;
  auto a_at = [&](const float* a, int64_t row, int k) { return a[kARowMajor ? row * e.lda + k : k * e.lda + row]; };
  auto b_at = [&](const float* b, int k, int64_t col) { return b[kBRowMajor ? k * e.ldb + col : col * e.ldb + k]; };
  for (int64_t item = blockIdx.x; item < e.batch * chunks; item += gridDim.x) {
    const int64_t z = item / chunks, other = item % chunks * blockDim.x + threadIdx.x;
    const bool active = other < across;
    const float* a = e.a + z * e.batch_stride_a;
    const float* b = e.b + z * e.batch_stride_b;
    float mine[kMaxK];
#pragma unroll
    for (int k = 0; k < kMaxK; ++k)
      mine[k] = active && k < e.k ? (kRows ? b_at(b, k, other) : a_at(a, other, k)) : -0.0f;
    for (int first = 0; first < count; first += kBatch) {
      const int batch = min(kBatch, count - first);
      __syncthreads();  // the last batch's lines are read
      for (int i = threadIdx.x; i < batch * kMaxK; i += blockDim.x) {
        const int q = i / kMaxK, k = i % kMaxK;
        const int64_t line = e.listed[first + q] % lines;  // of matrix z (an entry of another is skipped below)
        listed_lines[q][k] = k < e.k ? (kRows ? a_at(a, line, k) : b_at(b, k, line)) : 0.0f;
      }
      __syncthreads();
      if (!active) continue;
      for (int q = 0; q < batch; ++q) {
        const int64_t entry = e.listed[first + q];
        if (!listed_broadcast && entry / lines != z) continue;
        const int64_t line = entry % lines;
        float sum = 0.0f;
#pragma unroll
        for (int k = 0; k < kMaxK; ++k)
          sum = kRows ? fmaf(listed_lines[q][k], mine[k], sum) : fmaf(mine[k], listed_lines[q][k], sum);
        e.c[(z * e.m + (kRows ? line : other)) * e.n + (kRows ? other : line)] = sum;
      }
    }
  }
}

}  // namespace tiledmm
