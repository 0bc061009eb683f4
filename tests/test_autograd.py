"""Gradients of the operators and of matmul, in float64, against finite differences."""

import pytest
import torch
from torch.autograd import gradcheck, gradgradcheck

import tiledmm
from _util import LAYOUTS, operands


@pytest.mark.parametrize("layout", LAYOUTS)
def test_mm_gradients(device, layout):
    a, b = operands(5, 7, 3, layout, torch.float64, device)
    inputs = (a.requires_grad_(), b.requires_grad_())
    assert gradcheck(tiledmm.mm, inputs)
    assert gradgradcheck(tiledmm.mm, inputs)


@pytest.mark.parametrize(
    "shape_a,shape_b", [((7,), (7, 3)), ((2, 1, 5, 7), (3, 7, 4)), ((4, 5, 7), (7,))], ids=str
)
def test_matmul_gradients_broadcast(device, shape_a, shape_b):
    a = torch.randn(shape_a, dtype=torch.float64, device=device, requires_grad=True)
    b = torch.randn(shape_b, dtype=torch.float64, device=device, requires_grad=True)
    assert gradcheck(tiledmm.matmul, (a, b))


def test_only_needed_gradients(device):
    a, b = operands(5, 7, 3, "nn", torch.float64, device)
    a.requires_grad_()
    tiledmm.mm(a, b).sum().backward()
    assert a.grad is not None and b.grad is None
    torch.testing.assert_close(a.grad, torch.ones(5, 3, dtype=torch.float64, device=device) @ b.T)
