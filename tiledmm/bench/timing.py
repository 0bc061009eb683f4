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


def median_ms(fn, device, warmup, reps, flush=None):
    """Median time of fn in milliseconds: CUDA events around each run after warm-up (a host clock
    on the CPU). With flush, the L2 is evicted before each run, outside the timed region."""
    for _ in range(warmup):
        fn()
    if device != "cuda":
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            fn()
            times.append((time.perf_counter() - start) * 1e3)
        return statistics.median(times)
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        if flush is not None:
            flush()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


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
