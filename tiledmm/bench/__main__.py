"""python -m tiledmm.bench: tiledmm against torch.matmul on the same inputs, in the same process.

For each problem, dtype and (for float32) precision, forward (C = A @ B) and forward+backward
(also dA and dB): the time
(CUDA events around each of --reps runs queued back to back after warm-up, torch and tiledmm
taking turns, the median, with the quartiles as its spread; optionally
with a cold L2, or with the host's launch latency in each run: --serialize), TFLOP/s, and the
relative error ||out - ref|| / ||ref|| against float64 products of the same randn inputs (for
float64 inputs, summed in chunks of K so as to be more accurate than what is measured; for
forward+backward, the larger of dA's and dB's). Writes bench/results/<device>-<date>.json (with
-cold-l2 or -serialized after the date for runs timed that way; an earlier file of that name from
another commit is kept, renamed <device>-<date>-<its commit>.json) and prints a table. Without a GPU it runs a small CPU comparison instead.

--suite models times what training two models runs instead: the forward, input-gradient and
weight-gradient products of each linear layer of GPT-2 small (8192 tokens) and Llama-3-8B (4096
tokens), each its own forward row, and GPT-2's batched attention products; it writes
<device>-<date>-models.json, with a summary per model, dtype and precision (the geometric mean
of the speedups and the worst one), printed last. Without a GPU it runs a miniature of them.

--suite short-k times products over a short K (64 to 256: large outputs, small ones, batches of
attention's) in bfloat16, float16 and TF32, with the same summary; it writes
<device>-<date>-short-k.json.

--suite decode times the forward x @ W^T of both models' linear layers at 1, 8, 32 and 128 tokens (a
generation step: outputs of few rows, the weights' bytes outweighing their products) in bfloat16
and float16, with a summary per model; it writes <device>-<date>-decode.json. With --cold-l2 it
times them as a step does, whose weights are not in the L2.

--host times the host instead: each entry point's time per call, torch's and tiledmm's, at small
sizes, with and without gradients (tiledmm/bench/host.py); it writes <device>-<date>-host.json.
"""

import argparse
import datetime
import json
import math
import os
import re
import subprocess
import sys

import torch

import tiledmm

from . import host
from .problems import (CPU_DECODE_PROBLEMS, CPU_MODEL_PROBLEMS, CPU_PROBLEMS, CPU_SHORT_K_PROBLEMS, DECODE_PROBLEMS,
                       MODEL_PROBLEMS, PROBLEMS, SHORT_K_PROBLEMS)
from .report import speedup_summary, spread_pct
from .timing import L2Flush, quartiles, rel_err, times_ms_each, torch_precision

DTYPES = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16, "bfloat16": torch.bfloat16}
# float32 precisions. torch runs its float32-accurate default for all but "tf32", where it runs TF32.
PRECISIONS = ["highest", "3xtf32", "tf32", "ieee"]
# Per suite: its problems (GPU, CPU fallback) and default dtypes, float32 precisions and passes.
# The model suite's products are each timed on their own, so forward only.
SUITES = {
    "reference": dict(problems=(PROBLEMS, CPU_PROBLEMS), dtypes=["float32"], precisions=PRECISIONS,
                      passes=["fwd", "fwd+bwd"]),
    "models": dict(problems=(MODEL_PROBLEMS, CPU_MODEL_PROBLEMS), dtypes=["bfloat16", "float16", "float32"],
                   precisions=["tf32", "highest"], passes=["fwd"]),
    "short-k": dict(problems=(SHORT_K_PROBLEMS, CPU_SHORT_K_PROBLEMS), dtypes=["bfloat16", "float16", "float32"],
                    precisions=["tf32"], passes=["fwd"]),
    "decode": dict(problems=(DECODE_PROBLEMS, CPU_DECODE_PROBLEMS), dtypes=["bfloat16", "float16"],
                   precisions=["tf32"], passes=["fwd"]),
}


def operands(problem, dtype, device):
    """A (m, k) and B (k, n), with a leading batch dimension for a batched problem; a "t" operand
    is a transposed view of a contiguous tensor."""
    batch = (problem.batch,) if problem.batch > 1 else ()
    a_shape = (problem.k, problem.m) if problem.layout[0] == "t" else (problem.m, problem.k)
    b_shape = (problem.n, problem.k) if problem.layout[1] == "t" else (problem.k, problem.n)
    a = torch.randn(*batch, *a_shape, dtype=dtype, device=device)
    b = torch.randn(*batch, *b_shape, dtype=dtype, device=device)
    return (a.mT if problem.layout[0] == "t" else a), (b.mT if problem.layout[1] == "t" else b)


def reference_product(x, y):
    """x @ y in float64, the rows' error reference. Lower-precision inputs: exact products summed
    in float64. float64 inputs: there a plain float64 product would be torch's own result, so the
    sum runs in chunks of about sqrt(K) of K, each chunk's product added to the total in turn:
    about 2 sqrt(K) roundings per output against K for one pass along K (tiledmm's, cuBLAS's),
    so the reference is the more accurate one."""
    x64, y64 = x.double(), y.double()
    if x.dtype != torch.float64:
        return x64 @ y64
    k = x.shape[-1]
    chunk = max(1, math.isqrt(k))
    total = x64[..., :chunk] @ y64[..., :chunk, :]
    for k0 in range(chunk, k, chunk):
        total += x64[..., k0:k0 + chunk] @ y64[..., k0:k0 + chunk, :]
    return total


def implementations(precision):
    """(name, product) of torch.matmul and tiledmm at one precision ("n/a" for other dtypes)."""
    tiledmm_precision = None if precision == "n/a" else precision
    return {"torch": torch.matmul, "tiledmm": lambda a, b: tiledmm.matmul(a, b, precision=tiledmm_precision)}


def measure(problem, dtype, precision, passes, device, args, flush):
    """Rows for one problem, dtype and precision: each pass, each implementation, same inputs."""
    a, b = operands(problem, dtype, device)
    rows = []
    for pass_ in passes:
        if pass_ == "fwd":
            refs = (reference_product(a, b),)
            flops = 2.0 * problem.batch * problem.m * problem.k * problem.n
        else:
            grad = torch.randn(*a.shape[:-1], problem.n, dtype=dtype, device=device)
            refs = (reference_product(grad, b.mT), reference_product(a.mT, grad))
            flops = 6.0 * problem.batch * problem.m * problem.k * problem.n
            a.requires_grad_(True)
            b.requires_grad_(True)
        runs, errs = {}, {}
        for impl, fn in implementations(precision).items():
            if pass_ == "fwd":
                runs[impl] = lambda fn=fn: fn(a, b)
                errs[impl] = rel_err(runs[impl](), refs[0])
            else:
                runs[impl] = lambda fn=fn: torch.autograd.grad(fn(a, b), (a, b), grad)
                errs[impl] = max(rel_err(g, r) for g, r in zip(runs[impl](), refs))
        # torch and tiledmm take turns, on the same inputs.
        times = times_ms_each(runs, device, args.warmup, args.reps, flush, args.serialize)
        stats = {impl: quartiles(t) for impl, t in times.items()}
        for impl, (q1, ms, q3) in stats.items():
            row = dict(problem=problem.name, m=problem.m, k=problem.k, n=problem.n, layout=problem.layout,
                       dtype=str(dtype).removeprefix("torch."), precision=precision, impl=impl,
                       ms=round(ms, 5), ms_q1=round(q1, 5), ms_q3=round(q3, 5),
                       tflops=round(flops / ms / 1e9, 2), rel_err=float(f"{errs[impl]:.3e}"))
            row["pass"] = pass_
            if problem.suite:
                row.update(suite=problem.suite, batch=problem.batch)
            if impl == "tiledmm":
                row["speedup"] = round(stats["torch"][1] / ms, 3)
            rows.append(row)
        a.requires_grad_(False)
        b.requires_grad_(False)
    return rows


def table(rows):
    """The tiledmm rows beside torch's, with the spread of the two (report.spread_pct)."""
    width = max([10] + [len(r["problem"]) for r in rows])
    lines = [f"{'problem':{width}s} {'dtype':9s} {'precision':9s} {'pass':8s} {'tiledmm ms':>11s} {'torch ms':>9s} {'speedup':>8s} "
             f"{'spread':>7s} {'TFLOP/s':>8s} {'err tiledmm':>12s} {'err torch':>10s}"]
    for t in (r for r in rows if r["impl"] == "tiledmm"):
        ref = next(r for r in rows if r["impl"] == "torch" and all(r[key] == t[key] for key in ("problem", "dtype", "precision", "pass")))
        spread = spread_pct(t, ref)
        lines.append(f"{t['problem']:{width}s} {t['dtype']:9s} {t['precision']:9s} {t['pass']:8s} {t['ms']:11.3f} {ref['ms']:9.3f} "
                     f"{t['speedup']:7.2f}x {spread:6.1f}% {t['tflops']:8.2f} {t['rel_err']:12.2e} {ref['rel_err']:10.2e}")
    return "\n".join(lines)


def summary_table(summary):
    """report.speedup_summary's groups, one line each."""
    lines = [f"{'suite':8s} {'dtype':9s} {'precision':9s} {'pass':8s} {'rows':>4s} {'geomean':>8s}  worst"]
    for s in summary:
        lines.append(f"{s['suite']:8s} {s['dtype']:9s} {s['precision']:9s} {s['pass']:8s} {s['rows']:4d} "
                     f"{s['geomean_speedup']:7.3f}x  {s['worst_speedup']:.3f}x ({s['worst_problem']})")
    return "\n".join(lines)


def keep_earlier_run(path, commit_):
    """A results file already at path from another commit (a second run on the same day) is kept,
    renamed with its commit (and so is its chart, path's .png); one from the same commit is
    replaced (here or under that name: the latest run of a commit is the one kept). Returns the
    new name, or None."""
    try:
        with open(path) as f:
            earlier = json.load(f).get("commit", "unknown")
    except (OSError, ValueError):
        return None
    if earlier == commit_:
        return None
    stem = path.removesuffix(".json")
    kept = f"{stem}-{re.sub(r'[^A-Za-z0-9]+', '-', earlier)}"  # replaces an older run of that commit
    for suffix in (".json", ".png"):
        if os.path.exists(stem + suffix):
            os.replace(stem + suffix, kept + suffix)
    return kept + ".json"


def commit():
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main():
    parser = argparse.ArgumentParser(prog="python -m tiledmm.bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", default="reference", choices=list(SUITES),
                        help="reference: the reference problems; models: two models' training products")
    parser.add_argument("--problems", nargs="*", help=f"subset of the suite's: {' '.join(p.name for p in PROBLEMS)} "
                                                      "(models: <model>.<layer>.<fwd|dgrad|wgrad>, gpt2.attn.<scores|out>)")
    parser.add_argument("--dtypes", nargs="*", choices=list(DTYPES),
                        help="default: float32 (models: bfloat16 float16 float32)")
    parser.add_argument("--precisions", nargs="*", choices=PRECISIONS,
                        help="float32 precisions to run (other dtypes have one path); default: all (models: tf32 highest)")
    parser.add_argument("--passes", nargs="*", choices=["fwd", "fwd+bwd"], help="default: both (models: fwd)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="1 warm-up and 5 timed runs")
    parser.add_argument("--cold-l2", action="store_true", help="evict the L2 before each timed run")
    parser.add_argument("--serialize", action="store_true",
                        help="wait for each run before starting the next, so that each time also holds "
                             "the host's launch latency (default: runs queued back to back)")
    parser.add_argument("--host", action="store_true",
                        help="time the host per call of each entry point instead, at small sizes (default dtypes: "
                             "float32 bfloat16)")
    parser.add_argument("--entries", nargs="*", choices=list(host.ENTRIES), help="--host: subset of the entry points")
    parser.add_argument("--sizes", nargs="*", type=int, help="--host: n of the n x n operands (default: "
                        f"{' '.join(map(str, host.SIZES['cuda']))}; without a GPU {' '.join(map(str, host.SIZES['cpu']))})")
    parser.add_argument("--out", default="bench/results", help="folder for the results JSON")
    parser.add_argument("--commit", default=None, help="commit to record (default: git's HEAD)")
    args = parser.parse_args()
    if args.quick:
        args.warmup, args.reps = 1, 5
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    fields, tables, suffix = (run_host if args.host else run_products)(args, device)

    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    result = {"device": name, "torch": torch.__version__, "commit": args.commit or commit(),
              "date": datetime.date.today().isoformat(), **fields}
    os.makedirs(args.out, exist_ok=True)
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    path = os.path.join(args.out, f"{slug}-{result['date']}{suffix}.json")
    kept = keep_earlier_run(path, result["commit"])
    if kept:
        print(f"an earlier run of another commit was at {path}: kept as {kept}")
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    print(tables[0])
    print(f"\n{name}, torch {torch.__version__}: wrote {path}")
    for text in tables[1:]:
        print("\n" + text)


def run_products(args, device):
    """The reference or the model suite: (the result's fields, the tables to print (the first
    before the file's name), the file name's suffix)."""
    suite = SUITES[args.suite]
    for option in ("dtypes", "precisions", "passes"):
        if getattr(args, option) is None:
            setattr(args, option, suite[option])
    problems = suite["problems"][0 if device == "cuda" else 1]
    if device == "cpu":
        instead = f"a miniature of the {args.suite} suite" if args.suite != "reference" else "a small CPU comparison"
        print(f"No CUDA GPU found: running {instead} instead (tiledmm's CPU kernel is "
              "plain loops for correctness, not speed).")
    if args.problems:
        problems = [p for p in problems if p.name in args.problems]
    flush = L2Flush(device) if args.cold_l2 and device == "cuda" else None
    jobs = [(p, d, q) for p in problems for d in args.dtypes for q in (args.precisions if d == "float32" else ["n/a"])]
    rows = []
    for i, (problem, dtype_name, precision) in enumerate(jobs):
        print(f"\r[{i + 1}/{len(jobs)}] {problem.name} {dtype_name} {precision} ...".ljust(60), end="",
              file=sys.stderr, flush=True)
        with torch_precision(precision):
            rows += measure(problem, DTYPES[dtype_name], precision, args.passes, device, args, flush)
        if device == "cuda":
            torch.cuda.empty_cache()
    print(file=sys.stderr)
    fields = {"cold_l2": bool(flush), "timing": "serialized" if args.serialize else "queued", "reps": args.reps,
              "rows": rows}
    # Runs timed another way get files of their own, so that they do not replace the default run's.
    timed = ("-cold-l2" if flush else "") + ("-serialized" if args.serialize else "")
    if args.suite == "reference":
        return fields, [table(rows)], timed
    fields.update(suite=args.suite, summary=speedup_summary(rows))
    heading = f"speedup (torch ms / tiledmm ms) per {'model' if args.suite in ('models', 'decode') else 'dtype'}:\n"
    return fields, [table(rows), heading + summary_table(fields["summary"])], f"-{args.suite}" + timed


def run_host(args, device):
    """--host: each entry point's host time per call (tiledmm/bench/host.py)."""
    if device == "cpu":
        print("No CUDA GPU found: timing the host on CPU tensors (the same Python layer; tiledmm's CPU "
              "kernel is plain loops, so the sizes stay small), on one thread.")
        # torch's thread pool on products this small can wait milliseconds for its workers.
        torch.set_num_threads(1)
    calls = 20 if args.quick else 200
    dtypes = [DTYPES[d] for d in args.dtypes or ["float32", "bfloat16"]]
    rows = host.measure(args.entries or list(host.ENTRIES), args.sizes or host.SIZES[device], dtypes, device,
                        calls, args.reps)
    fields = {"suite": "host", "calls": calls, "reps": args.reps, "threads": torch.get_num_threads(), "rows": rows}
    return fields, [host.table(rows)], "-host"


if __name__ == "__main__":
    main()
