// The CPU backend: plain loops over the same strided GemmProblem the CUDA kernels run, so CPU
// tensors work and the planning code is exercised without a GPU.
#include <string>
#include <vector>

#include <torch/csrc/stable/library.h>
#include <torch/headeronly/util/BFloat16.h>
#include <torch/headeronly/util/Half.h>

#include "plan/accumulator.h"
#include "plan/gemm_plan.h"

namespace tiledmm {
namespace {

using torch::headeronly::ScalarType;

template <typename T>
T element(const MatrixOperand& x, int64_t batch, int64_t row, int64_t col) {
  const int64_t offset = batch * x.batch_stride + (x.row_major ? row * x.ld + col : col * x.ld + row);
  return static_cast<const T*>(x.data)[offset];
}

template <typename T>
void gemm_cpu_typed(const GemmProblem& p) {
  using Acc = typename Accumulator<T>::type;
  std::vector<Acc> row(p.n);
  T* c = static_cast<T*>(p.c);
  const T* bias = static_cast<const T*>(p.bias);  // added to the sums before their rounding
  if (bias != nullptr) *p.bias_added = true;
  for (int64_t z = 0; z < p.batch; ++z) {
    for (int64_t i = 0; i < p.m; ++i) {
      std::fill(row.begin(), row.end(), Acc(0));
      for (int64_t kk = 0; kk < p.k; ++kk) {
        const Acc a = static_cast<Acc>(element<T>(p.a, z, i, kk));
        for (int64_t j = 0; j < p.n; ++j) row[j] += a * static_cast<Acc>(element<T>(p.b, z, kk, j));
      }
      T* out = c + (z * p.m + i) * p.n;
      if (bias != nullptr)
        for (int64_t j = 0; j < p.n; ++j) row[j] += static_cast<Acc>(bias[j * p.bias_stride]);
      for (int64_t j = 0; j < p.n; ++j) out[j] = static_cast<T>(row[j]);
    }
  }
}

void gemm_cpu(const GemmProblem& p) {
  switch (p.dtype) {
    case ScalarType::Float: return gemm_cpu_typed<float>(p);
    case ScalarType::Double: return gemm_cpu_typed<double>(p);
    case ScalarType::Half: return gemm_cpu_typed<torch::headeronly::Half>(p);
    case ScalarType::BFloat16: return gemm_cpu_typed<torch::headeronly::BFloat16>(p);
    default: STD_TORCH_CHECK(false, "tiledmm: no CPU kernel for this dtype");
  }
}

std::string describe_cpu(const GemmProblem& p) {
  return std::string("CPU backend: plain loops over the strided operands, accumulating in ") +
         (p.dtype == ScalarType::Double ? "float64" : "float32") +
         " (every float32 precision setting computes exact float32 here)";
}

constexpr GemmBackend kCpu{gemm_cpu, describe_cpu, nullptr};  // its loops add the bias

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(tiledmm, CPU, m) {
  register_gemm_ops<kCpu>(m);
}

}  // namespace tiledmm
