// The Hopper GEMM core's kernels for bfloat16 operands (gemm_core_launch.cuh): compiled in a file of their own so that paths build in parallel.
#include "cuda/sm90/gemm_core_launch.cuh"

namespace tiledmm {
template <>
void run_family<CorePath<__nv_bfloat16>>(const GemmProblem& p, cudaStream_t stream, const DeviceLimits& device) {
  CoreLaunch<__nv_bfloat16>::run(p, stream, device);
}
template <>
std::string describe_family<CorePath<__nv_bfloat16>>(const GemmProblem& p, const DeviceLimits& device) {
  return CoreLaunch<__nv_bfloat16>::describe(p, device);
}
}  // namespace tiledmm
