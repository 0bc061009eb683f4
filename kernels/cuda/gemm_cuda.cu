// The CUDA backend: guards the device, takes the current stream and hands the problem to the
// dispatcher (gemm_dispatch.cuh).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdlib>
#include <string>
#include <type_traits>

#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/macros.h>

#include "cuda/dispatch/gemm_dispatch.cuh"
#include "plan/gemm_plan.h"

namespace tiledmm {

namespace {

using torch::headeronly::ScalarType;

DeviceLimits limits_of(int32_t device_index) {
  DeviceLimits limits{};
  STD_CUDA_CHECK(cudaDeviceGetAttribute(&limits.num_sms, cudaDevAttrMultiProcessorCount, device_index));
  STD_CUDA_CHECK(cudaDeviceGetAttribute(&limits.max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                                        device_index));
  int major = 0, minor = 0;
  STD_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device_index));
  STD_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device_index));
  // sm_90a code runs on compute capability 9.0 only; setup.py defines TILEDMM_SM90A when it builds
  // it. Off when the driver compiles PTX instead of loading the sm_90a image (CUDA_FORCE_PTX_JIT:
  // the PTX is compute_90's, without wgmma), and with TILEDMM_NO_WGMMA=1 (read at every call:
  // the tests run the mma.sync kernels, Ampere's, on a Hopper GPU this way).
#if defined(TILEDMM_SM90A)
  auto set = [](const char* name) {
    const char* value = std::getenv(name);
    return value != nullptr && std::string(value) == "1";
  };
  limits.wgmma = major == 9 && minor == 0 && !set("CUDA_FORCE_PTX_JIT") && !set("TILEDMM_NO_WGMMA");
#else
  limits.wgmma = false;
#endif
  return limits;
}

// Calls f with a null pointer of the problem's device storage type.
template <typename F>
auto with_device_type(ScalarType dtype, F&& f) {
  switch (dtype) {
    case ScalarType::Float: return f(static_cast<float*>(nullptr));
    case ScalarType::Double: return f(static_cast<double*>(nullptr));
    case ScalarType::Half: return f(static_cast<__half*>(nullptr));
    case ScalarType::BFloat16: return f(static_cast<__nv_bfloat16*>(nullptr));
    default: STD_TORCH_CHECK(false, "tiledmm: no CUDA kernel for this dtype");
  }
}

void gemm_cuda(const GemmProblem& p) {
  torch::stable::accelerator::DeviceGuard guard(p.device_index);
  void* stream = nullptr;
  TORCH_ERROR_CODE_CHECK(aoti_torch_get_current_cuda_stream(p.device_index, &stream));
  const DeviceLimits limits = limits_of(p.device_index);
  with_device_type(p.dtype, [&](auto* type) {
    with_family<std::remove_pointer_t<decltype(type)>>(p, limits, [&](auto family, const auto&) {
      run_family<decltype(family)>(p, static_cast<cudaStream_t>(stream), limits);
    });
  });
}

std::string describe_cuda(const GemmProblem& p) {
  const DeviceLimits limits = limits_of(p.device_index);
  return with_device_type(p.dtype, [&](auto* type) {
    std::string text;
    with_family<std::remove_pointer_t<decltype(type)>>(p, limits, [&](auto family, const auto& why) {
      text = "path: " + std::string(why) + "\n" + describe_family<decltype(family)>(p, limits);
    });
    return text;
  });
}

constexpr GemmBackend kCuda{gemm_cuda, describe_cuda};

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(tiledmm, CUDA, m) {
  register_gemm_ops<kCuda>(m);
}

}  // namespace tiledmm
