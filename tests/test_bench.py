"""The benchmark runs anywhere (a small CPU comparison without a GPU) and writes the documented
JSON; the report turns it into a table."""

import json
import subprocess
import sys

import tiledmm  # noqa: F401  (the subprocesses import the same installed package)

ROW_KEYS = {"problem", "m", "k", "n", "layout", "dtype", "precision", "pass", "impl", "ms", "tflops", "rel_err"}


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
        assert row["ms"] > 0 and 0 < row["rel_err"] < (1e-3 if row["precision"] == "tf32" else 1e-5), row
        assert ("speedup" in row) == (row["impl"] == "tiledmm")
    report = subprocess.run([sys.executable, "-m", "tiledmm.bench.report", str(path)], check=True,
                            capture_output=True, text=True, cwd=tmp_path).stdout
    assert "| irregular | " in report and "fwd+bwd" in report
