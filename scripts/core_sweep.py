"""Times the Hopper GEMM core's tiles against torch.matmul on one GPU, to fit the rule's tile rates
(gemm_core_plan.cpp): for each shape, torch, the dispatcher's choice, each core tile forced (4-6:
128 x 256, 128 x 128, 128 x 64; 7-8: 128 x 256, 128 x 128 in clusters of two; 9: 128 x 192; 10: 128 x 160; 11:
128 x 128 ping-pong; 12-14: 64 x 96, 64 x 128, 64 x 32; the K split still the rule's) and the wgmma family's large tile
(0, "old"), in bfloat16, float16 or TF32 (--dtype; TF32 on the core takes x @ W^T only: the nt shapes). Timed as
the benchmark times (tiledmm/bench/timing.py: every configuration of a shape in turn, queued behind a GPU sleep,
CUDA events, the median of --reps after warm-up), with the L2 warm or, with --cold-l2, evicted before each run:
one run at a time behind a memset read up to 20% apart from it on the largest shapes (bench/NOTES.md item 180).

    python scripts/core_sweep.py [--reps 20] [--cold-l2] [--dtype bfloat16|float16|tf32] [--shapes M,K,N,layout ...]
"""

import argparse
import statistics

import torch

import tiledmm
from tiledmm.bench.timing import L2Flush, times_ms_each

# Linear layers' products of GPT-2 small (8192 tokens) and Llama-3-8B (4096 tokens), and shapes of
# neither (to check the rule, not the list).
SHAPES = [
    (8192, 768, 2304, "nt"), (8192, 2304, 768, "nn"), (2304, 8192, 768, "tn"),
    (8192, 768, 3072, "nt"), (768, 8192, 3072, "tn"), (3072, 8192, 768, "tn"),
    (8192, 768, 50304, "nt"), (8192, 50304, 768, "nn"), (50304, 8192, 768, "tn"),
    (4096, 4096, 28672, "nt"), (4096, 14336, 4096, "nt"), (4096, 4096, 6144, "nt"),
    (4096, 28672, 4096, "nn"), (14336, 4096, 4096, "tn"), (4096, 4096, 128256, "nt"),
    (4096, 4096, 4096, "nn"), (8192, 8192, 8192, "nn"), (2048, 8192, 4096, "tn"),
    (3000, 1000, 5000, "nt"), (512, 12288, 1536, "tn"), (1024, 2048, 1024, "nn"), (256, 65536, 256, "nn"),
]


def operand(rows, cols, transposed, dtype=torch.bfloat16):
    if transposed:
        return torch.randn(cols, rows, dtype=dtype, device="cuda").T
    return torch.randn(rows, cols, dtype=dtype, device="cuda")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--shapes", nargs="*", help="M,K,N,layout")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "tf32"])
    parser.add_argument("--cold-l2", action="store_true", help="evict the L2 before each run")
    args = parser.parse_args()
    shapes = [(*map(int, s.split(",")[:3]), s.split(",")[3]) for s in args.shapes] if args.shapes else SHAPES
    tf32 = args.dtype == "tf32"
    if tf32:
        shapes = [s for s in shapes if s[3] == "nt"]
    dtype = torch.float32 if tf32 else getattr(torch, args.dtype)
    precision, code = ("tf32", 2) if tf32 else (None, 0)
    torch.backends.cuda.matmul.fp32_precision = "tf32" if tf32 else "ieee"  # torch's float32 products
    flush = L2Flush("cuda") if args.cold_l2 else None
    ops = torch.ops.tiledmm
    print(f"{torch.cuda.get_device_name()}: ratios torch ms / tiledmm ms ({args.dtype}, "
          f"L2 {'evicted' if args.cold_l2 else 'warm'})")
    tiles = (4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 0)
    print(f"{'m':>6} {'k':>6} {'n':>6} lay {'torch':>7} {'TF/s':>5} {'auto':>6} "
          + " ".join(f"{'t' + str(t) if t else 'old':>6}" for t in tiles) + "  chosen")
    for m, k, n, layout in shapes:
        a, b = operand(m, k, layout[0] == "t", dtype), operand(k, n, layout[1] == "t", dtype)
        a3, b3 = a[None], b[None]
        runs = {"torch": lambda: torch.matmul(a, b), "auto": lambda: tiledmm.matmul(a, b, precision=precision)}
        for tile in tiles:
            runs[tile] = lambda tile=tile: ops._bmm_with_config(a3, b3, tile, 0, code)
        times = {name: statistics.median(t) for name, t in times_ms_each(runs, "cuda", 3, args.reps, flush).items()}
        ref = times["torch"]
        cells = [ref / times[name] for name in ["auto", *tiles]]
        text = tiledmm.explain(a, b, precision=precision)
        chosen = next((line.split(":")[0] for line in text.splitlines() if line.startswith("tile ")), "?")
        split = next((line.split("(")[0] for line in text.splitlines()
                      if line.startswith(("stream-K", "split K"))), "")
        tflops = 2.0 * m * k * n / ref / 1e9
        print(f"{m:6d} {k:6d} {n:6d} {layout:3s} {ref:7.3f} {tflops:5.0f} " + " ".join(f"{c:6.3f}" for c in cells)
              + f"  {chosen} {split}", flush=True)
        del a, b, a3, b3, runs
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
