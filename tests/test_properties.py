"""Property-based tests (hypothesis): random shapes, strides, dtypes and batch broadcasting,
against a float64 reference. CPU in CI; on the GPU too (scripts/gpu_check.sh). The number of
cases per test is TILEDMM_PROPERTY_EXAMPLES (default 300)."""

import os

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tiledmm
from _util import check_against_reference

EXAMPLES = int(os.environ.get("TILEDMM_PROPERTY_EXAMPLES", "300"))
PROPERTY = settings(
    max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# 0, 1, primes, and sizes just below, at and above the tile sizes (4, 8, 16, 64, 128, 256).
SIZES = st.sampled_from([0, 1, 2, 3, 4, 5, 7, 8, 9, 13, 15, 16, 17, 31, 63, 64, 65, 127, 128, 129, 255, 257])
DTYPES = st.sampled_from([torch.float32, torch.float64, torch.float16, torch.bfloat16])
VIEWS = st.sampled_from(["contiguous", "transposed", "row_step", "col_step", "offset", "transposed_offset", "expanded"])


def make(view, rows, cols, batch, dtype, device):
    """A (*batch, rows, cols) randn operand seen through the given kind of view."""
    r = lambda *shape: torch.randn(*batch, *shape, dtype=dtype, device=device)  # noqa: E731
    if view == "contiguous":
        return r(rows, cols)
    if view == "transposed":
        return r(cols, rows).mT
    if view == "row_step":
        return r(2 * rows, cols)[..., ::2, :]
    if view == "col_step":
        return r(rows, 2 * cols)[..., ::2]
    if view == "offset":
        return r(rows + 1, cols + 3)[..., 1:, 3:]
    if view == "transposed_offset":
        return r(cols + 2, rows + 1).mT[..., 1:, 2:]
    return r(1, cols).expand(*batch, rows, cols)  # expanded: every row the same, stride 0


@st.composite
def batch_shapes(draw):
    """Two broadcast-compatible batch shapes (possibly empty)."""
    dims = draw(st.integers(0, 2))
    full = [draw(st.sampled_from([1, 2, 3])) for _ in range(dims)]
    a = [d if draw(st.booleans()) else 1 for d in full]
    b = [d if draw(st.booleans()) else 1 for d in full]
    return tuple(a[draw(st.integers(0, dims)):]), tuple(b)


@PROPERTY
@given(m=SIZES, k=SIZES, n=SIZES, dtype=DTYPES, view_a=VIEWS, view_b=VIEWS, batches=batch_shapes())
def test_matmul_matches_float64(device, m, k, n, dtype, view_a, view_b, batches):
    a = make(view_a, m, k, batches[0], dtype, device)
    b = make(view_b, k, n, batches[1], dtype, device)
    check_against_reference(tiledmm.matmul(a, b), a, b)


@PROPERTY
@given(m=SIZES, k=SIZES, dtype=DTYPES, left=st.booleans())
def test_vector_operands(device, m, k, dtype, left):
    matrix = torch.randn(m, k, dtype=dtype, device=device)
    vector = torch.randn(m if left else k, dtype=dtype, device=device)
    a, b = (vector, matrix) if left else (matrix, vector)
    check_against_reference(tiledmm.matmul(a, b), a, b)
