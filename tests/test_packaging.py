"""The installed package is the abi3 wheel, and the sdist ships the kernel sources."""

import importlib.metadata
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

import tiledmm

REPO = Path(__file__).resolve().parents[1]


def test_extension_is_abi3():
    assert tiledmm._C.__file__.endswith(".abi3.so"), tiledmm._C.__file__


def test_installed_wheel_is_cp310_abi3():
    wheel = importlib.metadata.distribution("tiledmm").read_text("WHEEL")
    if wheel is None:
        pytest.skip("tiledmm is not installed from a wheel (editable or source install)")
    tags = [line.split(": ", 1)[1] for line in wheel.splitlines() if line.startswith("Tag: ")]
    assert tags and all(t.startswith("cp310-abi3-") for t in tags), tags


@pytest.mark.skipif(not (REPO / "setup.py").exists(), reason="needs the source tree")
def test_sdist_ships_kernel_sources(tmp_path):
    subprocess.run(
        [sys.executable, "setup.py", "-q", "sdist", "--dist-dir", str(tmp_path)],
        cwd=REPO, check=True, capture_output=True,
        env={**os.environ, "TORCH_CUDA_ARCH_LIST": "9.0"},
    )
    (sdist,) = tmp_path.glob("tiledmm-*.tar.gz")
    with tarfile.open(sdist) as tar:
        names = {Path(n).relative_to(Path(n).parts[0]).as_posix() for n in tar.getnames() if "/" in n}
    expected = {p.relative_to(REPO).as_posix() for p in (REPO / "kernels").rglob("*") if p.is_file()}
    expected |= {"setup.py", "pyproject.toml", "README.md", "LICENSE", "tiledmm/__init__.py"}
    assert expected <= names, sorted(expected - names)
