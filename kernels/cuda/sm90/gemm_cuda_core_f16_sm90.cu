// The Hopper GEMM core's kernels for float16 operands (gemm_core_launch.cuh): compiled in a file of their own so that paths build in parallel.
#include "cuda/sm90/gemm_core_launch.cuh"

namespace tiledmm {
template <>
void run_family<CorePath<__half>>(const GemmProblem& p, cudaStream_t stream, const DeviceLimits& device) {
  CoreLaunch<__half>::run(p, stream, device);
}
template <>
std::string describe_family<CorePath<__half>>(const GemmProblem& p, const DeviceLimits& device) {
  return CoreLaunch<__half>::describe(p, device);
}
}  // namespace tiledmm
