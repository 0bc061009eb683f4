"""Batching rules for the tiledmm operators, so that torch.func.vmap (and the transforms built on
it: jacrev, jacfwd, hessian, per-sample gradients) runs one product over the whole batch instead of
one product per batch element.

The vmapped dimension is one more batch dimension, broadcast as tiledmm.matmul broadcasts. mm with
only its left operand batched folds the batch into the rows where the layout allows (one mm);
otherwise one bmm reads each operand through its strides, an unbatched matrix with batch stride 0.
For bmm the vmapped and the operator's own batch dimensions are two: merged into one where the
strides allow, else copied into one (an unbatched operand expanded along the vmapped dimension),
as torch.matmul's broadcasting does.
"""

import torch

from ._checks import check_pair, check_ranks, check_shapes
from .functional import _plan_matmul

ops = torch.ops.tiledmm


def _logical_shape(x: torch.Tensor, batched: bool) -> torch.Size:
    return x.shape[1:] if batched else x.shape


def _batching_rule(name: str, rank: int):
    def rule(info, in_dims, a, b, precision=0):
        a_dim, b_dim = in_dims[0], in_dims[1]
        a = a if a_dim is None else a.movedim(a_dim, 0)
        b = b if b_dim is None else b.movedim(b_dim, 0)
        # The operator's own checks, on the shapes it was called with (the batch dimension aside).
        a_shape, b_shape = _logical_shape(a, a_dim is not None), _logical_shape(b, b_dim is not None)
        check_ranks(name, a_shape, b_shape, rank)
        check_pair(name, a, b)
        check_shapes(name, a_shape, b_shape, rank)
        plan = _plan_matmul(a, b)
        product = ops.bmm if plan.batched else ops.mm
        return product(plan.a, plan.b, precision).view(plan.out_shape), 0

    return rule


# The same rule for each operator's raw twin (compiled graphs' products).
for _name, _rank in (("mm", 2), ("bmm", 3)):
    for _op in (_name, f"_{_name}_raw"):
        torch.library.register_vmap(f"tiledmm::{_op}", _batching_rule(f"tiledmm.{_name}", _rank))
