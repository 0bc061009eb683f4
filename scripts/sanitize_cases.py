"""Runs every kernel variant once at small odd shapes, for compute-sanitizer.

Variants: tile shape x K splits x path (float32 exact / 3xTF32 / TF32, float64, float16, bfloat16;
the wgmma paths also with TILEDMM_NO_WGMMA=1, so their mma.sync kernels) x operand layouts x load
width (element-wise at shapes that divide nothing, 16-byte at multiples of 8), batched with a
broadcast (stride-0) operand too; and every path with linear's bias (tiledmm::_gemm_nd). Each result is checked against float64, so a variant that runs
but computes garbage is caught here as well. Arguments, if any, name the paths to run: a dtype
(e.g. `float16 bfloat16`) or a float32 precision (`float32:ieee`, `float32:3xtf32`, `float32:tf32`,
`float32:highest`: its scaled float16 splits);
by default every path runs; `core` runs the Hopper GEMM core's cases (and the bias's) alone, `bias`
the bias's alone, `short-k` the core's at short K as the dispatcher plans them alone.
"""

import itertools
import os
import sys

import torch

import tiledmm
from tiledmm import _precision

# (dtype, precision code, tolerance): float32 exact, 3xTF32, TF32; float64; float16; bfloat16.
PATHS = [(torch.float32, 0, 1e-5), (torch.float32, 1, 1e-5), (torch.float32, 2, 2e-3),
         (torch.float64, 0, 1e-12), (torch.float16, 0, 2e-3), (torch.bfloat16, 0, 1.6e-2)]
SHAPES = [(2, 33, 7, 31), (2, 40, 24, 72), (3, 5, 130, 9), (1, 72, 264, 136), (1, 136, 197, 141)]


def matrix(batch, rows, cols, transposed, dtype):
    if transposed:
        return torch.randn(batch, cols, rows, device="cuda", dtype=dtype).mT
    return torch.randn(batch, rows, cols, device="cuda", dtype=dtype)


# On Hopper these paths run wgmma; TILEDMM_NO_WGMMA=1 runs their mma.sync kernels (Ampere's) too.
MMA_SYNC_PATHS = [p for p in PATHS if p[0] in (torch.float16, torch.bfloat16) or p[1] in (1, 2)]


def cases(only=None):
    """(wgmma off, tile, splits, path, A transposed, B transposed, shape) of every variant run; tile
    None: the dispatcher's plan (tiledmm.mm); "core": the dispatcher's plan, which must be the Hopper
    GEMM core's (tiledmm.matmul); "bias": the plan plus a bias (tiledmm::_gemm_nd)."""
    default = itertools.product([False], range(4), [1, 2], PATHS, [False, True], [False, True], SHAPES)
    mma_sync = itertools.product([True], range(4), [1, 2], MMA_SYNC_PATHS, [False, True], [False, True], SHAPES)
    # Hopper runs 3xTF32 on wgmma only for outputs that fill the GPU: a batch of 140 tiles does
    # (element-wise copies, and 16-byte ones with partial tiles along K and N). Persistent tiles
    # (the short-K ones of 3xTF32, TF32 and, with 16-byte loads, exact float32, float16 and
    # bfloat16) then take two tiles in some blocks.
    many_tiles = itertools.product([False], range(4), [1, 2], PATHS[0:3] + PATHS[4:], [False, True], [False, True],
                                   [(140, 33, 40, 31), (140, 40, 36, 72)])
    # 16-bit row-major products without 16-byte alignment run on tiles of one residue class of A's
    # rows where the dispatcher plans them (tile None: whole bands of 2048 rows and a grid that
    # fills the GPU; the rest of the rows on the windowed path).
    class_tiles = itertools.product([False], [None], [1], PATHS[4:], [False], [False],
                                    [(1, 2053, 301, 2201), (1, 2048, 381, 2305)])
    # 'highest' at short K on Hopper: float16 splits of float32 operands where the output fills the
    # GPU (tile None: the dispatcher's plan), with a row and a column left out of the split
    # (recomputed exactly).
    scaled_split = itertools.product([False], [None], [1], [(torch.float32, 3, 1e-5)], [False, True], [False, True],
                                     [(1, 2049, 64, 2051), (1, 2048, 40, 2176)])
    # The Hopper GEMM core (tiles 4-14, 16-bit operands with 16-byte aligned lines in every layout, TF32
    # with A row-major: B column-major, or row-major computed transposed with A through registers on
    # every tile but 11, the ping-pong tile; 7 and 8 in clusters of two; 12, 13 and 14 of 64 rows): ragged
    # edges on every side, K over several stages and in slices, a batch and a persistent walk of more
    # work items than SMs (140 matrices); an output taller than wide, which 16-bit MN-major operands
    # run transposed (C^T = B^T A^T) in whole tiles.
    core_shapes = [(2, 40, 264, 72), (1, 136, 1032, 264), (140, 8, 72, 24), (2, 264, 392, 136)]
    core = itertools.chain(
        itertools.product([False], range(4, 15), [1, 3], PATHS[4:], [False, True], [False, True], core_shapes),
        itertools.product([False], range(4, 15), [1, 3], PATHS[2:3], [False], [True], core_shapes),
        itertools.product([False], [t for t in range(4, 15) if t != 11], [1, 3], PATHS[2:3], [False], [False],
                          core_shapes))
    # The dispatcher's plan at short K (tile "core"): the core for aligned 16-bit operands (one K tile,
    # partial, over 6 rounds of tiles: kCoreShortKMaxRounds) and TF32 x @ W^T past K = 64 (kCoreMinK),
    # at K of one to seven K tiles, over outputs that fill the GPU (smaller ones fail the plan's fit).
    short_k_core = itertools.chain(
        itertools.product([False], ["core"], [1], PATHS[4:], [False, True], [False, True],
                          [(4, 1032, 136, 1032), (1, 1032, 200, 2056), (96, 512, 56, 512)]),
        itertools.product([False], ["core"], [1], PATHS[2:3], [False], [False, True],
                          [(4, 1032, 136, 1032), (1, 1032, 200, 2056)]))
    # linear's bias (tile "bias": tiledmm::_gemm_nd, the dispatcher's plan): in the core's epilogue
    # (aligned 16-bit and TF32 x @ W^T shapes, the tile's columns staged in shared memory; 16-bit
    # x @ W^T at 1032 x 1032 on the ping-pong tile, whose warpgroups stage theirs apart, and at 1104 x
    # 2696 computed transposed, the bias along its rows), added after the product elsewhere.
    bias = itertools.product([False, True], ["bias"], [1], PATHS, [False, True], [False, True],
                             [(1, 33, 7, 31), (1, 40, 264, 72), (1, 136, 1032, 264), (1, 1032, 264, 1032),
                              (1, 1104, 264, 2696)])
    if only == "bias":
        return bias
    if only == "short-k":
        return short_k_core
    if only == "core":
        return itertools.chain(core, short_k_core, bias)
    return itertools.chain(default, mma_sync, many_tiles, class_tiles, scaled_split, core, short_k_core, bias)


def selected(path_names, dtype, precision):
    """Whether a path is among those named (all when none are)."""
    name = str(dtype).removeprefix("torch.")
    return not path_names or name in path_names or any(
        p == f"{name}:{_precision.NAMES[precision]}" for p in path_names if ":" in p)


def main(path_names):
    torch.manual_seed(0)
    runs = failures = unfit = 0
    only = next((p for p in path_names if p in ("core", "bias", "short-k")), None)
    path_names = [p for p in path_names if p not in ("core", "bias", "short-k")]
    for wgmma_off, tile, splits, (dtype, precision, tolerance), ta, tb, (batch, m, k, n) in cases(only):
        if not selected(path_names, dtype, precision):
            continue
        os.environ["TILEDMM_NO_WGMMA"] = "1" if wgmma_off else "0"
        a = matrix(batch, m, k, ta, dtype)
        b = matrix(1, k, n, tb, dtype).expand(batch, k, n)  # stride-0 batch
        bias = None
        try:
            if tile == "bias":
                bias = torch.randn(n, device="cuda", dtype=dtype) * k**0.5  # as large as the products
                out = torch.ops.tiledmm._gemm_nd(a[0], b[0], False, False, bias, precision)[None]
            elif tile == "core":
                name = _precision.NAMES[precision]
                if "Hopper GEMM core (wgmma" not in tiledmm.explain(a, b, precision=name):  # the core's kernel line
                    raise RuntimeError(f"shape {(batch, m, k, n)} no longer runs on the Hopper GEMM core")
                out = tiledmm.matmul(a, b, precision=name)
            elif tile is None:
                name = _precision.NAMES[precision]
                expected = "scaled big and remainder parts" if dtype == torch.float32 else "one residue class"
                if dtype == torch.float32:
                    a[0, 3, 0] = 2.0**30  # row 3: a range past float16's parts
                    b[0, 5, 7] = 2.0**-30  # column 7
                if expected not in tiledmm.explain(a[0], b[0], precision=name):
                    raise RuntimeError(f"shape {(m, k, n)} no longer takes the path with {expected!r}")
                out = tiledmm.mm(a[0], b[0], precision=name)[None]
            else:
                out = torch.ops.tiledmm._bmm_with_config(a, b, tile, splits, precision)
        except RuntimeError as error:  # a tile this layout makes too large (never dispatched)
            if "bytes of shared memory" not in str(error):
                raise
            unfit += 1
            continue
        # The reference runs on the CPU: only tiledmm's kernels go through the sanitizer.
        ref = torch.matmul(a.cpu().double(), b.cpu().double())
        if bias is not None:
            ref += bias.cpu().double()
        err = ((out.cpu().double() - ref).norm() / ref.norm()).item()
        runs += 1
        if not err <= tolerance:
            failures += 1
            print(f"FAIL wgmma_off={wgmma_off} tile={tile} splits={splits} {dtype} precision={precision} ta={ta} tb={tb} shape={(batch, m, k, n)} err={err:.3e}")
    torch.cuda.synchronize()
    print(f"sanitize_cases: {runs} variant runs, {failures} wrong results, {unfit} tiles too large for their layout")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
