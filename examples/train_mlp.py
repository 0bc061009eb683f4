"""Trains the same models with torch and with tiledmm, from the same initial weights, on
synthetic data (no downloads), and prints both loss curves and the time per step.

    python examples/train_mlp.py [--device cuda] [--steps 200]

1. An MLP built from tiledmm.nn.Linear, against the same MLP of torch.nn.Linear.
2. A small attention block written with plain torch (nn.Linear, @, softmax), run unchanged
   under tiledmm.enable().
"""

import argparse
import contextlib
import copy
import time

import torch

import tiledmm


def mlp(linear, width):
    return torch.nn.Sequential(
        linear(64, width), torch.nn.GELU(), linear(width, width), torch.nn.GELU(), linear(width, 10)
    )


class AttentionBlock(torch.nn.Module):
    """Single-head self-attention and an MLP, in plain torch."""

    def __init__(self, dim):
        super().__init__()
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(), torch.nn.Linear(4 * dim, dim))
        self.head = torch.nn.Linear(dim, 10)

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        attention = torch.softmax(q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5, dim=-1)
        x = x + self.proj(attention @ v)
        x = x + self.mlp(x)
        return self.head(x.mean(dim=1))


def train(model, batches, steps, device, context):
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    losses, times = [], []
    with context():
        for step in range(steps):
            x, y = batches[step % len(batches)]
            if device == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())  # synchronizes
            times.append(time.perf_counter() - start)
    steady = sorted(times[len(times) // 4:])  # past warm-up; median
    return losses, steady[len(steady) // 2] * 1e3


def compare(name, torch_model, tiledmm_model, batches, args, tiledmm_context):
    ref_losses, ref_ms = train(torch_model, batches, args.steps, args.device, contextlib.nullcontext)
    losses, ms = train(tiledmm_model, batches, args.steps, args.device, tiledmm_context)
    print(f"\n{name}: loss every {args.every} steps (torch | tiledmm)")
    for step in range(0, args.steps, args.every):
        print(f"  step {step:4d}  {ref_losses[step]:.5f} | {losses[step]:.5f}")
    final_gap = abs(losses[-1] - ref_losses[-1]) / abs(ref_losses[-1])
    print(f"  final    {ref_losses[-1]:.5f} | {losses[-1]:.5f}   relative gap {final_gap:.2e}")
    print(f"  time per step: torch {ref_ms:.3f} ms | tiledmm {ms:.3f} ms")
    return final_gap


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--every", type=int, default=20)
    parser.add_argument("--width", type=int, default=1024)
    args = parser.parse_args()
    torch.manual_seed(0)

    # A fixed random teacher labels random inputs: a learnable, download-free task.
    teacher = torch.nn.Linear(64, 10, device=args.device)
    inputs = [torch.randn(512, 64, device=args.device) for _ in range(16)]
    batches = [(x, teacher(x).argmax(-1).detach()) for x in inputs]

    torch_mlp = mlp(torch.nn.Linear, args.width).to(args.device)
    tiledmm_mlp = mlp(tiledmm.nn.Linear, args.width).to(args.device)
    tiledmm_mlp.load_state_dict(torch_mlp.state_dict())
    gaps = [compare("MLP (tiledmm.nn.Linear)", torch_mlp, tiledmm_mlp, batches, args, contextlib.nullcontext)]

    sequences = [(x.view(64, 8, 64), y.view(64, 8)[:, 0]) for x, y in batches]
    block = AttentionBlock(64).to(args.device)
    gaps.append(compare("Attention block (tiledmm.enable())", block, copy.deepcopy(block), sequences, args, tiledmm.enable))
    print(f"\nlargest final-loss gap: {max(gaps):.2e} (device {args.device}, torch {torch.__version__})")


if __name__ == "__main__":
    main()
