// The one description of a matrix product that every backend (CPU loops, CUDA kernels) runs.
//
// C[b] = A[b] @ B[b] for b in [0, batch), A[b] is m x k, B[b] is k x n, C is a fresh row-major
// tensor. Each operand is read through its strides: row-major (the last dimension is
// unit-stride) or column-major (the first is), with an arbitrary leading dimension and batch
// stride (0 for a broadcast batch). All offsets are 64-bit.
#pragma once

#include <cstdint>

#include <torch/headeronly/core/ScalarType.h>

namespace tiledmm {

// How float32 products are computed (other dtypes have one path each). tiledmm.matmul's
// precision names map onto these codes in Python (tiledmm/_precision.py).
enum class Precision : int {
  kIeee = 0,    // exact float32 fused multiply-adds on CUDA cores
  k3xTf32 = 1,  // three TF32 tensor-core products per step: float32 accuracy
  kTf32 = 2,    // inputs rounded to TF32 (10-bit mantissa), one tensor-core product
  kHighest = 3, // float32 accuracy by the fastest path that has it (the dispatcher chooses)
};
constexpr int kNumPrecisions = 4;

struct MatrixOperand {
  const void* data;
  int64_t ld;            // distance between consecutive rows (row-major) or columns (column-major)
  int64_t batch_stride;  // elements between consecutive matrices of the batch; 0 when broadcast
  bool row_major;
};

struct GemmProblem {
  torch::headeronly::ScalarType dtype;
  int64_t batch, m, n, k;
  MatrixOperand a;  // m x k
  MatrixOperand b;  // k x n
  void* c;          // m x n, row-major, leading dimension n, batch stride m * n
  int32_t device_index;
  Precision precision;  // float32 only
  // Forces a kernel configuration (tests, tile sweeps); -1 and 0 let the dispatcher choose.
  int tile_override;        // an index into the dispatcher's tile table
  int64_t splits_override;  // the number of slices K is split into
  // Set by the dispatcher only (transposed(): the families' orient, the core's plan_core_run): the
  // kernel computes C^T = B^T A^T, an n x m product whose result it writes column-major into c.
  bool c_transposed;
  // linear's bias (tiledmm::_gemm_nd), or null: column j of C gains bias[j * bias_stride] (stride 0:
  // one value for all). A kernel that adds it in its epilogue, to the float32 sums before their
  // rounding, sets *bias_added; otherwise the backend adds it to C afterwards (GemmBackend::add_bias).
  const void* bias;
  int64_t bias_stride;
  bool* bias_added;
};

// C^T = B^T A^T for p: an n x m product of B's and A's memory, each read transposed (a row-major
// matrix's transpose is column-major, and the other way round), whose result the kernel writes
// column-major into c, which is C row-major.
inline GemmProblem transposed(const GemmProblem& p) {
  GemmProblem q = p;
  q.a = p.b;
  q.b = p.a;
  q.a.row_major = !p.b.row_major;
  q.b.row_major = !p.a.row_major;
  q.m = p.n;
  q.n = p.m;
  q.c_transposed = true;
  return q;
}

}  // namespace tiledmm
