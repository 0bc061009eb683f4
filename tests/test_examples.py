"""examples/train_gpt.py: a miniature GPT trains to the same loss curve with torch and with tiledmm
(on CPU; on a GPU where there is one, compiled too), data-parallel runs match one process, and
every product of the model runs on tiledmm, whether the model is built from tiledmm's layers or
run under tiledmm.enable()."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from _util import OpLog, requires_gpu

import tiledmm

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "train_gpt.py"
# The largest relative gap between the torch and tiledmm loss curves over a few steps: float32
# products differ only in the order of their sums (CPU: 1e-7), TF32 and bfloat16 round their inputs.
CURVE_TOLERANCE = {"highest": 1e-4, "tf32": 1e-2, "bf16": 1e-2}


def run_example(tmp_path, *flags):
    """Runs the example with --tiny and flags; returns its results JSON."""
    out = tmp_path / "results.json"
    package_root = os.path.dirname(os.path.dirname(tiledmm.__file__))  # the tiledmm these tests import
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")])),
               OMP_NUM_THREADS="1")  # the miniature's products gain nothing from threads that wait on a busy CPU
    subprocess.run([sys.executable, str(EXAMPLE), "--tiny", "--out", str(out), *flags], check=True, env=env,
                   capture_output=True, timeout=600)
    return json.loads(out.read_text())


def check_curves(results, steps, precisions):
    assert [c["precision"] for c in results["configurations"]] == precisions
    for config in results["configurations"]:
        torch_curve, tiledmm_curve = config["loss"]["torch"], config["loss"]["tiledmm"]
        assert len(torch_curve) == len(tiledmm_curve) == steps
        assert torch_curve[-1] < torch_curve[0]  # it learns
        assert config["max_rel_loss_diff"] < CURVE_TOLERANCE[config["precision"]], config
        speed = config["tokens_per_s"]
        assert speed["torch"] > 0 and config["ratio"] == pytest.approx(speed["tiledmm"] / speed["torch"])


@pytest.mark.parametrize("route", ["layers", "enable"])
def test_tiny_gpt_trains_alike_on_cpu(tmp_path, route):
    results = run_example(tmp_path, "--device", "cpu", "--steps", "6", "--precision", "highest", "bf16", "--route", route)
    assert results["device"] == "cpu" and results["model"]["layers"] == 2
    assert all(c["route"] == route for c in results["configurations"])
    check_curves(results, 6, ["highest", "bf16"])


@pytest.mark.parametrize("parallel", ["--ddp", "--fsdp"])
def test_tiny_gpt_data_parallel_on_cpu_matches_one_process(tmp_path, parallel):
    results = run_example(tmp_path, "--device", "cpu", parallel, "--world", "2", "--steps", "3", "--precision",
                          "highest")
    (config,) = results["configurations"]
    assert config["parallel"] == parallel[2:] and config["world"] == 2
    for impl in ("torch", "tiledmm"):
        assert config["max_rel_gap_to_single_process"][impl] < 1e-5, config


def _load_example():
    spec = importlib.util.spec_from_file_location("train_gpt", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("route", ["layers", "enable"])
@pytest.mark.parametrize("precision", ["highest", "bf16"])
def test_every_product_of_the_gpt_runs_on_tiledmm(device, precision, route):
    example = _load_example()
    args = example.parse_args(["--tiny", "--device", device, "--route", route])
    model, _, _, route, autocast = example.new_run(args, "tiledmm", precision, torch.device(device), None)
    tokens = torch.randint(args.vocab, (2, args.seq), device=device)
    with route(), OpLog() as log:
        with autocast():
            loss = model(tokens).float().square().mean()
        loss.backward()
    # per block: q/k/v, projection, two MLP layers and two attention products; the LM head
    products = [op for op in log.ops if op.startswith("tiledmm.")]
    assert len(products) == 3 * (6 * args.layers + 1), products  # each forward with its two gradients
    assert not any(op.split(".")[1] in ("mm", "bmm", "addmm", "baddbmm", "matmul", "linear")
                   for op in log.ops if op.startswith("aten.")), log.ops


@requires_gpu
@pytest.mark.parametrize("mode", [[], ["--compile"]], ids=["eager", "compile"])
def test_tiny_gpt_trains_alike_on_gpu(tmp_path, mode):
    results = run_example(tmp_path, "--device", "cuda", "--steps", "8", *mode)
    check_curves(results, 8, ["highest", "tf32", "bf16"])


@requires_gpu
@pytest.mark.parametrize("parallel", ["--ddp", "--fsdp"])
def test_tiny_gpt_data_parallel_on_gpus_matches_one_process(tmp_path, parallel):
    # every GPU of the machine, over NCCL; the example fails beyond its tolerance
    gpus = torch.cuda.device_count()
    results = run_example(tmp_path, "--device", "cuda", parallel, "--steps", "4", "--batch", str(2 * gpus))
    assert all(c["world"] == gpus for c in results["configurations"])
