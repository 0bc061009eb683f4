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
    operands themselves) on one CPU or CUDA device, dense, at least 1-D. enable() asks for the
    products that _first_is_plain does not pass, and for those that tiledmm refused (whose error
    is then tiledmm's for such arguments; for any others torch runs the call). It reads the
    tensors' flags and device index (is_cuda, is_cpu, get_device) rather than making and comparing
    torch.device objects (bench/NOTES.md item 172)."""
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


def _first_is_plain(args) -> bool:
    """Whether a product of these arguments goes to tiledmm before _servable asks: outside autocast
    (whose casts _servable foresees), its first argument a dense CPU or CUDA tensor of a supported
    dtype. The common case, tested in a fraction of _servable's host time (~9k instructions a
    product, bench/NOTES.md item 209)."""
    first = args[0] if args else None
    return (isinstance(first, _Tensor) and first.dtype in SUPPORTED_DTYPES and first.layout is _STRIDED
            and (first.is_cuda or first.is_cpu) and not _any_autocast())


class _TiledmmMode(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        # Every torch call inside the context comes here: anything but a product leaves at once.
        # A product of a plain first operand runs on tiledmm, whose operators check the rest anyway;
        # where they refuse it, _servable decides whose error it is: tiledmm's for operands it
        # serves (its words name the problem), else torch runs the call (mixed devices, a sparse
        # second operand). Other products (complex or integer tensors, autocast) ask _servable first.
        product = _PRODUCTS.get(func)
        if product is not None and not (kwargs and "out" in kwargs):
            every = (*args, *kwargs.values()) if kwargs else args
            plain = _first_is_plain(every)
            if plain or _servable(every):
                try:
                    return product(*args, **kwargs) if kwargs else product(*args)
                except Exception:
                    if not plain or _servable(every):
                        raise
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
