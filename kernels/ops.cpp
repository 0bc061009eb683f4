// Declares tiledmm's operators with PyTorch's dispatcher; the backends register their kernels
// (gemm_cpu.cpp, gemm_cuda.cu) and Python registers fake kernels and autograd.
#include <Python.h>

#include <torch/csrc/stable/library.h>

extern "C" {
// Importing tiledmm._C loads this library, whose static initializers register the operators.
// The module itself is empty.
PyMODINIT_FUNC PyInit__C(void) {
  static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, nullptr};
  return PyModule_Create(&module);
}
}

STABLE_TORCH_LIBRARY(tiledmm, m) {
  // precision: how float32 products are computed (Precision in gemm_problem.h: 0 exact, 1 3xTF32,
  // 2 TF32, 3 float32-accurate by the fastest path); other dtypes ignore it. tiledmm.matmul maps names and torch's setting onto it.
  m.def("mm(Tensor a, Tensor b, int precision=0) -> Tensor");
  // linear's products on inputs of any leading dimensions, without views (run_gemm_nd in
  // gemm_plan.h): a's and b's rows folded, each transposed where ta / tb, plus linear's bias (of a's
  // dtype and device; shape (n,), (1,) or ()) added to every row, in the kernel's epilogue where it
  // has one (torch's addmm). Internal: tiledmm.linear's and mm's eager paths.
  m.def("_gemm_nd(Tensor a, Tensor b, bool ta, bool tb, Tensor? bias, int precision=0) -> Tensor");
  m.def("bmm(Tensor a, Tensor b, int precision=0) -> Tensor");
  // mm and bmm without autograd (no Python autograd kernel on the way to the kernel): what
  // torch.compile's graphs record and call (tiledmm/autograd.py's Compiled). Internal.
  m.def("_mm_raw(Tensor a, Tensor b, int precision=0) -> Tensor");
  m.def("_bmm_raw(Tensor a, Tensor b, int precision=0) -> Tensor");
  // bmm with the kernel configuration forced: tile >= 0 indexes the dispatcher's tile table,
  // splits >= 1 slices K. Lets tests, the sanitizer script and the tile sweep reach every kernel
  // variant at any shape.
  m.def("_bmm_with_config(Tensor a, Tensor b, int tile, int splits, int precision=0) -> Tensor");
  // What mm (2-D operands) or bmm (3-D) would run for these operands, and why (tiledmm.explain).
  m.def("_explain(Tensor a, Tensor b, int precision=0) -> str");
}
