"""``tiledmm.enable()``: run an unchanged model's matrix products on tiledmm."""

import contextlib

import torch
from torch.overrides import TorchFunctionMode

from . import functional
from ._checks import SUPPORTED_DTYPES
from ._registrations import autocast_inputs


def _servable(tensors) -> bool:
    """Whether tiledmm computes a product of these arguments (linear's bias None left out): tensors
    of one supported dtype on one CPU or CUDA device, dense, at least 1-D. Anything else falls
    through to torch. (Read per call: is_cuda and is_cpu, not device.type, which costs ~0.5 us.)"""
    first = tensors[0]
    if not (isinstance(first, torch.Tensor) and first.dtype in SUPPORTED_DTYPES and (first.is_cuda or first.is_cpu)):
        return False
    dtype, device = first.dtype, first.device
    for t in tensors:
        if not (isinstance(t, torch.Tensor) and t.dtype == dtype and t.device == device
                and t.layout == torch.strided and t.dim() >= 1):
            return False
    return True


# torch function -> the tiledmm function with the same signature
_PRODUCTS = {
    torch.matmul: functional.matmul,
    torch.Tensor.matmul: functional.matmul,
    torch.Tensor.__matmul__: functional.matmul,
    torch.Tensor.__rmatmul__: lambda self, other: functional.matmul(other, self),
    torch.mm: functional.mm,
    torch.Tensor.mm: functional.mm,
    torch.bmm: functional.bmm,
    torch.Tensor.bmm: functional.bmm,
    torch.nn.functional.linear: functional.linear,
}


def _autocast(args, kwargs):
    """The arguments as torch.autocast casts a product's: under autocast, a bfloat16 activation
    meets a float32 weight, and both become bfloat16 (else the product would fall to torch)."""
    first = next((a for a in args if isinstance(a, torch.Tensor)), None)
    if first is None or first.device.type not in ("cpu", "cuda") or not torch.is_autocast_enabled(first.device.type):
        return args, kwargs

    def cast(a):
        return autocast_inputs(first.device.type, a)[0] if isinstance(a, torch.Tensor) else a

    return [cast(a) for a in args], {name: cast(a) for name, a in kwargs.items()}


class _TiledmmMode(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        # Every torch call inside the context comes here: anything but a product leaves at once.
        kwargs = kwargs or {}
        product = _PRODUCTS.get(func)
        if product is not None and "out" not in kwargs:
            cast_args, cast_kwargs = _autocast(args, kwargs) if torch._C._is_any_autocast_enabled() else (args, kwargs)
            if _servable([a for a in (*cast_args, *cast_kwargs.values()) if a is not None]):
                return product(*cast_args, **cast_kwargs)
        return func(*args, **kwargs)


@contextlib.contextmanager
def enable():
    """Within this context, torch.matmul, torch.mm, torch.bmm, the ``@`` operator (and their
    Tensor methods) and torch.nn.functional.linear run on tiledmm, so existing models train on
    tiledmm unchanged. Calls tiledmm cannot serve (integer or complex tensors, sparse tensors,
    other devices, ``out=``) run on torch as usual. Outside it nothing changes.
    """
    with _TiledmmMode():
        yield
