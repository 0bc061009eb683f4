"""The products' lean host path (tiledmm/autograd.py `transformable`): without gradients the
operator runs below autograd; with them, one eager autograd.Function node per product, not
torch.library's Python autograd kernel. For every entry point, on CPU and GPU: the graph torch
would build, with gradients on one input, both or none, under autocast, torch.compile, torch.func
and torch.jit.trace, with the same values and gradients as torch."""

import pytest
import torch
import torch.nn.functional as F
from torch import func

import tiledmm
from _util import OpLog, poisoned

# name -> (tiledmm's call, torch's call, operand shapes (input, weight or other)): linear's
# operands are (x, w) with a bias that requires a gradient where w does.
ENTRIES = {
    "matmul": (tiledmm.matmul, torch.matmul, ((6, 5), (5, 4))),
    "matmul_nd": (tiledmm.matmul, torch.matmul, ((2, 6, 5), (5, 4))),
    "matmul_batched": (tiledmm.matmul, torch.matmul, ((2, 3, 6, 5), (2, 3, 5, 4))),
    "mm": (tiledmm.mm, torch.mm, ((6, 5), (5, 4))),
    "bmm": (tiledmm.bmm, torch.bmm, ((2, 6, 5), (2, 5, 4))),
    "linear": (lambda x, w: tiledmm.linear(x, w, w[:, 0]), lambda x, w: F.linear(x, w, w[:, 0]), ((6, 5), (4, 5))),
    "linear_nd": (lambda x, w: tiledmm.linear(x, w, w[:, 0]), lambda x, w: F.linear(x, w, w[:, 0]),
                  ((2, 6, 5), (4, 5))),
    "nn.Linear": (lambda x, w: _layer(tiledmm.nn.Linear, x, w), lambda x, w: _layer(torch.nn.Linear, x, w),
                  ((6, 5), (4, 5))),
    "nn.Linear_nd": (lambda x, w: _layer(tiledmm.nn.Linear, x, w), lambda x, w: _layer(torch.nn.Linear, x, w),
                     ((2, 6, 5), (4, 5))),
    "enable": (lambda a, b: _enabled(torch.matmul, a, b), torch.matmul, ((6, 5), (5, 4))),
}


# Each entry's product node where it is not TiledmmMMBackward: linear's and matmul's N-D rows
# times one matrix (x @ W^T + bias or x @ W, any leading dimensions of x, no views), and the
# batched products'.
_PRODUCT_NODE = {"bmm": "TiledmmBMMBackward", "matmul_batched": "TiledmmBMMBackward",
                 **{name: "TiledmmRowsBackward"
                    for name in ("matmul_nd", "linear", "linear_nd", "nn.Linear", "nn.Linear_nd")}}


def _layer(cls, x, w):
    """cls (an nn.Linear) with weight w and bias w[:, 0], on x."""
    layer = cls(w.shape[1], w.shape[0], device="meta")
    return func.functional_call(layer, {"weight": w, "bias": w[:, 0]}, (x,))


def _enabled(fn, *args):
    with tiledmm.enable():
        return fn(*args)


def _operands(name, device, needs, dtype=torch.float64):
    shapes = ENTRIES[name][2]
    return [torch.randn(s, device=device, dtype=dtype, requires_grad=w in needs) for s, w in zip(shapes, "ab")]


def _graph_nodes(out):
    """The names of the nodes of out's graph."""
    names, stack = [], [out.grad_fn]
    while stack:
        node = stack.pop()
        if node is not None:
            names.append(type(node).__name__)
            stack += [next_node for next_node, _ in node.next_functions]
    return names


@pytest.mark.parametrize("needs", ["", "a", "b", "ab"], ids=["none", "a", "b", "both"])
@pytest.mark.parametrize("name", list(ENTRIES))
def test_graph_and_gradients_as_torchs(device, name, needs):
    ours_fn, torch_fn, _ = ENTRIES[name]
    inputs = _operands(name, device, needs)
    ours, theirs = ours_fn(*inputs), torch_fn(*inputs)
    torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-12)
    assert ours.requires_grad == theirs.requires_grad == bool(needs)
    if not needs:
        assert ours.grad_fn is None
        return
    nodes = _graph_nodes(ours)
    assert _PRODUCT_NODE.get(name, "TiledmmMMBackward") in nodes, nodes  # lean
    assert not any("GeneratedBackwardFor" in n for n in nodes), nodes  # not torch.library's
    wrt = [x for x in inputs if x.requires_grad]
    grad = torch.randn_like(ours)
    for g, h in zip(torch.autograd.grad(ours, wrt, grad), torch.autograd.grad(theirs, wrt, grad)):
        torch.testing.assert_close(g, h, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("needs", ["bias", "all"])
@pytest.mark.parametrize("shape", [(6, 5), (2, 6, 5)], ids=["2d", "nd"])
def test_linear_bias_is_in_the_products_node(device, shape, needs):
    # As torch's addmm: the bias is added to the product's output in place, one graph node for
    # both, whose backward sums the output's gradient into the bias's.
    x, w = torch.randn(shape, device=device, dtype=torch.float64), torch.randn(4, 5, device=device, dtype=torch.float64)
    bias = torch.randn(4, device=device, dtype=torch.float64, requires_grad=True)
    wrt = [x.requires_grad_(), w.requires_grad_(), bias] if needs == "all" else [bias]
    ours, theirs = tiledmm.linear(x, w, bias), F.linear(x, w, bias)
    torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-12)
    nodes = _graph_nodes(ours)
    assert nodes[0] == "TiledmmRowsBackward" and not any(n.startswith(("AddBackward", "ViewBackward",
                                                                           "TransposeBackward")) for n in nodes), nodes
    grad = torch.randn_like(ours)
    for g, h in zip(torch.autograd.grad(ours, wrt, grad), torch.autograd.grad(theirs, wrt, grad)):
        torch.testing.assert_close(g, h, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", ["mm", "bmm", "matmul_nd", "linear", "linear_nd"])
def test_the_products_node_takes_tensors_only(device, name):
    """The product's graph node was made from tensors alone, not the precision or an absent bias:
    autograd.Function.apply tests every argument twice, so a non-tensor one costs host time on
    every call (bench/NOTES.md item 207). Its needs_input_grad has an entry for each argument."""
    a, b = _operands(name, device, "ab")
    out = ENTRIES[name][0](a, b)
    tensors = 3 if name.startswith("linear") else 2  # linear's bias is w[:, 0]
    assert out.grad_fn.needs_input_grad == (True,) * tensors, (out.grad_fn, out.grad_fn.needs_input_grad)


# Every kernel family's way to the bias: float64, exact float32 and TF32, both 16-bit types.
BIAS_PATHS = {"float64": (torch.float64, None, 1e-12), "ieee": (torch.float32, "ieee", 1e-5),
              "tf32": (torch.float32, "tf32", 2e-3), "float16": (torch.float16, None, 4e-3),
              "bfloat16": (torch.bfloat16, None, 1.6e-2)}
# One row, sizes that divide no tile and break 16-byte alignment, the Hopper GEMM core's whole and
# ragged tiles, and a long K over a small output (split or stream-K).
BIAS_SHAPES = [(1, 64, 24), (7, 37, 41), (33, 136, 264), (1032, 520, 776), (256, 8192, 256)]


@pytest.mark.parametrize("bias_kind", ["full", "one", "strided"])
@pytest.mark.parametrize("needs", ["", "all"], ids=["no_grad", "grad"])
@pytest.mark.parametrize("m,k,n", BIAS_SHAPES, ids=str)
@pytest.mark.parametrize("path", list(BIAS_PATHS))
def test_linear_bias_is_added_by_the_products_operator(device, path, m, k, n, needs, bias_kind):
    # tiledmm::_gemm_nd adds a bias of the product's dtype in the kernel's epilogue (the Hopper
    # GEMM core, the CPU loops) or right after the product from C++: one operator, no add of its own.
    if device == "cpu" and m * k * n > 2**21:
        pytest.skip("the CPU backend's plain loops: small shapes only")
    dtype, precision, tolerance = BIAS_PATHS[path]
    x = torch.randn(m, k, dtype=dtype, device=device, requires_grad=bool(needs))
    w = torch.randn(n, k, dtype=dtype, device=device, requires_grad=bool(needs))
    scale = k**0.5  # as large as the products, so that a bias left out or added twice shows
    bias = {"full": lambda: torch.randn(n, dtype=dtype, device=device) * scale,
            "one": lambda: torch.randn(1, dtype=dtype, device=device) * scale,
            "strided": lambda: torch.randn(n, 3, dtype=dtype, device=device)[:, 1] * scale}[bias_kind]()
    bias.requires_grad_(bool(needs))
    with OpLog() as log:
        out, _ = poisoned(lambda: tiledmm.linear(x, w, bias, precision=precision), (m, n), dtype, device)
    assert "tiledmm._gemm_nd.default" in log.ops and not any(op.startswith("aten.add") for op in log.ops), log.ops
    ref = x.double() @ w.double().mT + bias.double()
    assert torch.isfinite(out).all()
    assert ((out.double() - ref).norm() / ref.norm()).item() < tolerance
    if needs:
        grad = torch.randn_like(out)
        grad_bias = torch.autograd.grad(out, bias, grad)[0]
        torch.testing.assert_close(grad_bias.double(), grad.double().sum_to_size(bias.shape), rtol=1e-2, atol=1e-2 * m**0.5)


# _gemm_nd's operands: N-D tensors whose rows fold, ones that must be copied (leading strides that
# do not chain, a stride-0 expanded gradient), and each transposed.
FOLDED = {
    "rows": lambda t: t(2, 3, 5),
    "matrix": lambda t: t(6, 5),
    "column_major_rows": lambda t: t(5, 2, 3).permute(1, 2, 0),  # folds into a column-major matrix
    "unfoldable": lambda t: t(3, 2, 5).transpose(0, 1),  # copied: its leading strides do not chain
    "expanded": lambda t: t(1, 1, 5).expand(2, 3, 5),
}


@pytest.mark.parametrize("bias", [False, True], ids=["no_bias", "bias"])
@pytest.mark.parametrize("b_kind", ["matrix", "rows"])
@pytest.mark.parametrize("a_kind", list(FOLDED))
@pytest.mark.parametrize("ta,tb", [(False, True), (False, False), (True, False), (True, True)])
def test_gemm_nd_reads_folded_and_transposed_operands(device, ta, tb, a_kind, b_kind, bias):
    # A = a's rows folded (a^T where ta), B likewise (b^T where tb); the output keeps an N-D a's
    # leading dimensions where a is not transposed. Operands sized so that every pairing fits.
    def t(*shape):
        return torch.randn(shape, device=device, dtype=torch.float64)

    a = FOLDED[a_kind](t)  # 6 rows of 5 (or 2 x 3 x 5)
    fold = lambda x: x.reshape(-1, x.shape[-1])  # noqa: E731
    A = fold(a).mT if ta else fold(a)
    k = A.shape[1]
    if b_kind == "matrix":
        b = t(4, k) if tb else t(k, 4)
    else:  # rows of an N-D tensor: 4 of k, or k of 4
        b = t(2, 2, k) if tb else t(k, 1, 4)
    B = fold(b).mT if tb else fold(b)
    n = B.shape[1]
    c = t(n) if bias else None
    out = torch.ops.tiledmm._gemm_nd(a, b, ta, tb, c, 0)
    ref = A @ B + (c if bias else 0)
    shape = (*a.shape[:-1], n) if a.dim() > 2 and not ta else (A.shape[0], n)
    assert out.shape == shape and out.is_contiguous()
    torch.testing.assert_close(out.reshape(-1, n), ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("bias_shape", [(1,), (6, 4), (2, 1, 4)])
def test_linear_bias_broadcasts_as_torchs(device, bias_shape):
    # Biases other than (out_features,) broadcast as F.linear's do (added out of place).
    x, w, bias = (torch.randn(s, device=device, dtype=torch.float64) for s in ((2, 6, 5), (4, 5), bias_shape))
    torch.testing.assert_close(tiledmm.linear(x, w, bias), F.linear(x, w, bias), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtypes", [(torch.float64, torch.float32), (torch.float32, torch.float64)],
                         ids=["float64_operands", "float32_operands"])
def test_linear_of_a_strided_input_adds_the_bias_as_torchs(device, dtypes):
    # An input that cannot fold into rows takes matmul's general path; there torch adds the bias
    # in place into the product's output, which takes a bias of another floating dtype.
    operands, bias_dtype = dtypes
    x = torch.randn(5, 6, 2, device=device, dtype=operands).transpose(0, 2)
    w, bias = torch.randn(4, 5, device=device, dtype=operands), torch.randn(4, device=device, dtype=bias_dtype)
    ours, theirs = tiledmm.linear(x, w, bias, precision="ieee"), F.linear(x, w, bias)
    assert ours.dtype == theirs.dtype == operands
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("needs", ["", "bias"], ids=["no_grad", "grad"])
def test_linear_under_vmap_over_the_bias(device, needs):
    # vmap over the bias alone: its batch is not the product's, so it is not added in place.
    x, w = (torch.randn(s, device=device, dtype=torch.float64) for s in ((6, 5), (4, 5)))
    biases = torch.randn(3, 4, device=device, dtype=torch.float64, requires_grad=bool(needs))
    ours = func.vmap(lambda b: tiledmm.linear(x, w, b))(biases)
    torch.testing.assert_close(ours, func.vmap(lambda b: F.linear(x, w, b))(biases), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", list(ENTRIES))
def test_no_grad_mode_builds_no_graph(device, name):
    inputs = _operands(name, device, "ab")
    with torch.no_grad():
        out = ENTRIES[name][0](*inputs)
    assert out.grad_fn is None and not out.requires_grad


@pytest.mark.parametrize("needs", ["a", "b"])
@pytest.mark.parametrize("name", ["matmul", "matmul_nd", "mm", "bmm", "linear", "linear_nd"])
def test_autocast_forward_backward_after_it(device, name, needs):
    # Mixed-precision training with one operand needing a gradient: the Function saves the cast
    # operands, so a backward after the autocast block gives a float32 gradient, close to torch's.
    ours_fn, torch_fn, _ = ENTRIES[name]
    inputs = _operands(name, device, needs, dtype=torch.float32)
    with torch.autocast(device, dtype=torch.bfloat16):
        ours, theirs = ours_fn(*inputs), torch_fn(*inputs)
    assert ours.dtype == theirs.dtype == torch.bfloat16
    (wrt,) = [x for x in inputs if x.requires_grad]
    grad = torch.randn_like(ours, dtype=torch.float32)
    (g,), (h,) = torch.autograd.grad(ours.float(), wrt, grad), torch.autograd.grad(theirs.float(), wrt, grad)
    assert g.dtype == h.dtype == torch.float32
    torch.testing.assert_close(g, h, rtol=2e-2, atol=5e-2)


def _recording_backend(called):
    """aot_eager, adding to `called` the operators that its forward and backward graphs call."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    def compiler(gm, _):
        called.update(str(node.target) for node in gm.graph.nodes if node.op == "call_function")
        return make_boxed_func(gm.forward)

    return aot_autograd(fw_compiler=compiler, bw_compiler=compiler)


_RAW = {"tiledmm._mm_raw.default", "tiledmm._bmm_raw.default"}


@pytest.mark.parametrize("needs", ["a", "ab"], ids=["a", "both"])
@pytest.mark.parametrize("name", ["matmul", "matmul_nd", "matmul_batched", "mm", "bmm", "linear", "linear_nd"])
def test_compile_fullgraph(device, name, needs):
    # The compiled graphs, forward and backward, call the operators' raw twins, which go straight to
    # the kernel (no Python autograd kernel a call); the gradients are torch's.
    ours_fn, torch_fn, _ = ENTRIES[name]
    inputs = _operands(name, device, needs)
    wrt = [x for x in inputs if x.requires_grad]
    torch._dynamo.reset()
    called = set()
    compiled = torch.compile(lambda *args: ours_fn(*args).square().sum(), fullgraph=True,
                             backend=_recording_backend(called))
    for g, h in zip(torch.autograd.grad(compiled(*inputs), wrt), torch.autograd.grad(torch_fn(*inputs).square().sum(), wrt)):
        torch.testing.assert_close(g, h, rtol=1e-12, atol=1e-12)
    products = {op for op in called if op.startswith("tiledmm.")}
    assert products and products <= _RAW, called


@pytest.mark.parametrize("name", ["matmul", "matmul_batched", "linear", "linear_nd"])
def test_compile_under_autocast(device, name):
    # The operands are cast before the compiled graph's product (whose Function saves them cast):
    # bfloat16 outputs and float32 gradients close to torch's under autocast, through the raw twins.
    ours_fn, torch_fn, _ = ENTRIES[name]
    inputs = _operands(name, device, "ab", dtype=torch.float32)
    torch._dynamo.reset()
    called = set()
    compiled = torch.compile(ours_fn, fullgraph=True, backend=_recording_backend(called))
    with torch.autocast(device, dtype=torch.bfloat16):
        ours, theirs = compiled(*inputs), torch_fn(*inputs)
    assert ours.dtype == theirs.dtype == torch.bfloat16
    torch.testing.assert_close(ours, theirs, rtol=2e-2, atol=2e-2)
    grad = torch.randn_like(ours)
    for g, h in zip(torch.autograd.grad(ours, inputs, grad), torch.autograd.grad(theirs, inputs, grad)):
        assert g.dtype == h.dtype == torch.float32
        torch.testing.assert_close(g, h, rtol=2e-2, atol=5e-2)
    assert {op for op in called if op.startswith("tiledmm.")} <= _RAW, called


@pytest.mark.parametrize("name", ["matmul", "matmul_nd", "matmul_batched", "mm", "bmm", "linear", "linear_nd"])
def test_func_grad_and_vmap(device, name):
    ours_fn, torch_fn, _ = ENTRIES[name]
    a, b = _operands(name, device, "")
    for argnums in (0, 1):
        ours = func.grad(lambda x, y: ours_fn(x, y).square().sum(), argnums=argnums)(a, b)
        theirs = func.grad(lambda x, y: torch_fn(x, y).square().sum(), argnums=argnums)(a, b)
        torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-12)
    # vmap over an operand that requires a gradient: the operators' batching rules, then autograd.
    batch, b = torch.stack([a, 2 * a]), b.requires_grad_()
    ours, theirs = func.vmap(ours_fn, in_dims=(0, None))(batch, b), func.vmap(torch_fn, in_dims=(0, None))(batch, b)
    torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(torch.autograd.grad(ours.sum(), b), torch.autograd.grad(theirs.sum(), b),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.filterwarnings("ignore:`torch.jit.trace` is deprecated")
@pytest.mark.parametrize("enabled", [False, True], ids=["tiledmm.nn.Linear", "enable"])
def test_jit_trace_of_a_linear_layer_passes_its_check(device, enabled):
    # The trace's check reruns the layer without gradients: it must record the same graph.
    x = torch.randn(6, 5, device=device)
    if enabled:
        layer = torch.nn.Linear(5, 4, device=device)
        with tiledmm.enable():
            traced = torch.jit.trace(layer, x)
    else:
        layer = tiledmm.nn.Linear(5, 4, device=device)
        traced = torch.jit.trace(layer, x)
    assert "tiledmm::mm" in str(traced.graph)
    torch.testing.assert_close(traced(x), torch.nn.functional.linear(x, layer.weight, layer.bias), rtol=1e-3, atol=1e-3)


@pytest.mark.filterwarnings("ignore:`torch.jit.trace` is deprecated")
@pytest.mark.parametrize("requires_grad", [False, True], ids=["no_grad", "grad"])
def test_jit_trace_records_the_operator(device, requires_grad):
    a, b = (torch.randn(4, 3, device=device, requires_grad=requires_grad) for _ in range(2))
    traced = torch.jit.trace(tiledmm.matmul, (a, b.mT), check_trace=False)
    graph = str(traced.graph)
    assert "tiledmm::mm" in graph and "PythonOp" not in graph, graph
    torch.testing.assert_close(traced(a, b.mT), a @ b.mT)


@pytest.mark.parametrize("needs", ["", "ab"], ids=["no_grad", "grad"])
@pytest.mark.parametrize("name,operator", [("mm", "tiledmm::mm"), ("bmm", "tiledmm::bmm"),
                                           ("linear_nd", "tiledmm::_gemm_nd")])
def test_a_profile_names_the_operators(device, name, operator, needs):
    """torch.profiler sees each product's operator, forward and backward, as it sees torch's: the
    plain-eager path's straight call to the CUDA kernel, which no profile records, steps aside
    while a profiler runs."""
    operands = _operands(name, device, needs, torch.float32)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        out = ENTRIES[name][0](*operands)
        if needs:
            out.sum().backward()
    calls = sum(event.count for event in profile.key_averages() if event.key == operator)
    assert calls == (3 if needs else 1), [event.key for event in profile.key_averages()]
