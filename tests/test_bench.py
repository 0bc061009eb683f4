"""The benchmark runs anywhere (a small CPU comparison without a GPU) and writes the documented
JSON; the report turns it into a table."""

import json
import subprocess
import sys

import tiledmm  # noqa: F401  (the subprocesses import the same installed package)

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
