"""tiledmm on DTensors (tensor parallelism): the sharding rules of tiledmm/_dtensor.py, on CPU over
gloo, in this process (one rank) and in two spawned processes (two ranks, uneven shards)."""

import contextlib
import datetime

import pytest
import torch
import torch.distributed as dist

if not (dist.is_available() and dist.is_gloo_available()):
    pytest.skip("torch.distributed with gloo is not available in this torch build", allow_module_level=True)

import torch.multiprocessing as mp
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor, init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

import tiledmm
from _util import OpLog

M, K, N, BATCH = 7, 6, 5, 4  # odd sizes: two ranks hold shards of different sizes

# (a's placement, b's placement, the output's): aten.mm's and aten.bmm's strategies.
MM_CASES = [
    (Shard(0), Replicate(), Shard(0)),
    (Replicate(), Shard(1), Shard(1)),
    (Shard(1), Shard(0), Partial()),
    (Replicate(), Replicate(), Replicate()),
    (Partial(), Replicate(), Partial()),
]
BMM_CASES = [
    (Shard(0), Shard(0), Shard(0)),
    (Shard(1), Replicate(), Shard(1)),
    (Replicate(), Shard(2), Shard(2)),
    (Shard(2), Shard(1), Partial()),
    (Replicate(), Replicate(), Replicate()),
]


def check_product(mesh, product, shapes, placements):
    """product on DTensors placed as placements (a, b, output expected) against the local product:
    the output's placement, its value and both inputs' gradients."""
    a_place, b_place, out_place = placements
    torch.manual_seed(0)  # the same operands on every rank
    a, b = (torch.randn(*shape, dtype=torch.float64, requires_grad=True) for shape in shapes)
    grad = torch.randn(*shapes[0][:-1], shapes[1][-1], dtype=torch.float64)
    if a_place.is_partial():  # a Partial's value is the sum over ranks: each holds its share
        da = DTensor.from_local(a.detach() / mesh.size(), mesh, [a_place]).requires_grad_()
    else:
        da = distribute_tensor(a.detach(), mesh, [a_place]).requires_grad_()
    db = distribute_tensor(b.detach(), mesh, [b_place]).requires_grad_()
    with OpLog() as log:
        out = product(da, db)
    assert any(op.startswith("tiledmm.") for op in log.ops), log.ops
    assert not any(op.startswith(("aten.mm", "aten.bmm")) for op in log.ops), log.ops
    assert isinstance(out, DTensor) and out.placements == (out_place,), out.placements
    expected = a @ b
    torch.testing.assert_close(out.full_tensor(), expected)
    (out.full_tensor() * grad).sum().backward()
    (expected * grad).sum().backward()
    torch.testing.assert_close(da.grad.full_tensor(), a.grad)
    torch.testing.assert_close(db.grad.full_tensor(), b.grad)


def _mlp(linear):
    return torch.nn.Sequential(linear(K, 2 * N), torch.nn.GELU(), linear(2 * N, K))


def check_tensor_parallel_mlp(mesh, linear, context):
    """An MLP of `linear` layers made tensor-parallel (column- then row-wise) computes, within
    context, on tiledmm what the same torch MLP computes on one process, gradients included."""
    torch.manual_seed(1)
    local = _mlp(torch.nn.Linear)
    parallel = parallelize_module(_mlp(linear), mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    with torch.no_grad():
        for p, q in zip(parallel.parameters(), local.parameters()):
            p.copy_(distribute_tensor(q, mesh, p.placements))
    x = torch.randn(BATCH, M, K)
    with context(), OpLog() as log:
        out = parallel(x)
        out.square().sum().backward()
    assert "tiledmm.mm.default" in log.ops and "aten.mm.default" not in log.ops, log.ops
    expected = local(x)
    expected.square().sum().backward()
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    for p, q in zip(parallel.parameters(), local.parameters()):
        torch.testing.assert_close(p.grad.full_tensor(), q.grad, rtol=1e-5, atol=1e-5)


CASES = (
    [(f"mm-{a}x{b}", check_product, (tiledmm.mm, [(M, K), (K, N)], (a, b, c))) for a, b, c in MM_CASES]
    + [(f"bmm-{a}x{b}", check_product, (tiledmm.bmm, [(BATCH, M, K), (BATCH, K, N)], (a, b, c)))
       for a, b, c in BMM_CASES]
    # matmul folds the Shard(0) batch of a 3-D operand into the rows of one mm
    + [("matmul-3d", check_product, (tiledmm.matmul, [(BATCH, M, K), (K, N)], (Shard(0), Replicate(), Shard(0))))]
    + [("tensor-parallel-mlp-enable", check_tensor_parallel_mlp, (torch.nn.Linear, tiledmm.enable))]
    + [("tensor-parallel-mlp-nn.Linear", check_tensor_parallel_mlp, (tiledmm.nn.Linear, contextlib.nullcontext))]
)


@contextlib.contextmanager
def _process_group(rank, world, store_file):
    # The ranks meet through a file, not a TCP store: rank 0 would host the store's server thread,
    # and on a loaded 2-core machine it aborted at exit about one run in several ("terminate called
    # without an active exception"), barrier or not. A failing rank ends the others' collectives
    # within the timeout instead of hanging CI.
    dist.init_process_group("gloo", init_method=f"file://{store_file}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(minutes=2))
    try:
        yield init_device_mesh("cpu", (world,))
        dist.barrier()  # no rank tears the group down while another still uses it
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def one_rank_mesh(tmp_path_factory):
    with _process_group(0, 1, tmp_path_factory.mktemp("store") / "store") as mesh:
        yield mesh


@pytest.mark.parametrize("check, args", [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_one_rank(one_rank_mesh, check, args):
    check(one_rank_mesh, *args)


def _run_every_case(rank, world, store_file):
    with _process_group(rank, world, store_file) as mesh:
        for _, check, args in CASES:
            check(mesh, *args)


def test_two_ranks(tmp_path):
    mp.spawn(_run_every_case, args=(2, tmp_path / "store"), nprocs=2, join=True)


def test_one_rank_compiled(one_rank_mesh):
    # torch.compile traces the operators on DTensors through the same rules (fake kernels)
    a = torch.randn(M, K, dtype=torch.float64, requires_grad=True)
    b = torch.randn(K, N, dtype=torch.float64)
    da = distribute_tensor(a.detach(), one_rank_mesh, [Shard(0)]).requires_grad_()
    db = distribute_tensor(b, one_rank_mesh, [Replicate()])
    loss = torch.compile(lambda x, y: tiledmm.matmul(x, y).sin().sum(), backend="aot_eager", fullgraph=True)
    loss(da, db).backward()
    (a @ b).sin().sum().backward()
    # On one rank Shard(0) and Replicate() hold the same data: torch 2.11's compiled backward picks
    # Replicate(), 2.14's Shard(0).
    assert da.grad.placements in ((Shard(0),), (Replicate(),))
    torch.testing.assert_close(da.grad.full_tensor(), a.grad)
