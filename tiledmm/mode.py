"""``tiledmm.enable()``: run an unchanged model's matrix products on tiledmm."""

import contextlib

import torch
from torch.overrides import TorchFunctionMode

from . import functional
from ._checks import SUPPORTED_DTYPES


_Tensor, _STRIDED, _any_autocast = torch.Tensor, torch.strided, torch._C._is_any_autocast_enabled


def _servable(args) -> bool:
    """Whether tiledmm computes a product of these arguments (None, linear's absent bias, left out):
    tensors of one supported dtype (as torch.autocast would cast them: the products cast their
    operands themselves) on one CPU or CUDA device, dense, at least 1-D. Anything else falls
    through to torch. Every product inside enable() asks, so it reads the tensors' flags and device
    index (is_cuda, is_cpu, get_device) rather than making and comparing torch.device objects
    (bench/NOTES.md item 172), the first tensor's device once, and module-level names (item 207)."""
    if not args:
        return False
    first = args[0]
    if not isinstance(first, _Tensor):
        return False
    cuda = first.is_cuda
    if not (cuda or first.is_cpu):
        return False
    index = first.get_device()  # -1 on the CPU
    cast_to = None
    if _any_autocast():
        device_type = "cuda" if cuda else "cpu"
        if torch.is_autocast_enabled(device_type):
            cast_to = torch.get_autocast_dtype(device_type)
    dtype = None
    for t in args:
        if t is None:
            continue
        if t is not first and not (isinstance(t, _Tensor) and (t.is_cuda if cuda else t.is_cpu)
                                   and t.get_device() == index):
            return False
        if t.layout is not _STRIDED or not t.ndim:
            return False
        t_dtype = t.dtype
        if cast_to is not None and t_dtype is not torch.float64 and t.is_floating_point():
            t_dtype = cast_to
        if t_dtype is not dtype and dtype is not None:
            return False
        dtype = t_dtype
    return dtype in SUPPORTED_DTYPES


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
        # Every torch call inside the context comes here: anything but a product leaves at once.
        product = _PRODUCTS.get(func)
        if product is not None:
            if not kwargs:
                if _servable(args):
                    return product(*args)
            elif "out" not in kwargs and _servable((*args, *kwargs.values())):
                return product(*args, **kwargs)
        return func(*args, **kwargs) if kwargs else func(*args)


@contextlib.contextmanager
def enable():
    """Within this context, torch.matmul, torch.mm, torch.bmm, the ``@`` operator (and their
    Tensor methods) and torch.nn.functional.linear run on tiledmm, so existing models train on
    tiledmm unchanged. Calls tiledmm cannot serve (integer or complex tensors, sparse tensors,
    other devices, ``out=``) run on torch as usual. Outside it nothing changes.
    """
    with _TiledmmMode():
        yield
