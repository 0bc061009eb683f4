#include "gemm_dispatch.cuh"

template void tiledmm::launch_gemm<float>(const tiledmm::GemmProblem&, cudaStream_t, int);
