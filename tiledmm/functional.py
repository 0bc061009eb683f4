"""tiledmm's user-facing products: matmul, mm, bmm and linear. All differentiable."""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from . import _precision, autograd
from ._checks import check_pair, check_tensors

def _product(product, name: str, a: torch.Tensor, b: torch.Tensor, precision: str | None) -> torch.Tensor:
    """product (autograd.mm or autograd.bmm: the operator, dispatched the cheapest way that keeps
    its gradients) on (a, b) at `precision`. The operator checks the operands; that both are
    tensors, which its dispatch assumes, is checked only once something failed (host time)."""
    try:
        return product(a, b, _precision.resolve(precision, a.dtype))
    except Exception:
        check_tensors(name, a, b)
        raise


_PRECISION_DOC = """``precision`` (float32 only): None follows torch's setting
    (``torch.backends.cuda.matmul.fp32_precision`` / ``torch.get_float32_matmul_precision()``);
    "highest" float32 accuracy by the fastest path (the exact kernel or 3xTF32 tensor cores, by
    shape), "ieee" exact float32 on CUDA cores, "3xtf32", or "tf32" (about 3e-4 relative error).
    The backward pass uses the same precision."""


def mm(input: torch.Tensor, mat2: torch.Tensor, *, precision: str | None = None) -> torch.Tensor:
    """Matrix product of two 2-D tensors, like :func:`torch.mm`.

    ``input`` is (m, k) and ``mat2`` is (k, n); the result is a new contiguous (m, n) tensor of
    the same dtype. Transposed views are read through their strides, without a copy.
    Supported dtypes: float32, float64 (accumulated in their own type), float16 and bfloat16
    (accumulated in float32). {precision}
    """
    return _product(autograd.mm, "tiledmm.mm", input, mat2, precision)


def bmm(input: torch.Tensor, mat2: torch.Tensor, *, precision: str | None = None) -> torch.Tensor:
    """Batched matrix product of two 3-D tensors, like :func:`torch.bmm`.

    ``input`` is (b, m, k) and ``mat2`` is (b, k, n); the result is (b, m, n). Any batch stride
    is read as is, including 0 for a batch dimension made with ``expand``. {precision}
    """
    return _product(autograd.bmm, "tiledmm.bmm", input, mat2, precision)


def _rows_foldable(x: torch.Tensor) -> bool:
    """True when x (..., m, k) can be viewed as (prod(...) * m, k) without a copy."""
    if x.shape[-1] != 1 and x.stride(-1) != 1:
        return False
    for d in range(x.dim() - 2):
        if x.shape[d] != 1 and x.stride(d) != x.stride(d + 1) * x.shape[d + 1]:
            return False
    return True


class _MatmulPlan(NamedTuple):
    """How matmul maps its operands onto one mm or bmm call."""

    batched: bool  # bmm on (a, b), else mm
    a: torch.Tensor
    b: torch.Tensor
    out_shape: tuple
    notes: list


def _check_matmul(input: torch.Tensor, other: torch.Tensor) -> None:
    """matmul's operand checks, in its words."""
    check_pair("tiledmm.matmul", input, other)
    if input.dim() == 0 or other.dim() == 0:
        raise RuntimeError(
            "tiledmm.matmul: both arguments need at least 1 dimension, got shapes "
            f"{list(input.shape)} and {list(other.shape)}"
        )
    k, other_k = input.shape[-1], other.shape[-2 if other.dim() > 1 else -1]
    if k != other_k:
        raise RuntimeError(
            f"tiledmm.matmul: inner dimensions differ: input of shape {list(input.shape)} and "
            f"other of shape {list(other.shape)} ({k} != {other_k})"
        )


def _matmul_error(input: torch.Tensor, other: torch.Tensor) -> Exception | None:
    """The error _check_matmul raises for these operands as the products saw them (cast by
    autocast where it is on), or None where they pass."""
    if isinstance(input, torch.Tensor) and isinstance(other, torch.Tensor):
        input, other, _ = autograd.autocast_operands(input, other)
    try:
        _check_matmul(input, other)
    except (TypeError, RuntimeError) as error:
        return error
    return None


def _plan_matmul(input: torch.Tensor, other: torch.Tensor) -> _MatmulPlan:
    """The plan for operands that pass _check_matmul (others may fail in the planning's own words)."""
    notes = []
    a = input.unsqueeze(0) if input.dim() == 1 else input
    b = other.unsqueeze(-1) if other.dim() == 1 else other
    if input.dim() == 1:
        notes.append("input is 1-D: a row vector, whose dimension is removed from the result")
    if other.dim() == 1:
        notes.append("other is 1-D: a column vector, whose dimension is removed from the result")
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]

    if b.dim() == 2 and (a.dim() == 2 or _rows_foldable(a)):
        # The batch of a (if any) folds into its rows: one 2-D product, as torch.matmul does.
        batch = a.shape[:-2]
        if batch:
            notes.append(f"the batch dimensions {list(batch)} of input fold into its rows: one mm")
        plan = _MatmulPlan(False, a.reshape(math.prod(a.shape[:-1]), k), b, (), notes)
    else:
        # Equal batch shapes need no broadcasting (torch.broadcast_shapes costs ~20 us a call).
        batch = a.shape[:-2] if a.shape[:-2] == b.shape[:-2] else torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        count = math.prod(batch)
        a3 = a.expand(*batch, m, k).reshape(count, m, k)  # a view unless batch dims cannot merge
        # b keeps its own inner size, which the operator checks (expanded to k, a 1 would broadcast).
        b3 = b.expand(*batch, b.shape[-2], n).reshape(count, b.shape[-2], n)
        notes.append(f"batch dimensions {list(batch)}: one bmm over {count} products")
        plan = _MatmulPlan(True, a3, b3, (), notes)
    out_shape = tuple(batch) + ((m,) if input.dim() > 1 else ()) + ((n,) if other.dim() > 1 else ())
    return plan._replace(out_shape=out_shape)


def matmul(input: torch.Tensor, other: torch.Tensor, *, precision: str | None = None) -> torch.Tensor:
    """Matrix product with the semantics of :func:`torch.matmul`.

    - 1-D @ 1-D: dot product (a 0-D tensor).
    - 2-D @ 2-D: matrix product; 1-D operands are treated as a row (left) or a column (right)
      vector and that dimension is removed from the result.
    - N-D: batched product over the leading dimensions, which broadcast.

    Views (transposes, slices, expanded batch dimensions, storage offsets) are read through their
    strides; a copy is made only for a matrix whose two last dimensions both have non-unit
    strides, or for broadcast batch dimensions that cannot be merged into one. {precision}
    """
    return _matmul(input, other, precision, None)


def _matmul(input, other, precision, bias, rows_untried=True):
    """matmul, plus linear's bias (None, or a tensor of at most one dimension): a product of rows
    times one matrix (one mm) adds it to its output in place, in its graph node, as torch's addmm
    does; the other plans add it as F.linear's matmul path does. rows_untried: False where the
    caller has had autograd.rows_in_plain_eager refuse these operands already (linear)."""
    # The operator checks the operands (host time per call counts where products are small);
    # matmul's own checks run only to name the problem in its words once something failed.
    # The commonest cases first, as _plan_matmul plans them but without its Python work (~20 us a
    # call on a CPU).
    try:
        if isinstance(input, torch.Tensor) and isinstance(other, torch.Tensor):
            dim = input.dim()
            if other.dim() == 2:
                code = _precision.resolve(precision, input.dtype)
                if dim > 2 and rows_untried:
                    # A model's (batch, sequence, features) activations times one matrix: its rows
                    # read in place by one node, without the views below.
                    out = autograd.rows_in_plain_eager(input, other, False, bias, code)
                    if out is not None:
                        return out
                if dim == 2 or (dim > 2 and input.is_contiguous()):
                    # Rows, or rows in a batch (a model's (batch, sequence, features) activations)
                    # folded into rows as a view, times one matrix: one mm.
                    rows = input if dim == 2 else input.flatten(0, -2)
                    out = autograd.mm(rows, other, code, bias)
                    return out if dim == 2 else out.view(*input.shape[:-1], other.shape[-1])
            elif bias is None and dim == other.dim() > 2 and input.shape[:-2] == other.shape[:-2]:
                # Equal batch dimensions (attention's (batch, heads, ...) products): one bmm.
                code = _precision.resolve(precision, input.dtype)
                out = autograd.bmm(input.flatten(0, -3), other.flatten(0, -3), code)
                return out.view(*input.shape[:-1], other.shape[-1])
        plan = _plan_matmul(input, other)
        product = autograd.bmm if plan.batched else autograd.mm
        out = product(plan.a, plan.b, _precision.resolve(precision, input.dtype)).view(plan.out_shape)
        return autograd.plus_bias(out, bias)
    except Exception:
        error = _matmul_error(input, other)
        if error is None:
            raise
        raise error from None


def explain(input: torch.Tensor, other: torch.Tensor, *, precision: str | None = None) -> str:
    """Says what ``tiledmm.matmul(input, other)`` would run, and why: how the operands map onto
    mm or bmm, how each is read (layout, copies), the kernel, its tile configuration, load width,
    K splitting and precision path. Runs nothing."""
    _check_matmul(input, other)
    plan = _plan_matmul(input, other)
    lines = [f"tiledmm.matmul({list(input.shape)}, {list(other.shape)}) -> {list(plan.out_shape)}"]
    lines += plan.notes
    code = _precision.resolve(precision, input.dtype)
    if input.dtype == torch.float32:
        source = "requested" if precision is not None else "from torch's float32 matmul setting"
        lines.append(f"precision: {_precision.NAMES[code]} ({source})")
    for name, x, view in (("input", input, plan.a), ("other", other, plan.b)):
        if view.numel() and view.untyped_storage().data_ptr() != x.untyped_storage().data_ptr():
            lines.append(f"{name}: its broadcast batch dimensions cannot merge into one: copied")
    lines.append(torch.ops.tiledmm._explain(plan.a, plan.b, code))
    return "\n".join(lines)


def linear(
    input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, *, precision: str | None = None
) -> torch.Tensor:
    """``input @ weight.T + bias``, like :func:`torch.nn.functional.linear`.

    The weight (out_features, in_features) is read as a transposed view: never copied. The bias
    (out_features,) is added to the product's output in place, one graph node for both, as
    torch's addmm does. {precision}
    """
    if bias is not None and not (isinstance(bias, torch.Tensor) and bias.dim() <= 1):
        return autograd.plus_bias(matmul(input, weight.mT, precision=precision), bias)  # broadcast as F.linear's
    if isinstance(input, torch.Tensor):
        out = autograd.rows_in_plain_eager(input, weight, True, bias, _precision.resolve(precision, input.dtype))
        if out is not None:
            return out
    return _matmul(input, weight.mT, precision, bias, rows_untried=False)


for _f in (mm, bmm, matmul, linear):
    _f.__doc__ = _f.__doc__.replace("{precision}", _PRECISION_DOC)
