#include "gemm_dispatch.cuh"

template void tiledmm::launch_gemm<double>(const tiledmm::GemmProblem&, cudaStream_t, int);
template std::string tiledmm::describe_gemm<double>(const tiledmm::GemmProblem&, int);
