"""The PTX route: what a GPU without native code in the wheel gets (the driver compiles the wheel's
PTX at first use), run on a GPU that has native code, through a build of compute_80 PTX only
(TORCH_CUDA_ARCH_LIST="8.0+PTX": its sm_80 code runs on no other major version, so the driver
compiles the PTX). scripts/gpu_check.sh runs it with an empty CUDA_CACHE_PATH, so that every kernel
is compiled here, and writes the JSON it prints.

Every dtype and float32 precision, in every layout, at shapes that divide no tile (a batch with a
broadcast operand too), each product checked against float64 on the CPU; the time of the first
product (module load and its kernels' compilation) and of the first pass over each dtype and
precision is recorded.

    CUDA_CACHE_PATH=$(mktemp -d) python scripts/ptx_route.py > ptx_route.json
"""

import itertools
import json
import os
import sys
import time

import torch

import tiledmm

# (dtype, precision, tolerance on ||out - ref|| / ||ref||)
PATHS = [(torch.float32, "highest", 1e-5), (torch.float32, "ieee", 1e-5), (torch.float32, "3xtf32", 1e-5),
         (torch.float32, "tf32", 2e-3), (torch.float64, None, 1e-12), (torch.float16, None, 2e-3),
         (torch.bfloat16, None, 1.6e-2)]
SHAPES = [(1, 33, 7, 31), (3, 130, 264, 67), (1, 1000, 1001, 1003), (2, 2048, 64, 2056)]


def matrix(batch, rows, cols, transposed, dtype):
    if transposed:
        return torch.randn(batch, cols, rows, dtype=dtype).mT
    return torch.randn(batch, rows, cols, dtype=dtype)


def main():
    torch.manual_seed(0)
    cache = os.environ.get("CUDA_CACHE_PATH")
    if not cache or os.listdir(cache):
        sys.exit("ptx_route: set CUDA_CACHE_PATH to an empty folder, so that the driver compiles every kernel here")
    start = time.perf_counter()
    rows, failures = [], 0
    for dtype, precision, tolerance in PATHS:
        path_start = time.perf_counter()
        for (batch, m, k, n), ta, tb in itertools.product(SHAPES, [False, True], [False, True]):
            a = matrix(batch, m, k, ta, dtype)
            b = matrix(1, k, n, tb, dtype).expand(batch, k, n)  # a broadcast (stride-0) batch
            t0 = time.perf_counter()
            out = tiledmm.matmul(a.cuda(), b.cuda(), precision=precision).cpu()
            seconds = time.perf_counter() - t0
            ref = a.double() @ b.double()
            err = ((out.double() - ref).norm() / ref.norm()).item()
            ok = err <= tolerance
            failures += not ok
            rows.append(dict(dtype=str(dtype).removeprefix("torch."), precision=precision, batch=batch, m=m, k=k, n=n,
                             a_transposed=ta, b_transposed=tb, rel_err=err, ok=ok, seconds=round(seconds, 4)))
        print(f"ptx_route: {rows[-1]['dtype']} {precision or ''}: first pass {time.perf_counter() - path_start:.1f} s",
              file=sys.stderr)
    explain = tiledmm.explain(torch.empty(64, 64, device="cuda"), torch.empty(64, 64, device="cuda"))
    if "PTX, compiled by the driver at first use" not in explain:  # the route this run is meant to take
        failures += 1
        print(f"ptx_route: the build has machine code for this GPU, so no PTX was compiled:\n{explain}", file=sys.stderr)
    summary = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, products=len(rows), failures=failures,
                   first_product_s=rows[0]["seconds"], first_pass_s=round(time.perf_counter() - start, 2),
                   cache_files=sum(len(files) for _, _, files in os.walk(cache)), explain=explain, rows=rows)
    print(json.dumps(summary, indent=1))
    print(f"ptx_route: {len(rows)} products, {failures} wrong; first product {summary['first_product_s']:.1f} s, "
          f"first pass over every dtype and precision {summary['first_pass_s']:.1f} s", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
