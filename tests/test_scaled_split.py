"""'highest' at short K on Hopper: float32 products from scaled float16 splits
(kernels/cuda/sm90/scaled_split.cuh).

The path runs where 32 < K <= 64 and the output fills the GPU (at least two 128 x 128 tiles per SM).
Each test checks first that its problem takes the path, so that none passes on another one.
"""

import pytest
import torch

import tiledmm
from _util import HOPPER_ONLY, UNIT_ROUNDOFF, poisoned, rel_err, requires_gpu, torch_product

PATH = "float16 product of the operands' scaled big and remainder parts"


pytestmark = [requires_gpu, HOPPER_ONLY]


def _fill_gpu_shape(k, aligned=False):
    """m x k x n with at least two 128 x 128 output tiles per SM: dividing no tile (n odd: the
    output has no tensor map), or whole tiles."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    column_tiles = (2 * sms + 15) // 16  # with 16 rows of tiles, or 17 with m = 2049
    return (2048, k, column_tiles * 128) if aligned else (2049, k, column_tiles * 128 - 125)


def _takes_path(a, b):
    text = tiledmm.explain(a, b, precision="highest")
    assert PATH in text, text
    return text


def _componentwise_ok(out, a, b, where=None):
    """|out - ref| <= 2 K (u (|A| |B|) + eta) elementwise (at the outputs `where` selects, else
    all): float32 summation's bound (eta: the spacing of float32's subnormals), which the float16
    split must keep for the lines it takes and the exact recomputation for those it leaves out."""
    ref = a.double() @ b.double()
    k = a.shape[-1]
    bound = 2 * k * (UNIT_ROUNDOFF[torch.float32] * (a.double().abs() @ b.double().abs()) + 2.0**-149)
    excess = (out.double() - ref).abs() - bound
    excess = (excess if where is None else excess[where]).max().item()
    assert excess <= 0, f"an output exceeds float32 summation's bound by {excess:.3e}"


@pytest.mark.parametrize("kind", ["randn", "rand"])
@pytest.mark.parametrize("k", [33, 47, 64])
@pytest.mark.parametrize("layout", ["nn", "tn", "nt", "tt"])
@pytest.mark.parametrize("aligned", [False, True], ids=["odd", "aligned"])
def test_contract_on_every_layout(aligned, layout, k, kind):
    """Within 2x torch.matmul's float32 error on randn and rand, every output written (poisoned)."""
    m, k, n = _fill_gpu_shape(k, aligned)
    make = torch.randn if kind == "randn" else torch.rand
    a = make(k, m, device="cuda").T if layout[0] == "t" else make(m, k, device="cuda")
    b = make(n, k, device="cuda").T if layout[1] == "t" else make(k, n, device="cuda")
    _takes_path(a, b)
    out, reused = poisoned(lambda: tiledmm.matmul(a, b, precision="highest"), (m, n), torch.float32, "cuda")
    assert torch.isfinite(out).all(), "unwritten (poisoned) outputs"
    ref = a.double() @ b.double()
    err, torch_err = rel_err(out, ref), rel_err(torch_product(a, b), ref)
    print(f"{layout} {m}x{k}x{n} {kind}: tiledmm {err:.3e} torch {torch_err:.3e} poisoned={reused}")
    assert err <= 2 * torch_err, f"relative error {err:.3e} > 2x torch.matmul's {torch_err:.3e}"


@pytest.mark.parametrize("broadcast", ["none", "a", "b"])
def test_batches(broadcast):
    """bmm and broadcast matmul: each matrix its own scales (a broadcast operand's shared)."""
    m, k, n = 1031, 64, 4099
    a = torch.randn(1 if broadcast == "a" else 3, m, k, device="cuda")
    b = torch.randn(1 if broadcast == "b" else 3, k, n, device="cuda")
    a[-1, 5, 3] = 2.0**30  # a row left out of the split (of every matrix, where A is broadcast)
    b[-1, 7, 11] = -(2.0**-30)  # a column left out
    a, b = a.expand(3, m, k), b.expand(3, k, n)
    _takes_path(a, b)
    out = tiledmm.bmm(a, b, precision="highest")
    _componentwise_ok(out, a, b)
    ref = a.double() @ b.double()
    assert rel_err(out, ref) <= 2 * rel_err(torch_product(a, b), ref)


def test_lines_left_out_across_a_batch():
    """Attention's scores (96 x 512 x 64 x 512): rows and columns left out of the split in a few of
    the matrices, more than a group of the recomputation's, its groups mixing matrices; every
    output written (poisoned) and within float32's bound."""
    a = torch.randn(96, 512, 64, device="cuda")
    b = torch.randn(96, 512, 64, device="cuda").mT
    for z, row in [(0, 0), (5, 7), (5, 300), (50, 511), (95, 2), (95, 3), (31, 64), (77, 128), (12, 9), (60, 1)]:
        a[z, row, 4] = 2.0**-40  # 2^-40 below the row's largest: left out
    for z, col in [(3, 0), (50, 511), (94, 17), (94, 18)]:
        b[z, 6, col] = -(2.0**-40)
    _takes_path(a, b)
    out, _ = poisoned(lambda: tiledmm.matmul(a, b, precision="highest"), (96, 512, 512), torch.float32, "cuda")
    _componentwise_ok(out, a, b)


def test_lines_the_split_leaves_out_are_exact():
    """Rows and columns whose range defeats float16 parts: a huge value beside small ones (its
    partner in the other operand zero, so that the small ones make the output), lines of tiny and
    of huge values (scales past 2^63), a tiny value in a column; each output within float32's
    bound (with its subnormals where a tiny row meets a tiny column)."""
    m, k, n = _fill_gpu_shape(64)
    a = torch.randn(m, k, device="cuda")
    b = torch.randn(k, n, device="cuda")
    a[3, 0] = 2.0**40
    b[0, :] = 0.0
    a[10] *= 2.0**-70
    a[11] *= 2.0**70
    b[:, 20] *= 2.0**-70
    b[5, 21] = 2.0**-60  # 2^-60 below the column's largest: its remainder would be lost
    b[:, 22] *= 2.0**50  # within the scales' range: taken
    _takes_path(a, b)
    out = tiledmm.mm(a, b, precision="highest")
    _componentwise_ok(out, a, b)


@pytest.mark.parametrize("which", ["edges", "many"])
def test_listed_lines_at_the_edges_and_many(which):
    """Lines left out of the split: the first and last rows and columns (the last in a partial
    tile), or every 50th row and 40th column (more than a group of the recomputation's); outputs
    where a listed row meets a listed column; every output written (poisoned) and within float32's
    bound."""
    m, k, n = _fill_gpu_shape(64)
    a = torch.randn(m, k, device="cuda")
    b = torch.randn(k, n, device="cuda")
    rows = [0, m - 1] if which == "edges" else list(range(0, m, 50)) + [m - 1]
    cols = [0, n - 1] if which == "edges" else list(range(0, n, 40)) + [n - 1]
    a[rows, 7] = 2.0**-40  # 2^-40 below the row's largest: left out
    b[9, cols] = -(2.0**-40)
    _takes_path(a, b)
    out, _ = poisoned(lambda: tiledmm.mm(a, b, precision="highest"), (m, n), torch.float32, "cuda")
    _componentwise_ok(out, a, b)


@pytest.mark.parametrize("below", [18.5, 19.0, 19.5])
def test_small_values_alone_in_their_outputs(below):
    """Values 2^-below under their row's largest (random significands), each output their product
    alone (the other operand zero where the rows are large): the split takes values down to 2^-19
    of the line's largest, to 2^-20 of each (docs/precision.md), and leaves smaller ones out for
    the exact recomputation, so each output (two values, each held to 2^-20) is within 2^-18 of its
    value and within float32's bound."""
    m, k, n = _fill_gpu_shape(64)
    a = torch.zeros(m, k, device="cuda")
    a[:, 0] = 1.0
    a[:, 1] = 2.0**-below * (1 + torch.rand(m, device="cuda"))
    b = torch.randn(k, n, device="cuda")
    b[0, :] = 0.0
    _takes_path(a, b)
    out = tiledmm.mm(a, b, precision="highest")
    _componentwise_ok(out, a, b)
    ref = a.double() @ b.double()
    worst = ((out.double() - ref).abs() / ref.abs()).max().item()
    assert worst <= 2.0**-18, f"an output is {worst:.3e} off its value"


def test_every_line_left_out():
    """Every row out of the split: the exact recomputation writes the whole output."""
    m, k, n = _fill_gpu_shape(40)
    a = torch.randn(m, k, device="cuda")
    a[:, 0] = 2.0**30
    b = torch.randn(k, n, device="cuda")
    b[0, :] = 0.0
    _takes_path(a, b)
    out, _ = poisoned(lambda: tiledmm.mm(a, b, precision="highest"), (m, n), torch.float32, "cuda")
    _componentwise_ok(out, a, b)


def test_non_finite_inputs_give_ieee_outputs():
    """NaN and Inf in a row or column: non-finite outputs exactly where torch.matmul's are, the
    same values (Inf with its sign, NaN), the rest finite and accurate."""
    m, k, n = _fill_gpu_shape(64)
    a = torch.randn(m, k, device="cuda")
    b = torch.randn(k, n, device="cuda")
    a[2, 5] = float("inf")
    a[9, 1] = float("nan")
    b[7, 30] = float("-inf")
    b[3, 40] = float("inf")
    b[4, 40] = float("-inf")  # inf - inf in column 40: NaN
    _takes_path(a, b)
    out = tiledmm.mm(a, b, precision="highest")
    expected = torch_product(a, b)
    assert torch.equal(torch.isnan(out), torch.isnan(expected))
    assert torch.equal(out[torch.isinf(expected)], expected[torch.isinf(expected)])
    finite = torch.isfinite(expected)
    assert torch.isfinite(out[finite]).all()
    _componentwise_ok(out, a, b, where=finite)


@pytest.mark.parametrize("k", [32, 65])
def test_other_short_k_keep_3xtf32(k):
    m, k, n = _fill_gpu_shape(k)
    text = tiledmm.explain(torch.randn(m, k, device="cuda"), torch.randn(k, n, device="cuda"), precision="highest")
    assert PATH not in text and "3xTF32" in text, text


def test_explicit_3xtf32_and_small_outputs_keep_3xtf32():
    m, k, n = _fill_gpu_shape(64)
    a, b = torch.randn(m, k, device="cuda"), torch.randn(k, n, device="cuda")
    assert PATH not in tiledmm.explain(a, b, precision="3xtf32")
    assert PATH not in tiledmm.explain(a[:512], b[:, :512], precision="highest")
