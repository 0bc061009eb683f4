"""tiledmm.matmul / mm / bmm against torch.matmul and a float64 reference, on CPU and GPU."""

import pytest
import torch

import tiledmm
from _util import DTYPES, LAYOUTS, check_against_reference, operands, poisoned

ODD = [1, 2, 7, 31, 33, 127, 4097]
BASE = (33, 31, 7)


def odd_shapes():
    """Each odd size in each position (m, k, n) of a small base problem, plus a few cubes."""
    shapes = {BASE, (1, 1, 1), (2, 2, 2), (127, 127, 127), (65, 129, 67)}
    for position in range(3):
        for size in ODD:
            shape = list(BASE)
            shape[position] = size
            shapes.add(tuple(shape))
    return sorted(shapes)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("m,k,n", odd_shapes())
def test_mm_odd_shapes_every_layout(device, dtype, layout, m, k, n):
    a, b = operands(m, k, n, layout, dtype, device)
    out, _ = poisoned(lambda: tiledmm.mm(a, b), (m, n), dtype, device)
    check_against_reference(out, a, b)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_bmm_every_layout(device, dtype, layout):
    a, b = operands(37, 19, 45, layout, dtype, device, batch=(3,))
    out, _ = poisoned(lambda: tiledmm.bmm(a, b), (3, 37, 45), dtype, device)
    check_against_reference(out, a, b)


# (shape of input, shape of other): every rank combination torch.matmul accepts.
MATMUL_SHAPES = [
    ((7,), (7,)),
    ((5, 7), (7,)),
    ((7,), (7, 5)),
    ((5, 7), (7, 3)),
    ((4, 5, 7), (7,)),
    ((7,), (4, 7, 3)),
    ((4, 5, 7), (7, 3)),
    ((5, 7), (4, 7, 3)),
    ((4, 5, 7), (4, 7, 3)),
    ((2, 1, 5, 7), (3, 7, 6)),
    ((1, 3, 5, 7), (2, 1, 7, 6)),
    ((2, 3, 5, 7), (7, 6)),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("shape_a,shape_b", MATMUL_SHAPES, ids=str)
def test_matmul_semantics(device, dtype, shape_a, shape_b):
    a = torch.randn(shape_a, dtype=dtype, device=device)
    b = torch.randn(shape_b, dtype=dtype, device=device)
    check_against_reference(tiledmm.matmul(a, b), a, b)


def _views(device):
    """Operands read through unusual strides: (name, a, b)."""
    r = lambda *s: torch.randn(*s, device=device)  # noqa: E731
    return [
        ("row_step", r(66, 31)[::2], r(31, 9)),  # row-major, leading dimension 2 * 31
        ("col_step", r(33, 31), r(18, 31).t()[:, ::2]),  # column-major B, leading dimension 62
        ("both_steps", r(66, 62)[::2, ::2], r(93, 27)[::3, ::3]),  # no unit stride: copied
        ("storage_offset", r(40, 40)[1:34, 3:34], r(35, 9)[2:33, 1:8]),  # unaligned pointers
        ("expanded_rows", r(1, 31).expand(33, 31), r(31, 9)),  # row stride 0
        ("expanded_inner", r(33, 1).expand(33, 31), r(31, 1).expand(31, 9)),  # column stride 0
        ("transposed_slice", r(50, 40).t()[2:35, 5:36], r(31, 9)),
        ("batched_transposed", r(3, 31, 33).mT, r(3, 9, 31).mT),
        ("batch_expanded", r(1, 33, 31).expand(4, 33, 31), r(4, 31, 9)),
        ("batch_step", r(6, 33, 31)[::2], r(3, 31, 9)),
        ("batch_permuted", r(33, 3, 31).permute(1, 0, 2), r(31, 3, 9).permute(1, 0, 2)),
    ]


@pytest.mark.parametrize("index", range(len(_views("cpu"))), ids=[v[0] for v in _views("cpu")])
def test_strided_views(device, index):
    _, a, b = _views(device)[index]
    check_against_reference(tiledmm.matmul(a, b), a, b)


@pytest.mark.parametrize(
    "shape_a,shape_b",
    [((0, 7), (7, 5)), ((5, 7), (7, 0)), ((5, 0), (0, 6)), ((0, 5, 7), (0, 7, 3)), ((3, 5, 0), (3, 0, 4))],
    ids=str,
)
def test_empty_dimensions(device, shape_a, shape_b):
    a = torch.randn(shape_a, device=device)
    b = torch.randn(shape_b, device=device)
    out = tiledmm.matmul(a, b)
    assert out.shape == torch.matmul(a, b).shape
    assert (out == 0).all()  # k == 0: zeros, whatever the allocator handed out


def test_output_is_fresh_and_contiguous(device):
    a, b = operands(9, 5, 11, "tt", torch.float32, device)
    out = tiledmm.mm(a, b)
    assert out.is_contiguous() and out.shape == (9, 11)


def test_explain_describes_the_mapping(device):
    text = tiledmm.explain(torch.randn(7, device=device), torch.randn(4, 7, device=device).T)
    assert "input is 1-D" in text and "tiledmm.mm: batch 1, m 1, k 7, n 4" in text
    assert "b: column-major, leading dimension 7" in text and "read in place" in text
    text = tiledmm.explain(torch.randn(2, 1, 5, 7, device=device), torch.randn(3, 7, 4, device=device))
    assert "one bmm over 6 products" in text and "input: its broadcast batch dimensions" in text
    strided = torch.randn(20, 30, device=device)[::2, ::3]
    assert "copied first" in tiledmm.explain(strided, torch.randn(10, 3, device=device))
