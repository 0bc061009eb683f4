"""Trains a small GPT with torch and with tiledmm from the same initial weights on the same
batches, and reports tokens/s and both loss curves.

    python examples/train_gpt.py                            # 4 blocks, d 768, 12 heads, 8 x 512 tokens
    python examples/train_gpt.py --compile --precision bf16
    python examples/train_gpt.py --ddp                      # every GPU: DistributedDataParallel, NCCL
    python examples/train_gpt.py --fsdp                     # every GPU: FSDP2 (fully_shard), NCCL
    python examples/train_gpt.py --tiny --steps 10          # a miniature that runs on CPU in seconds

The model: token embedding and learned positions, pre-LayerNorm blocks (causal self-attention
with two batched products, an MLP with GELU), a final LayerNorm and an LM head tied to the
embedding. The tiledmm run is the same model with its products on tiledmm, forward and backward:
the linear layers, the attention's batched products and the LM head. --route says how: "layers"
(the default) builds it from tiledmm.nn.Linear and tiledmm.matmul, as a model written for tiledmm
would be; "enable" runs the unchanged torch model under tiledmm.enable(), which sees every torch
call in its scope (about 10 us each on an H200 machine's host, products or not). The corpus is
synthetic (no download): a second-order Markov chain.

--precision (one or several): highest (float32: torch's fp32_precision "ieee", which tiledmm
follows as 'highest'), tf32 (both TF32), bf16 (torch.autocast to bfloat16; float32 weights).
The two runs take turns step by step, so that each sees the same conditions; tokens/s is the
global batch's tokens over the median step time past the first quarter of the steps (warm-up,
compilation).

With --ddp or --fsdp, --world processes (default: one per GPU; gloo on CPU, NCCL on GPUs) each
train on their shard of every global batch (--batch sequences), and rank 0 checks that the loss
curves, averaged over the ranks, match a single process training on the whole batch.

Writes --out (default bench/results/<device>-<date>-train_gpt[-compile][-enable][-ddp|-fsdp].json): per
precision, tokens/s for torch and tiledmm, their ratio, both loss curves (every step) and the
largest loss difference; with --ddp/--fsdp also the single-process curves and the gap to them.
"""

import argparse
import contextlib
import datetime
import functools
import json
import os
import re
import socket
import statistics
import subprocess
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

import tiledmm
from tiledmm.bench.timing import torch_precision

FULL = dict(layers=4, dim=768, heads=12, batch=8, seq=512, vocab=50304, steps=300)  # GPT-2's vocabulary
TINY = dict(layers=2, dim=64, heads=4, batch=4, seq=32, vocab=256, steps=20)

# The largest relative gap between a parallel run's loss curve and a single process's that the
# order of float sums (shards, all-reduce) explains: float32 carries it through Adam's steps;
# bfloat16 products round it to 2^-8 once a sum's order changes. Those floors hold on the CPU
# (gloo); on GPUs torch's own curve moves more (H100 DDP and FSDP2, 300 steps in float32: 3.0e-3
# to 3.3e-3), so tiledmm's curve is held to twice torch's own gap where that is larger.
PARALLEL_TOLERANCE = {"highest": 1e-3, "tf32": 1e-2, "bf16": 3e-2}


def parallel_tolerance(result):
    """The largest relative gap to one process that tiledmm's parallel curve may have: the floor, or
    twice the gap that the same parallel run gives torch's curve, whichever is larger."""
    return max(PARALLEL_TOLERANCE[result["precision"]], 2 * result["max_rel_gap_to_single_process"]["torch"])


def corpus(vocab, count, length, seed=0):
    """count sequences of length tokens from a second-order Markov chain: each pair of previous
    tokens (hashed into 4096 contexts) picks one of 4 successors with probabilities 1/2, 1/4, 1/8,
    1/8; successors and first tokens follow a Zipf law. Deterministic, learnable from pairs."""
    generator = torch.Generator().manual_seed(seed)
    zipf = 1.0 / torch.arange(1, vocab + 1, dtype=torch.float64)
    contexts = 4096
    successors = torch.multinomial(zipf, contexts * 4, replacement=True, generator=generator).view(contexts, 4)
    choices = torch.multinomial(torch.tensor([4.0, 2.0, 1.0, 1.0]), count * length, replacement=True,
                                generator=generator).view(count, length)
    tokens = torch.multinomial(zipf, count * length, replacement=True, generator=generator).view(count, length)
    for t in range(2, length):
        context = (tokens[:, t - 2] * 7919 + tokens[:, t - 1]) % contexts
        tokens[:, t] = successors[context, choices[:, t]]
    return tokens


def causal_attention(qkv, heads, matmul):
    """Multi-head causal self-attention whose two batched products are matmul's (torch.matmul, which
    tiledmm.enable() routes, or tiledmm.matmul), not scaled_dot_product_attention: the torch and
    tiledmm runs do the same math."""
    batch, length, _ = qkv.shape
    q, k, v = qkv.view(batch, length, 3, heads, -1).permute(2, 0, 3, 1, 4)  # (batch, heads, length, head dim)
    scores = matmul(q, k.transpose(-2, -1)) * q.shape[-1] ** -0.5
    future = torch.ones(length, length, dtype=torch.bool, device=qkv.device).triu(1)
    weights = scores.masked_fill(future, float("-inf")).softmax(-1)
    return matmul(weights, v).transpose(1, 2).reshape(batch, length, -1)


class Block(nn.Module):
    def __init__(self, dim, heads, linear, matmul):
        super().__init__()
        self.heads, self.matmul = heads, matmul
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = linear(dim, 3 * dim), linear(dim, dim)
        self.fc, self.out = linear(dim, 4 * dim), linear(4 * dim, dim)

    def forward(self, x):
        x = x + self.proj(causal_attention(self.qkv(self.ln1(x)), self.heads, self.matmul))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    """linear and matmul: the products' modules and function (nn.Linear and torch.matmul, or
    tiledmm.nn.Linear and tiledmm.matmul); the same seed gives the same weights with either."""

    def __init__(self, vocab, seq, dim, heads, layers, linear=nn.Linear, matmul=torch.matmul):
        super().__init__()
        self.embed, self.positions = nn.Embedding(vocab, dim), nn.Embedding(seq, dim)
        self.blocks = nn.ModuleList(Block(dim, heads, linear, matmul) for _ in range(layers))
        self.ln = nn.LayerNorm(dim)
        self.head = linear(dim, vocab, bias=False)
        self.head.weight = self.embed.weight
        for module in self.modules():  # GPT-2's initialisation
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)

    def forward(self, tokens):
        x = self.embed(tokens) + self.positions.weight[: tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def new_run(args, impl, precision, device, parallel):
    """A model from the same initial weights (seed 0), parallel ("ddp", "fsdp" or None) and compiled
    as asked, its optimizer and learning-rate schedule, and the contexts of its steps. The schedule
    warms up over the first tenth of the steps, and train() clips the gradients' norm to 1, as GPT
    training does: without them this model's loss spiked near step 70 at lr 1e-3, after which
    rounding differences between any two implementations (torch's own too) grow chaotically."""
    torch.manual_seed(0)
    layers = impl == "tiledmm" and args.route == "layers"
    products = (tiledmm.nn.Linear, tiledmm.matmul) if layers else (nn.Linear, torch.matmul)
    model = GPT(args.vocab, args.seq, args.dim, args.heads, args.layers, *products).to(device)
    if parallel == "ddp":
        model = nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    elif parallel == "fsdp":
        mesh = init_device_mesh(device.type, (dist.get_world_size(),))
        for block in model.blocks:
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
    if args.compile:
        model.compile()
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.0)
    warmup = max(1, args.steps // 10)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / warmup))
    route = tiledmm.enable if impl == "tiledmm" and not layers else contextlib.nullcontext
    bf16 = precision == "bf16"
    autocast = functools.partial(torch.autocast, device.type, torch.bfloat16) if bf16 else contextlib.nullcontext
    return model, optimizer, schedule, route, autocast


def step(run, tokens, mark=None):
    """One training step of run (new_run's tuple) on tokens (sequences, seq + 1); returns the loss.
    mark, if given, is called with "forward", "backward" and "optimizer" as each phase is queued
    (scripts/profile_train_step.py times the host's phases with it)."""
    mark = mark or (lambda phase: None)
    model, optimizer, schedule, route, autocast = run
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    optimizer.zero_grad(set_to_none=True)
    # tiledmm.enable() (--route enable) sees every torch call in its scope: it covers the forward and
    # backward, where the products are, and not the optimizer's calls.
    with route():
        with autocast():
            loss = F.cross_entropy(model(inputs).flatten(0, 1).float(), targets.flatten())
        mark("forward")
        loss.backward()
    mark("backward")
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    schedule.step()
    mark("optimizer")
    return loss


def train(runs, batches, device):
    """Trains every run of runs ({name: new_run(...)}) on batches (steps, sequences, seq + 1), taking
    turns step by step. Returns, per name, the losses (a tensor) and the step times in seconds."""
    losses = {name: [] for name in runs}
    times = {name: [] for name in runs}
    for tokens in batches:
        for name, run in runs.items():
            synchronize(device)
            start = time.perf_counter()
            loss = step(run, tokens)
            synchronize(device)
            times[name].append(time.perf_counter() - start)
            losses[name].append(loss.detach())
    return {name: torch.stack(curve).double() for name, curve in losses.items()}, times


def relative_gap(curve, reference):
    return ((curve - reference).abs() / reference.abs()).max().item()


def run_configuration(args, precision, batches, device, rank, world):
    """torch and tiledmm at one precision: tokens/s, loss curves and their gap (and with --ddp or
    --fsdp the gap to a single process, computed on rank 0)."""
    if args.compile:
        torch._dynamo.reset()  # each configuration's models compile afresh
    parallel = args.parallel  # "ddp", "fsdp" or None
    per_rank = args.batch // world
    with torch_precision("tf32" if precision == "tf32" else "ieee"):
        runs = {impl: new_run(args, impl, precision, device, parallel) for impl in ("torch", "tiledmm")}
        losses, times = train(runs, batches[:, rank * per_rank:(rank + 1) * per_rank], device)
        if world > 1:
            for curve in losses.values():
                dist.all_reduce(curve)
                curve /= world
        tokens_per_step = args.batch * args.seq
        speed = {impl: tokens_per_step / statistics.median(t[len(t) // 4:]) for impl, t in times.items()}
        result = {
            "precision": precision, "mode": "compile" if args.compile else "eager", "route": args.route,
            "parallel": parallel,
            "world": world, "tokens_per_s": speed, "ratio": speed["tiledmm"] / speed["torch"],
            "loss": {impl: curve.tolist() for impl, curve in losses.items()},
            "max_loss_diff": (losses["tiledmm"] - losses["torch"]).abs().max().item(),
            "max_rel_loss_diff": relative_gap(losses["tiledmm"], losses["torch"]),
        }
        if parallel and rank == 0:
            del runs
            single = {impl: new_run(args, impl, precision, device, None) for impl in ("torch", "tiledmm")}
            single_losses, _ = train(single, batches, device)
            result["single_process_loss"] = {impl: curve.tolist() for impl, curve in single_losses.items()}
            result["max_rel_gap_to_single_process"] = {
                impl: relative_gap(losses[impl], single_losses[impl]) for impl in losses}
    if parallel:
        dist.barrier()
    return result


def report(result, every):
    where = f"{result['parallel']} over {result['world']} processes" if result["parallel"] else "one process"
    print(f"\n{result['precision']}, {result['mode']}, tiledmm by {result['route']}, {where}: loss every {every} steps "
          "(torch | tiledmm)")
    curves = result["loss"]
    for step in range(0, len(curves["torch"]), every):
        print(f"  step {step:4d}  {curves['torch'][step]:.6f} | {curves['tiledmm'][step]:.6f}")
    print(f"  last       {curves['torch'][-1]:.6f} | {curves['tiledmm'][-1]:.6f}   largest difference "
          f"{result['max_loss_diff']:.2e} (relative {result['max_rel_loss_diff']:.2e})")
    speed = result["tokens_per_s"]
    print(f"  tokens/s: torch {speed['torch']:,.0f} | tiledmm {speed['tiledmm']:,.0f}  ({result['ratio']:.3f}x)")
    if "max_rel_gap_to_single_process" in result:
        gaps = result["max_rel_gap_to_single_process"]
        print(f"  largest relative gap to one process on the whole batch: torch {gaps['torch']:.2e} | "
              f"tiledmm {gaps['tiledmm']:.2e} (tolerance {parallel_tolerance(result):.1e})")


def commit(given=None):
    """The commit the results are recorded under: --commit, else the checkout's (a copied tree's
    .git may be older than its files: pass --commit there)."""
    if given:
        return given
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def run(args, device, rank=0, world=1):
    """Every configuration; rank 0 writes the results and checks parallel runs against one process."""
    batches = corpus(args.vocab, args.steps * args.batch, args.seq + 1).view(args.steps, args.batch, -1).to(device)
    results = [run_configuration(args, precision, batches, device, rank, world) for precision in args.precision]
    if rank != 0:
        return
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    output = {
        "device": name, "torch": torch.__version__, "commit": commit(args.commit), "date": datetime.date.today().isoformat(),
        "model": {key: getattr(args, key) for key in ("layers", "dim", "heads", "vocab", "batch", "seq")},
        "steps": args.steps, "lr": args.lr, "configurations": results,
    }
    path = args.out or os.path.normpath(os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "bench", "results",
        f"{re.sub(r'[^a-z0-9]+', '-', name.lower()).strip('-')}-{output['date']}-train_gpt"
        f"{'-compile' if args.compile else ''}{'-enable' if args.route == 'enable' else ''}"
        f"{'-' + args.parallel if args.parallel else ''}.json"))
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(output, f, indent=1)
    for result in results:
        report(result, args.every or max(1, args.steps // 10))
    print(f"\n{name}, torch {torch.__version__}: wrote {path}")
    failed = [r for r in results if r.get("parallel") and
              r["max_rel_gap_to_single_process"]["tiledmm"] > parallel_tolerance(r)]
    if failed:
        raise SystemExit(f"{args.parallel}: the loss curves depart from one process's beyond rounding "
                         f"({', '.join(r['precision'] for r in failed)})")


def worker(rank, world, args, port):
    os.environ["NCCL_NVLS_ENABLE"] = "0"  # NVLink multicast off
    device = torch.device("cuda", rank) if args.device == "cuda" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", init_method=f"tcp://127.0.0.1:{port}",
                            rank=rank, world_size=world)
    try:
        run(args, device, rank, world)
    finally:
        dist.destroy_process_group()


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tiny", action="store_true", help=f"a miniature for CPU: {TINY}")
    parser.add_argument("--steps", type=int, help=f"default {FULL['steps']} ({TINY['steps']} with --tiny)")
    for size in ("layers", "dim", "heads", "batch", "seq", "vocab"):
        parser.add_argument(f"--{size}", type=int, help=f"default {FULL[size]} ({TINY[size]} with --tiny)"
                            + ("; the global batch, in sequences" if size == "batch" else ""))
    parser.add_argument("--lr", type=float, default=1e-3, help="AdamW's learning rate (default 1e-3)")
    precisions = ["highest", "tf32", "bf16"]
    parser.add_argument("--precision", nargs="+", choices=precisions, default=precisions)
    parser.add_argument("--compile", action="store_true", help="torch.compile both models")
    parser.add_argument("--route", choices=["layers", "enable"], default="layers",
                        help="the tiledmm model: built from tiledmm.nn.Linear and tiledmm.matmul (layers, the "
                             "default), or the torch model under tiledmm.enable() (enable)")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--ddp", dest="parallel", action="store_const", const="ddp", help="DistributedDataParallel")
    group.add_argument("--fsdp", dest="parallel", action="store_const", const="fsdp", help="FSDP2 (fully_shard)")
    parser.add_argument("--world", type=int, help="processes for --ddp/--fsdp (default: every GPU; 2 on CPU)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", help="cuda or cpu")
    parser.add_argument("--every", type=int, help="print the losses every this many steps")
    parser.add_argument("--out", help="the results JSON (default bench/results/<device>-<date>-train_gpt*.json)")
    parser.add_argument("--commit", help="the commit to record (default: the checkout's)")
    args = parser.parse_args(argv)
    for key, value in (TINY if args.tiny else FULL).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.world is None:
        args.world = torch.cuda.device_count() if args.device == "cuda" else 2
    if args.dim % args.heads:
        parser.error(f"--dim {args.dim} is not a multiple of --heads {args.heads}")
    if args.parallel and args.batch % args.world:
        parser.error(f"--batch {args.batch} does not split into {args.world} equal shards")
    return args


def main(argv=None):
    args = parse_args(argv)
    if not args.parallel:
        run(args, torch.device(args.device))
        return
    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(args.world, args, port), nprocs=args.world, join=True)


if __name__ == "__main__":
    main()
