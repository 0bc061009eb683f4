"""``tiledmm.enable()``: run an unchanged model's matrix products on tiledmm."""

import contextlib

import torch
from torch.overrides import TorchFunctionMode

from . import functional
from ._checks import SUPPORTED_DTYPES


def _servable(*tensors) -> bool:
    """Whether tiledmm computes this product; anything else falls through to torch."""
    if not all(isinstance(t, torch.Tensor) for t in tensors):
        return False
    first = tensors[0]
    return (
        first.dtype in SUPPORTED_DTYPES
        and first.device.type in ("cpu", "cuda")
        and all(t.layout == torch.strided and t.dtype == first.dtype and t.device == first.device for t in tensors)
        and all(t.dim() >= 1 for t in tensors)
    )


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


class _TiledmmMode(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        product = _PRODUCTS.get(func)
        tensors = [a for a in list(args) + list(kwargs.values()) if a is not None]
        if product is not None and "out" not in kwargs and _servable(*tensors):
            return product(*args, **kwargs)
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
