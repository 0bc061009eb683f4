"""The Hopper GEMM core (gemm_core_sm90.cuh; 16-bit operands in every layout, TF32 with A
row-major, B row-major computed transposed with A through registers; products the rule runs as
C^T = B^T A^T): every tile (with and without clusters), layout and cut of K into stream-K ranges
(the operator's `splits`; even cuts where the clusters are a multiple of the tiles) at shapes whose
edges fall inside a tile, batches (broadcast ones too), persistent walks of more work items than
SMs, and the dispatcher's rule for which problems it takes and how."""

import pytest
import torch

import tiledmm
from _util import (HOPPER_ONLY, LAYOUTS, PRECISION_CODES, check_against_reference, check_tf32_product, operands,
                   poisoned, requires_gpu)

pytestmark = [requires_gpu, HOPPER_ONLY]
ops = torch.ops.tiledmm

CORE = "Hopper GEMM core (wgmma"  # the core's kernel line (a plan it gives back says "not the Hopper GEMM core")
# 128 x 256, 128 x 128, 128 x 64; 128 x 256, 128 x 128 in clusters of two; 128 x 192; 128 x 160; 128 x 128 ping-pong;
# 64 x 96, 64 x 128 and 64 x 32 (one math warpgroup)
CORE_TILES = [4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14]
PING_PONG = 11  # the core's ping-pong tile, which reads TF32 A from shared memory only
COOPERATIVE_TILES = [t for t in CORE_TILES if t != PING_PONG]
HALF_DTYPES = [torch.float16, torch.bfloat16]
# Multiples of 8 (the core needs 16-byte aligned lines in every layout) that divide no tile: one
# row or K tile, ragged M, N and K edges, K over several rounds of the stage ring.
SHAPES = [(8, 72, 8), (40, 264, 72), (136, 1032, 264), (264, 520, 392), (128, 4104, 256)]
TF32 = PRECISION_CODES["tf32"]



@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=["float16", "bfloat16"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("tile", CORE_TILES)
@pytest.mark.parametrize("splits", [1, 3, 7])
@pytest.mark.parametrize("m,k,n", SHAPES)
def test_every_core_variant(m, k, n, splits, tile, layout, dtype):
    a, b = operands(m, k, n, layout, dtype, "cuda", batch=(3,))
    out, _ = poisoned(lambda: ops._bmm_with_config(a, b, tile, splits, 0), (3, m, n), dtype, "cuda")
    check_against_reference(out, a, b)


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=["float16", "bfloat16"])
@pytest.mark.parametrize("tile", CORE_TILES)
def test_broadcast_batch_and_more_items_than_sms(tile, dtype):
    """A stride-0 operand read by every matrix of the batch, and a persistent walk through several
    work items a block (300 matrices)."""
    a = torch.randn(300, 24, 136, dtype=dtype, device="cuda")
    b = torch.randn(1, 136, 40, dtype=dtype, device="cuda").expand(300, 136, 40)
    out, _ = poisoned(lambda: ops._bmm_with_config(a, b, tile, 1, 0), (300, 24, 40), dtype, "cuda")
    check_against_reference(out, a, b)


@pytest.mark.parametrize("k", [40, 392, 1000])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_ping_pong_warpgroups_take_turns(k, layout):
    """Tile 11's math warpgroups take a block's tiles in turn, each computing a whole tile and
    stepping over the other's stages in the ring: five or six tiles a block (700 matrices), over one
    K tile (fewer than the ring's six stages), and over 7 and 16 (more: a stage's phases then wrap
    between turns)."""
    a, b = operands(24, k, 40, layout, torch.bfloat16, "cuda", batch=(700,))
    out, _ = poisoned(lambda: ops._bmm_with_config(a, b, 11, 1, 0), (700, 24, 40), torch.bfloat16, "cuda")
    check_against_reference(out, a, b)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_dispatcher_sends_aligned_16bit_products_to_the_core(layout):
    # An output of 90 tiles or more: smaller ones leave most of the GPU idle and keep the wgmma family.
    a, b = operands(1048, 1032, 1160, layout, torch.bfloat16, "cuda")
    assert CORE in tiledmm.explain(a, b)
    out, reused = poisoned(lambda: tiledmm.matmul(a, b), (1048, 1160), torch.bfloat16, "cuda")
    assert reused
    check_against_reference(out, a, b)


def test_other_problems_keep_their_paths():
    """A single K tile over many rounds of the core's tiles keeps the persistent short-K tile (8192^2 x
    64: 16 rounds of 128 x 256), over a few the core takes it (attention's 96 x 512 x 64 x 512: 6);
    unaligned lines keep the residue-class and window paths."""
    text = tiledmm.explain(*operands(8192, 64, 8192, "nn", torch.bfloat16, "cuda"))
    assert "not the Hopper GEMM core" in text and "the short-K tile streams faster" in text
    assert CORE not in text and "why: short K" in text
    a, b = operands(512, 64, 512, "nt", torch.bfloat16, "cuda", batch=(96,))
    assert CORE in tiledmm.explain(a, b)
    check_against_reference(tiledmm.matmul(a, b), a, b)
    a, b = operands(1000, 1001, 1003, "nn", torch.bfloat16, "cuda")
    assert CORE not in tiledmm.explain(a, b)
    out = tiledmm.matmul(a, b)
    check_against_reference(out, a, b)


def test_wide_output_walks_groups_of_rows():
    """The L2 rule: a wide output (4096 x 28672) runs in groups of row tiles, not row by row."""
    a, b = operands(4096, 4096, 28672, "nt", torch.bfloat16, "cuda")
    text = tiledmm.explain(a, b)
    assert CORE in text and "in groups of" in text
    groups = int(text.split("in groups of ")[1].split()[0])
    assert 4 <= groups <= 32


@pytest.mark.parametrize("batch", [2, 6], ids=["even", "uneven"])
@pytest.mark.parametrize("tile", CORE_TILES)
def test_stream_k_sums_in_range_order(tile, batch):
    """K cut into ranges (five a tile, forced): the last range of a tile to finish adds every part
    in range order, so the same inputs give the same bits launch after launch, whichever range
    happens to finish last (each launch leaves the arrival counters at zero for the next). A batch of two cuts
    K evenly on most tiles (one range a cluster); with six, five ranges a tile need more clusters
    than the GPU has, so every cluster takes an even share that crosses tiles, and a tile's head
    that comes after another item of its share may keep its part in registers."""
    a, b = operands(264, 4104, 392, "tn", torch.bfloat16, "cuda", batch=(batch,))
    first = ops._bmm_with_config(a, b, tile, 5, 0)
    check_against_reference(first, a, b)
    for _ in range(8):
        assert torch.equal(ops._bmm_with_config(a, b, tile, 5, 0), first)


def test_stream_k_on_two_streams_and_in_a_cuda_graph():
    """Stream-K's arrival counters are kept per stream between launches (each launch leaves them at
    zero): products on two streams at once, and a captured graph (which zeroes counters of its own,
    since it may replay on any stream) replayed beside launches on the stream it was captured on."""
    shapes = [(768, 8192, 768), (896, 8192, 1280), (640, 16384, 640)]
    pairs = [operands(m, k, n, "tn", torch.bfloat16, "cuda") for m, k, n in shapes]
    assert all("stream-K:" in tiledmm.explain(a, b) for a, b in pairs) or not on_132_sms()
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    outs = [[], []]
    for s in streams:
        s.wait_stream(torch.cuda.current_stream())
    for _ in range(3):
        for i, s in enumerate(streams):
            with torch.cuda.stream(s):
                outs[i] += [tiledmm.matmul(a, b) for a, b in (pairs if i == 0 else pairs[::-1])]
    torch.cuda.synchronize()
    for i in range(2):
        for out, (a, b) in zip(outs[i], (pairs if i == 0 else pairs[::-1]) * 3):
            check_against_reference(out, a, b)

    a, b = pairs[0]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side):
        captured = tiledmm.matmul(a, b)
    for _ in range(3):
        a.copy_(torch.randn_like(a))
        b.copy_(torch.randn_like(b))
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            graph.replay()
            eager = tiledmm.matmul(a, b)
        graph.replay()  # on the current stream, beside the side stream's launches
        torch.cuda.synchronize()
        check_against_reference(captured, a, b)
        check_against_reference(eager, a, b)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("tile", CORE_TILES)
@pytest.mark.parametrize("splits", [2, 4, 5, 6, 8])
def test_even_cuts(splits, tile, layout):
    """K cut into 2-8 ranges a tile over that many times as many clusters as tiles (even cuts: one
    range a cluster; 3-12 tiles here), with ragged edges, a batch of two, and K tiles that the
    ranges divide unevenly; the stream-K walk's phase classes reorder the tiles."""
    a, b = operands(264, 4104, 136, layout, torch.bfloat16, "cuda", batch=(2,))
    out, _ = poisoned(lambda: ops._bmm_with_config(a, b, tile, splits, 0), (2, 264, 136), torch.bfloat16, "cuda")
    check_against_reference(out, a, b)


# Weight gradients whose outputs have fewer tiles than SMs over a long K: 768 x 768 (36 tiles of
# 128 x 128, K cut evenly, one range a cluster) and 896 x 1280 (70 tiles over 132 clusters: every
# cluster an even share of the K tiles that crosses tiles).
@pytest.mark.parametrize("m,k,n", [(768, 8192, 768), (896, 8192, 1280)])
def test_small_output_long_k_shares_k_by_stream_k(m, k, n):
    """The ranges of K meet, and the parts' float32 sum is as accurate as torch."""
    a, b = operands(m, k, n, "tn", torch.bfloat16, "cuda")
    text = tiledmm.explain(a, b)
    assert CORE in text and "stream-K:" in text
    out, _ = poisoned(lambda: tiledmm.matmul(a, b), (m, n), torch.bfloat16, "cuda")
    check_against_reference(out, a, b)


def test_outputs_that_fill_the_gpu_run_whole_tiles():
    """More tiles than SMs (4096 x 4096 x 6144): whole tiles, no stream-K."""
    a, b = operands(4096, 4096, 6144, "nt", torch.bfloat16, "cuda")
    text = tiledmm.explain(a, b)
    assert CORE in text and "stream-K:" not in text
    out, _ = poisoned(lambda: tiledmm.matmul(a, b), (4096, 6144), torch.bfloat16, "cuda")
    check_against_reference(out, a, b)


def test_a_tile_or_two_over_a_very_long_k_keeps_the_k_slices():
    """256 x 65536 x 256: the core's best plan would leave most SMs idle, so the wgmma family's K
    slices, summed across the GPU, run it."""
    a, b = operands(256, 65536, 256, "nn", torch.bfloat16, "cuda")
    text = tiledmm.explain(a, b)
    assert "not the Hopper GEMM core" in text and "split K" in text
    out, _ = poisoned(lambda: tiledmm.matmul(a, b), (256, 256), torch.bfloat16, "cuda")
    check_against_reference(out, a, b)


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=["float16", "bfloat16"])
def test_model_layer_products(dtype):
    """The three training products of a linear layer at a model's size (4096 tokens, 2048 -> 5632)."""
    x = torch.randn(4096, 2048, dtype=dtype, device="cuda")
    w = torch.randn(5632, 2048, dtype=dtype, device="cuda")
    dy = torch.randn(4096, 5632, dtype=dtype, device="cuda")
    for a, b in ((x, w.T), (dy, w), (dy.T, x)):
        assert CORE in tiledmm.explain(a, b)
        out, _ = poisoned(lambda: tiledmm.matmul(a, b), (a.shape[0], b.shape[1]), dtype, "cuda")
        check_against_reference(out, a, b)


@pytest.mark.parametrize("layout", ["nt", "nn"])
@pytest.mark.parametrize("tile", CORE_TILES)
@pytest.mark.parametrize("splits", [1, 3, 7])
@pytest.mark.parametrize("m,k,n", SHAPES)
def test_every_tf32_core_variant(m, k, n, splits, tile, layout):
    """TF32 on the core, each operand rounded to nearest TF32 by the TMA, on every tile and cut of K:
    x @ W^T (both operands K-major, as wgmma reads TF32 from shared memory), and dy @ W (B
    row-major) computed as C^T = W^T dy^T, its A (W's memory, MN-major) read into the math warps'
    registers and its result written transposed."""
    if layout == "nn" and tile == PING_PONG:
        pytest.skip("the ping-pong tile takes x @ W^T only (test_forced_core_tiles_say_what_is_wrong)")
    a, b = operands(m, k, n, layout, torch.float32, "cuda", batch=(3,))
    out, _ = poisoned(lambda: ops._bmm_with_config(a, b, tile, splits, TF32), (3, m, n), torch.float32, "cuda")
    check_tf32_product(out, a, b)


@pytest.mark.parametrize("dtype,layout", [(torch.bfloat16, "nn"), (torch.bfloat16, "nt"), (torch.float32, "nt")],
                         ids=["bfloat16-nn", "bfloat16-nt", "tf32-nt"])
@pytest.mark.parametrize("tile", CORE_TILES)
@pytest.mark.parametrize("splits", [1, 3])
@pytest.mark.parametrize("m", [1, 13, 100])
def test_k_major_a_of_fewer_rows_than_a_tile(m, splits, tile, dtype, layout):
    """A K-major A with fewer rows than the tile (x @ W^T while decoding) comes in boxes of its rows
    rounded up to 8; the stage's rows past them keep what they held before, which may be the NaN
    rows of a product run just before in the same orientation (shared memory is not cleared between
    kernels). Every output of the m rows is right and finite. 16-bit nn always runs as it comes;
    in nt a few tiles run the product transposed (C^T = B^T A^T, m the columns), as the rule says."""
    precision = TF32 if dtype == torch.float32 else 0
    nan_a, nan_b = operands(256, 264, 136, layout, dtype, "cuda", batch=(3,))
    nan_a[:, 1:] = float("nan")
    ops._bmm_with_config(nan_a, nan_b, tile, splits, precision)
    a, b = operands(m, 264, 136, layout, dtype, "cuda", batch=(3,))
    out, _ = poisoned(lambda: ops._bmm_with_config(a, b, tile, splits, precision), (3, m, 136), dtype, "cuda")
    assert torch.isfinite(out).all()
    if dtype == torch.float32:
        check_tf32_product(out, a, b)
    else:
        check_against_reference(out, a, b)


@pytest.mark.parametrize("transposed", [False, True], ids=["x_wt", "dy_w"])
@pytest.mark.parametrize("tile", CORE_TILES)
@pytest.mark.parametrize("splits", [2, 5, 8])
def test_tf32_even_cuts_and_broadcast_batch(tile, splits, transposed):
    """TF32 K cut evenly into 2-8 ranges a tile, over a batch whose W is broadcast (stride 0): x @ W^T,
    and dy @ W (computed transposed: the broadcast operand is then the product's A)."""
    if transposed and tile == PING_PONG:
        pytest.skip("the ping-pong tile takes x @ W^T only")
    a = torch.randn(2, 264, 4104, device="cuda")
    w = torch.randn(1, 4104, 136, device="cuda") if transposed else torch.randn(1, 136, 4104, device="cuda").mT
    b = w.expand(2, 4104, 136)
    out, _ = poisoned(lambda: ops._bmm_with_config(a, b, tile, splits, TF32), (2, 264, 136), torch.float32, "cuda")
    check_tf32_product(out, a, b)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_dispatcher_sends_tf32_x_w_t_to_the_core(layout):
    """TF32 takes the core where A is row-major: x @ W^T (nt) as it is, dy @ W (nn) as C^T = B^T A^T;
    the other layouts (an MN-major A) keep the TF32 wgmma family (wgmma reads TF32 K-major only)."""
    a, b = operands(1048, 1032, 1160, layout, torch.float32, "cuda")
    text = tiledmm.explain(a, b, precision="tf32")
    assert (CORE in text) == (layout in ("nt", "nn")), text
    assert ("written transposed" in text) == (layout == "nn"), text
    assert CORE not in tiledmm.explain(a, b, precision="highest")
    out, _ = poisoned(lambda: tiledmm.matmul(a, b, precision="tf32"), (1048, 1160), torch.float32, "cuda")
    check_tf32_product(out, a, b)


def test_tf32_linear_layer_with_a_wide_output():
    """A language model's head in TF32 (x @ W^T, 2048 x 768 -> 50304 outputs): the core, in groups
    of row tiles."""
    x = torch.randn(2048, 768, device="cuda")
    w = torch.randn(50304, 768, device="cuda")
    text = tiledmm.explain(x, w.T, precision="tf32")
    assert CORE in text and "in groups of" in text
    out, _ = poisoned(lambda: tiledmm.matmul(x, w.T, precision="tf32"), (2048, 50304), torch.float32, "cuda")
    check_tf32_product(out, x, w.T)


def test_forced_core_tiles_say_what_is_wrong():
    """A core tile index past the core's, a core tile forced on operands its tensor maps cannot
    read (rows of 33 bf16 elements: 66 bytes apart), and forced on TF32 operands with A column-major,
    or the ping-pong tile on a row-major B, are refused with errors that say so."""
    a, b = operands(40, 264, 72, "nn", torch.bfloat16, "cuda", batch=(2,))
    with pytest.raises(RuntimeError, match=f"out of range: the Hopper GEMM core's tiles are 4 ... {CORE_TILES[-1]}"):
        ops._bmm_with_config(a, b, CORE_TILES[-1] + 1, 1, 0)
    a, b = operands(40, 33, 72, "nn", torch.bfloat16, "cuda", batch=(2,))
    with pytest.raises(RuntimeError, match="16-byte aligned"):
        ops._bmm_with_config(a, b, 4, 1, 0)
    a, b = operands(40, 264, 72, "tn", torch.float32, "cuda", batch=(2,))
    with pytest.raises(RuntimeError, match="reads TF32 operands with A row-major only"):
        ops._bmm_with_config(a, b, 4, 1, TF32)
    a, b = operands(40, 264, 72, "nn", torch.float32, "cuda", batch=(2,))
    with pytest.raises(RuntimeError, match="ping-pong tile.* reads TF32 operands K-major only: B column-major"):
        ops._bmm_with_config(a, b, PING_PONG, 1, TF32)


# x @ W^T with a bias: one tile's rows and columns with ragged edges, several, and a small output
# over a long K (GPT-2's weight gradients' shape), which stream-K's ranges share.
# ping-pong, 128 x 64, stream-K; in 16 bits computed transposed (128 x 192: 132 tiles against 135)
BIAS_SHAPES = [(1048, 1032, 1160), (1032, 520, 776), (768, 8192, 768), (1104, 264, 2696)]
BIAS_PRECISIONS = ["bfloat16", "float16", "tf32"]


def _bias_operands(m, k, n, precision):
    dtype = torch.float32 if precision == "tf32" else getattr(torch, precision)
    x, w = torch.randn(m, k, dtype=dtype, device="cuda"), torch.randn(n, k, dtype=dtype, device="cuda")
    return x, w.mT, TF32 if precision == "tf32" else 0


def test_bias_shapes_take_whole_tiles_and_stream_k():
    texts = [ops._explain(*_bias_operands(m, k, n, "bfloat16")) for m, k, n in BIAS_SHAPES]
    assert any("stream-K: " in t for t in texts) and any("stream-K: " not in t for t in texts), texts
    if on_132_sms():
        assert [TRANSPOSED in t for t in texts] == [False, False, False, True], texts
        assert TRANSPOSED in ops._explain(*_bias_operands(*BIAS_SHAPES[-1], "tf32"))


# Products that the core runs as C^T = B^T A^T (plan_core_run). Which ones, test_core_rule checks for
# 132 SMs (H100 SXM, H200); on other GPUs the tests below still check every product, not its orientation.
TRANSPOSED = "computed as C^T = B^T A^T"


def on_132_sms():
    return torch.cuda.get_device_properties(0).multi_processor_count == 132


def check_in_precision(out, a, b, precision):
    """out against float64: TF32's contract for "tf32", the 16-bit output's rounding otherwise."""
    if precision == "tf32":
        check_tf32_product(out, a, b)
    else:
        check_against_reference(out, a, b)


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=["float16", "bfloat16"])
@pytest.mark.parametrize("tile", CORE_TILES)
@pytest.mark.parametrize("splits", [1, 3])
@pytest.mark.parametrize("m,k,n", [(264, 392, 136), (1088, 264, 136), (136, 72, 40)])
def test_16bit_mn_major_products_transposed(m, k, n, splits, tile, dtype):
    """dW = dy^T x (both operands MN-major) with C taller than wide: on every cooperative tile in
    whole tiles, where the orientations' estimates are level, the rule runs the transpose (and in
    stream-K where that estimate is the faster; the ping-pong tile never); ragged edges, K of one
    whole K tile and a ragged one (72) and more, a batch."""
    a, b = operands(m, k, n, "tn", dtype, "cuda", batch=(3,))
    out, _ = poisoned(lambda: ops._bmm_with_config(a, b, tile, splits, 0), (3, m, n), dtype, "cuda")
    check_against_reference(out, a, b)


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=["float16", "bfloat16"])
@pytest.mark.parametrize("tile", CORE_TILES)
def test_mn_major_operands_sliced_from_wider_matrices(tile, dtype):
    """MN-major operands (dy^T x) that are slices of wider matrices, their lines 1032 and 776
    elements apart, read through their strides: a box per 128-byte column block, the last one
    ragged (m 392 and n 328 end inside a block, where the map's bounds give zeros); NaN just past
    each slice's columns, which no box may read into the product."""
    k, m, n = 264, 392, 328
    wide_a = torch.full((3, k, 1032), float("nan"), dtype=dtype, device="cuda")
    wide_b = torch.full((3, k, 776), float("nan"), dtype=dtype, device="cuda")
    wide_a[..., :m] = torch.randn(3, k, m, dtype=dtype, device="cuda")
    wide_b[..., :n] = torch.randn(3, k, n, dtype=dtype, device="cuda")
    a, b = wide_a[..., :m].mT, wide_b[..., :n]
    out, _ = poisoned(lambda: ops._bmm_with_config(a, b, tile, 1, 0), (3, m, n), dtype, "cuda")
    check_against_reference(out, a, b)


@pytest.mark.parametrize("precision", ["float16", "bfloat16", "tf32"])
@pytest.mark.parametrize("m,n,batch,tile,splits", [
    (136, 40, 132, 4, 1), (40, 392, 40, 4, 3), (40, 72, 132, 6, 1), (40, 72, 1, 6, 3), (40, 136, 40, 8, 1),
    (40, 136, 1, 8, 3), (136, 40, 132, 9, 1), (40, 392, 40, 9, 3), (136, 40, 132, 10, 1), (40, 392, 40, 10, 3)])
def test_k_major_products_transposed(m, n, batch, tile, splits, precision):
    """x @ W^T (both operands K-major; 16-bit or TF32) where the transpose's estimate is the faster on
    the forced tile: fewer rounds of tiles, or a shorter stream-K share."""
    dtype = torch.float32 if precision == "tf32" else getattr(torch, precision)
    a, b = operands(m, 392, n, "nt", dtype, "cuda", batch=(batch,))
    code = TF32 if precision == "tf32" else 0
    out, _ = poisoned(lambda: ops._bmm_with_config(a, b, tile, splits, code), (batch, m, n), dtype, "cuda")
    check_in_precision(out, a, b, precision)


@pytest.mark.parametrize("m,k,n,layout,precision", [(3072, 8192, 768, "tn", "bfloat16"),
                                                    (3000, 2000, 7000, "nt", "bfloat16"), (3000, 2000, 7000, "nt", "tf32")])
def test_dispatcher_runs_products_transposed(m, k, n, layout, precision):
    """GPT-2's 3072 x 768 weight gradient (level estimates, C taller than wide) and an output whose
    transpose takes fewer rounds of 128 x 256 tiles (660 against 672), in 16 bits and TF32."""
    dtype = torch.float32 if precision == "tf32" else getattr(torch, precision)
    a, b = operands(m, k, n, layout, dtype, "cuda")
    text = tiledmm.explain(a, b, precision="tf32" if precision == "tf32" else None)
    assert CORE in text and (TRANSPOSED in text or not on_132_sms()), text
    out, _ = poisoned(lambda: tiledmm.matmul(a, b, precision="tf32" if precision == "tf32" else None), (m, n),
                      dtype, "cuda")
    check_in_precision(out, a, b, precision)


@pytest.mark.parametrize("precision", ["bfloat16", "tf32"])
def test_short_k_outputs_of_few_rows_stay_on_the_core(precision):
    """Attention's p @ v (batch 96 of 512 x 512 @ 512 x 64, K = 512) on the core: TF32 transposed,
    its 64-row outputs on a 64-row tile (test_core_rule checks the plan), bfloat16 as it comes; the
    product against float64."""
    dtype = torch.float32 if precision == "tf32" else torch.bfloat16
    prec = "tf32" if precision == "tf32" else None
    a, b = operands(512, 512, 64, "nn", dtype, "cuda", batch=(96,))
    text = tiledmm.explain(a, b, precision=prec)
    assert CORE in text or not on_132_sms(), text
    out, _ = poisoned(lambda: tiledmm.matmul(a, b, precision=prec), (96, 512, 64), dtype, "cuda")
    check_in_precision(out, a, b, precision)


def test_tf32_transposed_stream_k_with_a_bias():
    """x @ W^T + b in TF32 at 904 x 4104 x 1032: its transpose in stream-K (54 tiles of 128 x 160 cut
    into up to four ranges), the bias added along the C^T tile's rows once the ranges have met."""
    x, wt, code = _bias_operands(904, 4104, 1032, "tf32")
    if on_132_sms():
        text = ops._explain(x, wt, code)
        assert TRANSPOSED in text and "stream-K: " in text, text
    bias = torch.randn(1032, device="cuda") * 4104**0.5
    out, _ = poisoned(lambda: ops._gemm_nd(x, wt, False, False, bias, code), (904, 1032), torch.float32, "cuda")
    check_tf32_product(out - bias, x, wt)


@pytest.mark.parametrize("tile", COOPERATIVE_TILES)
def test_16bit_transposed_into_rows_without_a_tensor_map(tile):
    """dy^T x[:, :132]: C's rows of 132 16-bit outputs are not whole 16-byte chunks, so the
    transposed tile is stored by the threads themselves."""
    a = torch.randn(2, 392, 264, dtype=torch.bfloat16, device="cuda").mT
    b = torch.randn(2, 392, 136, dtype=torch.bfloat16, device="cuda")[:, :, :132]
    out, _ = poisoned(lambda: ops._bmm_with_config(a, b, tile, 1, 0), (2, 264, 132), torch.bfloat16, "cuda")
    check_against_reference(out, a, b)


@pytest.mark.parametrize("tile", [None, 4, 9])
def test_tf32_dy_w_into_rows_without_a_tensor_map(tile):
    """dy @ W[:, :2065] in TF32: W's lines stay 16-byte aligned (the core takes it, transposed), but
    C's rows of 2065 float32 are not, so the transposed tile is stored by the threads themselves
    (store_core_rows without a map); the dispatcher's plan (whole 128 x 192 tiles) and forced tiles
    in stream-K."""
    a = torch.randn(2, 528, 1032, device="cuda")
    b = torch.randn(2, 1032, 2068, device="cuda")[:, :, :2065]
    if tile is None:
        assert CORE in tiledmm.explain(a, b, precision="tf32")
        run = lambda: tiledmm.matmul(a, b, precision="tf32")  # noqa: E731
    else:
        run = lambda: ops._bmm_with_config(a, b, tile, 3, TF32)  # noqa: E731
    out, _ = poisoned(run, (2, 528, 2065), torch.float32, "cuda")
    check_tf32_product(out, a, b)


def test_tf32_dy_w_with_a_bias_is_summed_once():
    """dy @ W plus a bias in TF32 (B row-major): the core computes such a product transposed and adds
    the bias along its rows (C's columns), once."""
    a, b = operands(1048, 1032, 1160, "nn", torch.float32, "cuda")
    assert CORE in ops._explain(a, b, TF32)
    bias = torch.randn(1160, device="cuda") * 1032**0.5
    out, _ = poisoned(lambda: ops._gemm_nd(a, b, False, False, bias, TF32), (1048, 1160), torch.float32, "cuda")
    check_tf32_product(out - bias, a, b)


@pytest.mark.parametrize("precision", BIAS_PRECISIONS)
@pytest.mark.parametrize("m,k,n", BIAS_SHAPES)
def test_bias_in_the_core_epilogue(m, k, n, precision):
    # linear's bias (tiledmm::_gemm_nd) is added to the float32 sums before they are stored, once
    # an output, also where stream-K's ranges of K meet; the rows and columns past the edges too.
    x, wt, code = _bias_operands(m, k, n, precision)
    dtype = x.dtype
    bias = torch.randn(n, dtype=dtype, device="cuda") * k**0.5  # as large as the products
    assert CORE in ops._explain(x, wt, code)
    out, _ = poisoned(lambda: ops._gemm_nd(x, wt, False, False, bias, code), (m, n), dtype, "cuda")
    if precision == "tf32":
        check_tf32_product(out - bias, x, wt)
    else:
        ref = x.double() @ wt.double() + bias.double()
        tolerance = 4 * (2.0**-8 if dtype == torch.bfloat16 else 2.0**-11)  # the output's rounding
        assert torch.isfinite(out).all()
        assert ((out.double() - ref).norm() / ref.norm()).item() < tolerance
