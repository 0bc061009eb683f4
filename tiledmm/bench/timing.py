"""Timing and error measurement for the benchmark."""

import contextlib
import statistics
import time

import torch


class L2Flush:
    """Evicts the GPU's L2 before a timed run by writing a buffer twice its size."""

    def __init__(self, device):
        size = torch.cuda.get_device_properties(device).L2_cache_size
        self.buffer = torch.empty(2 * size // 4, dtype=torch.float32, device=device)

    def __call__(self):
        self.buffer.fill_(1.0)


def times_ms_each(runs, device, warmup, reps, flush=None, serialize=False):
    """The reps times in milliseconds of each function of runs ({name: fn}) after warm-up, the
    functions taking turns so that each sees the same GPU conditions (clocks, power, the L2 of the
    others' runs); a host clock on the CPU.

    On the GPU a pair of CUDA events brackets each run. By default the runs are queued back to
    back with one synchronization at the end, so the host enqueues ahead of the GPU and each time
    is the GPU's time for the run (as in a training step, where the host runs ahead). With
    serialize, the host waits for each run before starting the next, so each time also holds the
    host's launch latency (what a lone call costs). With flush, the L2 is evicted before each run,
    outside the events."""
    for fn in runs.values():
        for _ in range(warmup):
            fn()
    if device != "cuda":
        times = {name: [] for name in runs}
        for _ in range(reps):
            for name, fn in runs.items():
                start = time.perf_counter()
                fn()
                times[name].append((time.perf_counter() - start) * 1e3)
        return times
    torch.cuda.synchronize()
    events = {name: [] for name in runs}
    for _ in range(reps):
        for name, fn in runs.items():
            if flush is not None:
                flush()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            events[name].append((start, end))
            if serialize:
                end.synchronize()
    torch.cuda.synchronize()
    return {name: [s.elapsed_time(e) for s, e in pairs] for name, pairs in events.items()}


def median_ms_each(runs, device, warmup, reps, flush=None, serialize=False):
    """The median of times_ms_each's times for each function."""
    times = times_ms_each(runs, device, warmup, reps, flush, serialize)
    return {name: statistics.median(t) for name, t in times.items()}


def quartiles(times):
    """The first quartile, median and third quartile of a list of times (one time: itself)."""
    if len(times) < 2:
        return times[0], times[0], times[0]
    q1, median, q3 = statistics.quantiles(times, n=4, method="inclusive")
    return q1, median, q3


def rel_err(out, ref):
    """||out - ref|| / ||ref|| in float64."""
    return ((out.double() - ref).norm() / ref.norm()).item()


@contextlib.contextmanager
def torch_precision(precision):
    """torch.matmul's float32 mode for a row: TF32 for "tf32", else float32-accurate. Uses torch's
    new TF32 API only (mixing it with allow_tf32 makes torch raise)."""
    previous = torch.backends.cuda.matmul.fp32_precision
    torch.backends.cuda.matmul.fp32_precision = "tf32" if precision == "tf32" else "ieee"
    try:
        yield
    finally:
        torch.backends.cuda.matmul.fp32_precision = previous
