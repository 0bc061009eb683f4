"""Operand checks on the Python side (fake kernels, tiledmm.matmul).

They raise the same errors, with the same wording, as the C++ checks in kernels/plan/gemm_plan.cpp,
so an op traced with fake tensors fails the way it fails when it runs.
"""

import torch

SUPPORTED_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def _device(t: torch.Tensor) -> str:
    return str(t.device)


def check_tensors(op: str, a, b) -> None:
    """Checks that both arguments are tensors."""
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        raise TypeError(f"{op}: expected tensors, got {type(a).__name__} and {type(b).__name__}")


def check_pair(op: str, a: torch.Tensor, b: torch.Tensor) -> None:
    """Checks what any product needs: tensors of one supported dtype on one device."""
    check_tensors(op, a, b)
    if a.layout != torch.strided or b.layout != torch.strided:
        raise RuntimeError(f"{op}: only dense (strided) tensors are supported")
    if a.dtype != b.dtype:
        raise RuntimeError(
            f"{op}: expected both tensors to have the same dtype, got a: {a.dtype} and b: {b.dtype}"
        )
    if a.dtype not in SUPPORTED_DTYPES:
        raise RuntimeError(
            f"{op}: unsupported dtype {a.dtype}; supported: torch.float32, torch.float64, "
            "torch.float16, torch.bfloat16"
        )
    if a.device != b.device:
        raise RuntimeError(
            f"{op}: expected both tensors on the same device, got a on {_device(a)} and b on {_device(b)}"
        )


def check_matrices(op: str, a: torch.Tensor, b: torch.Tensor, rank: int) -> None:
    """Checks the operands of mm (rank 2) or bmm (rank 3)."""
    check_tensors(op, a, b)
    check_ranks(op, a.shape, b.shape, rank)
    check_pair(op, a, b)
    check_shapes(op, a.shape, b.shape, rank)


def check_ranks(op: str, a_shape: torch.Size, b_shape: torch.Size, rank: int) -> None:
    if len(a_shape) != rank or len(b_shape) != rank:
        raise RuntimeError(
            f"{op}: expected {rank}-D tensors, got a of shape {list(a_shape)} ({len(a_shape)}-D) and "
            f"b of shape {list(b_shape)} ({len(b_shape)}-D)"
        )


def check_shapes(op: str, a_shape: torch.Size, b_shape: torch.Size, rank: int) -> None:
    """Checks that the shapes of mm's (rank 2) or bmm's (rank 3) operands fit together."""
    if a_shape[-1] != b_shape[-2]:
        raise RuntimeError(
            f"{op}: inner dimensions differ: a of shape {list(a_shape)} has {a_shape[-1]} columns, "
            f"b of shape {list(b_shape)} has {b_shape[-2]} rows"
        )
    if rank == 3 and a_shape[0] != b_shape[0]:
        raise RuntimeError(
            f"{op}: batch sizes differ: a of shape {list(a_shape)}, b of shape {list(b_shape)}"
        )
