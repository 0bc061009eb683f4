"""Gradients of the operators, the autograd.Functions and matmul, in float64, against finite
differences (gradcheck) and for double backward (gradgradcheck), on CPU and GPU."""

import pytest
import torch
from torch.autograd import gradcheck, gradgradcheck

import tiledmm
from _util import LAYOUTS, OpLog, operands

ops = torch.ops.tiledmm


@pytest.mark.parametrize("fn", [tiledmm.mm, tiledmm.MM.apply, ops.mm], ids=["mm", "MM.apply", "ops.mm"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("m,k,n", [(5, 7, 3), (1, 9, 2), (6, 1, 4)])
def test_mm_gradients(device, layout, fn, m, k, n):
    a, b = operands(m, k, n, layout, torch.float64, device)
    inputs = (a.requires_grad_(), b.requires_grad_())
    assert gradcheck(fn, inputs)
    assert gradgradcheck(fn, inputs)


@pytest.mark.parametrize("fn", [tiledmm.bmm, tiledmm.BMM.apply, ops.bmm], ids=["bmm", "BMM.apply", "ops.bmm"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_bmm_gradients(device, layout, fn):
    a, b = operands(5, 3, 4, layout, torch.float64, device, batch=(2,))
    inputs = (a.requires_grad_(), b.requires_grad_())
    assert gradcheck(fn, inputs)
    assert gradgradcheck(fn, inputs)


@pytest.mark.parametrize("bias", [False, True], ids=["no_bias", "bias"])
@pytest.mark.parametrize("x_kind", ["2d", "3d", "unfoldable"])
def test_linear_gradients(device, x_kind, bias):
    """tiledmm.linear's node (TiledmmRows) and, for double backward, _gemm_nd's registered
    autograd: an input of 2 or 3 dimensions, and one whose leading dimensions do not fold."""
    x = {"2d": lambda: torch.randn(6, 5), "3d": lambda: torch.randn(2, 3, 5),
         "unfoldable": lambda: torch.randn(3, 2, 5).transpose(0, 1)}[x_kind]()
    inputs = [x.to(device, torch.float64).requires_grad_(), torch.randn(4, 5, dtype=torch.float64, device=device,
                                                                         requires_grad=True)]
    if bias:
        inputs.append(torch.randn(4, dtype=torch.float64, device=device, requires_grad=True))
    assert gradcheck(tiledmm.linear, inputs)
    assert gradgradcheck(tiledmm.linear, inputs)


@pytest.mark.parametrize("w_layout", ["row_major", "column_major"])
@pytest.mark.parametrize("x_kind", ["3d", "unfoldable"])
def test_matmul_rows_gradients(device, x_kind, w_layout):
    """matmul of a model's N-D activations by one matrix (one TiledmmRows node, as linear's), the
    matrix stored either way: gradients and double backward against finite differences."""
    x = {"3d": lambda: torch.randn(2, 3, 5), "unfoldable": lambda: torch.randn(3, 2, 5).transpose(0, 1)}[x_kind]()
    x = x.to(device, torch.float64).requires_grad_()
    w = torch.randn(5, 4, dtype=torch.float64, device=device)
    w = (w if w_layout == "row_major" else w.T.contiguous().T).requires_grad_()
    assert gradcheck(tiledmm.matmul, (x, w))
    assert gradgradcheck(tiledmm.matmul, (x, w))


@pytest.mark.parametrize("entry", ["matmul", "linear"])
def test_weight_gradient_in_the_weights_layout(device, entry):
    """A transposed weight's gradient is computed in its layout: autograd copies nothing."""
    weight = torch.randn(4, 5, dtype=torch.float64, device=device, requires_grad=True)
    x = torch.randn(2, 3, 5 if entry == "matmul" else 4, dtype=torch.float64, device=device)
    out = tiledmm.matmul(x, weight.mT) if entry == "matmul" else tiledmm.linear(x, weight.mT)
    grad = torch.randn_like(out)
    with OpLog() as log:
        out.backward(grad)
    assert not any(op.startswith(("aten.copy", "aten.clone", "aten._to_copy")) for op in log.ops), log.ops
    ref = grad.reshape(-1, grad.shape[-1]).mT @ x.reshape(-1, x.shape[-1])  # dW^T's transpose
    torch.testing.assert_close(weight.grad, ref if entry == "matmul" else ref.mT, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("ta,tb", [(False, True), (False, False), (True, False), (True, True)])
def test_gemm_nd_gradients(device, ta, tb):
    a = torch.randn(2, 3, 5, dtype=torch.float64, device=device, requires_grad=True)
    k = 6 if ta else 5
    b = torch.randn((4, k) if tb else (k, 4), dtype=torch.float64, device=device, requires_grad=True)
    bias = torch.randn(4, dtype=torch.float64, device=device, requires_grad=True)
    fn = lambda a, b, bias: ops._gemm_nd(a, b, ta, tb, bias, 0)  # noqa: E731
    assert gradcheck(fn, (a, b, bias))
    assert gradgradcheck(fn, (a, b, bias))


@pytest.mark.parametrize(
    "shape_a,shape_b",
    [((7,), (7,)), ((7,), (7, 3)), ((5, 7), (7,)), ((2, 1, 5, 7), (3, 7, 4)), ((4, 5, 7), (7,)),
     ((7,), (2, 7, 3)), ((3, 5, 7), (7, 2)), ((5, 7), (3, 7, 2))],
    ids=str,
)
def test_matmul_gradients_broadcast(device, shape_a, shape_b):
    a = torch.randn(shape_a, dtype=torch.float64, device=device, requires_grad=True)
    b = torch.randn(shape_b, dtype=torch.float64, device=device, requires_grad=True)
    assert gradcheck(tiledmm.matmul, (a, b))
    assert gradgradcheck(tiledmm.matmul, (a, b))


def test_gradients_match_torch(device):
    a = torch.randn(3, 33, 17, device=device, requires_grad=True)
    b = torch.randn(17, 9, device=device, requires_grad=True)
    grad = torch.randn(3, 33, 9, device=device)
    ours = torch.autograd.grad(tiledmm.matmul(a, b), (a, b), grad)
    theirs = torch.autograd.grad(torch.matmul(a, b), (a, b), grad)
    for x, y in zip(ours, theirs):
        torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("needs", ["a", "b", "both"])
def test_backward_uses_tiledmm_only_for_needed_gradients(device, needs):
    a, b = operands(9, 7, 5, "tn", torch.float32, device)
    a.requires_grad_(needs in ("a", "both"))
    b.requires_grad_(needs in ("b", "both"))
    out = tiledmm.mm(a, b)
    with OpLog() as log:
        out.backward(torch.randn_like(out))
    products = [op for op in log.ops if "mm" in op]
    assert products == ["tiledmm.mm.default"] * (2 if needs == "both" else 1), log.ops
    assert (a.grad is not None) == (needs in ("a", "both"))
    assert (b.grad is not None) == (needs in ("b", "both"))
    assert not any("copy" in op or "clone" in op or "contiguous" in op for op in log.ops), log.ops


@pytest.mark.parametrize("fn", [tiledmm.mm, tiledmm.matmul, tiledmm.bmm], ids=["mm", "matmul", "bmm"])
@pytest.mark.parametrize("mode", ["no_grad", "inputs_without_grad", "with_grad"])
def test_graph_only_where_a_gradient_can_flow(device, fn, mode):
    # Products no gradient can flow through skip the autograd kernel (tiledmm/functional.py): the
    # same values, and a graph exactly where torch.matmul would build one.
    batch = (2,) if fn is tiledmm.bmm else ()
    a, b = operands(6, 5, 4, "nt", torch.float64, device, batch=batch)
    a.requires_grad_(mode != "inputs_without_grad")
    if mode == "no_grad":
        with torch.no_grad():
            out, ref = fn(a, b), torch.matmul(a, b)
    else:
        out, ref = fn(a, b), torch.matmul(a, b)
    assert out.requires_grad == ref.requires_grad == (mode == "with_grad")
    assert (out.grad_fn is None) == (mode != "with_grad")
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    if mode == "with_grad":
        grad = torch.randn_like(out)
        torch.testing.assert_close(torch.autograd.grad(out, a, grad)[0], torch.autograd.grad(ref, a, grad)[0])
