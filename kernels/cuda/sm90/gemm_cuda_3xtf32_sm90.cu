// The kernels of one path, 3xTF32 on Hopper's warpgroup tensor cores (wgmma): compiled in a file of their own so that paths build in parallel.
#include "cuda/dispatch/gemm_dispatch.cuh"

namespace tiledmm {
TILEDMM_FAMILY_TEMPLATES(, Wgmma3xTf32Family)
}  // namespace tiledmm
