"""Training with tiledmm: torch.compile, tiledmm.nn.Linear, tiledmm.enable(), autocast."""

import pytest
import torch

import tiledmm
from _util import OpLog


class _Block(torch.nn.Module):
    """An MLP with a batched product in the middle: every tiledmm entry point in one model."""

    def __init__(self):
        super().__init__()
        self.up = tiledmm.nn.Linear(16, 32)
        self.down = tiledmm.nn.Linear(32, 8, bias=False)

    def forward(self, x):
        h = torch.relu(self.up(x))  # (batch, seq, 32)
        mix = tiledmm.matmul(h, h.mT) / 32  # (batch, seq, seq)
        return self.down(tiledmm.matmul(torch.softmax(mix, -1), h))


def test_compile_fullgraph_forward_and_backward(device):
    torch.manual_seed(0)
    model = _Block().to(device)
    x = torch.randn(4, 10, 16, device=device)

    def step(m):
        loss = m(x).square().mean()
        grads = torch.autograd.grad(loss, list(m.parameters()))
        return loss, grads

    compiled = torch.compile(model, fullgraph=True)
    eager_loss, eager_grads = step(model)
    compiled_loss, compiled_grads = step(compiled)
    torch.testing.assert_close(compiled_loss, eager_loss, rtol=1e-5, atol=1e-6)
    for g, h in zip(compiled_grads, eager_grads):
        torch.testing.assert_close(g, h, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("bias", [True, False])
def test_linear_is_a_drop_in(device, bias):
    torch.manual_seed(1)
    ref = torch.nn.Linear(24, 10, bias=bias, device=device)
    torch.manual_seed(1)
    ours = tiledmm.nn.Linear(24, 10, bias=bias, device=device)
    assert isinstance(ours, torch.nn.Linear)
    assert list(ours.state_dict()) == list(ref.state_dict())
    for p, q in zip(ours.parameters(), ref.parameters()):
        assert torch.equal(p, q)  # same initialisation from the same seed
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(3, 5, 24, device=device, requires_grad=True)
    with OpLog() as log:
        y = ours(x)
    # x @ W^T on x's rows and W as stored, the bias in the product's kernel: one operator, no view
    assert log.ops.count("tiledmm._gemm_nd.default") == 1 and "aten.mm.default" not in log.ops, log.ops
    assert not any(op.startswith(("aten.add", "aten.view", "aten.t.", "aten.transpose")) for op in log.ops), log.ops
    assert not any("copy" in op or "clone" in op for op in log.ops), log.ops
    torch.testing.assert_close(y, ref(x), rtol=1e-5, atol=1e-5)
    y.square().sum().backward()
    grads = [p.grad for p in ours.parameters()]
    ref(x).square().sum().backward()
    for g, p in zip(grads, ref.parameters()):
        torch.testing.assert_close(g, p.grad, rtol=1e-5, atol=1e-4)


def test_enable_routes_products_to_tiledmm(device):
    x = torch.randn(6, 8, device=device)
    w = torch.randn(5, 8, device=device)
    calls = [
        lambda: torch.matmul(x, w.T), lambda: x @ w.T, lambda: x.matmul(w.T), lambda: torch.mm(x, w.T),
        lambda: x.mm(w.T), lambda: torch.bmm(x[None], w.T[None]), lambda: x[None].bmm(w.T[None]),
        lambda: torch.nn.functional.linear(x, w), lambda: torch.nn.functional.linear(x, w, w[:, 0]),
    ]
    for call in calls:
        expected = call()
        with tiledmm.enable(), OpLog() as log:
            got = call()
        assert any(op.startswith("tiledmm.") for op in log.ops), log.ops
        assert not any(op in ("aten.mm.default", "aten.bmm.default", "aten.addmm.default") for op in log.ops), log.ops
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    with OpLog() as log:
        x @ w.T  # outside the context nothing changes
    assert not any(op.startswith("tiledmm.") for op in log.ops)


def test_enable_falls_through_for_what_tiledmm_cannot_serve(device):
    # complex: torch.matmul serves it on CPU and GPU alike, tiledmm does not
    i = torch.randn(4, 3, dtype=torch.complex64, device=device)
    j = torch.randn(3, 2, dtype=torch.complex64, device=device)
    out = torch.empty(4, 2, device=device)
    x, y = torch.randn(4, 3, device=device), torch.randn(3, 2, device=device)
    with tiledmm.enable(), OpLog() as log:
        assert torch.equal(i @ j, torch.matmul(i, j))
        torch.matmul(x, y, out=out)  # out=: torch
    assert not any(op.startswith("tiledmm.") for op in log.ops), log.ops
    torch.testing.assert_close(out, torch.matmul(x, y))


def test_enable_gives_torch_the_products_tiledmm_refuses(device):
    # A plain first operand sends the product to tiledmm; where tiledmm refuses the others, torch
    # runs the call: its result, or its error in its words.
    x = torch.randn(4, 3, device=device)
    with tiledmm.enable():
        if device == "cpu":  # torch's dense @ sparse on the CPU
            sparse = torch.randn(3, 2).to_sparse()
            torch.testing.assert_close(torch.mm(x, sparse), torch.mm(x, sparse.to_dense()))
        with pytest.raises(RuntimeError, match="same dtype"):
            torch.matmul(x, torch.randn(3, 2, dtype=torch.float64, device=device))
        if device == "cuda":
            with pytest.raises(RuntimeError) as error:
                torch.matmul(x, torch.randn(3, 2))
            assert "tiledmm" not in str(error.value)


def test_enable_serves_exactly_what_tiledmm_computes(device):
    """The mode's test for a product's arguments: dense tensors of at least one dimension, on one
    CPU or CUDA device, of one supported dtype as autocast would cast them; anything else is
    torch's."""
    from tiledmm.mode import _servable

    def t(*shape, dtype=torch.float32, on=device):
        return torch.randn(*shape, device=on).to(dtype)

    assert _servable([t(2, 3), t(3, 4)])
    assert _servable([t(2, 3), t(4, 3), t(4)])
    for dtype in (torch.float64, torch.float16, torch.bfloat16):
        assert _servable([t(2, 3, dtype=dtype), t(3, dtype=dtype)])
    assert not _servable([t(2, 3), t(3, 4, dtype=torch.float64)])  # dtypes differ
    assert not _servable([t(2, 3, dtype=torch.int32), t(3, 4, dtype=torch.int32)])
    assert not _servable([torch.randn(2, 3, dtype=torch.complex64, device=device)] * 2)
    assert not _servable([t(2, 3), torch.tensor(1.0, device=device)])  # 0-D
    assert not _servable([t(2, 3), t(3, 4).to_sparse()])
    assert not _servable([t(2, 3), t(3, 4, on="meta")]) and not _servable([t(2, 3, on="meta"), t(3, 4, on="meta")])
    assert not _servable([t(2, 3), 3.0])
    if device == "cuda":
        assert not _servable([t(2, 3), t(3, 4, on="cpu")]) and not _servable([t(2, 3, on="cpu"), t(3, 4)])
        if torch.cuda.device_count() > 1:
            assert not _servable([t(2, 3), t(3, 4, on="cuda:1")])
    with torch.autocast(device, dtype=torch.bfloat16):
        assert _servable([t(2, 3), t(3, 4, dtype=torch.bfloat16)])  # both cast to bfloat16
        assert not _servable([t(2, 3, dtype=torch.float64), t(3, 4, dtype=torch.bfloat16)])  # float64 stays


def test_enable_trains_an_unchanged_model(device):
    torch.manual_seed(2)
    model = torch.nn.Sequential(torch.nn.Linear(12, 20), torch.nn.Tanh(), torch.nn.Linear(20, 1)).to(device)
    x, y = torch.randn(64, 12, device=device), torch.randn(64, 1, device=device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    with tiledmm.enable():
        for _ in range(20):
            loss = torch.nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    assert losses[-1] < 0.9 * losses[0]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_autocast_casts_like_torch(device, dtype):
    if device == "cpu" and dtype == torch.float16:
        pytest.skip("CPU autocast's float16 support varies across torch versions")
    a = torch.randn(9, 7, device=device)
    b = torch.randn(7, 5, device=device, dtype=torch.float64)
    c = torch.randn(7, 5, device=device)
    with torch.autocast(device, dtype=dtype):
        ours, theirs = tiledmm.matmul(a, c), torch.matmul(a, c)
        assert ours.dtype == theirs.dtype == dtype
        assert tiledmm.nn.Linear(7, 3, device=device)(a).dtype == dtype
        assert torch.ops.tiledmm.mm(b.T.contiguous(), b).dtype == torch.float64  # float64 is not cast
    torch.testing.assert_close(ours.float(), theirs.float(), rtol=2e-2, atol=2e-2)


def test_enable_under_autocast_serves_mixed_dtypes(device):
    # Under autocast a bfloat16 activation meets a float32 weight (the second layer): torch.autocast
    # casts both, and so does tiledmm.enable(), rather than leaving the product to torch.
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4)).to(device)
    x = torch.randn(5, 8, device=device)
    with torch.autocast(device, dtype=torch.bfloat16):
        expected = model(x)
        with tiledmm.enable(), OpLog() as log:
            got = model(x)
    assert log.ops.count("tiledmm._gemm_nd.default") == 2 and "aten.addmm.default" not in log.ops, log.ops
    assert got.dtype == expected.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), expected.float(), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("fn", [tiledmm.matmul, tiledmm.mm], ids=["matmul", "mm"])
def test_autocast_forward_then_backward_outside(device, fn):
    # Mixed-precision training: the forward under autocast, the backward after it. The gradients
    # are float32 like the inputs', and close to torch.matmul's under the same autocast.
    a = torch.randn(9, 7, device=device, requires_grad=True)
    b = torch.randn(7, 5, device=device, requires_grad=True)
    grad = torch.randn(9, 5, device=device)
    with torch.autocast(device, dtype=torch.bfloat16):
        ours, theirs = fn(a, b), torch.matmul(a, b)
    assert ours.dtype == theirs.dtype == torch.bfloat16
    ours_grads = torch.autograd.grad(ours.float(), (a, b), grad)
    theirs_grads = torch.autograd.grad(theirs.float(), (a, b), grad)
    for x, y in zip(ours_grads, theirs_grads):
        assert x.dtype == y.dtype == torch.float32
        torch.testing.assert_close(x, y, rtol=2e-2, atol=5e-2)
