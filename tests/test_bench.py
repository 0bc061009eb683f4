"""The benchmark runs anywhere (a small CPU comparison without a GPU) and writes the documented
JSON; the report turns it into a table."""

import json
import math
import os
import statistics
import subprocess
import sys
import time
from fractions import Fraction

import pytest
import torch
from _util import UNIT_ROUNDOFF, requires_gpu

import tiledmm
from tiledmm.bench.__main__ import operands, reference_product
from tiledmm.bench.problems import (CPU_DECODE_PROBLEMS, CPU_MODEL_PROBLEMS, CPU_SHORT_K_PROBLEMS, DECODE_PROBLEMS,
                                    MODEL_PROBLEMS, SHORT_K_PROBLEMS)
from tiledmm.bench.report import speedup_summary
from tiledmm.bench.timing import times_ms_each

@pytest.fixture(autouse=True)
def _subprocesses_import_this_tiledmm(monkeypatch):
    """The benchmark's subprocesses import the tiledmm this process imported: the installed
    package, or the source tree's (run from elsewhere, they would find only an installed one)."""
    paths = [os.path.dirname(os.path.dirname(tiledmm.__file__)), os.environ.get("PYTHONPATH")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in paths if p))


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



# The model suite's layers as (layer, in-features, out-features), and each model's tokens, written
# out here rather than read from tiledmm.bench.problems.
MODEL_LAYERS = {
    "gpt2": (8192, [("qkv", 768, 2304), ("attn_out", 768, 768), ("mlp_fc", 768, 3072), ("mlp_proj", 3072, 768),
                    ("lm_head", 768, 50304)]),
    "llama3": (4096, [("qkv", 4096, 6144), ("attn_out", 4096, 4096), ("gate_up", 4096, 28672),
                      ("down", 14336, 4096), ("lm_head", 4096, 128256)]),
}
# The float32 series' error bounds; float16 and bfloat16: their unit roundoff (the output's rounding).
FLOAT32_ERR = {"tf32": 1e-3, "highest": 1e-5}


def test_model_suite_is_each_layers_three_training_products_and_gpt2s_attention():
    expected = []
    for suite, (tokens, layers) in MODEL_LAYERS.items():
        for layer, d_in, d_out in layers:
            expected += [(f"{suite}.{layer}.fwd", suite, 1, tokens, d_in, d_out, "nt"),
                         (f"{suite}.{layer}.dgrad", suite, 1, tokens, d_out, d_in, "nn"),
                         (f"{suite}.{layer}.wgrad", suite, 1, d_out, tokens, d_in, "tn")]
    expected += [("gpt2.attn.scores", "gpt2", 96, 512, 64, 512, "nt"), ("gpt2.attn.out", "gpt2", 96, 512, 512, 64, "nn")]
    assert len(expected) == 10 * 3 + 2
    assert [(p.name, p.suite, p.batch, p.m, p.k, p.n, p.layout) for p in MODEL_PROBLEMS] == expected
    # The CPU miniature: the same products, features divided by 64, 64 tokens, attention (2, 16, 8).
    assert [p.name for p in CPU_MODEL_PROBLEMS] == [p.name for p in MODEL_PROBLEMS]
    mini = {p.name: (p.batch, p.m, p.k, p.n, p.layout) for p in CPU_MODEL_PROBLEMS}
    assert mini["llama3.lm_head.wgrad"] == (1, 128256 // 64, 64, 4096 // 64, "tn")
    assert mini["gpt2.mlp_proj.dgrad"] == (1, 64, 768 // 64, 3072 // 64, "nn")
    assert mini["gpt2.attn.scores"] == (2, 16, 8, 16, "nt") and mini["gpt2.attn.out"] == (2, 16, 16, 8, "nn")


def test_model_suite_operands_are_laid_out_as_in_a_training_step():
    """Each product's operands have the shapes and strides of the tensors a linear layer's training
    step multiplies (x, W, dy contiguous; W^T and dy^T views) and of attention's q, k, p, v."""
    def layout(t):
        return tuple(t.shape), t.stride()

    problems = {p.name: p for p in CPU_MODEL_PROBLEMS}
    for suite, (_, layers) in MODEL_LAYERS.items():
        for layer, d_in, d_out in layers:
            tokens, d_in, d_out = 64, d_in // 64, d_out // 64
            x, w, dy = torch.randn(tokens, d_in), torch.randn(d_out, d_in), torch.randn(tokens, d_out)
            for product, step in (("fwd", (x, w.T)), ("dgrad", (dy, w)), ("wgrad", (dy.T, x))):
                built = operands(problems[f"{suite}.{layer}.{product}"], torch.float32, "cpu")
                assert [layout(t) for t in built] == [layout(t) for t in step], (suite, layer, product)
    q, k, p, v = (torch.randn(2, 16, n) for n in (8, 8, 16, 8))
    for name, step in (("gpt2.attn.scores", (q, k.mT)), ("gpt2.attn.out", (p, v))):
        assert [layout(t) for t in operands(problems[name], torch.float32, "cpu")] == [layout(t) for t in step], name


def test_speedup_summary_is_the_geometric_mean_and_worst_per_model_dtype_and_precision():
    def rows(suite, dtype, precision, speedups):
        for i, speedup in enumerate(speedups):
            common = {"problem": f"{suite}.p{i}.fwd", "suite": suite, "dtype": dtype, "precision": precision, "pass": "fwd"}
            yield common | {"impl": "torch", "ms": 1.0}
            yield common | {"impl": "tiledmm", "ms": 1.0 / speedup, "speedup": speedup}

    synthetic = [*rows("gpt2", "bfloat16", "n/a", [0.8, 1.25, 2.0, 0.5]), *rows("llama3", "bfloat16", "n/a", [4.0, 1.0]),
                 *rows("gpt2", "float32", "tf32", [1.5, 0.9, 3.0]), *rows("gpt2", "float32", "highest", [2.0])]
    assert speedup_summary(synthetic) == [
        {"suite": "gpt2", "dtype": "bfloat16", "precision": "n/a", "pass": "fwd", "rows": 4,
         "geomean_speedup": 1.0, "worst_speedup": 0.5, "worst_problem": "gpt2.p3.fwd"},
        {"suite": "llama3", "dtype": "bfloat16", "precision": "n/a", "pass": "fwd", "rows": 2,
         "geomean_speedup": 2.0, "worst_speedup": 1.0, "worst_problem": "llama3.p1.fwd"},
        {"suite": "gpt2", "dtype": "float32", "precision": "tf32", "pass": "fwd", "rows": 3,
         "geomean_speedup": round(4.05 ** (1 / 3), 3), "worst_speedup": 0.9, "worst_problem": "gpt2.p1.fwd"},
        {"suite": "gpt2", "dtype": "float32", "precision": "highest", "pass": "fwd", "rows": 1,
         "geomean_speedup": 2.0, "worst_speedup": 2.0, "worst_problem": "gpt2.p0.fwd"},
    ]


def models_result(speedups):
    """A models-suite JSON of one forward row per (series, problem, speedup) of speedups."""
    rows = []
    for (dtype, precision), by_problem in speedups.items():
        for problem, speedup in by_problem.items():
            common = {"problem": problem, "suite": problem.split(".")[0], "batch": 1, "m": 7, "k": 33, "n": 5,
                      "layout": "nt", "dtype": dtype, "precision": precision, "pass": "fwd", "ms_q1": 0.9,
                      "ms_q3": 1.1, "tflops": 1.0, "rel_err": 1e-7}
            rows += [common | {"impl": "torch", "ms": 1.0}, common | {"impl": "tiledmm", "ms": 1.0, "speedup": speedup}]
    return {"device": "X", "torch": "t", "commit": "c", "date": "d", "suite": "models", "rows": rows,
            "summary": speedup_summary(rows)}


SYNTHETIC_SPEEDUPS = {
    ("bfloat16", "n/a"): {"gpt2.qkv.fwd": 2.0, "gpt2.qkv.wgrad": 0.5, "llama3.down.dgrad": 1.2},
    ("float32", "highest"): {"gpt2.qkv.fwd": 3.0, "gpt2.qkv.wgrad": 1.5, "llama3.down.dgrad": 0.7},
}


def test_report_of_a_models_json_is_its_summary_table(tmp_path):
    path = tmp_path / "x-models.json"
    path.write_text(json.dumps(models_result(SYNTHETIC_SPEEDUPS)))
    report = subprocess.run([sys.executable, "-m", "tiledmm.bench.report", str(path)], check=True,
                            capture_output=True, text=True, cwd=tmp_path).stdout
    assert report.splitlines()[0] == "X, torch t, commit c, d:"
    assert report.splitlines()[4:] == [
        "| gpt2 | bfloat16 | fwd | 2 | 1.000x | 0.500x (gpt2.qkv.wgrad) |",
        "| llama3 | bfloat16 | fwd | 1 | 1.200x | 1.200x (llama3.down.dgrad) |",
        "| gpt2 | float32 highest | fwd | 2 | 2.121x | 1.500x (gpt2.qkv.wgrad) |",
        "| llama3 | float32 highest | fwd | 1 | 0.700x | 0.700x (llama3.down.dgrad) |",
    ]


def test_models_chart_has_a_panel_of_speedups_per_dtype_with_a_line_at_one(tmp_path):
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from tiledmm.bench.report import models_chart

    models_chart(models_result(SYNTHETIC_SPEEDUPS), tmp_path / "chart.png")
    assert (tmp_path / "chart.png").read_bytes().startswith(b"\x89PNG")
    axes = plt.gcf().axes
    assert len(axes) == len(SYNTHETIC_SPEEDUPS)
    for axis, by_problem in zip(axes, SYNTHETIC_SPEEDUPS.values()):
        assert sorted(bar.get_height() for bar in axis.patches) == sorted(by_problem.values())
        assert any(list(line.get_ydata()) == [1.0, 1.0] for line in axis.lines)
    plt.close("all")


def test_cpu_miniature_of_the_model_suite(tmp_path):
    """Without a GPU (hidden here, so that a GPU machine runs the same miniature), --suite models
    runs every product of the suite at small sizes, in its default dtypes and precisions, and
    writes <device>-<date>-models.json with its summary, printed last."""
    env = os.environ | {"CUDA_VISIBLE_DEVICES": ""}
    stdout = subprocess.run([sys.executable, "-m", "tiledmm.bench", "--suite", "models", "--quick", "--out", str(tmp_path)],
                            check=True, capture_output=True, text=True, cwd=tmp_path, env=env).stdout
    (path,) = tmp_path.glob("*.json")
    assert path.name.startswith("cpu-") and path.name.endswith("-models.json")
    result = json.loads(path.read_text())
    series = [("bfloat16", "n/a"), ("float16", "n/a"), ("float32", "tf32"), ("float32", "highest")]
    expected = [(p.name, p.suite, p.batch, p.m, p.k, p.n, p.layout, d, pr, impl)
                for p in CPU_MODEL_PROBLEMS for d, pr in series for impl in ("torch", "tiledmm")]
    rows = result["rows"]
    assert [tuple(r[key] for key in ("problem", "suite", "batch", "m", "k", "n", "layout", "dtype", "precision", "impl"))
            for r in rows] == expected
    for row in rows:
        assert ROW_KEYS <= set(row) and row["pass"] == "fwd", row
        bound = FLOAT32_ERR[row["precision"]] if row["dtype"] == "float32" else UNIT_ROUNDOFF[getattr(torch, row["dtype"])]
        assert 0 < row["rel_err"] < bound, row
    tiledmm_rows = [r for r in rows if r["impl"] == "tiledmm"]
    summary = result["summary"]
    assert [(s["suite"], s["dtype"], s["precision"], s["rows"]) for s in summary] == [
        (suite, d, pr, count) for suite, count in (("gpt2", 17), ("llama3", 15)) for d, pr in series]
    for s in summary:
        group = [r for r in tiledmm_rows if (r["suite"], r["dtype"], r["precision"]) == (s["suite"], s["dtype"], s["precision"])]
        logs = [math.log(r["speedup"]) for r in group]
        assert s["geomean_speedup"] == pytest.approx(math.exp(sum(logs) / len(logs)), abs=1e-3), s
        worst = min(group, key=lambda r: r["speedup"])
        assert (s["worst_speedup"], s["worst_problem"]) == (worst["speedup"], worst["problem"]), s
    # The summary table comes last, after the per-row table: a heading, its column names, a line per group.
    lines = stdout.splitlines()
    start = lines.index("speedup (torch ms / tiledmm ms) per model:")
    assert start > next(i for i, line in enumerate(lines) if line.startswith("problem "))
    assert lines[start + 1].split() == ["suite", "dtype", "precision", "pass", "rows", "geomean", "worst"]
    assert [line.split() for line in lines[start + 2:]] == [
        [s["suite"], s["dtype"], s["precision"], "fwd", str(s["rows"]), f"{s['geomean_speedup']:.3f}x",
         f"{s['worst_speedup']:.3f}x", f"({s['worst_problem']})"] for s in summary]


def cpu_miniature(tmp_path, suite):
    """Runs --suite suite --quick without a GPU (its CPU miniature) and returns the JSON it wrote,
    <device>-<date>-<suite>.json, the only file in tmp_path."""
    env = os.environ | {"CUDA_VISIBLE_DEVICES": ""}
    subprocess.run([sys.executable, "-m", "tiledmm.bench", "--suite", suite, "--quick", "--out", str(tmp_path)],
                   check=True, capture_output=True, text=True, cwd=tmp_path, env=env)
    (path,) = tmp_path.glob("*.json")
    assert path.name.startswith("cpu-") and path.name.endswith(f"-{suite}.json")
    return json.loads(path.read_text())


def test_short_k_suite_spans_k_64_to_256_and_runs_as_a_cpu_miniature(tmp_path):
    """--suite short-k: products over K = 64 ... 256 (large outputs, small ones, attention's batches);
    without a GPU a miniature of the same structure, in bfloat16, float16 and TF32, written to
    <device>-<date>-short-k.json with its summary."""
    assert all(64 <= p.k <= 256 and p.suite == "short-k" for p in SHORT_K_PROBLEMS)
    assert any(p.batch > 1 for p in SHORT_K_PROBLEMS) and {p.layout for p in SHORT_K_PROBLEMS} >= {"nn", "nt", "tn"}
    result = cpu_miniature(tmp_path, "short-k")
    series = [("bfloat16", "n/a"), ("float16", "n/a"), ("float32", "tf32")]
    assert [(r["problem"], r["dtype"], r["precision"], r["impl"]) for r in result["rows"]] == [
        (p.name, d, pr, impl) for p in CPU_SHORT_K_PROBLEMS for d, pr in series for impl in ("torch", "tiledmm")]
    assert [(s["suite"], s["dtype"], s["precision"], s["rows"]) for s in result["summary"]] == [
        ("short-k", d, pr, len(CPU_SHORT_K_PROBLEMS)) for d, pr in series]


def test_decode_suite_times_every_layer_at_few_tokens_and_runs_as_a_cpu_miniature(tmp_path):
    """--suite decode: each model's linear layers' forward x @ W^T at 1, 8, 32 and 128 tokens (the
    model suite's layers, their weights read transposed); without a GPU a miniature of the same
    structure in bfloat16 and float16, written to <device>-<date>-decode.json, summarized per model."""
    layers = [(f"{p.suite}.{p.name.split('.')[1]}", p.k, p.n) for p in MODEL_PROBLEMS if p.name.endswith(".fwd")]
    assert [(p.name.rsplit(".", 1)[0], p.k, p.n) for p in DECODE_PROBLEMS[::4]] == layers
    assert {p.m for p in DECODE_PROBLEMS} == {1, 8, 32, 128} and {p.layout for p in DECODE_PROBLEMS} == {"nt"}
    result = cpu_miniature(tmp_path, "decode")
    dtypes, impls = ("bfloat16", "float16"), ("torch", "tiledmm")
    assert [(r["problem"], r["dtype"], r["impl"]) for r in result["rows"]] == [
        (p.name, d, impl) for p in CPU_DECODE_PROBLEMS for d in dtypes for impl in impls]
    per_model = len(CPU_DECODE_PROBLEMS) // 2
    assert [(s["suite"], s["dtype"], s["rows"]) for s in result["summary"]] == [
        (f"{model}-decode", d, per_model) for model in ("gpt2", "llama3") for d in ("bfloat16", "float16")]


def run_models(out, commit, *options):
    subprocess.run([sys.executable, "-m", "tiledmm.bench", "--suite", "models", "--quick", "--problems", "gpt2.attn.out",
                    "--dtypes", "float32", "--precisions", "highest", "--out", str(out), "--commit", commit, *options],
                   check=True, capture_output=True, cwd=out)


def test_the_model_suite_has_its_own_file_and_keeps_another_commits_run(tmp_path):
    run_bench(tmp_path, "aaa1111")
    (reference,) = tmp_path.glob("*.json")
    run_models(tmp_path, "aaa1111")
    models = reference.with_name(f"{reference.stem}-models.json")
    assert json.loads(models.read_text())["commit"] == "aaa1111"
    run_models(tmp_path, "bbb2222")
    assert sorted(p.name for p in tmp_path.glob("*.json")) == sorted(
        [reference.name, models.name, f"{models.stem}-aaa1111.json"])
    assert json.loads(reference.read_text())["commit"] == "aaa1111" and "summary" not in json.loads(reference.read_text())
    assert json.loads(models.read_text())["commit"] == "bbb2222"
    assert json.loads((tmp_path / f"{models.stem}-aaa1111.json").read_text())["summary"][0]["worst_problem"] == "gpt2.attn.out"


@requires_gpu
def test_runs_timed_with_a_cold_l2_or_serialized_have_files_of_their_own(tmp_path):
    """A --cold-l2 or --serialize run of the same day and commit writes its own file beside the
    default run's instead of replacing it."""
    run_models(tmp_path, "aaa1111")
    run_models(tmp_path, "aaa1111", "--cold-l2")
    run_models(tmp_path, "aaa1111", "--serialize")
    names = sorted(p.name for p in tmp_path.glob("*.json"))
    assert [n.split("-models")[1] for n in names] == ["-cold-l2.json", "-serialized.json", ".json"], names
    cold = next(p for p in tmp_path.glob("*-models-cold-l2.json"))
    assert json.loads(cold.read_text())["cold_l2"] is True


def test_host_mode_times_each_entry_point_per_call(tmp_path):
    """--host (here on CPU tensors, the GPU hidden) times every entry point, torch's and tiledmm's,
    in each of its passes, and writes <device>-<date>-host.json with the per-call microseconds."""
    from tiledmm.bench.host import ENTRIES, PASSES

    env = os.environ | {"CUDA_VISIBLE_DEVICES": ""}
    stdout = subprocess.run([sys.executable, "-m", "tiledmm.bench", "--host", "--quick", "--sizes", "4", "--dtypes",
                             "float32", "--out", str(tmp_path)], check=True, capture_output=True, text=True, cwd=tmp_path,
                            env=env).stdout
    (path,) = tmp_path.glob("*.json")
    assert path.name.startswith("cpu-") and path.name.endswith("-host.json")
    result = json.loads(path.read_text())
    assert result["suite"] == "host" and result["calls"] > 0 and result["threads"] == 1
    rows = result["rows"]
    expected = [(name, p, impl) for name, entry in ENTRIES.items() for p in entry.passes for impl in ("torch", "tiledmm")]
    assert [(r["entry"], r["pass"], r["impl"]) for r in rows] == expected
    assert {p for name, p, _ in expected if name == "matmul"} == set(PASSES) == {"nograd", "grad", "fwd+bwd"}
    for row in rows:
        assert (row["n"], row["dtype"]) == (4, "float32"), row
        assert 0 < row["us_q1"] <= row["us"] <= row["us_q3"], row
        assert ("ratio" in row) == (row["impl"] == "tiledmm")
    for torch_row, tiledmm_row in zip(rows[::2], rows[1::2]):
        assert tiledmm_row["ratio"] == pytest.approx(tiledmm_row["us"] / torch_row["us"], rel=0.01, abs=0.002)
    lines = stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("entry "))
    assert lines[header].split() == ["entry", "pass", "n", "dtype", "torch", "us", "tiledmm", "us", "ratio"]
    assert [line.split()[:2] for line in lines[header + 1:header + 1 + len(rows) // 2]] == [
        [r["entry"], r["pass"]] for r in rows[1::2]]
    report = subprocess.run([sys.executable, "-m", "tiledmm.bench.report", str(path)], check=True,
                            capture_output=True, text=True, cwd=tmp_path).stdout
    t = rows[1]
    assert f"| {t['entry']} | {t['pass']} | 4 | float32 | {rows[0]['us']:.2f} | {t['us']:.2f} | {t['ratio']:.2f}x |" in report
