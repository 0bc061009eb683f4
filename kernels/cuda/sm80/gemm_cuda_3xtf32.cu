// The kernels of one path, float32 as 3xTF32 on tensor cores: compiled in a file of their own so that paths build in parallel.
#include "cuda/dispatch/gemm_dispatch.cuh"

namespace tiledmm {
TILEDMM_FAMILY_TEMPLATES(, MmaFamily<Split3xTf32Math>)
}  // namespace tiledmm
