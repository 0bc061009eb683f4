"""The wgmma families' wave-timed plans (plan_launch): the tile and K split of least modelled time,
so that a grid's last wave is not a few blocks on an idle GPU; and 'highest' on small outputs over
a long K, which runs 3xTF32 on wgmma in 8 K slices or more for accuracy. Shapes are sized from
the GPU's SM count where the rule depends on it."""

import math
import re

import pytest
import torch

import tiledmm
from _util import HOPPER_ONLY, check_against_reference, poisoned, rel_err, torch_product

pytestmark = HOPPER_ONLY


def _sms():
    return torch.cuda.get_device_properties(0).multi_processor_count


def _tiles(m, n, bm=128, bn=128):
    return math.ceil(m / bm) * math.ceil(n / bn)


def _make(kind, rows, cols, transposed):
    make = torch.randn if kind == "randn" else torch.rand
    return make(cols, rows, device="cuda").mT if transposed else make(rows, cols, device="cuda")


def _operands(m, k, n, layout, kind="randn"):
    return _make(kind, m, k, layout[0] == "t"), _make(kind, k, n, layout[1] == "t")


def _slices(text):
    found = re.search(r"split K: (\d+) slices of (\d+)", text)
    return (int(found.group(1)), int(found.group(2))) if found else (1, None)


# K >= 4096; each is taken where it has fewer 128 x 128 tiles than the GPU has SMs.
SMALL_LONG_K = [(768, 8192, 768, "tn"), (2304, 4100, 700, "tn"), (300, 5000, 200, "nn"), (1000, 4096, 1000, "tt"),
                (700, 40000, 600, "nn")]


@pytest.mark.parametrize("kind", ["randn", "rand"])
@pytest.mark.parametrize("m,k,n,layout", SMALL_LONG_K)
def test_highest_small_outputs_over_long_k_run_on_wgmma_in_short_slices(m, k, n, layout, kind):
    """3xTF32's sums move into float32 once per 32 of K: one sequential sum over a long K measured
    up to 2.4x torch's error on all-positive inputs, so outputs too small to fill the GPU take at
    least 8 K slices, none longer than 2048 (up to K = 2^17; beyond, sqrt(32 K): test_precision's
    K = 524288), and stay within 2x torch's error on rand as well as randn."""
    if _tiles(m, n) >= _sms():
        pytest.skip(f"{m} x {n} fills this GPU's {_sms()} SMs")
    a, b = _operands(m, k, n, layout, kind)
    text = tiledmm.explain(a, b, precision="highest")
    assert "3xTF32 tensor cores (wgmma" in text and "for accuracy" in text, text
    slices, length = _slices(text)
    assert slices >= 8 and length <= 2048, text
    out, _ = poisoned(lambda: tiledmm.matmul(a, b, precision="highest"), (m, n), torch.float32, "cuda")
    ref = a.double() @ b.double()
    err, torch_err = rel_err(out, ref), rel_err(torch_product(a, b), ref)
    assert err <= 2 * torch_err, f"relative error {err:.3e} > 2x torch.matmul's {torch_err:.3e}"


def test_highest_small_outputs_over_shorter_k_stay_on_mma_sync():
    """Below K = 4096, where 8 slices were not measured for accuracy: 3xTF32 on mma.sync, whose sums
    move into float32 every 8 of K."""
    if _tiles(768, 768) >= _sms():
        pytest.skip(f"768 x 768 fills this GPU's {_sms()} SMs")
    a, b = _operands(768, 4000, 768, "tn")
    assert "mma.sync" in tiledmm.explain(a, b, precision="highest")
    out, _ = poisoned(lambda: tiledmm.matmul(a, b, precision="highest"), (768, 768), torch.float32, "cuda")
    check_against_reference(out, a, b, strict=True)


@pytest.mark.parametrize("precision", ["tf32", "highest"])
def test_a_last_wave_of_few_blocks_is_split_away(precision):
    """An output of 12 more 128 x 128 tiles than SMs (3072 x 768 on 132 SMs): whole tiles would take
    two waves for 1.09 waves' work, so K is split until the waves are at least 3/4 full."""
    m = 128 * math.ceil((_sms() + 12) / 6)
    a, b = _operands(m, 8192, 768, "tn")
    text = tiledmm.explain(a, b, precision=precision)
    assert "least modelled time" in text and _slices(text)[0] > 1, text
    blocks, waves, per_wave = map(int, re.search(r"(\d+) blocks in (\d+) wave\(s\) of (\d+)", text).groups())
    assert blocks >= 0.75 * waves * per_wave, text
    out, _ = poisoned(lambda: tiledmm.matmul(a, b, precision=precision), (m, 768), torch.float32, "cuda")
    check_against_reference(out, a, b, strict=precision == "highest", tf32=precision == "tf32")


def test_outputs_of_nearly_full_waves_keep_whole_tiles():
    """4096 x 4096 x 4096 (3.9 waves of 128 x 256 tiles on 132 SMs): no split, which would double
    the waves and add the workspace's round trip; in TF32 the Hopper GEMM core's whole tiles."""
    text = tiledmm.explain(*_operands(4096, 4096, 4096, "nn"), precision="highest")
    assert "split K" not in text and "least modelled time" in text, text
    text = tiledmm.explain(*_operands(4096, 4096, 4096, "nn"), precision="tf32")
    assert "Hopper GEMM core (wgmma" in text and "stream-K: " not in text, text


def test_misaligned_outputs_that_fill_the_gpu_keep_whole_tiles():
    """Without 16-byte alignment a split K would give up TF32's residue-class boxes: whole tiles."""
    a, b = _operands(8205, 2949, 5921, "nn")
    text = tiledmm.explain(a, b, precision="tf32")
    assert "split K" not in text and "least modelled time" in text, text


@pytest.mark.parametrize("precision", ["tf32", "3xtf32", "highest"])
@pytest.mark.parametrize("layout", ["nn", "nt", "tn", "tt"])
@pytest.mark.parametrize("m,k,n", [(2049, 1000, 2051), (333, 9001, 517), (4097, 2049, 515), (131, 6000, 4099)])
def test_wave_timed_plans_at_odd_shapes(m, k, n, layout, precision):
    """Whatever tile and split the plan picks (TF32's aligned x @ W^T runs on the Hopper GEMM core
    instead), every output is written and accurate."""
    a, b = _operands(m, k, n, layout)
    out, _ = poisoned(lambda: tiledmm.matmul(a, b, precision=precision), (m, n), torch.float32, "cuda")
    check_against_reference(out, a, b, strict=precision != "tf32", tf32=precision == "tf32")
