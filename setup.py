"""Builds tiledmm's CUDA extension ahead of time against the LibTorch stable ABI.

The result, tiledmm/_C.abi3.so, targets the stable ABI of torch 2.10 (TORCH_TARGET_VERSION) and
the limited Python API of CPython 3.10 (torch's BuildExtension defines Py_LIMITED_API=0x030A0000,
and no torch >= 2.10 installs on an older Python), so one cp310-abi3 wheel serves every Python >= 3.10
and torch >= 2.10. Building needs nvcc, never a GPU.
"""

import glob
import os
import re
import shutil
import subprocess

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
    """nvcc's -gencode flags (none where torch makes them from TORCH_CUDA_ARCH_LIST), whether sm_90a
    (Hopper's wgmma) is among them, and the compute capabilities (10 major + minor; sm_90a as 90)
    the build holds machine code for and PTX of, from which tiledmm.explain names the code a GPU
    runs (None where TORCH_CUDA_ARCH_LIST names architectures, as "Ampere").

    By default, native code for every NVIDIA generation CUDA 13 builds: Ampere and Ada (sm_80, which
    8.6 and 8.9 run), Hopper (sm_90a: wgmma and TMA kernels; only compute capability 9.0 runs it),
    data-center Blackwell (sm_100, also 10.3) and desktop Blackwell (sm_120, also 12.1), plus
    compute_80 PTX that any later GPU compiles at load time. The mma.sync kernels use nothing past
    sm_80, so one front-end pass (compute_80) serves sm_80, sm_100, sm_120 and the PTX: each more
    target costs only ptxas, and PTX of an older virtual architecture JIT-compiles on more GPUs.
    TORCH_CUDA_ARCH_LIST (e.g. "8.9;9.0a", or "12.0" to build for one GPU only, faster) overrides;
    without "9.0a" in it, Hopper runs the mma.sync kernels."""
    arch_list = os.environ.get("TORCH_CUDA_ARCH_LIST")
    if arch_list:
        entries = [e for e in arch_list.replace(" ", ";").split(";") if e]
        archs = [e.split("+")[0] for e in entries]
        if "9.0a" in archs and "9.0" in archs:
            # With both an sm_90 and an sm_90a image, the one the driver loads decides whether
            # the wgmma kernels exist; tiledmm's dispatcher must know that at build time.
            raise RuntimeError(f"tiledmm: TORCH_CUDA_ARCH_LIST={arch_list!r} names both 9.0 and 9.0a; "
                               "name one (9.0a for Hopper's wgmma kernels)")
        number = lambda arch: int(arch.rstrip("a").replace(".", ""))  # noqa: E731
        if not all(re.fullmatch(r"\d+\.\d+a?(\+PTX)?", e) for e in entries):
            return [], "9.0a" in archs, None, None  # named architectures ("Ampere"): torch's table
        sass = [number(e.split("+")[0]) for e in entries]
        ptx = [number(e.split("+")[0]) for e in entries if e.endswith("+PTX")]
        return [], "9.0a" in archs, sass, ptx
    blackwell = ["sm_100", "sm_120"] if nvcc_version() >= (12, 8) else []
    if not blackwell:
        print("tiledmm: nvcc before 12.8 builds no Blackwell (sm_100, sm_120) code; those GPUs will compile the "
              "compute_80 PTX at first use")
    ampere_codes = ",".join(["sm_80", *blackwell, "compute_80"])
    sass = [80, 90] + [int(code[3:]) for code in blackwell]
    return [f"-gencode=arch=compute_80,code=[{ampere_codes}]", "-gencode=arch=compute_90a,code=sm_90a"], True, sass, [80]


def nvcc_version():
    """(major, minor) of CUDA_HOME's nvcc."""
    nvcc = os.path.join(os.environ["CUDA_HOME"], "bin", "nvcc")
    text = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=True).stdout
    match = re.search(r"release (\d+)\.(\d+)", text)
    if not match:
        raise RuntimeError(f"tiledmm: could not read the CUDA version from `{nvcc} --version`:\n{text}")
    return int(match.group(1)), int(match.group(2))


os.environ["CUDA_HOME"] = find_cuda_home()
GENCODE, WITH_SM90A, SASS, PTX = gpu_targets()

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
                + (["-DTILEDMM_SM90A"] if WITH_SM90A else [])
                # Dot-separated: nvcc splits a -D option's value at commas.
                + ([f"-DTILEDMM_SASS_TARGETS={'.'.join(map(str, SASS))}",
                    f"-DTILEDMM_PTX_TARGETS={'.'.join(map(str, PTX))}"] if SASS is not None else []),
            },
            py_limited_api=True,
        )
    ],
    cmdclass={"build_ext": BuildExtension},
    options={"bdist_wheel": {"py_limited_api": "cp310"}},
)
