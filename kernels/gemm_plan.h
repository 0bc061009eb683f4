// Validation and planning shared by every backend: checks the operands, describes them as a
// GemmProblem (copying only operands whose strides no kernel can read), allocates the output
// and hands the problem to the backend.
#pragma once

#include <torch/csrc/stable/tensor.h>

#include "gemm_problem.h"

namespace tiledmm {

using GemmBackend = void (*)(const GemmProblem&);

// op: the user-facing name used in error messages ("tiledmm.mm"); rank: 2 (mm) or 3 (bmm).
torch::stable::Tensor run_gemm(const char* op,
                               const torch::stable::Tensor& a,
                               const torch::stable::Tensor& b,
                               int64_t rank,
                               int64_t tile_override,
                               GemmBackend backend);

}  // namespace tiledmm
