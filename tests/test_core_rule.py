"""The Hopper GEMM core's rule (plan_core, kernels/cuda/sm90/gemm_core_plan.cpp) on the CPU: what
it plans for a grid of shapes and GPU sizes must be a plan the kernel can run (its tile, grid,
stream-K shares and workspace within their bounds), and the cases the rule was measured on keep
their plans. The rule is plain host code: tests/core_rule/plan_driver.cpp compiles it alone (with a
stand-in for the one torch header it reads), so no GPU is needed."""

import itertools
import json
import math
import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMPILER = shutil.which(os.environ.get("CXX", "c++")) or shutil.which("g++") or shutil.which("clang++")
pytestmark = pytest.mark.skipif(COMPILER is None, reason="no C++ compiler (c++, g++ or clang++) to build the rule's driver")

MIN_SHARE = 4  # K tiles: the shortest stream-K share the rule plans (kMinShare)
MAX_WORKSPACE = 256 << 20  # bytes of float32 parts (kMaxWorkspace)
MAX_PARTS = 8  # about as many K ranges a tile at the most (kMaxParts; shares of uneven K one more, and the
# workspace holds one more again)
PING_PONG_MAX_SHORT_K_TILES = 4  # K tiles at which the rule leaves the ping-pong tile out (kCorePingPongMaxShortKTiles)
SHORT_K_MAX_ROUNDS = 12  # rounds of tiles a single 16-bit K tile runs on the core (kCoreShortKMaxRounds)
SM_RATE = {"bf16": 6.5e12, "f16": 6.5e12, "f32": 3.25e12}  # FLOP/s of one SM in plan_core's estimates (sm_rate)
HBM_RATE = 4e12  # bytes a second of the GPU's memory in plan_core's ideal (kHbmRate)
LAUNCH_FLOOR = 5e-6  # seconds: the least of plan_core's ideal over more than one K tile (kLaunchFloor)


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    """plan(problems) -> (the tile table, the plans); dtype "f32t": TF32 with A MN-major, through
    registers (dy @ W as the core runs it), the others x @ W^T or, after a colon, the layout of A and
    B (bf16:tn, dW = dy^T x), and after another ":b" one B that the batch broadcasts (bf16:nt:b). A
    plan's "transposed": the core runs the problem as C^T = B^T A^T."""
    driver = str(tmp_path_factory.mktemp("core_rule") / "plan_driver")
    subprocess.run([COMPILER, "-std=c++17", "-O1", "-I", os.path.join(ROOT, "tests", "core_rule"),
                    "-I", os.path.join(ROOT, "kernels"), os.path.join(ROOT, "tests", "core_rule", "plan_driver.cpp"),
                    os.path.join(ROOT, "kernels", "cuda", "sm90", "gemm_core_plan.cpp"), "-o", driver],
                   check=True, capture_output=True, text=True)

    def run(problems):
        text = "".join(" ".join(map(str, p)) + "\n" for p in problems)
        lines = subprocess.run([driver], input=text, check=True, capture_output=True, text=True).stdout.splitlines()
        return json.loads(lines[0]), [json.loads(line) for line in lines[1:]]

    return run


def problem(m, n, k, batch=1, dtype="bf16", sms=132, tile=-1, splits=0):
    return (m, n, k, batch, dtype, sms, tile, splits)


GRID = [problem(m, n, k, batch, dtype, sms)
        for m, n, k, batch, dtype, sms in itertools.product(
            [1, 7, 129, 768, 1000, 3072, 8192], [8, 200, 768, 1536, 4104, 50304], [33, 64, 65, 200, 257, 768, 4097, 8192, 65536],
            [1, 3], ["bf16", "bf16:tn", "f32", "f32:nn", "f32t"], [132, 114, 78])]
# Outputs of a few 128 x 64 tiles over a very long K: the most ranges a tile (kMaxParts) binds there.
GRID += [problem(m, n, 65536, 1, dtype) for m, n, dtype in itertools.product([128, 200, 384], [256, 512], ["bf16", "f32"])]


def check_runnable(p, c, table):
    """Invariants of any plan the launch takes (gemm_core_launch.cuh, CoreWalk)."""
    m, n, k, batch, dtype, sms, forced_tile, forced_splits = p
    if c["transposed"]:
        m, n = n, m
    bn, cluster = table["bn"][c["tile"]], table["cluster"][c["tile"]]
    rows = table["bm"][c["tile"]] * cluster
    m_tiles, k_tiles = math.ceil(m / rows), math.ceil(k / (32 if dtype.startswith("f32") else 64))
    gpu = max(1, sms // cluster)
    assert c["tiles"] == m_tiles * math.ceil(n / bn) * batch, (p, c)
    assert 1 <= c["group_rows"] <= m_tiles, (p, c)
    assert 1 <= c["clusters"] <= gpu, (p, c)
    if forced_tile < 0 and table["pingpong"][c["tile"]]:
        assert k_tiles > PING_PONG_MAX_SHORT_K_TILES, (p, c)  # too short a K loop to hide an epilogue behind
        assert dtype != "f32t" and not c["transposed"], (p, c)  # A's registers, the transposed epilogue
    if forced_tile < 0 and not dtype.startswith("f32") and k_tiles == 1 and c["fits"]:
        assert math.ceil(c["tiles"] / c["clusters"]) <= SHORT_K_MAX_ROUNDS, (p, c)  # else the short-K tile's
    if c["dp_tiles"] == c["tiles"]:  # whole tiles
        assert c["clusters"] == min(gpu, c["tiles"]), (p, c)
    else:  # stream-K over every tile: each cluster at least one K tile, shares past the shortest planned
        assert c["dp_tiles"] == 0, (p, c)
        assert c["clusters"] <= c["tiles"] * k_tiles, (p, c)
        assert c["max_parts"] >= 2, (p, c)
        workspace = c["tiles"] * cluster * table["bm"][c["tile"]] * bn * 4 * c["max_parts"]
        if forced_splits < 2:
            assert c["tiles"] < gpu, (p, c)  # only where whole tiles would leave SMs idle
            assert not table["pingpong"][c["tile"]], (p, c)  # one item a block leaves a warpgroup idle
            assert c["tiles"] * k_tiles // c["clusters"] >= MIN_SHARE, (p, c)
            assert workspace <= MAX_WORKSPACE, (p, c)
            assert c["max_parts"] <= MAX_PARTS + 2, (p, c)


def test_every_plan_is_one_the_kernel_runs(plan):
    table, plans = plan(GRID)
    for p, c in zip(GRID, plans):
        check_runnable(p, c, table)


def test_forced_tiles_and_splits_are_obeyed(plan):
    table, _ = plan([])
    forced = [problem(m, n, 4104, tile=table["tile_base"] + t, splits=s)
              for m, n in [(264, 136), (8192, 768)] for t in range(len(table["bn"])) for s in (0, 1, 3)]
    _, plans = plan(forced)
    for p, c in zip(forced, plans):
        check_runnable(p, c, table)
        assert c["tile"] == p[6] - table["tile_base"] and c["fits"], (p, c)
        splits = p[7]
        if splits == 1:
            assert c["dp_tiles"] == c["tiles"], (p, c)
        if splits >= 2:
            gpu = max(1, 132 // table["cluster"][c["tile"]])
            assert c["dp_tiles"] == 0 and c["clusters"] == min(gpu, c["tiles"] * splits), (p, c)


def test_measured_cases_keep_their_plans(plan):
    """Where the rule's constants were fitted (bench/NOTES.md items 151-180, 132 SMs)."""
    table, plans = plan([
        problem(4096, 28672, 4096),  # a wide output: whole tiles, in groups of rows
        problem(256, 256, 65536),  # a tile or two over a very long K: not the core's
        problem(768, 768, 8192),  # a small weight gradient: stream-K
        problem(512, 1536, 12288),
        problem(1024, 1024, 8192),  # items 170, 199: whole 128 x 64 or 64 x 128 tiles, not stream-K
        problem(768, 3072, 8192),  # item 176: 120 whole 128 x 160 tiles (128 x 192: 96), not stream-K
        problem(3072, 768, 8192),  # the same, transposed
        problem(6144, 1536, 2048),  # item 174: 128 x 192 (2.9 waves) over 128 x 256 (2.2)
        problem(8192, 768, 3072),  # item 174: 128 x 128 beats 128 x 192 at a width of 768
        problem(8192, 2304, 768),  # item 180: K = 768, 9 rounds of 128 x 128: ping-pong hides the epilogues
        problem(8192, 50304, 768),  # item 180: the same over 191 rounds (GPT-2's lm_head)
        problem(2048, 4096, 8192),  # item 180: K = 8192, 256 tiles of 128 x 256 (1.94 waves): not ping-pong
        problem(768, 768, 8192, dtype="f32"),  # fewer tiles than SMs: stream-K, not ping-pong
        problem(8192, 8192, 128),  # item 183: K = 128, 2 K tiles: 128 x 256 cooperative, not ping-pong
        problem(512, 512, 64, 96),  # item 183: one K tile, 6 rounds (attention's scores): the core's 128 x 256
        problem(8192, 8192, 64),  # one K tile, 16 rounds: the short-K tile's
        problem(32768, 32768, 64),  # smallK: the short-K tile's
    ])
    (wide, long_k, small, narrow, square, wgrad, wgrad_t, wave, width_768, *pingpong, long_k_256, small_f32, short_k,
     attention_k64, large_k64, small_k) = plans
    assert wide["fits"] and wide["dp_tiles"] == wide["tiles"] and wide["group_rows"] > 1
    assert not long_k["fits"]
    assert small["fits"] and small["dp_tiles"] == 0, small
    # Its plan is not pinned: since item 199 it takes 96 whole 64 x 128 tiles, measured 0.75x against
    # 128 x 128 stream-K's 0.79x (a known miss of the 64 x 128 rate, not a plan to keep).
    assert narrow["fits"], narrow
    # whole tiles of 8192 outputs: 128 x 64 (item 170) or, with four producer threads, 64 x 128 (item 199)
    assert square["fits"] and square["dp_tiles"] == square["tiles"], square
    assert table["bm"][square["tile"]] * table["bn"][square["tile"]] == 8192, square
    for c, width, tiles in ((wgrad, 160, 120), (wgrad_t, 160, 120), (wave, 192, 384)):
        assert c["dp_tiles"] == c["tiles"] == tiles and table["bn"][c["tile"]] == width, c
        assert table["cluster"][c["tile"]] == 1, c
    assert table["bm"][width_768["tile"]] == table["bn"][width_768["tile"]] == 128, width_768
    assert width_768["dp_tiles"] == width_768["tiles"], width_768
    # 768 x 768 over K = 8192: 128 x 128 in stream-K (0.78-0.84x torch), not 96 whole 64 x 96 tiles (0.58x)
    assert table["bm"][small["tile"]] == 128, small
    for c in pingpong:
        assert table["pingpong"][c["tile"]] and table["bn"][c["tile"]] == 128 and c["dp_tiles"] == c["tiles"], c
    assert not table["pingpong"][long_k_256["tile"]] and table["bn"][long_k_256["tile"]] == 256, long_k_256
    assert not table["pingpong"][small_f32["tile"]] and small_f32["dp_tiles"] == 0, small_f32
    assert not table["pingpong"][short_k["tile"]] and table["bn"][short_k["tile"]] == 256, short_k
    assert short_k["dp_tiles"] == short_k["tiles"], short_k
    assert attention_k64["fits"] and table["bn"][attention_k64["tile"]] == 256, attention_k64
    assert not table["pingpong"][attention_k64["tile"]], attention_k64
    assert not large_k64["fits"] and not small_k["fits"], (large_k64, small_k)


def test_plans_slower_than_the_gpu_go_back_to_the_family_unless_k_is_short(plan):
    """A plan over 3x the GPU's whole rate goes to the wgmma family (its K slices), but over a K of
    257 to 32 K tiles (which the family does not cut) only past 4x (bench/NOTES.md item 190, H200).
    The whole rate is the tensor cores', or the memory's (HBM_RATE) where the operands and output
    take longer to cross it: outputs of 16-48 rows, which the family and the 64-row tiles compute
    alike, stay on the core (item 200: 10-56% faster there, L2 evicted), and so do stream-K plans
    over half the GPU or more with A K-major (item 201: decoding's 1-32 x 4096 x 14336 0.94-0.99x
    torch against 0.90x; with A MN-major, 8 x 3656 x 7840, the family was faster); and no product
    over more than one K tile takes less than LAUNCH_FLOOR, so products of a few microseconds stay on
    the core (item 201: 1.35x faster than the family's K slices in 16 bits, 1.24-1.30x in TF32, on 47
    shapes). Tiles over a very long K go back (64 x 64 over K = 65536: the family 1.5x faster), but
    128 x 256 over 32768 now fits, 64 x 32 tiles in stream-K over 128 clusters (0.66x torch against
    the family's 0.70x, item 202), and a single K tile
    keeps the rates alone (the family's short-K tile). TF32 attention's p @ v (512 x 64 outputs,
    run transposed) fills a 64-row tile exactly."""
    band = [problem(32, 768, 512, 96, "f32"), problem(32, 1024, 512, 96, "f32")]  # short K, between the limits
    # The last three in stream-K.
    memory_bound = [problem(16, 4096, 4096), problem(24, 3072, 1536, 1, "bf16:nn"), problem(48, 8192, 512),
                    problem(1, 4096, 14336), problem(8, 1024, 8192), problem(128, 256, 32768)]
    floor = [problem(1, 768, 768), problem(8, 768, 3072), problem(256, 512, 512), problem(34, 1008, 1284, 1, "f32")]
    back = [problem(64, 64, 65536, 1, "bf16:nn"), problem(324, 732, 7176, 1, "f32:nn"),
            problem(1030, 1024, 64, 4), problem(8, 3656, 7840, 1, "bf16:tn")]
    shapes = band + memory_bound + floor + back
    table, plans = plan(shapes + [problem(512, 64, 512, 96, "f32:nn")])
    for p, c in zip(shapes, plans):
        # The estimate against the GPU's whole rate (plan_core's ideal, 132 SMs): the memory's too
        # for 16-bit whole tiles over more than one K tile, and the launch floor over more than one
        # K tile; the limit 4 over 257 to 32 K tiles, else 3.
        m, n, k, batch, dtype = p[:5]
        bk = 32 if dtype.startswith("f32") else 64
        k_tiles = (k + bk - 1) // bk
        compute = 2.0 * m * n * k * batch / (132 * SM_RATE[dtype.split(":")[0]])
        memory = 128 // bk * batch * (m * k + k * n + m * n) / HBM_RATE
        whole = c["dp_tiles"] == c["tiles"]
        layout = dtype.split(":")[1] if ":" in dtype else "nt"
        a_k_major = layout[1] == "t" if c["transposed"] else layout[0] == "n"  # the A the core reads
        spread = a_k_major and 2 * c["clusters"] * table["cluster"][c["tile"]] >= 132
        ideal = max(compute, memory) if bk == 64 and k_tiles > 1 and (whole or spread) else compute
        floored = max(ideal, LAUNCH_FLOOR) if k_tiles > 1 else ideal
        slowdown = c["fit_us"] * 1e-6 / floored  # the estimate without the L2's and the HBM's floors
        limit = 4.0 if 256 < k and k_tiles <= 32 else 3.0
        assert c["fits"] == (p not in back), (p, c, slowdown)
        assert (slowdown <= limit) == c["fits"], (p, c, slowdown, limit)
        if p in band:
            assert whole and 3.0 < slowdown <= 4.0 and ideal > LAUNCH_FLOOR, (p, slowdown)
        if p in memory_bound:  # past 3x the tensor cores' rate, within 3x the memory's
            assert c["fit_us"] * 1e-6 > 3.0 * compute and slowdown <= 3.0, (p, c)
        if p in floor:  # past the limit of the rates alone, within it of the floor
            assert c["fit_us"] * 1e-6 > limit * ideal and ideal < LAUNCH_FLOOR, (p, c)
        if p[:3] in ((1, 4096, 14336), (8, 1024, 8192), (128, 256, 32768)):
            assert c["dp_tiles"] == 0 and spread, (p, c)  # stream-K over half the GPU or more
        if p[:3] == (1, 4096, 14336):  # held by the memory's rate alone
            assert c["fit_us"] * 1e-6 > 3.0 * LAUNCH_FLOOR, (p, c)
    attention = plans[-1]
    assert attention["fits"] and attention["transposed"] and table["bm"][attention["tile"]] == 64, attention


def test_long_products_on_half_the_gpu_or_less_go_back_to_the_family(plan):
    """Stream-K over so few tiles that its clusters cover less than half the GPU goes to the wgmma
    family's K slices where the product is long (over 20 us and 1.5x its rates): largeK, 256 x 256
    x 524288 in 16 bits, ran 0.63x torch on 64 clusters of 64 x 128 and 0.94x on the family (H200,
    bench/NOTES.md item 205). Short products of few tiles stay on the core (item 201), and so do
    long ones within 1.5x of their memory's rate."""
    large_k = [problem(256, 256, 524288, 1, "bf16:nn"), problem(256, 256, 524288, 1, "bf16:tn")]
    stay = [problem(64, 64, 3304, 1, "bf16:nn"), problem(512, 128, 524288, 1, "bf16:nt")]
    table, plans = plan(large_k + stay)
    for p, c in zip(large_k + stay, plans):
        m, n, k = p[:3]
        compute = 2.0 * m * n * k / (132 * SM_RATE["bf16"])
        memory = 2 * (m * k + k * n + m * n) / HBM_RATE
        idle = c["dp_tiles"] < c["tiles"] and 2 * c["clusters"] * table["cluster"][c["tile"]] < 132
        long = c["fit_us"] * 1e-6 > max(20e-6, 1.5 * max(compute, memory))
        assert c["fits"] == (p in stay), (p, c)
        if p in large_k:
            assert idle and long, (p, c)
        else:
            assert not (idle and long), (p, c)


def test_a_broadcast_operand_counts_once_in_the_memory_rate(plan):
    """The memory's time counts a matrix that the batch broadcasts once: 8 outputs of 16 x 4096 over
    K = 4096 with their own weights cross 268 MB (whole 64 x 128 tiles within 3x of that), with one
    weight matrix shared 34 MB, which their estimate is over 3x of (and over 3x the tensor cores'
    rate): that one goes back to the family."""
    _, (own, shared) = plan([problem(16, 4096, 4096, 8), problem(16, 4096, 4096, 8, "bf16:nt:b")])
    assert own["dp_tiles"] == own["tiles"] and own["fits"], own
    assert shared["time_us"] == own["time_us"] and not shared["fits"], shared
    memory_us = {name: 2 * (8 * 16 * 4096 + b * 4096 * 4096 + 8 * 16 * 4096) / HBM_RATE * 1e6
                 for name, b in (("own", 8), ("shared", 1))}
    assert own["time_us"] <= 3 * memory_us["own"] and shared["time_us"] > 3 * memory_us["shared"], memory_us


def test_tf32_through_registers_takes_the_wide_tiles(plan):
    """TF32 dy @ W, run as its transpose with A through registers (item 185, H200): 128 x 192 where
    its whole tiles fill the rounds that 128 x 256's leave part idle (GPT-2's data gradients: 768 x
    8192 outputs), 128 x 256 where both fill them alike, never the ping-pong tile."""
    table, plans = plan([problem(768, 8192, k, dtype="f32t") for k in (768, 3072, 50304)] +
                        [problem(1536, 4096, 8192, dtype="f32t"), problem(4096, 4096, 4096, dtype="f32t"),
                         problem(3072, 8192, 768, dtype="f32t")])
    for c in plans[:4]:
        assert table["bn"][c["tile"]] == 192 and table["cluster"][c["tile"]] == 1 and c["dp_tiles"] == c["tiles"], c
    for c in plans[4:]:
        assert table["bn"][c["tile"]] == 256 and not table["pingpong"][c["tile"]], c


def test_16_bit_orientation(plan):
    """16-bit operands both K-major or both MN-major run as C^T = B^T A^T where that estimate is the
    faster, and MN-major ones also where the two are level, C is taller than wide and its whole tiles
    run in one round (bench/NOTES.md item 188); nn and tt (whose transposes are other layouts) never;
    TF32 x @ W^T as 16-bit, TF32 dy @ W always."""
    cases = [
        ((3072, 768, 8192, 1, "bf16:tn"), True, 160),  # level: 120 tiles of 128 x 160 either way, one round
        ((768, 3072, 8192, 1, "bf16:tn"), False, 160),
        ((14336, 4096, 4096, 1, "bf16:tn"), False, None),  # level over several rounds: as it comes
        ((2048, 640, 16384, 1, "bf16:tn"), False, None),  # level in stream-K: as it comes
        ((3072, 1024, 1024, 1, "f16:tn"), True, 192),  # 128 tiles of 128 x 192 against 144
        ((1024, 3072, 1024, 1, "f16:tn"), False, 192),
        ((3000, 7000, 2000, 1, "bf16"), True, 256),  # 660 tiles of 128 x 256 against 672
        ((7000, 3000, 2000, 1, "bf16"), False, 256),
        ((3072, 768, 8192, 1, "bf16"), False, 160),  # level and one round, but K-major: as it comes
        ((3072, 768, 8192, 1, "bf16:nn"), False, None),
        ((3072, 768, 8192, 1, "bf16:tt"), False, None),
        ((3000, 7000, 2000, 1, "f32"), True, 256),  # TF32 x @ W^T as 16-bit
        ((7000, 3000, 2000, 1, "f32"), False, 256),
        ((8192, 2304, 768, 1, "f32"), False, None),
        ((3000, 7000, 2000, 1, "f32:nn"), True, None),
    ]
    # Outputs the core leaves as they come stay left, whatever their transpose would fit: 24 rounds
    # of one K tile (12 transposed), and a plan past kMaxSlowdown (within it transposed: 264 x 1024).
    left = [(5096, 10096, 64, 1, "bf16"), (1024, 264, 8192, 1, "bf16")]
    table, plans = plan([problem(*shape) for shape, _, _ in cases] + [problem(*shape) for shape in left])
    for (shape, turned, width), c in zip(cases, plans):
        check_runnable(problem(*shape), c, table)
        assert c["transposed"] == turned and c["fits"], (shape, c)
        if width is not None:
            assert table["bn"][c["tile"]] == width and table["cluster"][c["tile"]] == 1, (shape, c)
    for shape, c in zip(left, plans[len(cases):]):
        assert not c["transposed"] and not c["fits"], (shape, c)
    _, turned = plan([problem(264, 1024, 8192), problem(10096, 5096, 64)])
    assert all(c["fits"] for c in turned), turned


def test_forced_16_bit_tiles_run_transposed_where_test_core_needs_it(plan):
    """test_core's transposed cases: every forced cooperative tile transposes 264 x 136, 1088 x 136
    and 264 x 132 dW in whole tiles where both orientations take one round of tiles (level
    estimates), or where the transpose takes fewer (1088 x 136 on 64 x 32: 255 tiles against 306
    is not transposed), and the K-major cases pick the transpose on the tiles they name; the
    ping-pong tile runs none transposed."""
    table, _ = plan([])
    cooperative = [t for t in range(len(table["bn"])) if not table["pingpong"][t]]
    mn_major = [problem(m, n, k, batch, "bf16:tn", tile=table["tile_base"] + t, splits=1)
                for m, n, k, batch in [(264, 136, 392, 3), (1088, 136, 264, 3), (264, 132, 392, 2)]
                for t in cooperative]

    def rounds(m, n, batch, t):
        rows, gpu = table["bm"][t] * table["cluster"][t], 132 // table["cluster"][t]
        return math.ceil(math.ceil(m / rows) * math.ceil(n / table["bn"][t]) * batch / gpu)

    _, plans = plan(mn_major)
    for p, c in zip(mn_major, plans):
        check_runnable(p, c, table)
        m, n, _, batch = p[:4]
        tile = p[6] - table["tile_base"]
        direct, turned = rounds(m, n, batch, tile), rounds(n, m, batch, tile)
        assert c["transposed"] == (turned < direct or turned == direct == 1), (p, c)
    assert all(any(c["transposed"] for p, c in zip(mn_major, plans) if p[6] == table["tile_base"] + t)
               for t in cooperative)
    k_major = [problem(m, n, 392, batch, dtype, tile=tile, splits=splits) for dtype in ("bf16", "f32")
               for m, n, batch, tile, splits in [
        (136, 40, 132, 4, 1), (40, 392, 40, 4, 3), (40, 72, 132, 6, 1), (40, 72, 1, 6, 3), (40, 136, 40, 8, 1),
        (40, 136, 1, 8, 3), (136, 40, 132, 9, 1), (40, 392, 40, 9, 3), (136, 40, 132, 10, 1), (40, 392, 40, 10, 3)]]
    _, plans = plan(k_major)
    for p, c in zip(k_major, plans):
        check_runnable(p, c, table)
        assert c["transposed"], (p, c)
    ping_pong = table["tile_base"] + table["pingpong"].index(True)
    _, plans = plan([problem(264, 136, 392, 3, "bf16:tn", tile=ping_pong, splits=1),
                     problem(2304, 768, 8192, 1, "bf16:tn")])
    assert not any(c["transposed"] for c in plans), plans


def test_plans_asked_again_are_the_same(plan):
    # plan_core_run keeps the last plans of each host thread by problem (a cache of 256 slots): asked
    # again, in another order, among others that share slots, a problem keeps its plan and orientation.
    problems = GRID[::37] + [problem(m, n, k, 1, "bf16:tn", tile=t, splits=s) for m, n, k in [(768, 768, 8192), (1000, 200, 4097)]
                             for t, s in [(-1, 0), (9, 0), (9, 3), (13, 2)]]
    _, first = plan(problems)
    _, again = plan(problems + problems[::-1])
    assert again[:len(problems)] == first
    assert again[len(problems):] == first[::-1]
