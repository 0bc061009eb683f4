"""Where examples/train_gpt.py's step time goes, torch against tiledmm: per implementation, the
host's time to queue each phase of a step (forward, backward, optimizer; unprofiled, the median
over the steps) and the wait for the GPU after it; then, under torch.profiler over the same
number of steps, the step's wall time, the GPU's busy time (kernels summed), the products'
kernels, and the operators that cost the most GPU and host time.

    python scripts/profile_train_step.py [--precision bf16] [--steps 5] [train_gpt.py's size options]
"""

import argparse
import contextlib
import os
import statistics
import sys
import time

import torch
from torch.autograd import DeviceType

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import train_gpt  # noqa: E402

from tiledmm.bench.timing import torch_precision  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--precision", default="bf16", choices=["highest", "tf32", "bf16"])
    parser.add_argument("--steps", type=int, default=5, help="profiled steps (after as many warm-up steps)")
    parser.add_argument("--rows", type=int, default=15, help="operators listed per table")
    args, rest = parser.parse_known_args()
    gpt = train_gpt.parse_args(rest + ["--steps", str(2 * args.steps)])
    device = torch.device("cuda")
    batches = train_gpt.corpus(gpt.vocab, 2 * args.steps * gpt.batch, gpt.seq + 1).view(2 * args.steps, gpt.batch, -1)
    batches = batches.to(device)
    with torch_precision("tf32" if args.precision == "tf32" else "ieee"):
        for impl in ("torch", "tiledmm"):
            run = train_gpt.new_run(gpt, impl, args.precision, device, None)
            for tokens in batches[: args.steps]:
                train_gpt.step(run, tokens)
            torch.cuda.synchronize()
            print_phases(impl, args.precision, [phase_times(run, tokens) for tokens in batches[args.steps:]])
            activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
            start = time.perf_counter()
            with torch.profiler.profile(activities=activities) as prof:
                for tokens in batches[args.steps:]:
                    train_gpt.step(run, tokens)
                torch.cuda.synchronize()
            wall = (time.perf_counter() - start) / args.steps * 1e3
            events = prof.key_averages()
            # The kernels themselves: an operator's self device time repeats its kernels', and
            # annotations (Optimizer.step) span others.
            kernels = [e for e in events
                       if e.device_type == DeviceType.CUDA and not getattr(e, "is_user_annotation", False)]
            gpu = sum(e.self_device_time_total for e in kernels) / args.steps / 1e3
            gemm = sum(e.self_device_time_total for e in kernels
                       if any(s in e.key.lower() for s in ("gemm", "wgmma", "mma", "cutlass", "nvjet", "sm90")))
            print(f"\n==== {impl}, {args.precision}: step {wall:.2f} ms wall (profiled), GPU busy {gpu:.2f} ms, "
                  f"products' kernels {gemm / args.steps / 1e3:.2f} ms")
            print(events.table(sort_by="self_device_time_total", row_limit=args.rows, max_name_column_width=60))
            print(events.table(sort_by="self_cpu_time_total", row_limit=args.rows, max_name_column_width=60))
            del run
            torch.cuda.empty_cache()


def phase_times(run, tokens):
    """One step's host time to queue each phase, and the wait for the GPU after the last (ms)."""
    torch.cuda.synchronize()
    marks = [("start", time.perf_counter())]
    train_gpt.step(run, tokens, lambda phase: marks.append((phase, time.perf_counter())))
    torch.cuda.synchronize()
    marks.append(("GPU tail", time.perf_counter()))
    return {phase: (t - marks[i][1]) * 1e3 for i, (phase, t) in enumerate(marks[1:])}


def print_phases(impl, precision, steps):
    median = {phase: statistics.median(s[phase] for s in steps) for phase in steps[0]}
    total = statistics.median(sum(s.values()) for s in steps)
    print(f"\n==== {impl}, {precision}: step {total:.2f} ms (median of {len(steps)}, unprofiled): "
          + ", ".join(f"{phase} {ms:.2f}" for phase, ms in median.items()) + " ms")


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        main()
