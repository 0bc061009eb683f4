#include "gemm_dispatch.cuh"

template void tiledmm::launch_gemm<__nv_bfloat16>(const tiledmm::GemmProblem&, cudaStream_t, int);
template std::string tiledmm::describe_gemm<__nv_bfloat16>(const tiledmm::GemmProblem&, int);
