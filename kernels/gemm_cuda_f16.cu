#include "gemm_dispatch.cuh"

template void tiledmm::launch_gemm<__half>(const tiledmm::GemmProblem&, cudaStream_t, int);
template std::string tiledmm::describe_gemm<__half>(const tiledmm::GemmProblem&, int);
