// The kernels of one path, exact float32 (CUDA cores): compiled in a file of their own so that paths build in parallel.
#include "cuda/dispatch/gemm_dispatch.cuh"

namespace tiledmm {
TILEDMM_FAMILY_TEMPLATES(, ExactFloatFamily)
}  // namespace tiledmm
