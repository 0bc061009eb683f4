"""Bad input gives an exception whose message names the problem and the shapes/dtypes/devices."""

import contextlib

import pytest
import torch

import tiledmm
from _util import requires_gpu

ops = torch.ops.tiledmm
r = torch.randn

# (id, function, operand factory, message pattern)
CASES = [
    ("mm_rank", tiledmm.mm, lambda: (r(2, 3, 4), r(4, 5)), r"tiledmm\.mm: expected 2-D tensors, got a of shape \[2, 3, 4\] \(3-D\)"),
    ("bmm_rank", tiledmm.bmm, lambda: (r(3, 4), r(4, 5)), r"tiledmm\.bmm: expected 3-D tensors, got a of shape \[3, 4\]"),
    ("mm_inner", tiledmm.mm, lambda: (r(2, 3), r(4, 5)), r"inner dimensions differ: a of shape \[2, 3\] has 3 columns, b of shape \[4, 5\] has 4 rows"),
    ("bmm_inner", tiledmm.bmm, lambda: (r(2, 2, 3), r(2, 4, 5)), r"inner dimensions differ: a of shape \[2, 2, 3\]"),
    ("bmm_batch", tiledmm.bmm, lambda: (r(2, 2, 3), r(3, 3, 5)), r"batch sizes differ: a of shape \[2, 2, 3\], b of shape \[3, 3, 5\]"),
    ("matmul_inner", tiledmm.matmul, lambda: (r(4, 2, 3), r(4, 5)), r"tiledmm\.matmul: inner dimensions differ: input of shape \[4, 2, 3\] and other of shape \[4, 5\] \(3 != 4\)"),
    ("matmul_inner_2d", tiledmm.matmul, lambda: (r(2, 3), r(4, 5)), r"tiledmm\.matmul: inner dimensions differ: input of shape \[2, 3\] and other of shape \[4, 5\] \(3 != 4\)"),
    ("matmul_inner_of_one", tiledmm.matmul, lambda: (r(2, 3, 4), r(2, 1, 5)), r"tiledmm\.matmul: inner dimensions differ: .* \(4 != 1\)"),  # not broadcast
    ("matmul_vectors", tiledmm.matmul, lambda: (r(3), r(4)), r"inner dimensions differ: input of shape \[3\] and other of shape \[4\]"),
    ("matmul_0d", tiledmm.matmul, lambda: (r(()), r(3)), r"at least 1 dimension, got shapes \[\] and \[3\]"),
    ("matmul_broadcast", tiledmm.matmul, lambda: (r(2, 4, 3), r(3, 3, 5)), r"shape|broadcast"),
    ("mixed_dtypes", tiledmm.mm, lambda: (r(2, 3), r(3, 4, dtype=torch.float64)), r"same dtype, got a: torch\.float32 and b: torch\.float64"),
    ("mixed_dtypes_matmul", tiledmm.matmul, lambda: (r(2, 3, dtype=torch.float16), r(3, 4)), r"same dtype, got a: torch\.float16 and b: torch\.float32"),
    ("int32", tiledmm.mm, lambda: (torch.ones(2, 3, dtype=torch.int32), torch.ones(3, 4, dtype=torch.int32)), r"unsupported dtype torch\.int32"),
    ("int64", tiledmm.matmul, lambda: (torch.ones(2, 3, dtype=torch.int64), torch.ones(3, 4, dtype=torch.int64)), r"unsupported dtype torch\.int64"),
    ("bool", tiledmm.bmm, lambda: (torch.ones(1, 2, 3, dtype=torch.bool), torch.ones(1, 3, 4, dtype=torch.bool)), r"unsupported dtype torch\.bool"),
    ("complex", tiledmm.mm, lambda: (r(2, 3, dtype=torch.complex64), r(3, 4, dtype=torch.complex64)), r"unsupported dtype torch\.complex64"),
    ("cpu_and_meta", tiledmm.mm, lambda: (r(2, 3), r(3, 4, device="meta")), r"same device, got a on cpu and b on meta"),
    ("meta_and_cpu", ops.bmm, lambda: (r(1, 2, 3, device="meta"), r(1, 3, 4)), r"same device, got a on meta and b on cpu"),
    ("not_a_tensor", tiledmm.matmul, lambda: (r(2, 3), [[1.0]] * 3), r"expected tensors, got Tensor and list"),
    ("mm_not_a_tensor", tiledmm.mm, lambda: (r(2, 3), [[1.0]] * 3), r"tiledmm\.mm: expected tensors, got Tensor and list"),
    ("bmm_not_a_tensor", tiledmm.bmm, lambda: ([[[1.0]]], r(1, 1, 4)), r"tiledmm\.bmm: expected tensors, got list and Tensor"),
    ("sparse", tiledmm.mm, lambda: (r(2, 3).to_sparse(), r(3, 4)), r"dense|strided|sparse|Sparse"),
    ("linear_inner", tiledmm.linear, lambda: (r(2, 3), r(4, 5)), r"tiledmm\.matmul: inner dimensions differ: input of shape \[2, 3\] and other of shape \[5, 4\]"),
    ("linear_bias_dtype", lambda x, w: tiledmm.linear(x, w, r(4, dtype=torch.float64)), lambda: (r(2, 3), r(4, 3)),
     r"tiledmm\.linear: a bias of dtype torch\.float64 for operands of dtype torch\.float32"),
    ("linear_bias_shape", lambda x, w: tiledmm.linear(x, w, r(5)), lambda: (r(2, 3), r(4, 3)),
     r"tiledmm\.linear: a bias of shape \[5\] for a product with 4 columns \(expected \[4\]\)"),
]


@pytest.mark.parametrize("fn,make,pattern", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input(fn, make, pattern):
    a, b = make()
    with pytest.raises((RuntimeError, TypeError, NotImplementedError), match=pattern):
        fn(a, b)


@pytest.mark.parametrize("fn,make,pattern", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_requiring_gradients(fn, make, pattern):
    # The path that builds a graph fails the same way, before it saves anything.
    a, b = (x.requires_grad_() if isinstance(x, torch.Tensor) and x.is_floating_point() and x.layout == torch.strided
            else x for x in make())
    with pytest.raises((RuntimeError, TypeError, NotImplementedError), match=pattern):
        fn(a, b)


@pytest.mark.parametrize("make", [lambda: (r(2, 3), r(4, 5)), lambda: (r(2, 3, dtype=torch.float16), r(3, 4)),
                                  lambda: (r(()), r(3))], ids=["inner", "dtype", "0d"])
def test_matmul_error_is_matmuls_alone(make):
    # The operator's own error, which matmul rewords, is not chained onto it.
    with pytest.raises(RuntimeError, match=r"^tiledmm\.matmul: ") as error:
        tiledmm.matmul(*make())
    assert error.value.__cause__ is None and error.value.__suppress_context__


# The operators themselves, called without the Python wrappers, check the same things in C++.
@pytest.mark.parametrize(
    "op,make,pattern",
    [
        (ops.mm, lambda: (r(2, 3), r(4, 5)), r"tiledmm\.mm: inner dimensions differ"),
        (ops.mm, lambda: (r(2, 3), r(3, 4, dtype=torch.float64)), r"same dtype, got a: torch\.float32 and b: torch\.float64"),
        (ops.mm, lambda: (torch.ones(2, 3, dtype=torch.int32), torch.ones(3, 4, dtype=torch.int32)), r"unsupported dtype torch\.int32"),
        (ops.bmm, lambda: (r(2, 3), r(3, 4)), r"tiledmm\.bmm: expected 3-D tensors"),
        (ops._bmm_with_config, lambda: (r(2, 2, 3), r(1, 3, 4)), r"batch sizes differ"),
    ],
)
def test_operator_checks(op, make, pattern):
    a, b = make()
    args = (a, b, 0, 1) if op is ops._bmm_with_config else (a, b)
    with pytest.raises(RuntimeError, match=pattern):
        op(*args)


@requires_gpu
@pytest.mark.parametrize("fn", [tiledmm.mm, ops.mm, tiledmm.matmul], ids=["mm", "ops.mm", "matmul"])
def test_mixed_cpu_and_cuda(fn):
    with pytest.raises(RuntimeError, match=r"same device, got a on cuda:0 and b on cpu"):
        fn(r(2, 3, device="cuda"), r(3, 4))
    with pytest.raises(RuntimeError, match=r"same device, got a on cpu and b on cuda:0"):
        fn(r(2, 3), r(3, 4, device="cuda"))


@pytest.mark.parametrize("enabled", [False, True], ids=["direct", "enable"])
def test_errors_under_autocast_name_the_problem(enabled):
    # The products cast the operands first; an error names what they met, not the dtypes before.
    x, w = r(6, 5, dtype=torch.bfloat16), r(4, 5)
    context = tiledmm.enable() if enabled else contextlib.nullcontext()
    linear = torch.nn.functional.linear if enabled else tiledmm.linear
    matmul = torch.matmul if enabled else tiledmm.matmul
    with torch.autocast("cpu", dtype=torch.bfloat16), context:
        with pytest.raises(RuntimeError, match=r"a bias of shape \[3\] for a product with 4 columns"):
            linear(x, w, r(3))
        with pytest.raises(RuntimeError, match=r"tiledmm\.matmul: inner dimensions differ: .* \(5 != 4\)"):
            matmul(x, r(4, 4))


@requires_gpu
def test_linear_bias_on_another_device():
    with pytest.raises(RuntimeError, match=r"tiledmm\.linear: a bias on cpu for operands on cuda:0"):
        tiledmm.linear(r(2, 3, device="cuda"), r(4, 3, device="cuda"), r(4))


@requires_gpu
def test_tile_index_out_of_range():
    a, b = r(1, 4, 4, device="cuda"), r(1, 4, 4, device="cuda")
    with pytest.raises(RuntimeError, match=r"tile index 7 out of range"):
        ops._bmm_with_config(a, b, 7, 1)
