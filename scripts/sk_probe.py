"""Probe (not kept): where the core's stream-K time goes on small outputs over long K."""
import statistics, sys
import torch, tiledmm

ops = torch.ops.tiledmm
flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
SMS = torch.cuda.get_device_properties(0).multi_processor_count
BN = {4: 256, 5: 128, 6: 64, 7: 256, 8: 128}
CL = {4: 1, 5: 1, 6: 1, 7: 2, 8: 2}


def operand(rows, cols, t):
    return torch.randn(cols, rows, dtype=torch.bfloat16, device="cuda").T if t else torch.randn(rows, cols, dtype=torch.bfloat16, device="cuda")


def tm(fn, reps=30):
    for _ in range(3):
        fn()
    ts = []
    for _ in range(reps):
        flush.zero_()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); fn(); e.record(); e.synchronize()
        ts.append(s.elapsed_time(e))
    return statistics.median(ts) * 1000  # us


shapes = [(768, 8192, 768, "tn"), (3072, 8192, 768, "tn"), (768, 8192, 3072, "tn"), (2304, 8192, 768, "tn"),
          (512, 12288, 1536, "tn"), (4096, 4096, 4096, "nn"), (1024, 8192, 1024, "nn")]
mode = sys.argv[1] if len(sys.argv) > 1 else "sweep"
if mode == "ncu":
    for m, k, n, lay in shapes[:3]:
        a, b = operand(m, k, lay[0] == "t"), operand(k, n, lay[1] == "t")
        torch.matmul(a, b); tiledmm.matmul(a, b)
        torch.cuda.synchronize()
    sys.exit()
if mode == "ksweep":
    shapes = []
print(torch.cuda.get_device_name(), SMS, "SMs; us, L2 flushed; cells: forced splits 1(DP) 0(rule) 2 3 4 6 8")
for m, k, n, lay in shapes:
    a, b = operand(m, k, lay[0] == "t"), operand(k, n, lay[1] == "t")
    ref = tm(lambda: torch.matmul(a, b))
    auto = tm(lambda: tiledmm.matmul(a, b))
    ex = [l for l in tiledmm.explain(a, b).splitlines() if l.startswith(("tile", "stream-K", "persistent"))]
    print(f"\n{m}x{k}x{n} {lay}: torch {ref:.1f} us, auto {auto:.1f} us ({ref/auto:.3f}x) | " + " | ".join(x[:160] for x in ex))
    a3, b3 = a[None], b[None]
    for tile in (4, 5, 6, 7, 8):
        cells = []
        for sp in (1, 0, 2, 3, 4, 6, 8):
            try:
                cells.append(f"{tm(lambda: ops._bmm_with_config(a3, b3, tile, sp, 0)):7.1f}")
            except Exception as ex_:
                cells.append("   err")
        print(f"  tile {tile} ({128*CL[tile]}x{BN[tile]}): " + " ".join(cells))
# DP problems with one tile a cluster and the K share stream-K would give each: the same products
# per block without any meeting.
print("\nDP equivalents: one tile per cluster, K = stream-K share; vs the stream-K time")
for m, k, n, lay in shapes[:5] if mode == "sweep" else []:
    for tile in (4, 5, 6, 7, 8):
        rows, bn, cl = 128 * CL[tile], BN[tile], CL[tile]
        tiles = -(-m // rows) * -(-n // bn)
        gpu = SMS // cl
        if tiles >= gpu:
            continue
        k_tiles = -(-k // 64)
        clusters = min(gpu, tiles * k_tiles, tiles * 8)
        share = -(-tiles * k_tiles // clusters)
        # clusters tiles arranged r x c
        r = 11 if clusters % 11 == 0 else 1
        c = clusters // r
        M, N, K = rows * r, bn * c, share * 64
        a2, b2 = operand(M, K, lay[0] == "t")[None], operand(K, N, lay[1] == "t")[None]
        a3, b3 = operand(m, k, lay[0] == "t")[None], operand(k, n, lay[1] == "t")[None]
        dp = tm(lambda: ops._bmm_with_config(a2, b2, tile, 1, 0))
        sk = tm(lambda: ops._bmm_with_config(a3, b3, tile, 0, 0))
        ideal = 2 * M * N * K / (clusters * cl) / 6.5e12 * 1e6
        print(f"  {m}x{k}x{n} tile {tile}: {clusters} clusters, share {share} K tiles; DP {M}x{K}x{N} {dp:.1f} us, "
              f"stream-K {sk:.1f} us (ideal {ideal:.1f})")
if mode == "ksweep":
    # Fixed cost per launch: whole tiles, one per block/cluster, K swept; torch on the same.
    for tile, (M, N) in ((4, (1408, 3072)), (7, (2816, 1536)), (5, (1408, 1536))):
        for k in (64, 256, 1024, 2048, 4096, 8192):
            a3, b3 = operand(M, k, False)[None], operand(k, N, False)[None]
            ours = tm(lambda: ops._bmm_with_config(a3, b3, tile, 1, 0))
            ref = tm(lambda: torch.matmul(a3[0], b3[0]))
            print(f"ksweep tile {tile} {M}x{k}x{N}: ours {ours:.1f} us, torch {ref:.1f} us")
