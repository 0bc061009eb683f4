"""Fake (meta) kernels and autocast for the tiledmm operators.

Fake kernels let torch.compile and meta tensors trace the ops. Under torch.autocast the ops cast
their floating-point inputs (float64 excepted) to the autocast dtype, as torch.matmul does.
"""

import math

import torch

from ._checks import check_matrices, check_pair

ops = torch.ops.tiledmm


@torch.library.register_fake("tiledmm::_mm_raw")
@torch.library.register_fake("tiledmm::mm")
def _mm_fake(a, b, precision=0):
    check_matrices("tiledmm.mm", a, b, rank=2)
    return a.new_empty((a.shape[0], b.shape[1]))


@torch.library.register_fake("tiledmm::_gemm_nd")
def _gemm_nd_fake(a, b, ta, tb, bias, precision=0):
    check_pair("tiledmm.linear", a, b)
    a_rows, b_rows = math.prod(a.shape[:-1]), math.prod(b.shape[:-1])
    m, k = (a.shape[-1], a_rows) if ta else (a_rows, a.shape[-1])
    inner, n = (b.shape[-1], b_rows) if tb else (b_rows, b.shape[-1])
    if inner != k:
        raise RuntimeError(f"tiledmm.linear: inner dimensions differ: a of shape {list(a.shape)}"
                           f"{' transposed' if ta else ''} and b of shape {list(b.shape)}{' transposed' if tb else ''}")
    return a.new_empty((*a.shape[:-1], n) if a.dim() > 2 and not ta else (m, n))


@torch.library.register_fake("tiledmm::_bmm_raw")
@torch.library.register_fake("tiledmm::bmm")
def _bmm_fake(a, b, precision=0):
    check_matrices("tiledmm.bmm", a, b, rank=3)
    return a.new_empty((a.shape[0], a.shape[1], b.shape[2]))


@torch.library.register_fake("tiledmm::_bmm_with_config")
def _bmm_with_config_fake(a, b, tile, splits, precision=0):
    check_matrices("tiledmm._bmm_with_config", a, b, rank=3)
    return a.new_empty((a.shape[0], a.shape[1], b.shape[2]))


# Each autocast dtype's Tensor method: a cast through it costs ~6k host instructions fewer than
# .to(dtype) on a CPU (~15k against ~21k with a graph node; bench/NOTES.md item 168).
_CASTS = {torch.bfloat16: torch.Tensor.bfloat16, torch.float16: torch.Tensor.half}


def autocast_inputs(device_type, *tensors):
    """The tensors as the ops' autocast kernels cast them: floating point (float64 excepted) to
    the autocast dtype of device_type."""
    dtype = torch.get_autocast_dtype(device_type)
    cast = _CASTS.get(dtype)
    return tuple([t if t.dtype in (dtype, torch.float64) or not t.is_floating_point()
                  else cast(t) if cast is not None else t.to(dtype) for t in tensors])


# The device types whose autocast casts the operators' inputs, and their dispatch keys.
AUTOCAST_KEYS = {"cuda": "AutocastCUDA", "cpu": "AutocastCPU"}


def _autocast_kernel(op, device_type):
    # Autocast off for the operator by excluding its dispatch key, as torch.library.register_autocast
    # does: what torch.autocast(enabled=False) does, without its Python (host time per call).
    autocast_off = torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, AUTOCAST_KEYS[device_type]))

    def kernel(*args):
        args = [autocast_inputs(device_type, x)[0] if isinstance(x, torch.Tensor) else x for x in args]
        with torch._C._ExcludeDispatchKeyGuard(autocast_off):
            return op(*args)

    return kernel


_autocast_lib = torch.library.Library("tiledmm", "IMPL")
for _name in ("mm", "_gemm_nd", "bmm", "_bmm_with_config", "_mm_raw", "_bmm_raw"):
    for _device_type, _key in AUTOCAST_KEYS.items():
        _autocast_lib.impl(_name, _autocast_kernel(getattr(ops, _name), _device_type), _key)
