"""python -m tiledmm.bench: tiledmm against torch.matmul on the same inputs, in the same process.

Each row: CUDA-event time (median of --reps runs after warm-up), TFLOP/s, and the relative error
||out - ref|| / ||ref|| against a float64 product of the same randn inputs. Writes
bench/results/<device>-<date>.json and prints a table. Without a GPU it runs small CPU problems.
"""

import argparse
import datetime
import json
import os
import re
import statistics
import subprocess
import time

import torch

import tiledmm

from .problems import CPU_PROBLEMS, PROBLEMS

DTYPES = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16, "bfloat16": torch.bfloat16}


def operands(problem, dtype, device):
    a_shape = (problem.k, problem.m) if problem.layout[0] == "t" else (problem.m, problem.k)
    b_shape = (problem.n, problem.k) if problem.layout[1] == "t" else (problem.k, problem.n)
    a = torch.randn(a_shape, dtype=dtype, device=device)
    b = torch.randn(b_shape, dtype=dtype, device=device)
    return (a.T if problem.layout[0] == "t" else a), (b.T if problem.layout[1] == "t" else b)


def median_ms(fn, device, warmup, reps):
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
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def rel_err(out, ref):
    return ((out.double() - ref).norm() / ref.norm()).item()


def precision_of(dtype):
    if dtype != torch.float32:
        return "n/a"
    return "highest" if torch.get_float32_matmul_precision() == "highest" else "tf32"


def commit():
    try:
        here = os.path.dirname(os.path.abspath(__file__))
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def run(args):
    device = "cuda" if torch.cuda.is_available() else "cpu"
    problems = PROBLEMS if device == "cuda" else CPU_PROBLEMS
    if device == "cpu":
        print("No CUDA GPU found: running a small CPU comparison instead (tiledmm's CPU kernel is "
              "plain loops for correctness, not speed).")
    if args.problems:
        problems = [p for p in problems if p.name in args.problems]
    rows = []
    for problem in problems:
        for dtype_name in args.dtypes:
            dtype = DTYPES[dtype_name]
            a, b = operands(problem, dtype, device)
            ref = torch.matmul(a.double(), b.double())
            flops = 2.0 * problem.m * problem.k * problem.n
            times = {}
            for impl, fn in (("torch", torch.matmul), ("tiledmm", tiledmm.matmul)):
                err = rel_err(fn(a, b), ref)
                ms = median_ms(lambda: fn(a, b), device, args.warmup, args.reps)
                times[impl] = ms
                row = dict(problem=problem.name, m=problem.m, k=problem.k, n=problem.n,
                           layout=problem.layout, dtype=dtype_name, precision=precision_of(dtype),
                           impl=impl, ms=round(ms, 5), tflops=round(flops / ms / 1e9, 2),
                           rel_err=float(f"{err:.3e}"))
                row["pass"] = "fwd"
                if impl == "tiledmm":
                    row["speedup"] = round(times["torch"] / ms, 3)
                rows.append(row)
                print(f"  {problem.name:9s} {dtype_name:8s} {impl:7s} {ms:9.3f} ms "
                      f"{row['tflops']:7.1f} TFLOP/s  err {err:.2e}", flush=True)
            del a, b, ref
            if device == "cuda":
                torch.cuda.empty_cache()
    return device, rows


def main():
    parser = argparse.ArgumentParser(prog="python -m tiledmm.bench", description=__doc__)
    parser.add_argument("--problems", nargs="*", help=f"subset of: {[p.name for p in PROBLEMS]}")
    parser.add_argument("--dtypes", nargs="*", default=["float32"], choices=list(DTYPES))
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--out", default="bench/results", help="folder for the results JSON")
    parser.add_argument("--commit", default=None, help="commit to record (default: git's HEAD)")
    args = parser.parse_args()
    torch.manual_seed(0)
    device, rows = run(args)
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    result = {"device": name, "torch": torch.__version__, "commit": args.commit or commit(), "rows": rows}
    os.makedirs(args.out, exist_ok=True)
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    path = os.path.join(args.out, f"{slug}-{datetime.date.today().isoformat()}.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    print(f"\n{'problem':10s} {'dtype':9s} {'tiledmm ms':>11s} {'torch ms':>9s} {'speedup':>8s} "
          f"{'err tiledmm':>12s} {'err torch':>10s}")
    for t in (r for r in rows if r["impl"] == "tiledmm"):
        ref = next(r for r in rows if r["impl"] == "torch" and r["problem"] == t["problem"] and r["dtype"] == t["dtype"])
        print(f"{t['problem']:10s} {t['dtype']:9s} {t['ms']:11.3f} {ref['ms']:9.3f} {t['speedup']:7.2f}x "
              f"{t['rel_err']:12.2e} {ref['rel_err']:10.2e}")
    print(f"\n{name}, torch {torch.__version__}: wrote {path}")


if __name__ == "__main__":
    main()
