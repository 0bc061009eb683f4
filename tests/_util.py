"""Shared helpers: operands in any layout, the float64 reference check, output poisoning."""

import math

import pytest
import torch

from tiledmm import _precision
from tiledmm.bench.timing import torch_precision
from torch.utils._python_dispatch import TorchDispatchMode

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
LAYOUTS = ["nn", "tn", "nt", "tt"]  # t: that operand is a transposed (column-major) view

# Unit roundoff: the rounding of the result alone, the floor of any error bound.
UNIT_ROUNDOFF = {
    torch.float32: 2.0**-24,
    torch.float64: 2.0**-53,
    torch.float16: 2.0**-11,
    torch.bfloat16: 2.0**-8,
}

NO_GPU = "no CUDA GPU on this machine: the GPU tests need a machine with a CUDA GPU (scripts/gpu_check.sh runs them there)"
requires_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_GPU)
# Hopper's wgmma paths (with requires_gpu first, so that a machine without a GPU says so).
HOPPER_ONLY = pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
                                 reason="wgmma runs on compute capability 9.0 (Hopper) only")


def matrix(rows, cols, transposed, dtype, device, batch=()):
    """A randn (..., rows, cols) operand; transposed=True makes it a column-major view."""
    if transposed:
        return torch.randn(*batch, cols, rows, dtype=dtype, device=device).mT
    return torch.randn(*batch, rows, cols, dtype=dtype, device=device)


def operands(m, k, n, layout, dtype, device, batch=()):
    return (
        matrix(m, k, layout[0] == "t", dtype, device, batch),
        matrix(k, n, layout[1] == "t", dtype, device, batch),
    )


def rel_err(out, ref):
    ref = ref.double()
    return ((out.double() - ref).norm() / ref.norm()).item()

def rounded_to_tf32(x):
    """cvt.rna.tf32.f32 on finite values: the nearest 10-bit mantissa, ties away from zero (sm_90
    rounds ties to even: they differ on exact ties only, far inside check_tf32_product's bound)."""
    return ((x.contiguous().view(torch.int32) + 0x1000) & ~0x1FFF).view(torch.float32)


def check_tf32_product(out, a, b):
    """TF32's contract: the float32 product of the inputs rounded to nearest TF32. Tensor cores read
    only an input's top 19 bits, so a kernel that skips the rounding (on either operand) lands
    about 3e-4 away; float32 summation error is far below the bound."""
    assert torch.isfinite(out).all(), "non-finite elements: unwritten (poisoned) or overflowed"
    exact = rounded_to_tf32(a).double() @ rounded_to_tf32(b).double()
    assert rel_err(out, exact) < 2e-5, rel_err(out, exact)



# TF32 rounds each input to 11 significant bits: products within 2^-10 relative.
TF32_BOUND = 2.0**-10

# The float32 paths as operator codes.
PRECISION_CODES = _precision.CODES


def torch_product(a, b, tf32=False):
    """torch.matmul(a, b), with TF32 for float32 when tf32 (else torch's float32 'ieee')."""
    with torch_precision("tf32" if tf32 else "ieee"):
        return torch.matmul(a, b)


def check_against_reference(out, a, b, strict=False, tf32=False):
    """Compares out with the float64 product of the same inputs.

    The error must be within 2x torch.matmul's on the same inputs (with TF32 when tf32); unless
    strict, plus a floor of sqrt(k) unit roundoffs, which absorbs differences in summation order on
    tiny errors yet is orders of magnitude under what an indexing, race or layout bug gives on
    randn data. sqrt(k) roundoffs is the typical error of one sum of k terms: the norm over many
    outputs stays near it, one output's can reach a few times it (a dot product with
    cancellation; a float64 matrix-vector product read 2.9e-15 against a floor of 2.5e-15 at
    torch's exact 0), so the floor grows for outputs of few elements.
    """
    expected = torch_product(a, b, tf32)
    assert out.shape == expected.shape, (out.shape, expected.shape)
    assert out.dtype == expected.dtype and out.device == expected.device
    ref = torch.matmul(a.double(), b.double())
    if out.numel() == 0:
        return
    assert torch.isfinite(out).all(), "non-finite elements: unwritten (poisoned) or overflowed"
    if ref.norm() == 0:  # k == 0: the product is exactly zero
        assert (out == 0).all()
        return
    err, torch_err = rel_err(out, ref), rel_err(expected, ref)
    k = a.shape[-1]
    floor = 2 * UNIT_ROUNDOFF[out.dtype] * math.sqrt(k + 1) * (1 + 2 / math.sqrt(out.numel()))
    bound = 2 * torch_err + (0.0 if strict else floor)
    if tf32:  # torch does not use TF32 for every shape (tiny K): TF32's own bound then
        bound = max(bound, TF32_BOUND)
    assert err <= bound, f"relative error {err:.3e} > {bound:.3e} (torch.matmul: {torch_err:.3e})"
    return err, torch_err


def poisoned(fn, shape, dtype, device):
    """Runs fn after filling, then freeing, a block of the output's size with NaN.

    On CUDA the caching allocator hands that block to the next allocation of the same size, so
    an element the kernel fails to write stays NaN and fails the check. Returns (out, reused).
    """
    if torch.device(device).type != "cuda":
        return fn(), False
    junk = torch.full(shape, float("nan"), dtype=dtype, device=device)
    address = junk.data_ptr()
    del junk
    out = fn()
    return out, out.numel() > 0 and out.data_ptr() == address


class OpLog(TorchDispatchMode):
    """Records the name of every operator that runs inside it."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))
