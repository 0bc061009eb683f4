"""Where the Hopper GEMM core's time goes on small outputs over a long K (bench/NOTES.md item 153),
bfloat16, CUDA events, L2 flushed, torch.matmul timed in the same process:

    python scripts/sk_probe.py sweep    # per shape: torch, the rule's choice, each core tile forced
                                        # with splits 1 (whole tiles), 0 (the rule's) and 2 ... 8
    python scripts/sk_probe.py dp       # stream-K against whole tiles doing the same K per block
    python scripts/sk_probe.py ksweep   # whole tiles, one a block, K from 64 to 8192: the fixed cost
    python scripts/sk_probe.py ncu      # one product each of torch and tiledmm, for ncu to profile
"""

import sys

import torch

import tiledmm
from core_sweep import operand, time_ms

ops = torch.ops.tiledmm
BN = {4: 256, 5: 128, 6: 64, 7: 256, 8: 128, 9: 192}  # the core's tiles (gemm_core_plan.h)
CLUSTER = {4: 1, 5: 1, 6: 1, 7: 2, 8: 2, 9: 1}
SHAPES = [(768, 8192, 768, "tn"), (3072, 8192, 768, "tn"), (768, 8192, 3072, "tn"), (2304, 8192, 768, "tn"),
          (512, 12288, 1536, "tn"), (4096, 4096, 4096, "nn"), (1024, 8192, 1024, "nn")]


def operands(m, k, n, layout, batched=False):
    a, b = operand(m, k, layout[0] == "t"), operand(k, n, layout[1] == "t")
    return (a[None], b[None]) if batched else (a, b)


def us(fn, flush):
    return time_ms(fn, 30, flush) * 1000


def sweep(flush):
    print("us; cells: forced splits 1 (whole tiles), 0 (the rule's), 2 3 4 6 8")
    for m, k, n, layout in SHAPES:
        a, b = operands(m, k, n, layout)
        ref, auto = us(lambda: torch.matmul(a, b), flush), us(lambda: tiledmm.matmul(a, b), flush)
        chosen = [line for line in tiledmm.explain(a, b).splitlines() if line.startswith(("tile", "stream-K"))]
        print(f"\n{m}x{k}x{n} {layout}: torch {ref:.1f} us, tiledmm {auto:.1f} us ({ref / auto:.3f}x) | "
              + " | ".join(line[:160] for line in chosen))
        a3, b3 = a[None], b[None]
        for tile in BN:
            cells = [f"{us(lambda: ops._bmm_with_config(a3, b3, tile, splits, 0), flush):7.1f}"
                     for splits in (1, 0, 2, 3, 4, 6, 8)]
            print(f"  tile {tile} ({128 * CLUSTER[tile]}x{BN[tile]}): " + " ".join(cells))


def dp(flush):
    """Whole tiles, one a cluster, each over the K share that stream-K over every cluster gives: the
    same products per block without meeting."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for m, k, n, layout in SHAPES[:5]:
        for tile in BN:
            rows, bn = 128 * CLUSTER[tile], BN[tile]
            tiles, gpu, k_tiles = -(-m // rows) * -(-n // bn), sms // CLUSTER[tile], -(-k // 64)
            if tiles >= gpu:
                continue
            clusters = min(gpu, tiles * k_tiles, tiles * 8)
            share = -(-tiles * k_tiles // clusters)
            r = 11 if clusters % 11 == 0 else 1  # the clusters' tiles as r x c
            shape = (rows * r, share * 64, bn * (clusters // r))
            a2, b2 = operands(*shape, layout, batched=True)
            a3, b3 = operands(m, k, n, layout, batched=True)
            whole = us(lambda: ops._bmm_with_config(a2, b2, tile, 1, 0), flush)
            streamk = us(lambda: ops._bmm_with_config(a3, b3, tile, 0, 0), flush)
            print(f"{m}x{k}x{n} tile {tile}: {clusters} clusters, share {share} K tiles; whole tiles "
                  f"{'x'.join(map(str, shape))} {whole:.1f} us, stream-K {streamk:.1f} us")


def ksweep(flush):
    for tile, (m, n) in ((4, (1408, 3072)), (7, (2816, 1536)), (5, (1408, 1536))):  # 132 blocks each
        for k in (64, 256, 1024, 2048, 4096, 8192):
            a3, b3 = operands(m, k, n, "nn", batched=True)
            ours = us(lambda: ops._bmm_with_config(a3, b3, tile, 1, 0), flush)
            ref = us(lambda: torch.matmul(a3[0], b3[0]), flush)
            print(f"tile {tile} {m}x{k}x{n}: tiledmm {ours:.1f} us, torch {ref:.1f} us")


def ncu():
    for m, k, n, layout in SHAPES[:3]:
        a, b = operands(m, k, n, layout)
        torch.matmul(a, b)
        tiledmm.matmul(a, b)
    torch.cuda.synchronize()


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "sweep"
    if mode == "ncu":
        return ncu()
    print(torch.cuda.get_device_name(), "(bfloat16, L2 flushed)")
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    {"sweep": sweep, "dp": dp, "ksweep": ksweep}[mode](flush)


if __name__ == "__main__":
    main()
