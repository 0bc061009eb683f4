// The Hopper GEMM core's kernels for TF32 products of float32 operands (gemm_core_launch.cuh): compiled in a file of their own so that paths build in parallel.
#include "cuda/sm90/gemm_core_launch.cuh"

namespace tiledmm {
template <>
void run_family<CorePath<float>>(const GemmProblem& p, cudaStream_t stream, const DeviceLimits& device) {
  CoreLaunch<float>::run(p, stream, device);
}
template <>
std::string describe_family<CorePath<float>>(const GemmProblem& p, const DeviceLimits& device) {
  return CoreLaunch<float>::describe(p, device);
}
}  // namespace tiledmm
