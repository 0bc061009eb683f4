"""torch.library.opcheck over the operators: schema, fake kernels, autograd registration and
AOT dispatch, on CPU and GPU."""

import pytest
import torch

from _util import LAYOUTS, operands

ops = torch.ops.tiledmm


@pytest.mark.parametrize("requires_grad", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_opcheck_mm(device, layout, dtype, requires_grad):
    a, b = operands(13, 9, 11, layout, dtype, device)
    torch.library.opcheck(ops.mm, (a.requires_grad_(requires_grad), b.requires_grad_(requires_grad)))


@pytest.mark.parametrize("requires_grad", [False, True])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_opcheck_bmm(device, layout, requires_grad):
    a, b = operands(13, 9, 11, layout, torch.float32, device, batch=(3,))
    torch.library.opcheck(ops.bmm, (a.requires_grad_(requires_grad), b.requires_grad_(requires_grad)))


@pytest.mark.parametrize("precision", [0, 1, 2, 3], ids=["ieee", "3xtf32", "tf32", "highest"])
def test_opcheck_precisions(device, precision):
    a, b = operands(40, 37, 33, "tn", torch.float32, device)
    torch.library.opcheck(ops.mm, (a.requires_grad_(True), b.requires_grad_(True), precision))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_opcheck_half_types(device, dtype):
    a, b = operands(13, 9, 11, "tn", dtype, device)
    torch.library.opcheck(ops.mm, (a, b))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_opcheck_raw(device, dtype):
    # mm and bmm without autograd, as compiled graphs call them (their inputs need no gradient there).
    a, b = operands(13, 9, 11, "nt", dtype, device)
    torch.library.opcheck(ops._mm_raw, (a, b))
    a, b = operands(13, 9, 11, "tn", dtype, device, batch=(3,))
    torch.library.opcheck(ops._bmm_raw, (a, b))


def test_opcheck_bmm_with_config(device):
    a, b = operands(13, 9, 11, "nt", torch.float32, device, batch=(2,))
    torch.library.opcheck(ops._bmm_with_config, (a, b, 1, 2))


@pytest.mark.parametrize("requires_grad", [False, True])
@pytest.mark.parametrize("bias_shape", [(11,), (1,)], ids=["full", "one"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_opcheck_mm_plus_bias(device, dtype, bias_shape, requires_grad):
    # mm's product plus linear's bias: _gemm_nd on two matrices, neither transposed.
    a, b = operands(13, 9, 11, "nt", dtype, device)
    bias = torch.randn(bias_shape, dtype=dtype, device=device)
    args = [x.requires_grad_(requires_grad and dtype == torch.float32) for x in (a, b, bias)]
    torch.library.opcheck(ops._gemm_nd, (args[0], args[1], False, False, args[2], 0))


@pytest.mark.parametrize("requires_grad", [False, True])
@pytest.mark.parametrize("ta,tb", [(False, True), (False, False), (True, False)])
def test_opcheck_gemm_nd(device, ta, tb, requires_grad):
    # linear's products: x @ W^T with a bias, dY W and dY^T x, x and dY 3-D.
    x, w, dy = (torch.randn(s, device=device, dtype=torch.float64) for s in ((2, 3, 5), (4, 5), (2, 3, 4)))
    a, b = {(False, True): (x, w), (False, False): (dy, w), (True, False): (dy, x)}[(ta, tb)]
    bias = torch.randn(4, device=device, dtype=torch.float64) if tb else None
    args = [t.requires_grad_(requires_grad) if t is not None else t for t in (a, b, bias)]
    torch.library.opcheck(ops._gemm_nd, (args[0], args[1], ta, tb, args[2], 0))
