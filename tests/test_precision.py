"""The precision argument: names, torch's setting, and on the GPU each mode's accuracy contract
(docs/precision.md), on randn and on rand inputs, for K from 1 to 524288."""

import pytest
import torch

import tiledmm
from _util import UNIT_ROUNDOFF, rel_err, requires_gpu, torch_product
from tiledmm import _precision

ops = torch.ops.tiledmm


@pytest.fixture
def torch_precision():
    """Restores torch's float32 matmul settings after a test changes them."""
    saved = (torch.get_float32_matmul_precision(), torch.backends.cuda.matmul.fp32_precision)
    yield
    torch.set_float32_matmul_precision(saved[0])
    torch.backends.cuda.matmul.fp32_precision = saved[1]


@pytest.mark.parametrize(
    "setting,expected",
    [("highest", "highest"), ("high", "tf32"), ("medium", "tf32")],
)
def test_none_follows_torchs_float32_matmul_precision(torch_precision, setting, expected):
    torch.set_float32_matmul_precision(setting)
    torch.backends.cuda.matmul.fp32_precision = "none"
    assert _precision.resolve(None, torch.float32) == _precision.CODES[expected]


@pytest.mark.parametrize("setting,expected", [("ieee", "highest"), ("tf32", "tf32")])
def test_none_follows_torchs_cuda_fp32_precision_first(torch_precision, setting, expected):
    torch.set_float32_matmul_precision("medium")
    torch.backends.cuda.matmul.fp32_precision = setting
    assert _precision.resolve(None, torch.float32) == _precision.CODES[expected]


@pytest.mark.parametrize("legacy", ["highest", "high", "medium"])
@pytest.mark.parametrize("cuda_setting", [None, "none", "ieee", "tf32"])
@pytest.mark.parametrize("allow_tf32_raised", [False, True])
def test_none_follows_torch_whatever_mix_of_its_apis_set_it(torch_precision, monkeypatch, legacy, cuda_setting,
                                                            allow_tf32_raised):
    """The documented order (the CUDA matmul setting, then the legacy one) in every state the two
    APIs leave, the mixed ones included (where torch's own allow_tf32 getter raises), whether that
    getter has raised before (then the settings are read) or not."""
    monkeypatch.setattr(_precision, "_allow_tf32_raised", allow_tf32_raised)
    torch.set_float32_matmul_precision(legacy)
    if cuda_setting is not None:
        torch.backends.cuda.matmul.fp32_precision = cuda_setting
    cuda_setting = torch.backends.cuda.matmul.fp32_precision
    expected = {"ieee": "highest", "tf32": "tf32"}.get(cuda_setting, "highest" if legacy == "highest" else "tf32")
    assert _precision.resolve(None, torch.float32) == _precision.CODES[expected]
    assert _precision.resolve(None, torch.bfloat16) == 0


def test_explicit_names_and_other_dtypes():
    for name, code in _precision.CODES.items():
        assert _precision.resolve(name, torch.float32) == code
        assert _precision.resolve(name, torch.float64) == 0  # ignored: one path per other dtype
    with pytest.raises(ValueError, match=r"precision must be None .* 'ieee', '3xtf32', 'tf32', 'highest'.*'fast'"):
        tiledmm.matmul(torch.randn(2, 3), torch.randn(3, 4), precision="fast")


def test_operator_rejects_unknown_codes():
    with pytest.raises(RuntimeError, match="precision code 7 is not one of"):
        ops.mm(torch.randn(2, 3), torch.randn(3, 4), 7)


class _PrecisionLog(torch.utils._python_dispatch.TorchDispatchMode):
    """Records the precision code of every tiledmm product call."""

    def __init__(self):
        super().__init__()
        self.codes = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in (ops.mm.default, ops.bmm.default):
            self.codes.append(args[2] if len(args) > 2 else 0)
        elif func == ops._gemm_nd.default:  # (a, b, ta, tb, bias, precision)
            self.codes.append(args[5] if len(args) > 5 else 0)
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("precision", ["tf32", "ieee"])
def test_backward_uses_the_forwards_precision(precision):
    a = torch.randn(5, 7, requires_grad=True)
    b = torch.randn(7, 3, requires_grad=True)
    with _PrecisionLog() as log:
        tiledmm.matmul(a, b, precision=precision).sum().backward()
    assert log.codes == [_precision.CODES[precision]] * 3  # forward, dA, dB


def test_linear_module_and_explain_carry_the_precision():
    layer = tiledmm.nn.Linear(6, 4, precision="tf32")
    with _PrecisionLog() as log:
        layer(torch.randn(3, 6))
    assert log.codes == [_precision.CODES["tf32"]]
    assert "precision: tf32 (requested)" in tiledmm.explain(torch.randn(2, 3), torch.randn(3, 4), precision="tf32")


# ---- GPU: the accuracy contract of each mode ----

CONTRACT_KS = [1, 2, 7, 31, 32, 33, 64, 255, 1000, 4096, 8192, 8193, 65536, 524288]


def _inputs(kind, m, k, n):
    make = torch.randn if kind == "randn" else torch.rand
    return make(m, k, device="cuda"), make(k, n, device="cuda")


@requires_gpu
@pytest.mark.parametrize("kind", ["randn", "rand"])
@pytest.mark.parametrize("k", CONTRACT_KS)
@pytest.mark.parametrize("precision", ["highest", "ieee", "3xtf32", "tf32"])
def test_accuracy_contract(precision, k, kind):
    """highest and 3xtf32: within 2x torch.matmul's float32 error. ieee (one sequential float32
    sum per output): within 2x torch's error plus sqrt(K) unit roundoffs. tf32: within 2x torch's
    TF32 error, or TF32's own 2^-10 where torch does not use TF32 (K = 1). Explicit 3xtf32 below
    the dispatcher's K threshold is not float32-accurate: skipped."""
    if precision == "3xtf32" and k < 32:
        pytest.skip("3xtf32 is float32-accurate from K = 32 (below it, 'highest' runs the exact kernel)")
    m, n = 96, 80
    a, b = _inputs(kind, m, k, n)
    ref = a.double() @ b.double()
    err = rel_err(tiledmm.matmul(a, b, precision=precision), ref)
    torch_err = rel_err(torch_product(a, b, tf32=precision == "tf32"), ref)
    print(f"{precision} K={k} {kind}: tiledmm {err:.3e} torch {torch_err:.3e} ratio {err / torch_err:.2f}")
    bound = 2 * torch_err
    if precision == "ieee":
        bound += 2 * UNIT_ROUNDOFF[torch.float32] * (k + 1) ** 0.5
    if precision == "tf32":
        bound = max(bound, 2.0**-10)
    assert err <= bound, f"relative error {err:.3e} > {bound:.3e} (torch.matmul: {torch_err:.3e})"


@requires_gpu
@pytest.mark.parametrize("kind", ["randn", "rand"])
@pytest.mark.parametrize("k", [33, 255, 1000, 4096])
def test_highest_contract_on_outputs_that_fill_the_gpu(k, kind):
    """Large outputs under 'highest' (the exact kernel; 3xTF32 on Hopper): within 2x torch's error."""
    a, b = _inputs(kind, 2048, k, 2048)
    ref = a.double() @ b.double()
    err = rel_err(tiledmm.matmul(a, b, precision="highest"), ref)
    torch_err = rel_err(torch_product(a, b), ref)
    print(f"highest 2048x{k}x2048 {kind}: tiledmm {err:.3e} torch {torch_err:.3e} ratio {err / torch_err:.2f}")
    assert err <= 2 * torch_err, f"relative error {err:.3e} > 2x torch.matmul's {torch_err:.3e}"


ANCHORS = [("square", 4096, 4096, 4096), ("standard", 2048, 8192, 4096), ("transA", 2048, 8192, 4096),
           ("irregular", 8205, 2949, 5921), ("smallK", 32768, 64, 32768)]


@requires_gpu
@pytest.mark.parametrize("name,m,k,n", ANCHORS, ids=[a[0] for a in ANCHORS])
def test_anchor_problems_pass_kernelbench_allclose_on_rand(name, m, k, n):
    """The five problems with their original torch.rand inputs, at the default precision."""
    if name == "transA":
        a, b = torch.rand(k, m, device="cuda").T, torch.rand(k, n, device="cuda")
    else:
        a, b = torch.rand(m, k, device="cuda"), torch.rand(k, n, device="cuda")
    out = tiledmm.matmul(a, b)
    expected = torch_product(a, b)
    assert torch.allclose(out, expected, atol=1e-4, rtol=1e-4), (out - expected).abs().max().item()
