"""Where examples/train_gpt.py's step time goes, torch against tiledmm: per implementation, the
step's wall time, the GPU's busy time (kernels summed), the products' kernels, and the operators
that cost the most GPU and host time (torch.profiler over a few steps after warm-up).

    python scripts/profile_train_step.py [--precision bf16] [--steps 5] [train_gpt.py's size options]
"""

import argparse
import contextlib
import os
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


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        main()
