// The kernels of one path, float64 tensor cores: compiled in a file of their own so that paths build in parallel.
#include "cuda/dispatch/gemm_dispatch.cuh"

namespace tiledmm {
TILEDMM_FAMILY_TEMPLATES(, MmaFamily<DoubleMath>)
}  // namespace tiledmm
