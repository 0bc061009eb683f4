"""python -m tiledmm.bench --host: the host's time per call of each product entry point, torch's
and tiledmm's, at small sizes, where the host rather than the GPU sets the pace.

Entry points, each torch's and tiledmm's on the same operands: matmul, mm, bmm (a batch of 4),
linear (with a bias: F.linear and tiledmm.linear), nn.Linear (torch.nn.Linear and
tiledmm.nn.Linear with the same parameters), each of these two also with a model's 3-D input
(linear_nd, nn.Linear_nd: n / 4 x 4 x n), enable (torch.matmul, and torch.matmul inside
``tiledmm.enable()``), and operator: torch.mm against tiledmm's operator called below autograd,
the floor that tiledmm's Python layer adds to (its C++ side: checks, allocation, launch).
Passes: "nograd" (nothing requires a gradient), "grad" (every operand and parameter requires
one: the forward, which builds the graph) and "fwd+bwd" (that forward, then ``.sum().backward()``).

A time is the host's per call: a batch of calls back to back, timed with time.perf_counter, the
median over repeats, torch and tiledmm taking turns batch by batch. On the GPU the stream is
synchronized before and after each batch, outside its timing.
"""

import contextlib
import statistics
import time
from typing import NamedTuple

import torch
import torch.nn.functional as F

import tiledmm

from .report import host_pairs

PASSES = ["nograd", "grad", "fwd+bwd"]
SIZES = {"cuda": [64, 256], "cpu": [8, 16]}  # the CPU kernel is plain loops: kept small, or it sets the pace
BATCH = 4  # bmm's


def _pair(torch_fn, tiledmm_fn, batch=()):
    """An entry point of two operands of shape (*batch, n, n)."""

    def make(n, dtype, device):
        a, b = (torch.randn(*batch, n, n, dtype=dtype, device=device) for _ in range(2))
        return [a, b], {"torch": lambda: torch_fn(a, b), "tiledmm": lambda: tiledmm_fn(a, b)}

    return make


def _input(n, dtype, device, rows_in_batch):
    """A linear layer's (n, n) input, or with rows_in_batch, (n / BATCH, BATCH, n): a model's
    (batch, sequence, features) activations, whose batch folds into the rows."""
    shape = (n // BATCH, BATCH, n) if rows_in_batch else (n, n)
    return torch.randn(*shape, dtype=dtype, device=device)


def _linear(rows_in_batch):
    def make(n, dtype, device):
        x = _input(n, dtype, device, rows_in_batch)
        w, bias = torch.randn(n, n, dtype=dtype, device=device), torch.randn(n, dtype=dtype, device=device)
        return [x, w, bias], {"torch": lambda: F.linear(x, w, bias), "tiledmm": lambda: tiledmm.linear(x, w, bias)}

    return make


def _module(rows_in_batch):
    def make(n, dtype, device):
        theirs = torch.nn.Linear(n, n, dtype=dtype, device=device)
        ours = tiledmm.nn.Linear(n, n, dtype=dtype, device=device)
        ours.load_state_dict(theirs.state_dict())
        x = _input(n, dtype, device, rows_in_batch)
        return [x, *theirs.parameters(), *ours.parameters()], {"torch": lambda: theirs(x), "tiledmm": lambda: ours(x)}

    return make


def _operator(a, b):
    with torch._C._AutoDispatchBelowAutograd():
        return torch.ops.tiledmm.mm.default(a, b, 0)


class Entry(NamedTuple):
    make: object  # (n, dtype, device) -> (the tensors a pass sets requires_grad of, {impl: call})
    passes: tuple = tuple(PASSES)
    enabled: bool = False  # tiledmm's calls run inside tiledmm.enable()


ENTRIES = {
    "matmul": Entry(_pair(torch.matmul, tiledmm.matmul)),
    "mm": Entry(_pair(torch.mm, tiledmm.mm)),
    "bmm": Entry(_pair(torch.bmm, tiledmm.bmm, (BATCH,))),
    "linear": Entry(_linear(False)),
    "linear_nd": Entry(_linear(True)),
    "nn.Linear": Entry(_module(False)),
    "nn.Linear_nd": Entry(_module(True)),
    "enable": Entry(_pair(torch.matmul, torch.matmul), enabled=True),
    "operator": Entry(_pair(torch.mm, _operator), passes=("nograd",)),
}


def _runs(entry, calls, pass_):
    """{impl: (what one call of the pass runs, the context its batches run in)}."""

    def forward_backward(call):
        return lambda: call().sum().backward()

    return {impl: (forward_backward(call) if pass_ == "fwd+bwd" else call,
                   tiledmm.enable if entry.enabled and impl == "tiledmm" else contextlib.nullcontext)
            for impl, call in calls.items()}


def time_per_call_us(runs, device, calls, repeats):
    """{name: [us per call, one per repeat]} for runs ({name: (fn, context)}): each repeat times a
    batch of `calls` calls back to back per function, the functions taking turns, inside the
    function's context (entered outside the timing). A warm-up batch each first."""
    times = {name: [] for name in runs}
    for repeat in range(repeats + 1):
        for name, (fn, context) in runs.items():
            if device == "cuda":
                torch.cuda.synchronize()
            with context():
                start = time.perf_counter()
                for _ in range(calls):
                    fn()
                elapsed = time.perf_counter() - start
            if device == "cuda":
                torch.cuda.synchronize()
            if repeat:
                times[name].append(elapsed / calls * 1e6)
    return times


def measure(entries, sizes, dtypes, device, calls, repeats):
    """A row per entry point, pass, size, dtype and implementation."""
    rows = []
    for name in entries:
        entry = ENTRIES[name]
        for n in sizes:
            for dtype in dtypes:
                leaves, impl_calls = entry.make(n, dtype, device)
                for pass_ in entry.passes:
                    for leaf in leaves:
                        leaf.requires_grad_(pass_ != "nograd")
                    times = time_per_call_us(_runs(entry, impl_calls, pass_), device, calls, repeats)
                    rows += _rows(name, pass_, n, dtype, times)
    return rows


def _rows(name, pass_, n, dtype, times):
    """The torch and tiledmm rows of one measurement: the median and quartiles of their times."""
    stats = {impl: statistics.quantiles(t, n=4, method="inclusive") for impl, t in times.items()}
    rows = []
    for impl, (q1, us, q3) in stats.items():
        row = {"entry": name, "pass": pass_, "n": n, "dtype": str(dtype).removeprefix("torch."), "impl": impl,
               "us": round(us, 2), "us_q1": round(q1, 2), "us_q3": round(q3, 2)}
        if impl == "tiledmm":
            row["ratio"] = round(us / stats["torch"][1], 3)
        rows.append(row)
    return rows


def table(rows):
    """tiledmm's time per call beside torch's, and their ratio (tiledmm / torch: lower is better)."""
    lines = [f"{'entry':12s} {'pass':8s} {'n':>4s} {'dtype':9s} {'torch us':>9s} {'tiledmm us':>11s} {'ratio':>7s}"]
    for t, ref in host_pairs(rows):
        lines.append(f"{t['entry']:12s} {t['pass']:8s} {t['n']:4d} {t['dtype']:9s} {ref['us']:9.2f} {t['us']:11.2f} "
                     f"{t['ratio']:6.2f}x")
    return "\n".join(lines)
