// Validation and planning shared by every backend: checks the operands, describes them as a
// GemmProblem (copying only operands whose strides no kernel can read), allocates the output
// and hands the problem to the backend.
#pragma once

#include <optional>
#include <string>

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/tensor.h>

#include "plan/gemm_problem.h"

namespace tiledmm {

// A backend runs a problem, or says in words what running it would do (tiledmm.explain), and adds
// a bias to a problem's output where its kernel did not (add_bias; null where every kernel does).
struct GemmBackend {
  void (*run)(const GemmProblem&);
  std::string (*describe)(const GemmProblem&);
  void (*add_bias)(const GemmProblem&);
};

// The caller's choices: the float32 precision code (Precision), and a forced configuration
// (tests): tile index and K splits, where -1 and 0 mean the dispatcher chooses.
struct GemmOptions {
  int64_t precision = 0;
  int64_t tile = -1;
  int64_t splits = 0;
};

// op: the user-facing name used in error messages ("tiledmm.mm"); rank: 2 (mm) or 3 (bmm).
torch::stable::Tensor run_gemm(const char* op, const torch::stable::Tensor& a,
                               const torch::stable::Tensor& b, int64_t rank,
                               GemmOptions options, const GemmBackend& backend);

// linear's products without views: A = a's leading dimensions folded into rows (a copy only where
// they do not fold), transposed where ta; B likewise from b and tb; C = A B (+ bias on every row), in
// a's shape with its last dimension n where a is N-D and not transposed, else m x n. It serves
// x @ W^T (ta 0, tb 1), dY W (0, 0) and dY^T x (1, 0) for inputs of any leading dimensions, and
// mm plus a bias (2-D, 0, 0).
torch::stable::Tensor run_gemm_nd(const torch::stable::Tensor& a, const torch::stable::Tensor& b, bool ta, bool tb,
                                  const torch::stable::Tensor* bias, int64_t precision, const GemmBackend& backend);

// What run_gemm would do with these operands, without running it.
std::string explain_gemm(const char* op, const torch::stable::Tensor& a,
                         const torch::stable::Tensor& b, int64_t rank, GemmOptions options,
                         const GemmBackend& backend);

// Registers the operators (ops.cpp declares them) for one backend:
//   STABLE_TORCH_LIBRARY_IMPL(tiledmm, CPU, m) { register_gemm_ops<kCpu>(m); }
template <const GemmBackend& kBackend>
struct GemmOps {
  using Tensor = torch::stable::Tensor;
  static Tensor mm(const Tensor& a, const Tensor& b, int64_t precision) {
    return run_gemm("tiledmm.mm", a, b, 2, {precision}, kBackend);
  }
  static Tensor gemm_nd(const Tensor& a, const Tensor& b, bool ta, bool tb, std::optional<Tensor> bias,
                        int64_t precision) {
    return run_gemm_nd(a, b, ta, tb, bias ? &*bias : nullptr, precision, kBackend);
  }
  static Tensor bmm(const Tensor& a, const Tensor& b, int64_t precision) {
    return run_gemm("tiledmm.bmm", a, b, 3, {precision}, kBackend);
  }
  static Tensor bmm_with_config(const Tensor& a, const Tensor& b, int64_t tile, int64_t splits,
                                int64_t precision) {
    return run_gemm("tiledmm._bmm_with_config", a, b, 3, {precision, tile, splits}, kBackend);
  }
  static std::string explain(const Tensor& a, const Tensor& b, int64_t precision) {
    const bool batched = a.dim() == 3;
    return explain_gemm(batched ? "tiledmm.bmm" : "tiledmm.mm", a, b, batched ? 3 : 2,
                        {precision}, kBackend);
  }
};

template <const GemmBackend& kBackend, typename Library>
void register_gemm_ops(Library& m) {
  using Ops = GemmOps<kBackend>;
  m.impl("mm", TORCH_BOX(&Ops::mm));
  m.impl("_gemm_nd", TORCH_BOX(&Ops::gemm_nd));
  m.impl("bmm", TORCH_BOX(&Ops::bmm));
  m.impl("_mm_raw", TORCH_BOX(&Ops::mm));
  m.impl("_bmm_raw", TORCH_BOX(&Ops::bmm));
  m.impl("_bmm_with_config", TORCH_BOX(&Ops::bmm_with_config));
  m.impl("_explain", TORCH_BOX(&Ops::explain));
}

}  // namespace tiledmm
