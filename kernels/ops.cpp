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
  m.def("mm(Tensor a, Tensor b) -> Tensor");
  m.def("bmm(Tensor a, Tensor b) -> Tensor");
  // bmm with the tile configuration forced (tile >= 0 indexes the dispatcher's table); lets tests
  // and the sanitizer script reach every kernel variant at small shapes.
  m.def("_bmm_with_tile(Tensor a, Tensor b, int tile) -> Tensor");
}
