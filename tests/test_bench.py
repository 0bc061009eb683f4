"""The benchmark runs anywhere (a small CPU comparison without a GPU) and writes the documented
JSON; the report turns it into a table."""

import json
import statistics
import subprocess
import sys
import time
from fractions import Fraction

import torch
from _util import requires_gpu

import tiledmm  # noqa: F401  (the subprocesses import the same installed package)
from tiledmm.bench.__main__ import reference_product
from tiledmm.bench.timing import times_ms_each

ROW_KEYS = {"problem", "m", "k", "n", "layout", "dtype", "precision", "pass", "impl", "ms", "ms_q1", "ms_q3",
            "tflops", "rel_err"}


def test_bench_writes_results_and_report(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "tiledmm.bench", "--quick", "--problems", "irregular", "--out", str(tmp_path)],
        check=True, capture_output=True, cwd=tmp_path,
    )
    (path,) = tmp_path.glob("*.json")
    result = json.loads(path.read_text())
    assert {"device", "torch", "commit", "rows"} <= set(result)
    rows = result["rows"]
    assert {(r["pass"], r["impl"]) for r in rows} == {(p, i) for p in ("fwd", "fwd+bwd") for i in ("torch", "tiledmm")}
    for row in rows:
        assert ROW_KEYS <= set(row), row
        assert 0 < row["ms_q1"] <= row["ms"] <= row["ms_q3"], row
        assert row["ms"] > 0 and 0 < row["rel_err"] < (1e-3 if row["precision"] == "tf32" else 1e-5), row
        assert ("speedup" in row) == (row["impl"] == "tiledmm")
    report = subprocess.run([sys.executable, "-m", "tiledmm.bench.report", str(path)], check=True,
                            capture_output=True, text=True, cwd=tmp_path).stdout
    assert "| irregular | " in report and "fwd+bwd" in report
    assert "| spread |" in report and "% |" in report  # each row's interquartile range


def run_bench(out, commit):
    subprocess.run([sys.executable, "-m", "tiledmm.bench", "--quick", "--problems", "irregular", "--passes", "fwd",
                    "--out", str(out), "--commit", commit], check=True, capture_output=True, cwd=out)


def test_a_second_run_on_the_same_day_keeps_another_commits_results(tmp_path):
    run_bench(tmp_path, "aaa1111")
    (first,) = tmp_path.glob("*.json")
    first.with_suffix(".png").write_bytes(b"chart")
    run_bench(tmp_path, "aaa1111")  # the same commit again: replaced
    assert sorted(p.name for p in tmp_path.glob("*.json")) == [first.name]
    run_bench(tmp_path, "bbb2222")
    kept = tmp_path / f"{first.stem}-aaa1111.json"
    assert json.loads(kept.read_text())["commit"] == "aaa1111"
    assert (tmp_path / f"{first.stem}-aaa1111.png").read_bytes() == b"chart"
    assert json.loads(first.read_text())["commit"] == "bbb2222"
    run_bench(tmp_path, "ccc3333")  # keeps bbb2222's run beside aaa1111's
    assert sorted(p.name for p in tmp_path.glob("*.json")) == sorted(
        [first.name, f"{first.stem}-aaa1111.json", f"{first.stem}-bbb2222.json"])


def test_report_readme_rows_are_the_readmes_selection_in_its_order(tmp_path):
    def row(problem, dtype, precision, pass_, impl):
        r = {"problem": problem, "m": 7, "k": 33, "n": 5, "layout": "nn", "dtype": dtype, "precision": precision,
             "pass": pass_, "impl": impl, "ms": 2.0, "ms_q1": 1.9, "ms_q3": 2.1, "tflops": 1.0, "rel_err": 1e-7}
        return r | ({"speedup": 1.5} if impl == "tiledmm" else {})

    # Series in the JSON's order, not the README's; float16 and float32 'tf32' forward+backward are not shown.
    series = [("float16", "n/a"), ("bfloat16", "n/a"), ("float32", "tf32"), ("float32", "highest")]
    rows = [row(p, d, pr, pass_, impl) for pass_ in ("fwd", "fwd+bwd") for p in ("square", "smallK")
            for d, pr in series for impl in ("torch", "tiledmm")]
    path = tmp_path / "result.json"
    path.write_text(json.dumps({"device": "X", "torch": "t", "commit": "c", "rows": rows}))
    report = subprocess.run([sys.executable, "-m", "tiledmm.bench.report", str(path), "--readme"], check=True,
                            capture_output=True, text=True, cwd=tmp_path).stdout
    lines = [line.split(" | ") for line in report.splitlines()[2:]]
    assert [(c[0].lstrip("| "), c[3], c[4], c[5]) for c in lines] == [
        ("square", "float32", "highest", "fwd"), ("smallK", "float32", "highest", "fwd"),
        ("square", "float32", "tf32", "fwd"), ("smallK", "float32", "tf32", "fwd"),
        ("square", "bfloat16", "n/a", "fwd"), ("smallK", "bfloat16", "n/a", "fwd"),
        ("square", "float32", "highest", "fwd+bwd"), ("smallK", "float32", "highest", "fwd+bwd"),
        ("square", "bfloat16", "n/a", "fwd+bwd"), ("smallK", "bfloat16", "n/a", "fwd+bwd"),
    ]
    assert report.startswith("| problem |")  # no heading line: the README has its own


@requires_gpu
def test_queued_times_are_the_gpus_when_the_host_is_slower_than_the_gpu():
    """Each run spends 2 ms on the host between its start event and its ~10 us kernel: queued
    times must still be the kernel's (the GPU holds back until every run is queued), and
    serialized ones must hold the host's 2 ms."""
    x = torch.randn(256, 256, device="cuda")

    def slow_host():
        time.sleep(0.002)
        return x @ x

    queued = times_ms_each({"run": slow_host}, "cuda", warmup=2, reps=10)["run"]
    serialized = times_ms_each({"run": slow_host}, "cuda", warmup=2, reps=10, serialize=True)["run"]
    assert statistics.median(queued) < 0.5, queued
    assert statistics.median(serialized) > 1.9, serialized


def test_float64_reference_is_more_accurate_than_a_product_summed_in_one_pass():
    """float64 rows are measured against a product summed in chunks of K, not against torch's own
    float64 product (which made torch's error 0 by construction): against the exact product of
    the inputs (rational arithmetic), it is several times closer than a float64 sum along K in one
    pass, the way a tiled kernel accumulates (expected about 5.6x at K = 4096; 2x asked)."""
    torch.manual_seed(0)
    a = torch.randn(8, 4096, dtype=torch.float64)
    b = torch.randn(4096, 8, dtype=torch.float64)
    rows, cols = a.tolist(), b.T.tolist()
    exact = torch.tensor([[float(sum(Fraction(x) * Fraction(y) for x, y in zip(r, c))) for c in cols] for r in rows],
                         dtype=torch.float64)
    one_pass = torch.zeros(8, 8, dtype=torch.float64)
    for i, r in enumerate(rows):
        for j, c in enumerate(cols):
            total = 0.0
            for x, y in zip(r, c):
                total += x * y
            one_pass[i, j] = total

    def err(out):
        return ((out - exact).norm() / exact.norm()).item()

    reference = reference_product(a, b)
    assert reference.dtype == torch.float64
    assert err(reference) < err(one_pass) / 2, (err(reference), err(one_pass))
    # Lower-precision inputs: exact products summed in float64.
    half = a.to(torch.bfloat16), b.to(torch.bfloat16)
    assert torch.equal(reference_product(*half), half[0].double() @ half[1].double())

