"""GPU-only checks: the reference problems at full size, every kernel variant, no hidden copies,
streams. The semantic suites (test_semantics, test_opcheck, test_autograd) also run on the GPU."""

import pytest
import torch

import tiledmm
from _util import (DTYPES, HOPPER_ONLY, LAYOUTS, PRECISION_CODES, check_against_reference, check_tf32_product, operands,
                   poisoned, rel_err, rounded_to_tf32, requires_gpu)

pytestmark = requires_gpu
ops = torch.ops.tiledmm

# The five problems of shared/anchors.md: (name, M, K, N, A is stored transposed).
ANCHORS = [
    ("square", 4096, 4096, 4096, False),
    ("standard", 2048, 8192, 4096, False),
    ("transA", 2048, 8192, 4096, True),
    ("irregular", 8205, 2949, 5921, False),
    ("smallK", 32768, 64, 32768, False),
]


@pytest.mark.parametrize("name,m,k,n,transposed_a", ANCHORS, ids=[a[0] for a in ANCHORS])
def test_anchor_problems_float32(name, m, k, n, transposed_a):
    a, b = operands(m, k, n, "tn" if transposed_a else "nn", torch.float32, "cuda")
    out, reused = poisoned(lambda: tiledmm.matmul(a, b), (m, n), torch.float32, "cuda")
    err, torch_err = check_against_reference(out, a, b, strict=True)
    print(f"{name}: tiledmm {err:.3e}  torch.matmul {torch_err:.3e}  poisoned={reused}")


def test_poisoning_reaches_the_output():
    """The poison helper only proves something if the op's output lands on the poisoned block."""
    a, b = operands(300, 40, 500, "nn", torch.float32, "cuda")
    _, reused = poisoned(lambda: tiledmm.mm(a, b), (300, 500), torch.float32, "cuda")
    assert reused


# Sizes that divide no tile (no 16-byte loads) and multiples of 8 that divide no tile (16-byte
# loads), the last of each with K over several K tiles of every kernel (the pipelines' steady
# state, and unaligned operands covering whole tiles: the copies that skip bounds checks).
VARIANT_SHAPES = [(33, 7, 31), (130, 45, 67), (300, 389, 271), (40, 24, 72), (136, 56, 200), (200, 456, 264)]


# Every kernel family: float32 by precision, and the other dtypes.
PATHS = [(torch.float32, p) for p in ("ieee", "3xtf32", "tf32")] + [(d, "ieee") for d in DTYPES[1:]]


def run_with_config(a, b, tile, splits, code, shape, dtype):
    """The forced configuration's output (poisoned first). On Hopper, TF32's A^T x B needs a raw
    tile per stage that leaves its 128 x 256 tiles (0 and 2) too large: the dispatcher avoids
    them and refuses them when forced; that case alone is skipped."""
    unfit = (torch.cuda.get_device_capability() == (9, 0) and dtype == torch.float32
             and code == PRECISION_CODES["tf32"] and tile in (0, 2)
             and a.stride(-2) == 1 and b.stride(-1) == 1)
    try:
        out, _ = poisoned(lambda: ops._bmm_with_config(a, b, tile, splits, code), shape, dtype, "cuda")
    except RuntimeError as error:
        if not (unfit and "bytes of shared memory; this GPU allows" in str(error)):
            raise
        pytest.skip(str(error))
    return out


@pytest.mark.parametrize("dtype,precision", PATHS, ids=[f"{str(d)[6:]}-{p}" for d, p in PATHS])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("tile", [0, 1, 2, 3])
@pytest.mark.parametrize("splits", [1, 3])
@pytest.mark.parametrize("m,k,n", VARIANT_SHAPES)
def test_every_kernel_variant(tile, splits, layout, dtype, precision, m, k, n):
    a, b = operands(m, k, n, layout, dtype, "cuda", batch=(3,))
    code = PRECISION_CODES[precision]
    out = run_with_config(a, b, tile, splits, code, (3, m, n), dtype)
    check_against_reference(out, a, b, tf32=precision == "tf32")


# What tiledmm.explain says of a persistent tile.
PERSISTENT = "persistent (each block walks output tiles"

# On Hopper 3xTF32 runs on wgmma only for outputs that fill the GPU (or long, finely split K):
# a batch of more output tiles than SMs takes it at small shapes, in every variant.
WGMMA_3XTF32_SHAPES = [(33, 40, 31), (130, 45, 67), (72, 264, 136)]


@HOPPER_ONLY
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("tile", [0, 1, 2, 3])
@pytest.mark.parametrize("splits", [1, 3])
@pytest.mark.parametrize("m,k,n", WGMMA_3XTF32_SHAPES)
def test_every_3xtf32_wgmma_variant(tile, splits, layout, m, k, n):
    batch = torch.cuda.get_device_properties(0).multi_processor_count + 8
    a, b = operands(m, k, n, layout, torch.float32, "cuda", batch=(batch,))
    assert "3xTF32 tensor cores (wgmma" in tiledmm.explain(a, b, precision="3xtf32")
    out = run_with_config(a, b, tile, splits, PRECISION_CODES["3xtf32"], (batch, m, n), torch.float32)
    check_against_reference(out, a, b)


@pytest.mark.parametrize("dtype,precision", PATHS, ids=[f"{str(d)[6:]}-{p}" for d, p in PATHS])
@pytest.mark.parametrize("tile", [0, 1, 2, 3])
@pytest.mark.parametrize("k", [40, 100])
def test_blocks_run_several_work_items_through_one_pipeline(tile, k, dtype, precision):
    """A batch longer than a grid dimension (65535) gives blocks two matrices each: the
    warp-specialized kernels carry their stage ring (and each stage's mbarrier phase) from one
    work item into the next, whose K tiles (2 or 4 here) then start mid-ring."""
    a, b = operands(5, k, 6, "nn", dtype, "cuda", batch=(70001,))
    code = PRECISION_CODES[precision]
    out = run_with_config(a, b, tile, 1, code, (70001, 5, 6), dtype)
    check_against_reference(out, a, b, tf32=precision == "tf32")


@HOPPER_ONLY
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("m,k,n", [(37, 300, 29), (37, 64, 29), (37, 64, 32), (100, 64, 96)])
def test_3xtf32_wgmma_recomputes_outputs_its_split_turns_into_nan(layout, m, k, n):
    """Inf inputs make inf - inf in the split: those outputs are recomputed exactly (a cold pass
    over the staged tile, in the kernel's orientation: transposed for row-major products), on
    the tiles whose epilogue writes over the stages and (K = 64) on the persistent short-K tile,
    where each math warpgroup stages, tests and repairs its own 64 rows in a buffer of its own
    (n = 32, 96: they leave by bulk copies; 100 x 96: both warpgroups' rows hold outputs in
    either orientation)."""
    batch = torch.cuda.get_device_properties(0).multi_processor_count + 8
    a, b = operands(m, k, n, layout, torch.float32, "cuda", batch=(batch,))
    for x, value in ((a, float("inf")), (b, float("-inf"))):
        storage = x if x.is_contiguous() else x.mT  # the transposed views' contiguous base
        storage.reshape(-1)[torch.randperm(x.numel(), device="cuda")[:40]] = value
    text = tiledmm.explain(a, b, precision="3xtf32")
    assert "3xTF32 tensor cores (wgmma" in text
    # A^T x B's raw B tiles leave no room for the persistent tile's buffer.
    assert (PERSISTENT in text) == (k == 64 and layout != "tn")
    out = tiledmm.matmul(a, b, precision="3xtf32")
    exact = torch.matmul(a.double(), b.double())
    assert torch.equal(torch.isnan(out), torch.isnan(exact))
    assert torch.equal(torch.isinf(out), torch.isinf(exact))
    finite = torch.isfinite(exact)
    torch.testing.assert_close(out[finite].double(), exact[finite], rtol=1e-5, atol=1e-4)


# The paths Hopper runs on wgmma, which also have mma.sync kernels (Ampere's): TILEDMM_NO_WGMMA=1
# runs those on a Hopper GPU.
MMA_SYNC_PATHS = [(torch.float32, "tf32"), (torch.float32, "3xtf32"), (torch.float16, "ieee"), (torch.bfloat16, "ieee")]


@pytest.mark.parametrize("dtype,precision", MMA_SYNC_PATHS, ids=[f"{str(d)[6:]}-{p}" for d, p in MMA_SYNC_PATHS])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("tile", [0, 1, 2, 3])
@pytest.mark.parametrize("splits", [1, 3])
@pytest.mark.parametrize("m,k,n", VARIANT_SHAPES)
def test_every_mma_sync_variant_with_wgmma_off(monkeypatch, tile, splits, layout, dtype, precision, m, k, n):
    monkeypatch.setenv("TILEDMM_NO_WGMMA", "1")
    a, b = operands(m, k, n, layout, dtype, "cuda", batch=(3,))
    assert "mma.sync" in tiledmm.explain(a[0], b[0], precision=precision)
    code = PRECISION_CODES[precision]
    out = run_with_config(a, b, tile, splits, code, (3, m, n), dtype)
    check_against_reference(out, a, b, tf32=precision == "tf32")


@pytest.mark.parametrize("dtype,precision", PATHS, ids=[f"{str(d)[6:]}-{p}" for d, p in PATHS])
def test_grid_stride_past_65535_row_tiles_and_batches(dtype, precision):
    """More row tiles, and more matrices of a batch, than a grid dimension holds (65535): the
    kernels loop over the rest."""
    a, b = operands(128 * 65536 + 3, 8, 8, "nn", dtype, "cuda")
    out, _ = poisoned(lambda: tiledmm.mm(a, b, precision=precision), (a.shape[0], 8), dtype, "cuda")
    check_against_reference(out, a, b, tf32=precision == "tf32")
    a, b = operands(5, 8, 6, "tn", dtype, "cuda", batch=(70000,))
    out, _ = poisoned(lambda: tiledmm.bmm(a, b, precision=precision), (70000, 5, 6), dtype, "cuda")
    check_against_reference(out, a, b, tf32=precision == "tf32")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_split_k_is_chosen_and_accurate_for_long_k(dtype):
    """A small output with a long K splits K; the slices are summed in the accumulator type."""
    a, b = operands(200, 70001, 131, "tn", dtype, "cuda")
    assert "split K" in tiledmm.explain(a, b)
    out, _ = poisoned(lambda: tiledmm.mm(a, b), (200, 131), dtype, "cuda")
    # float32 within 2x torch's error; float64's reference is torch's own float64 product.
    check_against_reference(out, a, b, strict=dtype == torch.float32)


def test_explain_names_the_kernel_and_reason(monkeypatch):
    """The dispatch of GPUs without wgmma (Hopper's own choices are tested below)."""
    monkeypatch.setenv("TILEDMM_NO_WGMMA", "1")
    a, b = operands(4096, 4096, 4096, "tn", torch.float32, "cuda")
    text = tiledmm.explain(a, b, precision="ieee")
    assert "a: column-major" in text and "b: row-major" in text and "read in place" in text
    assert "128x256x32" in text and "16-byte loads" in text and "why: large output" in text
    assert "transposed by" not in text and "transposed through" not in text  # nothing contiguous along k
    # nn.Linear's layout (both operands contiguous along k) copies them transposed; short K keeps
    # the registers where only A is contiguous along k, and runs the two-blocks tile, which
    # copies, in nn.Linear's layout.
    linear = operands(4096, 4096, 4096, "nt", torch.float32, "cuda")
    assert "transposed by 4-byte cp.async copies" in tiledmm.explain(*linear, precision="ieee")
    short_k = operands(4096, 64, 4096, "nn", torch.float32, "cuda")
    assert "transposed through registers" in tiledmm.explain(*short_k, precision="ieee")
    short_k_linear = tiledmm.explain(*operands(4096, 64, 4096, "nt", torch.float32, "cuda"), precision="ieee")
    assert "why: short K" in short_k_linear and "128x128x32" in short_k_linear
    assert "2 block(s) per SM" in short_k_linear and "transposed by 4-byte cp.async copies" in short_k_linear
    # Short K without 16-byte alignment: 8 x 8 outputs per thread, two blocks per SM.
    odd = operands(4097, 33, 7, "nn", torch.float32, "cuda")
    odd_text = tiledmm.explain(*odd, precision="ieee")
    assert "element loads" in odd_text and "why: short K" in odd_text
    assert "128x128x32" in odd_text and "8x8 outputs per thread" in odd_text
    assert "2 block(s) per SM" in odd_text
    # A narrow output (smallK's backward products) takes the small tile rather than a 256-wide one.
    narrow_exact = operands(32768, 4096, 64, "nn", torch.float32, "cuda")
    assert "64x64x16" in tiledmm.explain(*narrow_exact, precision="ieee")
    assert "element-wise cp.async" in tiledmm.explain(*odd, precision="3xtf32")
    text = tiledmm.explain(a, b, precision="3xtf32")
    assert "precision: 3xtf32 (requested)" in text and "3xTF32 tensor cores" in text
    assert "16-byte cp.async" in text and "-stage cp.async pipeline" in text
    assert "output that fills the GPU" in tiledmm.explain(a, b, precision="highest")
    small = operands(300, 1000, 200, "nn", torch.float32, "cuda")
    assert "small or narrow output" in tiledmm.explain(*small, precision="highest")
    narrow = operands(32768, 4096, 64, "nn", torch.float32, "cuda")
    assert "small or narrow output" in tiledmm.explain(*narrow, precision="highest")
    long_k = operands(256, 65536, 256, "nn", torch.float32, "cuda")
    assert "K split for accuracy" in tiledmm.explain(*long_k, precision="highest")
    assert "TF32 tensor cores" in tiledmm.explain(a, b, precision="tf32")
    short = operands(300, 16, 200, "nn", torch.float32, "cuda")
    assert "exact kernel" in tiledmm.explain(*short, precision="highest")
    assert "DMMA" in tiledmm.explain(*operands(100, 100, 100, "nn", torch.float64, "cuda"))
    assert "bfloat16 tensor cores" in tiledmm.explain(*operands(100, 100, 100, "nn", torch.bfloat16, "cuda"))


@HOPPER_ONLY
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_hopper_runs_wgmma_on_aligned_16bit_operands(dtype):
    aligned = operands(4096, 4096, 4096, "tn", dtype, "cuda")
    assert "wgmma m64n256k16" in tiledmm.explain(*aligned)
    unaligned = operands(4097, 33, 7, "nn", dtype, "cuda")
    assert "wgmma" in tiledmm.explain(*unaligned) and "aligned 16-byte windows" in tiledmm.explain(*unaligned)
    # Short K: a persistent warp-specialized tile with 16-byte loads, each math warpgroup writing
    # its own rows; windows (shifted per matrix) keep two blocks per SM.
    text = tiledmm.explain(*operands(32768, 64, 32768, "nn", dtype, "cuda"))
    assert "why: short K" in text and PERSISTENT in text and "warp-specialized" in text and "m64n128k16" in text
    assert "each math warpgroup's rows of a tile leave shared-memory buffers of its own" in text
    text = tiledmm.explain(*operands(8205, 63, 5921, "nn", dtype, "cuda"))
    assert "why: short K" in text and PERSISTENT not in text and "2 block(s) per SM" in text


def test_explain_names_the_gpu_and_its_code(monkeypatch):
    """explain names the GPU and the code it runs: machine code built for it, or PTX the driver
    compiles at first use (every GPU under CUDA_FORCE_PTX_JIT=1, which also turns Hopper's wgmma
    kernels off)."""
    a, b = operands(64, 64, 64, "nn", torch.float32, "cuda")
    major, minor = torch.cuda.get_device_capability()
    gpu_line = lambda: next(line for line in tiledmm.explain(a, b).splitlines() if line.startswith("gpu: "))  # noqa: E731
    first = gpu_line()
    assert first.startswith(f"gpu: {torch.cuda.get_device_name()} (compute capability {major}.{minor}), "), first
    assert "machine code from the build" in first or "PTX, compiled by the driver at first use" in first, first
    if (major, minor) == (9, 0):
        assert "sm_90a machine code from the build; Hopper's wgmma and TMA kernels" in first, first
    monkeypatch.setenv("CUDA_FORCE_PTX_JIT", "1")
    first = gpu_line()
    # A build without PTX for this GPU (TORCH_CUDA_ARCH_LIST naming machine code only) says so.
    assert ("PTX, compiled by the driver at first use (CUDA_FORCE_PTX_JIT=1); the mma.sync kernels" in first
            or f"none for compute capability {major}.{minor}: rebuild with" in first), first


@HOPPER_ONLY
def test_hopper_runs_float32_tensor_core_paths_on_wgmma():
    nn = operands(4096, 4096, 4096, "nn", torch.float32, "cuda")
    text = tiledmm.explain(*nn, precision="tf32")
    assert "wgmma m64n256k8" in text and "computed as C^T = B^T A^T" in text
    # A^T x B: B is MN-major; its ring of raw tiles leaves room for 128 x 256 at three stages.
    text = tiledmm.explain(*operands(4096, 4096, 4096, "tn", torch.float32, "cuda"), precision="tf32")
    assert "wgmma m64n256k8" in text and "3-stage pipeline" in text and "transposed in shared memory" in text
    assert "needs more shared memory" not in text
    text = tiledmm.explain(*operands(4096, 4096, 4096, "nt", torch.float32, "cuda"), precision="tf32")
    assert "wgmma" in text and "C^T" not in text
    for precision in ("tf32", "highest"):
        text = tiledmm.explain(*operands(8205, 2949, 5921, "nn", torch.float32, "cuda"), precision=precision)
        assert "wgmma" in text and "element-wise cp.async" in text
    for precision in ("highest", "3xtf32"):
        text = tiledmm.explain(*nn, precision=precision)
        assert "3xTF32 tensor cores (wgmma" in text and "computed as C^T = B^T A^T" in text
    short = operands(300, 16, 200, "nn", torch.float32, "cuda")
    assert "exact kernel" in tiledmm.explain(*short, precision="highest")
    for precision in ("3xtf32", "tf32"):
        text = tiledmm.explain(*operands(32768, 64, 32768, "nn", torch.float32, "cuda"), precision=precision)
        assert "why: short K" in text and PERSISTENT in text and "m64n128k8" in text
    # 'highest' there: one float16 product of scaled splits (tests/test_scaled_split.py).
    text = tiledmm.explain(*operands(32768, 64, 32768, "nn", torch.float32, "cuda"), precision="highest")
    assert "scaled big and remainder parts" in text and PERSISTENT in text and "m64n128k16" in text
    # The exact kernel's short-K register tile gives way to a persistent one where the output allows
    # a tensor map (rows of whole 16 bytes) and K fits in its two stages; in nn.Linear's layout the
    # two-blocks tile runs instead.
    text = tiledmm.explain(*operands(32768, 64, 32768, "nn", torch.float32, "cuda"), precision="ieee")
    assert "128x256x32" in text and "2-stage pipeline" in text and PERSISTENT in text
    assert "transposed by 4-byte cp.async copies" in text and "B's tiles by bulk tensor copies" in text
    assert PERSISTENT not in tiledmm.explain(*operands(32768, 72, 32768, "nn", torch.float32, "cuda"), precision="ieee")
    assert PERSISTENT not in tiledmm.explain(*operands(32768, 64, 32768, "nt", torch.float32, "cuda"), precision="ieee")


# Persistent short-K tiles (128 x 128 on wgmma, 128 x 256 exact): a batch of 4 outputs of 36-99
# tiles each, one to three tiles per block on a 132-SM GPU; lines of whole 128-byte chunks (bulk
# copies out), lines whose length is a multiple of 16 bytes but not of 128 (bulk copies of the
# whole chunks where a box has two, the threads the rest), and one that is not (4100 x 64 x 260 and
# 4100 x 200 x 260 in nn.Linear's layout: a persistent tile whose threads copy the tile out; past
# K = 64, 16-bit on the Hopper GEMM core, whose threads then write the rows).
PERSISTENT_SHAPES = [(1030, 64, 1024), (1030, 64, 1032), (1029, 61, 1031), (4100, 64, 260), (4100, 200, 260)]
PERSISTENT_PATHS = [(torch.float32, p) for p in ("ieee", "tf32", "3xtf32")] + [
    (torch.bfloat16, "ieee"), (torch.float16, "ieee")]


def runs_persistent(dtype, precision, layout, m, k, n):
    """Whether Hopper's dispatcher picks a persistent short-K tile for these operands (contiguous, as
    operands() makes them); past K = 64 the Hopper GEMM core takes 16-byte aligned 16-bit operands,
    and TF32 ones with A row-major (x @ W^T, and dy @ W computed transposed; at K <= 64 it takes
    16-bit outputs of 6-12 rounds of its tiles, larger than these)."""
    lines_a = k if layout[0] == "n" else m  # the unit-stride extent of each stored operand
    lines_b = n if layout[1] == "n" else k
    if dtype != torch.float32:  # 16-byte loads (8 elements), K <= 64
        return lines_a % 8 == 0 and lines_b % 8 == 0 and k <= 64
    if precision == "ieee":  # the register tile's place: B row-major, 16-byte loads, K <= 64, a tensor map
        return layout in ("nn", "tn") and n % 4 == 0 and lines_a % 4 == 0 and k <= 64
    if precision == "tf32" and layout in ("nt", "nn") and lines_a % 4 == 0 and lines_b % 4 == 0 and k > 64:
        return False  # the core's
    return precision == "tf32" or layout != "tn"


@HOPPER_ONLY
@pytest.mark.parametrize("dtype,precision", PERSISTENT_PATHS, ids=[f"{str(d)[6:]}-{p}" for d, p in PERSISTENT_PATHS])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("m,k,n", PERSISTENT_SHAPES)
def test_persistent_blocks_walk_many_output_tiles(dtype, precision, layout, m, k, n):
    """Short K on Hopper: each block of a grid of one per SM computes tile after tile, the next
    one's copies and products running while the last one's output leaves by bulk copies from its
    own buffers (taken in turn; 16-bit and 3xTF32: each math warpgroup its own rows, from
    buffers of its own), which the block fills again only once they have read them."""
    a, b = operands(m, k, n, layout, dtype, "cuda", batch=(4,))
    text = tiledmm.explain(a, b, precision=precision)
    assert (PERSISTENT in text) == runs_persistent(dtype, precision, layout, m, k, n)
    out, _ = poisoned(lambda: tiledmm.matmul(a, b, precision=precision), (4, m, n), dtype, "cuda")
    check_against_reference(out, a, b, tf32=precision == "tf32")


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
                    reason="the persistent exact tile runs on compute capability 9.0 (Hopper) only")
@pytest.mark.parametrize("layout", ["nn", "tn"])
@pytest.mark.parametrize("shared", ["a", "b", "none"])
@pytest.mark.parametrize("k", [64, 36])
def test_exact_persistent_tile_batched_and_shared_operands(layout, shared, k):
    """The exact short-K tile on Hopper walks consecutive tiles across the matrices of a batch:
    A's rows stay in shared memory while tiles share them (copied again at each new row of tiles
    or matrix), B's tiles come by bulk tensor copies from the matrix's place in B's tensor map (or
    the one matrix of a B shared by the batch, stride 0); K in one or two tiles, partial tiles
    along every dimension. 150 tiles: on 132 SMs some blocks take two, of one row or two."""
    a, b = operands(600, k, 1040, layout, torch.float32, "cuda", batch=(6,))
    if shared == "a":
        a = a[:1].expand_as(a)
    elif shared == "b":
        b = b[:1].expand_as(b)
    assert PERSISTENT in tiledmm.explain(a, b, precision="ieee")
    out, _ = poisoned(lambda: tiledmm.matmul(a, b, precision="ieee"), (6, 600, 1040), torch.float32, "cuda")
    check_against_reference(out, a, b)


@HOPPER_ONLY
@pytest.mark.parametrize("precision", ["tf32", "3xtf32"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("shared", ["a", "b", "none"])
def test_wgmma_float32_batched_and_shared_operands(precision, layout, shared):
    """16-byte aligned float32 operands on the warp-specialized wgmma tiles, a batch of them, or one
    operand shared by the batch (stride 0); K (264) and the output leave partial tiles. TF32 with A
    row-major runs on the Hopper GEMM core as tiledmm.matmul plans it (test_core.py), so there the
    wgmma tile is forced."""
    batch = torch.cuda.get_device_properties(0).multi_processor_count + 8  # 3xTF32 on wgmma
    a, b = operands(72, 264, 136, layout, torch.float32, "cuda", batch=(batch,))
    if shared == "a":
        a = a[:1].expand_as(a)
    elif shared == "b":
        b = b[:1].expand_as(b)
    text = tiledmm.explain(a, b, precision=precision)
    if precision == "tf32" and layout[0] == "n":
        assert "Hopper GEMM core (wgmma" in text
        # The family's 128 x 128 tile, warp-specialized in TF32.
        run = lambda: ops._bmm_with_config(a, b, 1, 1, PRECISION_CODES["tf32"])  # noqa: E731
    else:
        assert "warp-specialized" in text
        run = lambda: tiledmm.matmul(a, b, precision=precision)  # noqa: E731
    out, _ = poisoned(run, (batch, 72, 136), torch.float32, "cuda")
    check_against_reference(out, a, b, tf32=precision == "tf32")


@pytest.mark.parametrize("wgmma", [True, False], ids=["default", "wgmma-off"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("m,k,n", [(130, 456, 67), (200, 456, 264)])
def test_tf32_rounds_each_input_to_nearest(monkeypatch, wgmma, layout, m, k, n):
    """'tf32' is the float32 product of the inputs rounded to nearest TF32, not truncated: tensor
    cores read only the top 19 bits, so a kernel that skips the rounding (on either operand)
    lands about 3e-4 away from that product, against float32 summation error here."""
    if not wgmma:
        monkeypatch.setenv("TILEDMM_NO_WGMMA", "1")
    a, b = operands(m, k, n, layout, torch.float32, "cuda")
    out = tiledmm.matmul(a, b, precision="tf32")
    check_tf32_product(out, a, b)


BULK_B = "through a TFLOAT32 tensor map"
CLASS_BOXES = "four residue classes"


def _bulk_b_operand_variant(a, b, layout, operand):
    """Batched operands as they are ("batched", "single"), both broadcast along the batch (stride
    0: the kernel's B is A in nn, B in nt and tt), or fresh ones whose lines are 4 elements
    longer than the matrix's (a slice of a wider tensor: 16-byte aligned, ld > extent)."""
    if operand == "broadcast":
        return a[:1].expand_as(a), b[:1].expand_as(b)
    if operand == "padded":
        wide = lambda x: torch.randn(*x.shape[:-1], x.shape[-1] + 4, device="cuda")[..., : x.shape[-1]]
        return (wide(a.mT).mT if layout[0] == "t" else wide(a)), (wide(b.mT).mT if layout[1] == "t" else wide(b))
    return a, b


@HOPPER_ONLY
@pytest.mark.parametrize("tile", [0, 1, 2])
@pytest.mark.parametrize("splits", [1, 3])
@pytest.mark.parametrize("layout", ["nn", "nt", "tt"])
@pytest.mark.parametrize("operand", ["batched", "broadcast", "padded"])
def test_tf32_bulk_b_tiles_round_to_nearest(tile, splits, layout, operand):
    """TF32's warp-specialized tiles (the persistent short-K one past K = 64) take a K-major,
    16-byte aligned B (the kernel's: A of a row-major product, computed transposed) by bulk tensor
    copies through a TFLOAT32 tensor map, which rounds each element to nearest TF32 on the way: the
    result is the float32 product of the rounded inputs (a truncated B lands ~3e-4 away), with partial tiles along every dimension
    (K = 264: eight tiles and a partial one), the matrices of a batch, broadcast operands
    (stride 0), lines further apart than K (a slice of a wider tensor), and K split into slices.
    (test_tf32_explain_names_bulk_b checks that such operands get a tensor map.)"""
    batch = 3
    a, b = operands(200, 264, 136, layout, torch.float32, "cuda", batch=(batch,))
    a, b = _bulk_b_operand_variant(a, b, layout, operand)
    out, _ = poisoned(lambda: torch.ops.tiledmm._bmm_with_config(a, b, tile, splits, 2), (batch, 200, 136),
                      torch.float32, "cuda")
    check_tf32_product(out, a, b)


def _misaligned_operands(case, batch=3, m=203, n=301, layout="nn"):
    """Row-major A (m x 263 or 264) x B whose lines lack 16-byte alignment in ways the residue-class
    maps see: odd lines (every class shifted differently; one matrix), views starting mid-16-byte
    block (one shift for A, four for a row-major B), lines 2 elements longer than the matrix (two
    shifts), a batch (its matrices 16-byte multiples apart: lines of 268 or 266 elements, and B's
    n + 4 or n + 1 of 268 or 264) and a broadcast one. B row-major (layout "nn"), or W^T for a W
    made as A is (layout "nt": x @ W^T), or, for x @ W^T only, x and W shifted unlike each other
    ("mixed": x's views, W's odd lines broadcast) or W aligned ("w-aligned": x's lines 2 longer)."""
    randn = lambda *shape: torch.randn(*shape, device="cuda")

    def rows(lines, kind=case):  # lines x 263 or 264, as A
        if kind == "odd":
            return randn(1, lines, 263)
        if kind == "views":
            return randn(batch, lines + 3, 268)[:, 3:, 1:264]
        if kind == "ld+2":
            return randn(batch, lines + 1, 266)[:, 1:, :264]
        return randn(1, lines, 263).expand(batch, -1, -1)

    if case == "mixed":
        return rows(m, "views"), rows(n, "broadcast").mT
    if case == "w-aligned":
        return rows(m, "ld+2"), randn(batch, n, 264).mT
    if layout == "nt":
        return rows(m), rows(n).mT
    if case == "odd":
        return rows(m), randn(1, 263, n)
    if case == "views":
        return rows(m), randn(batch, 268, n + 4)[:, 2:265, 4:]
    if case == "ld+2":
        return rows(m), randn(batch, 264, n + 1)[..., :n]
    return rows(m), randn(1, 263, n).expand(batch, -1, -1)


@HOPPER_ONLY
@pytest.mark.parametrize("splits", [1, 3])
@pytest.mark.parametrize("layout,case", [(layout, case) for layout in ("nn", "nt")
                                         for case in ("odd", "views", "ld+2", "broadcast")]
                         + [("nt", "mixed"), ("nt", "w-aligned")])
def test_tf32_residue_class_tiles_round_to_nearest(layout, case, splits):
    """TF32's large tile takes a row-major product, or x @ W^T, whose lines lack 16-byte alignment
    (computed transposed: the kernel's A is B^T, MN-major, or W, K-major; its B is A, K-major) by
    bulk tensor copies of each residue class of lines (lines 4 apart share their misalignment)
    through TFLOAT32 maps, which round on the way: the result is the float32 product of the rounded
    inputs, with partial tiles along every dimension and the windows reaching before k = 0. Split K
    (not taken by that path) gives the same."""
    a, b = _misaligned_operands(case, layout=layout)
    shape = (a.shape[0], a.shape[1], b.shape[2])
    out, _ = poisoned(lambda: torch.ops.tiledmm._bmm_with_config(a, b, 0, splits, 2), shape, torch.float32, "cuda")
    check_tf32_product(out, a, b)


@HOPPER_ONLY
def test_tf32_residue_class_more_matrices_than_the_grid():
    """65536 misaligned matrices (the grid holds 65535): blocks would take two work items, which
    the residue-class path's clusters cannot (the other block copies into stages an epilogue still
    writes over), so the element-wise path runs them; the result is the rounded product."""
    a = torch.randn(65536, 8, 7, device="cuda")
    b = torch.randn(65536, 8, 9, device="cuda")[:, :7]
    out, _ = poisoned(lambda: torch.ops.tiledmm._bmm_with_config(a, b, 0, 1, 2), (65536, 8, 9), torch.float32, "cuda")
    check_tf32_product(out, a, b)


@HOPPER_ONLY
@pytest.mark.parametrize("case", ["odd", "views", "ld+2", "broadcast"])
@pytest.mark.parametrize("layout", ["nn", "nt"])
def test_tf32_explain_names_residue_classes(layout, case):
    """tiledmm.explain names the residue-class copies where the large tile runs them; aligned
    operands and other precisions do not take them."""
    a, b = _misaligned_operands(case, batch=2, m=2051, n=3001, layout=layout)  # a large output: the large tile
    assert CLASS_BOXES in tiledmm.explain(a, b, precision="tf32")
    assert CLASS_BOXES not in tiledmm.explain(a, b, precision="3xtf32")
    aligned_a, aligned_b = torch.randn(60, 200, 264, device="cuda"), torch.randn(60, 264, 304, device="cuda")
    if layout == "nt":
        aligned_b = torch.randn(60, 304, 264, device="cuda").mT
    assert CLASS_BOXES not in tiledmm.explain(aligned_a, aligned_b, precision="tf32")


@HOPPER_ONLY
@pytest.mark.parametrize("value", [float("inf"), float("nan")])
def test_tf32_residue_class_windows_before_k0(value):
    """The windows of a misaligned line of A start up to 3 elements before it, in the line before:
    a non-finite value at the end of a line reaches its own output row only."""
    a, b = torch.randn(261, 263, device="cuda"), torch.randn(263, 301, device="cuda")
    for row in (0, 5, 6, 7, 130):
        a[row, -1] = value
    out = torch.ops.tiledmm._bmm_with_config(a[None], b[None], 0, 1, 2)[0]
    bad_rows = (~torch.isfinite(out)).any(dim=1).nonzero().flatten().tolist()
    assert bad_rows == [0, 5, 6, 7, 130]
    finite = torch.isfinite(a).all(dim=1)
    exact = rounded_to_tf32(a[finite]).double() @ rounded_to_tf32(b).double()
    assert rel_err(out[finite], exact) < 2e-5


@HOPPER_ONLY
@pytest.mark.parametrize("value", [float("inf"), float("nan")])
def test_tf32_residue_class_windows_before_k0_both_operands(value):
    """x @ W^T: the windows of a misaligned line of either operand (both K-major) start up to 3
    elements before it, in the line before (W's boxes start up to 4 more before, outside its maps):
    a non-finite value at the end of a line of x reaches its own output row only, one of W its own
    output column only."""
    x, w = torch.randn(261, 263, device="cuda"), torch.randn(301, 263, device="cuda")
    rows, columns = [0, 5, 6, 7, 130], [0, 3, 4, 5, 6, 7, 200]
    x[rows, -1] = value
    w[columns, -1] = value
    out = torch.ops.tiledmm._bmm_with_config(x[None], w.mT[None], 0, 1, 2)[0]
    expected_bad = torch.zeros_like(out, dtype=torch.bool)
    expected_bad[rows, :] = True
    expected_bad[:, columns] = True
    assert torch.equal(~torch.isfinite(out), expected_bad)
    finite_x, finite_w = torch.isfinite(x).all(dim=1), torch.isfinite(w).all(dim=1)
    exact = rounded_to_tf32(x[finite_x]).double() @ rounded_to_tf32(w[finite_w]).double().T
    assert rel_err(out[finite_x][:, finite_w], exact) < 2e-5


# What tiledmm.explain says of 16-bit row-major products on tiles of one residue class.
CLASS_TILES = "tiles whose lines are A's rows of one residue class"


def _class_tile_operands(case, dtype, m=4101, k=333, n=1100):
    """Row-major 16-bit operands without 16-byte alignment, large enough for tiles of one residue
    class (two bands of 2048 rows and 5 rows more, a grid of the large tile that fills the GPU):
    odd lines (K = 333, and K = 381: 61 past a tile, so that the classes shifted 4 or more take one K
    tile more); views whose starts and lines are misaligned; A's lines aligned, or B's."""
    randn = lambda *shape: torch.randn(*shape, device="cuda", dtype=dtype)
    if case == "odd":
        return randn(m, k), randn(k, n)
    if case == "k381":  # classes whose shift passes K's last tile need one more
        return randn(m, 381), randn(381, n)
    if case == "views":
        return randn(m + 3, k + 6)[3:, 1:k + 1], randn(k + 2, n + 7)[2:, 3:n + 3]
    if case == "a-aligned":
        return randn(m, 336), randn(336, n)
    if case == "b-aligned":
        return randn(m, k), randn(k, 1104)
    assert case == "whole-bands"  # no rows left for the windowed path
    return randn(2048, k), randn(k, 2200)


@HOPPER_ONLY
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("case", ["odd", "k381", "views", "a-aligned", "b-aligned", "whole-bands"])
def test_16bit_class_tiles(case, dtype):
    """16-bit row-major products without 16-byte alignment: whole bands of 2048 rows on tiles of one
    residue class of A's rows (both operands by bulk tensor copies, no shift pass), the rest on the
    windowed path; every output written, within 2x torch's error."""
    a, b = _class_tile_operands(case, dtype)
    assert CLASS_TILES in tiledmm.explain(a, b)
    out, _ = poisoned(lambda: tiledmm.mm(a, b), (a.shape[0], b.shape[1]), dtype, "cuda")
    check_against_reference(out, a, b)


@HOPPER_ONLY
def test_16bit_class_tiles_on_a_stream_and_in_a_graph():
    """The class tiles and the rows past whole bands (two launches, the second with a split-K
    workspace): on a non-default stream and captured into a CUDA graph (replayed on fresh inputs)
    the result is complete and right, and work queued after it on the same stream sees all of it."""
    a, b = _class_tile_operands("odd", torch.bfloat16)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())  # the operands were made on the default stream
    with torch.cuda.stream(stream):
        out = tiledmm.mm(a, b)
        total = out.float().sum(dim=1)  # queued after: must see the rest's rows
    stream.synchronize()
    check_against_reference(out, a, b)
    assert torch.allclose(total, out.float().sum(dim=1))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = tiledmm.mm(a, b)
    a.copy_(torch.randn_like(a))
    b.copy_(torch.randn_like(b))
    captured.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    check_against_reference(captured, a, b)


@HOPPER_ONLY
def test_16bit_class_tiles_explain_where_they_run():
    """Aligned operands, a batch, short K, long K (split), a column-major A, one tile's columns and a
    forced configuration keep the other paths."""
    a, b = _class_tile_operands("odd", torch.bfloat16)
    assert CLASS_TILES not in tiledmm.explain(*operands(4096, 336, 1104, "nn", torch.bfloat16, "cuda"))
    assert CLASS_TILES not in tiledmm.explain(torch.stack([a, a]), torch.stack([b, b]))
    assert CLASS_TILES not in tiledmm.explain(*_class_tile_operands("odd", torch.bfloat16, k=255))
    assert CLASS_TILES not in tiledmm.explain(a.mT.contiguous().mT, b)  # A column-major
    assert CLASS_TILES not in tiledmm.explain(*_class_tile_operands("odd", torch.bfloat16, k=8195))
    assert CLASS_TILES not in tiledmm.explain(*_class_tile_operands("odd", torch.bfloat16, m=65541, n=127))
    out = ops._bmm_with_config(a[None], b[None], 0, 1, 0)[0]  # forced: the windowed path
    check_against_reference(out, a, b)


@HOPPER_ONLY
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("value", [float("inf"), float("nan")])
def test_16bit_class_tile_windows_before_k0(value, dtype):
    """The window of a misaligned row of A starts up to 7 elements before it, in the row before,
    and the boxes of B's rows up to 7 before theirs: a non-finite value at the end of a row of A
    reaches its own output row only (in the class tiles' rows and in the rest), one at the end of a
    row of B the last output column only."""
    a, b = _class_tile_operands("odd", dtype)
    rows = [0, 5, 6, 7, 130, 2047, 2048, 4095, 4096, 4100]
    a[rows, -1] = value
    b[[0, 1, 7, 100, 332], -1] = value
    out = tiledmm.mm(a, b)
    expected_bad = torch.zeros_like(out, dtype=torch.bool)
    expected_bad[rows, :] = True
    expected_bad[:, -1] = True
    assert torch.equal(~torch.isfinite(out), expected_bad)
    finite = torch.isfinite(a).all(dim=1)
    check_against_reference(out[finite][:, :-1], a[finite], b[:, :-1])


def _unusual_stride_operands(case):
    """Operands whose kernel B (K-major) has strides a plain 3-d tensor does not."""
    randn = lambda *shape: torch.randn(*shape, device="cuda")
    if case == "interleaved-a":  # A's matrices k apart, its rows batch * k apart
        return randn(2048, 3, 1024).permute(1, 0, 2), randn(3, 1024, 2048)
    if case == "interleaved-w":  # x @ W^T with W's matrices interleaved
        return randn(3, 2048, 1024), randn(2048, 3, 1024).permute(1, 0, 2).mT
    if case == "rows-broadcast":  # every row of A the same (stride 0)
        return randn(1, 1024).expand(2048, 1024), randn(1024, 2048)
    if case == "columns-broadcast":  # every column of B the same (stride 0)
        return randn(2048, 1024), randn(1, 1024).expand(2048, 1024).mT
    return randn(2, 3, 1536, 1024), randn(3, 2, 512, 1024).permute(1, 0, 3, 2)  # 4-d, B a permuted view


@HOPPER_ONLY
@pytest.mark.parametrize("case", ["interleaved-a", "interleaved-w", "rows-broadcast", "columns-broadcast", "4d-permuted"])
def test_tf32_bulk_b_unusual_strides(case):
    """The rounding bulk copies read B through its strides whatever they are (a tensor map's line
    and matrix strides are free multiples of 16 bytes, zero included): matrices closer together
    than a matrix's size, lines broadcast with stride 0, a permuted 4-d view."""
    a, b = _unusual_stride_operands(case)
    assert BULK_B in tiledmm.explain(a, b, precision="tf32")
    shape = (*torch.broadcast_shapes(a.shape[:-2], b.shape[:-2]), a.shape[-2], b.shape[-1])
    out, _ = poisoned(lambda: tiledmm.matmul(a, b, precision="tf32"), shape, torch.float32, "cuda")
    check_tf32_product(out, a, b)


@HOPPER_ONLY
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("operand", ["single", "batched", "broadcast", "padded"])
def test_tf32_explain_names_bulk_b(layout, operand):
    """tiledmm.explain says when B's tiles come by the rounding bulk copies: every layout but
    A^T x B (whose kernel B is MN-major, transposed by the producer), with 16-byte alignment, on
    the large and medium tiles and on the short-K tile past K = 64; for the operands of
    test_tf32_bulk_b_tiles_round_to_nearest (whose tensor maps then are valid)."""
    batch = () if operand == "single" else (3,)
    # 2048 x 1024 x 2048: the medium tile; 6144 x 1024 x 6144: the large one; 128, 64: the short-K one
    for m, k, bulk in [(2048, 1024, True), (6144, 1024, True), (2048, 128, True), (2048, 64, False),
                       (2048, 1023, False)]:
        a, b = operands(m, k, m, layout, torch.float32, "cuda", batch=batch)
        a, b = _bulk_b_operand_variant(a, b, layout, operand)
        text = tiledmm.explain(a, b, precision="tf32")
        assert (BULK_B in text) == (bulk and layout != "tn"), (m, k, text)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_large_odd_shape_every_dtype(dtype):
    a, b = operands(4097, 1031, 2053, "tt", dtype, "cuda")
    out, _ = poisoned(lambda: tiledmm.mm(a, b), (4097, 2053), dtype, "cuda")
    check_against_reference(out, a, b)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_no_hidden_copies(layout):
    """Transposed operands are read through their strides: the op allocates its output only."""
    a, b = operands(2000, 3000, 2400, layout, torch.float32, "cuda")
    assert "split K" not in tiledmm.explain(a, b)  # a split K would allocate a workspace
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = tiledmm.mm(a, b)
    torch.cuda.synchronize()
    assert torch.cuda.max_memory_allocated() - before == out.untyped_storage().nbytes()


def test_batch_broadcast_reads_stride_zero():
    a = torch.randn(1, 300, 200, device="cuda").expand(8, 300, 200)
    b = torch.randn(8, 200, 100, device="cuda")
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = tiledmm.bmm(a, b)
    assert torch.cuda.max_memory_allocated() - before == out.untyped_storage().nbytes()
    check_against_reference(out, a, b)


def test_runs_on_the_current_stream():
    """With the default stream held up by a long sleep, a product launched on a side stream must
    finish and be copied out on that stream alone; launched on the default stream, the copy would
    read the poisoned output. Where the sleep ends before the copy (a GPU time-sliced with other
    processes), the run proves nothing, and it is tried again with a longer sleep."""
    a, b = operands(1000, 700, 900, "nt", torch.float32, "cuda")
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        # Fill the side stream's allocator cache now: a cudaMalloc can synchronize the device.
        warm = [torch.empty((1000, 900), device="cuda") for _ in range(2)]
        del warm
    for cycles in (2_000_000_000, 10_000_000_000):  # about 1 and 5 seconds of the default stream
        torch.cuda.synchronize()
        torch.cuda._sleep(cycles)
        with torch.cuda.stream(stream):
            out, reused = poisoned(lambda: tiledmm.mm(a, b), (1000, 900), torch.float32, "cuda")
            host = out.cpu()
        assert reused
        held = not torch.cuda.current_stream().query()
        torch.cuda.synchronize()
        check_against_reference(host.cuda(), a, b)
        if held:
            return
    pytest.fail("the default stream finished its sleep before the side stream's copy, twice")


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_tensors_on_another_device():
    a, b = operands(257, 129, 65, "tn", torch.float32, "cuda:1")
    with torch.cuda.device(0):
        out = tiledmm.mm(a, b)
    assert out.device == a.device
    check_against_reference(out, a, b)
