// The Hopper GEMM core's kernels for float16 operands (gemm_core_launch.cuh).
#include "cuda/sm90/gemm_core_launch.cuh"

namespace tiledmm {
TILEDMM_CORE_PATH_INSTANCE(__half)
}  // namespace tiledmm
