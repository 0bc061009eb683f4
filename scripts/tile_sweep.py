"""Times every tile configuration of the float32 dispatcher table on a few problems (K unsplit
unless the dispatcher would split it), against torch.matmul, with the error of each: the data for
choosing tile shapes.

    python scripts/tile_sweep.py [--problems square smallK ...] [--reps 10]
"""

import argparse

import torch

import tiledmm  # noqa: F401
from tiledmm.bench.problems import PROBLEMS
from tiledmm.bench.timing import median_ms


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--problems", nargs="*", default=["square", "transA", "irregular", "smallK"])
    parser.add_argument("--reps", type=int, default=10)
    args = parser.parse_args()
    torch.manual_seed(0)
    for problem in (p for p in PROBLEMS if p.name in args.problems):
        a = torch.randn(problem.k, problem.m, device="cuda").T if problem.layout[0] == "t" else torch.randn(problem.m, problem.k, device="cuda")
        b = torch.randn(problem.n, problem.k, device="cuda").T if problem.layout[1] == "t" else torch.randn(problem.k, problem.n, device="cuda")
        ref = torch.matmul(a.double(), b.double())
        flops = 2.0 * problem.m * problem.n * problem.k
        torch_ms = median_ms(lambda: torch.matmul(a, b), "cuda", 1, args.reps)
        print(f"{problem.name}: torch {torch_ms:.3f} ms ({flops / torch_ms / 1e9:.1f} TFLOP/s)")
        tile = 0
        while True:
            try:
                out = torch.ops.tiledmm._bmm_with_config(a[None], b[None], tile, 0)[0]
            except RuntimeError:
                break
            err = ((out.double() - ref).norm() / ref.norm()).item()
            ms = median_ms(lambda: torch.ops.tiledmm._bmm_with_config(a[None], b[None], tile, 0), "cuda", 1, args.reps)
            print(f"  tile {tile}: {ms:8.3f} ms {flops / ms / 1e9:6.1f} TFLOP/s  {torch_ms / ms:5.2f}x torch  err {err:.2e}", flush=True)
            tile += 1
        del a, b, ref, out
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
