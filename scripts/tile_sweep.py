"""Times every tile configuration of one path's dispatcher table on a few problems (K unsplit
unless --splits), against torch.matmul at the same dtype and precision,
with the error of each: the data for choosing tile shapes.

    python scripts/tile_sweep.py [--problems square smallK ...] [--shape M K N] [--layouts nn nt]
                                 [--dtype bfloat16] [--precision tf32] [--tiles 2 4 5]
"""

import argparse
import itertools

import torch

import tiledmm  # noqa: F401
from tiledmm import _precision
from tiledmm.bench.problems import PROBLEMS, Problem
from tiledmm.bench.timing import median_ms_each, torch_precision


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--problems", nargs="*", default=["square", "transA", "irregular", "smallK"])
    parser.add_argument("--shape", nargs=3, type=int, action="append", default=[], metavar=("M", "K", "N"),
                        help="a problem of your own (nn unless --layouts), timed after --problems")
    parser.add_argument("--layouts", nargs="*", choices=["nn", "nt", "tn", "tt"],
                        help="operand layouts to time each problem in (default: the problem's own)")
    parser.add_argument("--tiles", nargs="*", type=int, help="tile indices to time (default: all)")
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--splits", nargs="*", type=int, default=[0],
                        help="K splits to force with each tile (0: none, one slice)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "float64", "float16", "bfloat16"])
    parser.add_argument("--precision", default="ieee", choices=list(_precision.CODES))
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    code = _precision.resolve(args.precision, dtype)
    torch.manual_seed(0)
    with torch_precision(args.precision if dtype == torch.float32 else "n/a"):
        sweep(args, dtype, code)


def sweep(args, dtype, code):
    print(f"{args.dtype} precision {args.precision if dtype == torch.float32 else 'n/a'}")
    problems = [p for p in PROBLEMS if p.name in args.problems]
    problems += [Problem(f"{m}x{k}x{n}", m, k, n, "nn") for m, k, n in args.shape]
    runs = [(p, layout) for p in problems for layout in args.layouts or [p.layout]]
    for problem, layout in runs:
        def make(rows, cols):
            return torch.randn(rows, cols, device="cuda", dtype=dtype)

        a = make(problem.k, problem.m).T if layout[0] == "t" else make(problem.m, problem.k)
        b = make(problem.n, problem.k).T if layout[1] == "t" else make(problem.k, problem.n)
        ref = torch.matmul(a.double(), b.double())
        flops = 2.0 * problem.m * problem.n * problem.k
        print(problem.name, layout)
        torch_run = lambda: torch.matmul(a, b)  # noqa: E731
        for splits in args.splits:
            for tile in args.tiles if args.tiles is not None else itertools.count():
                run = lambda: torch.ops.tiledmm._bmm_with_config(a[None], b[None], tile, splits, code)  # noqa: E731
                try:
                    out = run()[0]
                except RuntimeError as error:
                    if "bytes of shared memory" not in str(error):
                        break  # past the last tile
                    print(f"  tile {tile}: too much shared memory for this layout on this GPU")
                    continue
                err = ((out.double() - ref).norm() / ref.norm()).item()
                # torch and the tile take turns (bench/NOTES.md item 19).
                times = median_ms_each({"torch": torch_run, "tile": run}, "cuda", 1, args.reps)
                ms, torch_ms = times["tile"], times["torch"]
                print(f"  tile {tile} splits {max(splits, 1)}: {ms:8.3f} ms {flops / ms / 1e9:6.1f} TFLOP/s  "
                      f"{torch_ms / ms:5.2f}x torch ({torch_ms:.3f} ms)  err {err:.2e}", flush=True)
        del a, b, ref, out
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
