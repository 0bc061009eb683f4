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
    back with one synchronization at the end, and each time is the GPU's time for the run (as in a
    training step, where the host runs ahead): the GPU first sleeps long enough for the host to
    queue every run, so that no run's events also hold the host's work between them (a host
    slowed now and then had made a short run read up to 1.7 times its time, bench/NOTES.md item 79);
    where the host took longer than the sleep, the runs are timed again after a longer one. With
    serialize, the host waits for each run before starting the next, so each time also holds the
    host's launch latency (what a lone call costs). With flush, the L2 is evicted before each run,
    outside the events."""
    round_ms = 0.0  # the host's time for the last warm-up round (which it queued too)
    for _ in range(warmup):
        host_start = time.perf_counter()
        for fn in runs.values():
            fn()
        round_ms = (time.perf_counter() - host_start) * 1e3
    if device != "cuda":
        times = {name: [] for name in runs}
        for _ in range(reps):
            for name, fn in runs.items():
                start = time.perf_counter()
                fn()
                times[name].append((time.perf_counter() - start) * 1e3)
        return times
    backlog_ms = 2.0 * round_ms * reps + 1.0  # twice the host's time to queue every run, estimated
    for _ in range(_QUEUE_ATTEMPTS):
        torch.cuda.synchronize()
        if not serialize:
            gpu_sleep(backlog_ms)
        host_start = time.perf_counter()
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
        host_ms = (time.perf_counter() - host_start) * 1e3
        torch.cuda.synchronize()
        if serialize or host_ms < backlog_ms:
            break
        backlog_ms = 2.0 * host_ms
    return {name: [s.elapsed_time(e) for s, e in pairs] for name, pairs in events.items()}


# Times the runs are queued at most (each after a sleep twice the host's time at the last).
_QUEUE_ATTEMPTS = 3
_sleep_cycles_per_ms = None


def gpu_sleep(ms):
    """Holds the current stream for about ms milliseconds (a GPU spin of clock cycles, the cycles
    per millisecond measured once)."""
    global _sleep_cycles_per_ms
    if _sleep_cycles_per_ms is None:
        cycles = 10_000_000
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
        _sleep_cycles_per_ms = cycles / start.elapsed_time(end)
    torch.cuda._sleep(int(ms * _sleep_cycles_per_ms))


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


def rel_err(out, ref, chunk_elements=1 << 24):
    """||out - ref|| / ||ref|| in float64, in blocks of rows of about chunk_elements elements (the
    norm of the blocks' norms): whole float64 copies of out and of the difference would add 8 GB
    to the 4 GB reference of the Llama-3 lm head's output."""
    rows = max(1, chunk_elements // out[..., :1, :].numel())
    blocks = list(zip(out.split(rows, -2), ref.split(rows, -2)))
    diff = torch.stack([(o.double() - r).norm() for o, r in blocks]).norm()
    return (diff / torch.stack([r.norm() for _, r in blocks]).norm()).item()


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
