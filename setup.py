"""Builds tiledmm's CUDA extension ahead of time against the LibTorch stable ABI.

The result, tiledmm/_C.abi3.so, targets the stable ABI of torch 2.10 (TORCH_TARGET_VERSION) and
the limited Python API of CPython 3.10 (torch's BuildExtension defines Py_LIMITED_API=0x030A0000,
and no torch >= 2.10 installs on an older Python), so one cp310-abi3 wheel serves every Python >= 3.10
and torch >= 2.10. Building needs nvcc, never a GPU.
"""

import glob
import os
import shutil

from setuptools import setup


def find_cuda_home():
    """The CUDA toolkit root: the first of CUDA_HOME, CUDA_PATH, the toolkit of the nvcc on PATH
    and /usr/local/cuda that has both nvcc and the runtime headers. (An nvcc on PATH may be a
    wrapper script outside the toolkit, so its location alone is not trusted.)"""
    candidates = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")]
    nvcc = shutil.which("nvcc")
    if nvcc:
        candidates.append(os.path.dirname(os.path.dirname(os.path.realpath(nvcc))))
    candidates += glob.glob("/usr/local/cuda") + sorted(glob.glob("/usr/local/cuda-*"), reverse=True)
    for root in filter(None, candidates):
        if os.path.isfile(os.path.join(root, "bin", "nvcc")) and os.path.isfile(
            os.path.join(root, "include", "cuda_runtime.h")
        ):
            return root
    raise RuntimeError(
        "tiledmm needs the CUDA toolkit's compiler nvcc to build (no GPU is needed), and none was "
        f"found (looked in {[c for c in candidates if c]}). Install the CUDA toolkit and set "
        "CUDA_HOME to its root, e.g. CUDA_HOME=/usr/local/cuda."
    )


def gpu_targets():
    """nvcc's -gencode flags and whether sm_90a (Hopper's wgmma) is among them. By default native
    code for Ampere (sm_80) and Hopper (sm_90a, which only compute capability 9.0 runs) and PTX of
    compute_90 that newer GPUs compile at load time. TORCH_CUDA_ARCH_LIST (e.g. "8.9;9.0a")
    overrides; without "9.0a" in it, Hopper runs the mma.sync kernels."""
    arch_list = os.environ.get("TORCH_CUDA_ARCH_LIST")
    if arch_list:
        archs = [a.split("+")[0] for a in arch_list.replace(" ", ";").split(";")]
        if "9.0a" in archs and "9.0" in archs:
            # With both an sm_90 and an sm_90a image, the one the driver loads decides whether
            # the wgmma kernels exist; tiledmm's dispatcher must know that at build time.
            raise RuntimeError(f"tiledmm: TORCH_CUDA_ARCH_LIST={arch_list!r} names both 9.0 and 9.0a; "
                               "name one (9.0a for Hopper's wgmma kernels)")
        return [], "9.0a" in archs
    targets = [("80", "sm_80"), ("90a", "sm_90a"), ("90", "compute_90")]
    return [f"-gencode=arch=compute_{arch},code={code}" for arch, code in targets], True


os.environ["CUDA_HOME"] = find_cuda_home()
GENCODE, WITH_SM90A = gpu_targets()

from torch.utils.cpp_extension import BuildExtension, CUDAExtension  # noqa: E402

# The LibTorch stable ABI of torch 2.10 ([major][minor][patch][abi tag]). BuildExtension adds
# Py_LIMITED_API=0x030A0000 itself for py_limited_api extensions (the module uses only
# PyModule_Create of it), hence the cp310-abi3 tag.
STABLE_ABI = ["-DTORCH_TARGET_VERSION=0x020a000000000000"]

here = os.path.dirname(os.path.abspath(__file__))
sources = sorted(glob.glob(os.path.join("kernels", "**", "*.cpp"), recursive=True)
                 + glob.glob(os.path.join("kernels", "**", "*.cu"), recursive=True))

setup(
    ext_modules=[
        CUDAExtension(
            "tiledmm._C",
            sources,
            include_dirs=[os.path.join(here, "kernels")],
            extra_compile_args={
                "cxx": ["-O3", *STABLE_ABI],
                # USE_CUDA declares aoti_torch_get_current_cuda_stream in the shim header.
                # With -gencode flags given here, torch adds none from TORCH_CUDA_ARCH_LIST.
                "nvcc": ["-O3", "-DUSE_CUDA", *STABLE_ABI, *GENCODE]
                + (["-DTILEDMM_SM90A"] if WITH_SM90A else []),
            },
            py_limited_api=True,
        )
    ],
    cmdclass={"build_ext": BuildExtension},
    options={"bdist_wheel": {"py_limited_api": "cp310"}},
)
