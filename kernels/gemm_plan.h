// Validation and planning shared by every backend: checks the operands, describes them as a
// GemmProblem (copying only operands whose strides no kernel can read), allocates the output
// and hands the problem to the backend.
#pragma once

#include <string>

#include <torch/csrc/stable/tensor.h>

#include "gemm_problem.h"

namespace tiledmm {

// A backend runs a problem, or says in words what running it would do (tiledmm.explain).
struct GemmBackend {
  void (*run)(const GemmProblem&);
  std::string (*describe)(const GemmProblem&);
};

// Forced configuration (tests): tile index and K splits; -1 and 0 mean the dispatcher chooses.
struct ConfigOverride {
  int64_t tile = -1;
  int64_t splits = 0;
};

// op: the user-facing name used in error messages ("tiledmm.mm"); rank: 2 (mm) or 3 (bmm).
torch::stable::Tensor run_gemm(const char* op, const torch::stable::Tensor& a,
                               const torch::stable::Tensor& b, int64_t rank,
                               ConfigOverride config, const GemmBackend& backend);

// What run_gemm would do with these operands, without running it.
std::string explain_gemm(const char* op, const torch::stable::Tensor& a,
                         const torch::stable::Tensor& b, int64_t rank, const GemmBackend& backend);

}  // namespace tiledmm
