// The CUDA backend: guards the device, takes the current stream and hands the problem to the
// dispatcher of its dtype.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/macros.h>

#include "gemm_plan.h"

namespace tiledmm {

// Defined (and explicitly instantiated per dtype) in gemm_dispatch.cuh / gemm_cuda_<dtype>.cu.
template <typename T>
void launch_gemm(const GemmProblem& p, cudaStream_t stream, int num_sms);

namespace {

using torch::headeronly::ScalarType;
using torch::stable::Tensor;

void gemm_cuda(const GemmProblem& p) {
  torch::stable::accelerator::DeviceGuard guard(p.device_index);
  void* stream = nullptr;
  TORCH_ERROR_CODE_CHECK(aoti_torch_get_current_cuda_stream(p.device_index, &stream));
  int num_sms = 0;
  STD_CUDA_CHECK(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, p.device_index));
  const auto s = static_cast<cudaStream_t>(stream);
  switch (p.dtype) {
    case ScalarType::Float: return launch_gemm<float>(p, s, num_sms);
    case ScalarType::Double: return launch_gemm<double>(p, s, num_sms);
    case ScalarType::Half: return launch_gemm<__half>(p, s, num_sms);
    case ScalarType::BFloat16: return launch_gemm<__nv_bfloat16>(p, s, num_sms);
    default: STD_TORCH_CHECK(false, "tiledmm: no CUDA kernel for this dtype");
  }
}

Tensor mm_cuda(const Tensor& a, const Tensor& b) {
  return run_gemm("tiledmm.mm", a, b, 2, -1, gemm_cuda);
}

Tensor bmm_cuda(const Tensor& a, const Tensor& b) {
  return run_gemm("tiledmm.bmm", a, b, 3, -1, gemm_cuda);
}

Tensor bmm_with_tile_cuda(const Tensor& a, const Tensor& b, int64_t tile) {
  return run_gemm("tiledmm._bmm_with_tile", a, b, 3, tile, gemm_cuda);
}

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(tiledmm, CUDA, m) {
  m.impl("mm", TORCH_BOX(&mm_cuda));
  m.impl("bmm", TORCH_BOX(&bmm_cuda));
  m.impl("_bmm_with_tile", TORCH_BOX(&bmm_with_tile_cuda));
}

}  // namespace tiledmm
