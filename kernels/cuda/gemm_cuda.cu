// The CUDA backend: guards the device, takes the current stream and hands the problem to the
// dispatcher (gemm_dispatch.cuh).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/macros.h>

#include "cuda/dispatch/gemm_dispatch.cuh"
#include "plan/gemm_plan.h"

namespace tiledmm {

namespace {

using torch::headeronly::ScalarType;

// A GPU's attributes that the dispatcher reads. Asked of the driver once a device (four queries
// cost ~2 us of a call's host time on an H100 machine): they cannot change while the process runs.
struct DeviceAttributes {
  int num_sms, max_smem, major, minor;
};

DeviceAttributes query_attributes(int32_t device_index) {
  DeviceAttributes a{};
  STD_CUDA_CHECK(cudaDeviceGetAttribute(&a.num_sms, cudaDevAttrMultiProcessorCount, device_index));
  STD_CUDA_CHECK(cudaDeviceGetAttribute(&a.max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device_index));
  STD_CUDA_CHECK(cudaDeviceGetAttribute(&a.major, cudaDevAttrComputeCapabilityMajor, device_index));
  STD_CUDA_CHECK(cudaDeviceGetAttribute(&a.minor, cudaDevAttrComputeCapabilityMinor, device_index));
  return a;
}

DeviceAttributes attributes_of(int32_t device_index) {
  constexpr int kCachedDevices = 64;
  if (device_index < 0 || device_index >= kCachedDevices) return query_attributes(device_index);
  static std::once_flag once[kCachedDevices];
  static DeviceAttributes cached[kCachedDevices];
  std::call_once(once[device_index], [&] { cached[device_index] = query_attributes(device_index); });
  return cached[device_index];
}

DeviceLimits limits_of(int32_t device_index) {
  const DeviceAttributes attributes = attributes_of(device_index);
  DeviceLimits limits{};
  limits.num_sms = attributes.num_sms;
  limits.max_smem = attributes.max_smem;
  const int major = attributes.major, minor = attributes.minor;
  // sm_90a code runs on compute capability 9.0 only; setup.py defines TILEDMM_SM90A when it builds
  // it. Off when the driver compiles PTX instead of loading the sm_90a image (CUDA_FORCE_PTX_JIT:
  // the PTX is compute_80's, without wgmma), and with TILEDMM_NO_WGMMA=1 (read at every call:
  // the tests run the mma.sync kernels, Ampere's, on a Hopper GPU this way).
#if defined(TILEDMM_SM90A)
  auto set = [](const char* name) {
    const char* value = std::getenv(name);
    return value != nullptr && std::string(value) == "1";
  };
  limits.wgmma = major == 9 && minor == 0 && !set("CUDA_FORCE_PTX_JIT") && !set("TILEDMM_NO_WGMMA");
#else
  (void)major, (void)minor;
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

void add_bias_cuda(const GemmProblem& p) {
  torch::stable::accelerator::DeviceGuard guard(p.device_index);
  void* stream = nullptr;
  TORCH_ERROR_CODE_CHECK(aoti_torch_get_current_cuda_stream(p.device_index, &stream));
  with_device_type(p.dtype, [&](auto* type) {
    using T = std::remove_pointer_t<decltype(type)>;
    const int64_t total = p.batch * p.m * p.n;
    const int64_t blocks = std::min<int64_t>((total + 255) / 256, 65535);
    add_bias_kernel<T><<<static_cast<unsigned>(blocks), 256, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<T*>(p.c), static_cast<const T*>(p.bias), p.n, p.bias_stride, total);
    STD_CUDA_KERNEL_LAUNCH_CHECK();
  });
}

// The compute capabilities (10 major + minor; sm_90a as 90) in a list that setup.py passed as one
// preprocessing number, dot-separated ("80.90.100.120"; nvcc splits a -D value at commas).
#define TILEDMM_STRING(x) #x
#define TILEDMM_EXPANDED_STRING(x) TILEDMM_STRING(x)
std::vector<int> capabilities(const std::string& list) {
  std::vector<int> out;
  for (size_t at = 0; at < list.size();) {
    const size_t end = std::min(list.find('.', at), list.size());
    out.push_back(std::stoi(list.substr(at, end - at)));
    at = end + 1;
  }
  return out;
}

// The code this build holds for a GPU of compute capability major.minor, from the targets setup.py
// built (TILEDMM_SASS_TARGETS: machine code; TILEDMM_PTX_TARGETS: PTX). Machine code runs on its own
// major version at its minor version or later; PTX, which the driver compiles at first use, on any
// later GPU (and on every GPU under CUDA_FORCE_PTX_JIT=1).
std::string code_for(int major, int minor) {
#if defined(TILEDMM_SASS_TARGETS)
  const std::string capability = std::to_string(major) + "." + std::to_string(minor);
  const char* forced = std::getenv("CUDA_FORCE_PTX_JIT");
  const bool machine_code = forced == nullptr || std::string(forced) != "1";
  for (const int s : capabilities(TILEDMM_EXPANDED_STRING(TILEDMM_SASS_TARGETS))) {
    if (machine_code && s / 10 == major && s % 10 <= minor) {
#if defined(TILEDMM_SM90A)
      const char* suffix = s == 90 ? "a" : "";
#else
      const char* suffix = "";
#endif
      return "sm_" + std::to_string(s) + suffix + " machine code from the build";
    }
  }
  int ptx = 0;
  for (const int p : capabilities(TILEDMM_EXPANDED_STRING(TILEDMM_PTX_TARGETS)))
    ptx = p <= 10 * major + minor && p > ptx ? p : ptx;
  if (ptx != 0)
    return "compute_" + std::to_string(ptx) + " PTX, compiled by the driver at first use (" +
           (machine_code ? "the build has no machine code for compute capability " + capability
                         : std::string("CUDA_FORCE_PTX_JIT=1")) +
           ")";
  return "none for compute capability " + capability + ": rebuild with TORCH_CUDA_ARCH_LIST=\"" + capability + "\"";
#else
  (void)major, (void)minor;
  return "as TORCH_CUDA_ARCH_LIST named it at build time";
#endif
}

std::string describe_cuda(const GemmProblem& p) {
  const DeviceLimits limits = limits_of(p.device_index);
  cudaDeviceProp prop{};
  STD_CUDA_CHECK(cudaGetDeviceProperties(&prop, p.device_index));
  const std::string gpu = "gpu: " + std::string(prop.name) + " (compute capability " + std::to_string(prop.major) +
                          "." + std::to_string(prop.minor) + "), " + code_for(prop.major, prop.minor) + "; " +
                          (limits.wgmma ? "Hopper's wgmma and TMA kernels" : "the mma.sync kernels") + "\n";
  return gpu + with_device_type(p.dtype, [&](auto* type) {
    std::string text;
    with_family<std::remove_pointer_t<decltype(type)>>(p, limits, [&](auto family, const auto& why) {
      text = "path: " + std::string(why) + "\n" + describe_family<decltype(family)>(p, limits);
    });
    return text;
  });
}

constexpr GemmBackend kCuda{gemm_cuda, describe_cuda, add_bias_cuda};

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(tiledmm, CUDA, m) {
  register_gemm_ops<kCuda>(m);
}

}  // namespace tiledmm
