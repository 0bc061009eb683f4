"""Autograd for tiledmm's products, on tiledmm's own kernels.

For C = A @ B: dA = dC @ B^T and dB = A^T @ dC, computed by the same operators on transposed
views (the kernels read them through their strides: nothing is copied, torch.matmul is never
called), and only for the inputs that need a gradient. The backward is itself made of
differentiable operators, so double backward works.

The gradients are computed at the forward's precision (tiledmm/_precision.py). The same rule
serves the dispatcher operators (torch.ops.tiledmm.*, registered below) and the public
autograd.Function classes MM and BMM; tiledmm.matmul, mm and bmm reach them through call().
"""

import functools

import torch

ops = torch.ops.tiledmm
_wrapped = torch._C._functorch.is_functorch_wrapped_tensor


def call(op, a, b, code):
    """op(a, b, code) (op: ops.mm or ops.bmm) through the autograd that costs the host least and
    is right for it, where host time per call counts (small products; bench/NOTES.md item 141):
    - no gradient can flow (grad mode off, or no input that requires one): the operator below
      autograd, as its registered autograd kernel would call it after its own checks, which
      torch.library runs in Python (~5 us a call on an H200's host);
    - eager autograd: MM or BMM, whose apply costs a quarter of the Function torch.library builds
      for the registered rule;
    - traced by torch.compile, or tensors of torch.func's transforms: the operator itself, with
      its registered autograd (and its own errors for arguments that are not tensors)."""
    tensors = isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
    if torch.compiler.is_compiling() or not tensors or _wrapped(a) or _wrapped(b):
        return op(a, b, code)
    if torch.is_grad_enabled() and (a.requires_grad or b.requires_grad):
        return _FUNCTIONS[op].apply(a, b, code)
    with torch._C._AutoDispatchBelowAutograd():
        return op(a, b, code)


def _column_major(x):
    return x.stride(-2) == 1 and x.stride(-1) != 1


def _setup_context(ctx, inputs, output, precision_index=2):
    """inputs: (a, b, ...), with the precision code at precision_index (0 if absent)."""
    a, b = inputs[0], inputs[1]
    ctx.save_for_backward(a if ctx.needs_input_grad[1] else None, b if ctx.needs_input_grad[0] else None)
    ctx.column_major = (_column_major(a), _column_major(b))
    ctx.precision = inputs[precision_index] if len(inputs) > precision_index else 0


def _product_in_layout(product, lhs, rhs, column_major, precision):
    """lhs @ rhs, as a column-major result when the input it is the gradient of is column-major
    (computed as (rhs^T @ lhs^T)^T), so that autograd need not copy it into that input's layout
    (a transposed weight, as in nn.Linear)."""
    if column_major:
        return product(rhs.mT, lhs.mT, precision).mT
    return product(lhs, rhs, precision)


def _gradients(product, ctx, grad):
    a, b = ctx.saved_tensors
    a_col, b_col = ctx.column_major
    grad_a = _product_in_layout(product, grad, b.mT, a_col, ctx.precision) if ctx.needs_input_grad[0] else None
    grad_b = _product_in_layout(product, a.mT, grad, b_col, ctx.precision) if ctx.needs_input_grad[1] else None
    return grad_a, grad_b


def _product_function(name, op, doc):
    """A torch.autograd.Function computing op(a, b, precision) forward (precision: an operator
    code, default 0) and its gradients backward. Its forward takes ctx (not a setup_context, with
    which every apply binds the forward's signature: 44 us a call against 10 on this project's CPU,
    bench/NOTES.md item 142); torch.func's transforms need that form, and reach the operators
    instead (call)."""

    class Product(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a, b, precision=0):
            _setup_context(ctx, (a, b, precision), None)
            return call(op, a, b, precision)  # (grad mode is off here)

        @staticmethod
        def backward(ctx, grad):
            return _gradients(functools.partial(call, op), ctx, grad) + (None,)

    Product.__name__ = Product.__qualname__ = name
    Product.__doc__ = doc
    return Product


MM = _product_function(
    "MM", ops.mm, "C = A @ B for 2-D A (m, k) and B (k, n) on tiledmm's kernels: ``MM.apply(a, b, precision_code)``."
)
BMM = _product_function(
    "BMM", ops.bmm, "C[i] = A[i] @ B[i] for 3-D A (b, m, k) and B (b, k, n): ``BMM.apply(a, b, precision_code)``."
)


def _register(name, op, precision_index):
    def setup_context(ctx, inputs, output):
        _setup_context(ctx, inputs, output, precision_index)

    def backward(ctx, grad):
        # Operators take arguments after the two matrices (precision, a configuration): no gradient.
        return _gradients(functools.partial(call, op), ctx, grad) + (None,) * (len(ctx.needs_input_grad) - 2)

    torch.library.register_autograd(f"tiledmm::{name}", backward, setup_context=setup_context)


_FUNCTIONS = {ops.mm: MM, ops.bmm: BMM}

_register("mm", ops.mm, 2)
_register("bmm", ops.bmm, 2)
_register("_bmm_with_config", ops.bmm, 4)  # (a, b, tile, splits, precision)
