#include "gemm_dispatch.cuh"

template void tiledmm::launch_gemm<float>(const tiledmm::GemmProblem&, cudaStream_t, int);
template std::string tiledmm::describe_gemm<float>(const tiledmm::GemmProblem&, int);
