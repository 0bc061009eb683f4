"""torch.func's transforms (vmap, grad, jacrev, jacfwd, jvp, hessian, per-sample gradients) and
forward-mode AD over tiledmm's products, against the same transforms over torch's, on CPU and GPU.
vmap must run tiledmm's batching rules (one product for the whole batch), never the per-element
fallback."""

import pytest
import torch
import torch.autograd.forward_ad as fwAD
from torch import func

import tiledmm
from _util import OpLog, matrix

ops = torch.ops.tiledmm


def close(x, y):
    torch.testing.assert_close(x, y, rtol=1e-10, atol=1e-10)


@pytest.fixture(autouse=True)
def _no_vmap_fallback():
    # Without a batching rule, vmap loops over the batch (and only logs a warning): an error here.
    enabled = torch._C._functorch._is_vmap_fallback_enabled()
    torch._C._functorch._set_vmap_fallback_enabled(False)
    yield
    torch._C._functorch._set_vmap_fallback_enabled(enabled)


def f64(*shape, device, transposed=False):
    return matrix(shape[-2], shape[-1], transposed, torch.float64, device, batch=shape[:-2])


def test_functionalize(device):
    x, w = f64(6, 5, device=device), f64(3, 5, device=device)
    close(func.functionalize(tiledmm.linear)(x, w), x @ w.mT)
    xs = f64(4, 6, 5, device=device)
    close(func.functionalize(func.vmap(tiledmm.linear, in_dims=(0, None)))(xs, w), xs @ w.mT)


def operand(rows, cols, transposed, device, batch=None, dim=0):
    """A float64 (rows, cols) operand, or with a batch of that size at dimension dim; transposed:
    each matrix column-major."""
    if batch is None:
        return f64(rows, cols, device=device, transposed=transposed)
    return f64(batch, rows, cols, device=device, transposed=transposed).movedim(0, dim)


@pytest.mark.parametrize("transposed", [False, True], ids=["row-major", "column-major"])
@pytest.mark.parametrize("in_dims", [(0, None), (None, 0), (0, 0), (1, None), (None, 2), (-1, -3)], ids=str)
def test_vmap_mm(device, in_dims, transposed):
    batch, m, k, n = 5, 7, 33, 3
    a = operand(m, k, transposed, device, None if in_dims[0] is None else batch, in_dims[0] or 0)
    b = operand(k, n, transposed, device, None if in_dims[1] is None else batch, in_dims[1] or 0)
    ours = func.vmap(tiledmm.mm, in_dims=in_dims)(a, b)
    theirs = func.vmap(torch.mm, in_dims=in_dims)(a, b)
    close(ours, theirs)


@pytest.mark.parametrize("in_dims", [(0, None), (None, 0), (0, 0), (2, 1)], ids=str)
def test_vmap_bmm(device, in_dims):
    shapes = [(2, 7, 5), (2, 5, 3)]
    args = [
        f64(*shape, device=device) if dim is None else torch.stack([f64(*shape, device=device) for _ in range(4)], dim)
        for shape, dim in zip(shapes, in_dims)
    ]
    close(func.vmap(tiledmm.bmm, in_dims=in_dims)(*args), func.vmap(torch.bmm, in_dims=in_dims)(*args))


def test_vmap_runs_one_product_without_copies(device):
    a, b = f64(6, 9, 4, device=device), f64(4, 3, device=device, transposed=True)
    with OpLog() as log:
        out = func.vmap(tiledmm.mm, in_dims=(0, None))(a, b)
    products = [op for op in log.ops if op.startswith("tiledmm.")]
    assert len(products) == 1, log.ops
    assert not any("copy" in op or "clone" in op or "contiguous" in op for op in log.ops), log.ops
    close(out, a @ b)


def test_nested_vmap_and_matmul(device):
    a, b = f64(3, 4, 5, 6, device=device), f64(6, 2, device=device)
    inner = func.vmap(tiledmm.matmul, in_dims=(0, None))
    close(func.vmap(inner, in_dims=(0, None))(a, b), a @ b)


def loss(product):
    return lambda x, w: (product(x, w.mT) ** 2).sum()


@pytest.mark.parametrize("fn", [tiledmm.matmul, tiledmm.mm, tiledmm.MM.apply], ids=["matmul", "mm", "MM.apply"])
def test_grad_jacrev_jacfwd_hessian(device, fn):
    x, w = f64(7, 5, device=device), f64(3, 5, device=device)
    ours, theirs = loss(fn), loss(torch.matmul)
    for transform in (func.grad, func.jacrev, func.jacfwd):
        close(transform(ours, argnums=(0, 1))(x, w), transform(theirs, argnums=(0, 1))(x, w))
    close(func.hessian(ours)(x, w), func.hessian(theirs)(x, w))
    close(func.grad(lambda x: func.grad(ours)(x, w).sum())(x), func.grad(lambda x: func.grad(theirs)(x, w).sum())(x))


def test_forward_over_reverse(device):
    # The backward's products inside a forward-AD level (gradgradcheck's fwd-over-rev check).
    a, b = f64(4, 6, device=device, transposed=True), f64(6, 3, device=device)
    inputs = (a.requires_grad_(), b.requires_grad_())
    assert torch.autograd.gradgradcheck(tiledmm.matmul, inputs, check_fwd_over_rev=True)


def test_nested_forward_mode_raises(device):
    # torch.autograd.Function's second-order tangents come out wrong: an error, not a wrong result.
    x = f64(4, 3, device=device)
    with pytest.raises(NotImplementedError, match="forward-mode AD nested in forward-mode AD"):
        func.jacfwd(func.jacfwd(lambda a: tiledmm.mm(a, a.mT).sum()))(x)


def test_forward_mode_inside_compile(device):
    # Traced, the Function would lose its tangent: the product runs eagerly (a graph break).
    x, w, dx = f64(6, 5, device=device), f64(3, 5, device=device), f64(6, 5, device=device)
    torch._dynamo.reset()
    tangent = torch.compile(lambda x, dx: func.jvp(lambda x: tiledmm.linear(x, w), (x,), (dx,))[1], backend="aot_eager")
    close(tangent(x, dx), dx @ w.mT)


def test_jvp_of_bmm(device):
    a, b = f64(2, 7, 5, device=device), f64(2, 5, 3, device=device)
    da, db = torch.randn_like(a), torch.randn_like(b)
    close(func.jvp(tiledmm.bmm, (a, b), (da, db))[1], func.jvp(torch.bmm, (a, b), (da, db))[1])


def test_per_sample_gradients_of_linear(device):
    # vmap of grad over functional_call: the per-sample gradients of an nn.Linear.
    ours = tiledmm.nn.Linear(5, 3, device=device, dtype=torch.float64)
    theirs = torch.nn.Linear(5, 3, device=device, dtype=torch.float64)
    theirs.load_state_dict(ours.state_dict())
    params = {name: p.detach() for name, p in ours.named_parameters()}
    x = f64(8, 5, device=device)

    def per_sample(model):
        def sample_loss(params, sample):
            return (func.functional_call(model, params, (sample.unsqueeze(0),)) ** 2).sum()

        return func.vmap(func.grad(sample_loss), in_dims=(None, 0))(params, x)

    close(per_sample(ours), per_sample(theirs))


@pytest.mark.parametrize("tangents", ["a", "b", "both"])
def test_forward_mode_ad(device, tangents):
    a, b = f64(4, 7, 5, device=device), f64(5, 3, device=device, transposed=True)
    da, db = torch.randn_like(a), torch.randn_like(b)
    with fwAD.dual_level():
        dual_a = fwAD.make_dual(a, da) if tangents != "b" else a
        dual_b = fwAD.make_dual(b, db) if tangents != "a" else b
        ours = fwAD.unpack_dual(tiledmm.matmul(dual_a, dual_b))
        theirs = fwAD.unpack_dual(torch.matmul(dual_a, dual_b))
    close(ours.primal, theirs.primal)
    close(ours.tangent, theirs.tangent)


def test_grad_under_autocast(device):
    # autocast's cast comes before the product's autograd, as for the operators: float32
    # gradients, close to torch.matmul's under the same autocast.
    x, w = torch.randn(9, 7, device=device), torch.randn(5, 7, device=device)
    with torch.autocast(device, dtype=torch.bfloat16):
        ours = func.grad(lambda x: (tiledmm.linear(x, w).float() ** 2).sum())(x)
        theirs = func.grad(lambda x: (torch.nn.functional.linear(x, w).float() ** 2).sum())(x)
    assert ours.dtype == theirs.dtype == torch.float32
    torch.testing.assert_close(ours, theirs, rtol=3e-2, atol=3e-1)


@pytest.mark.parametrize(
    "op,shapes,in_dims,message",
    [
        (ops.mm, [(4, 3, 5), (4, 2)], (0, None, None), "tiledmm.mm: inner dimensions differ"),
        (ops.mm, [(4, 3, 2, 5), (5, 2)], (0, None, None), "tiledmm.mm: expected 2-D tensors"),
        (ops.bmm, [(4, 2, 3, 5), (3, 5, 2)], (0, None, None), "tiledmm.bmm: batch sizes differ"),
    ],
    ids=["inner", "rank", "batch"],
)
def test_vmap_errors_name_the_problem(device, op, shapes, in_dims, message):
    args = [torch.randn(shape, device=device) for shape in shapes]
    with pytest.raises(RuntimeError, match=message):
        func.vmap(op, in_dims=in_dims)(*args, 0)


def test_vmap_dtype_mismatch(device):
    a, b = torch.randn(4, 3, 5, device=device), torch.randn(5, 2, device=device, dtype=torch.float64)
    with pytest.raises(RuntimeError, match="tiledmm.mm: expected both tensors to have the same dtype"):
        func.vmap(tiledmm.mm, in_dims=(0, None))(a, b)
