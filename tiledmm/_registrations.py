"""Fake (meta) kernels and autograd for the tiledmm operators.

Fake kernels let torch.compile and meta tensors trace the ops. The backward of C = A @ B is
dA = dC @ B^T and dB = A^T @ dC, computed by the same ops on transposed views (the kernels read
them through their strides; nothing is copied), and only for the inputs that need a gradient.
"""

import torch

from ._checks import check_matrices


@torch.library.register_fake("tiledmm::mm")
def _mm_fake(a, b):
    check_matrices("tiledmm.mm", a, b, rank=2)
    return a.new_empty((a.shape[0], b.shape[1]))


@torch.library.register_fake("tiledmm::bmm")
def _bmm_fake(a, b):
    check_matrices("tiledmm.bmm", a, b, rank=3)
    return a.new_empty((a.shape[0], a.shape[1], b.shape[2]))


@torch.library.register_fake("tiledmm::_bmm_with_tile")
def _bmm_with_tile_fake(a, b, tile):
    check_matrices("tiledmm._bmm_with_tile", a, b, rank=3)
    return a.new_empty((a.shape[0], a.shape[1], b.shape[2]))


def _setup_context(ctx, inputs, output):
    a, b = inputs[0], inputs[1]
    needs_a, needs_b = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
    ctx.save_for_backward(a if needs_b else None, b if needs_a else None)


def _backward_with(product):
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        grad_a = product(grad, b.mT) if ctx.needs_input_grad[0] else None
        grad_b = product(a.mT, grad) if ctx.needs_input_grad[1] else None
        return (grad_a, grad_b) + (None,) * (len(ctx.needs_input_grad) - 2)

    return backward


torch.library.register_autograd(
    "tiledmm::mm", _backward_with(torch.ops.tiledmm.mm), setup_context=_setup_context
)
torch.library.register_autograd(
    "tiledmm::bmm", _backward_with(torch.ops.tiledmm.bmm), setup_context=_setup_context
)
torch.library.register_autograd(
    "tiledmm::_bmm_with_tile",
    _backward_with(torch.ops.tiledmm.bmm),
    setup_context=_setup_context,
)
