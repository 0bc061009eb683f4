"""Trains a tiledmm model with DistributedDataParallel (NCCL, one process per GPU).

    python examples/train_ddp.py [--steps 50] [--gpus N]

Each rank trains on its shard of one global batch. Checks: the parameters end identical on every
rank, and the loss averaged over ranks tracks a single-process torch.nn.Linear model trained on
the whole batch from the same initial weights.
"""

import argparse
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel

import tiledmm


def model(linear):
    torch.manual_seed(0)
    return torch.nn.Sequential(linear(128, 512), torch.nn.Tanh(), linear(512, 512), torch.nn.Tanh(), linear(512, 1))


def global_batch(device, size):
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(size, 128, generator=generator)
    y = torch.sin(x[:, :1] * 2) + 0.1 * torch.randn(size, 1, generator=generator)
    return x.to(device), y.to(device)


def train(net, x, y, steps, lr=0.05):
    optimizer = torch.optim.SGD(net.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        loss = torch.nn.functional.mse_loss(net(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    return torch.stack(losses)


def worker(rank, world, args, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), NCCL_NVLS_ENABLE="0")
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world)
    device = torch.device("cuda", rank)

    x, y = global_batch(device, args.batch * world)
    shard = slice(rank * args.batch, (rank + 1) * args.batch)
    net = DistributedDataParallel(model(tiledmm.nn.Linear).to(device), device_ids=[rank])
    losses = train(net, x[shard], y[shard], args.steps)

    mean_losses = losses.clone()
    dist.all_reduce(mean_losses)
    mean_losses /= world
    flat = torch.cat([p.detach().flatten() for p in net.parameters()])
    gathered = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(gathered, flat)
    print(f"rank {rank} on {torch.cuda.get_device_name(device)}: first loss {losses[0].item():.6f}, "
          f"last loss {losses[-1].item():.6f}", flush=True)

    if rank == 0:
        identical = all(torch.equal(gathered[0], g) for g in gathered[1:])
        reference = train(model(torch.nn.Linear).to(device), x, y, args.steps)
        gap = ((mean_losses - reference).abs() / reference.abs()).max().item()
        for step in range(0, args.steps, max(1, args.steps // 10)):
            print(f"  step {step:4d}  DDP tiledmm (mean over ranks) {mean_losses[step].item():.6f} | "
                  f"single-process torch {reference[step].item():.6f}")
        print(f"world size {world}: parameters identical across ranks: {identical}; "
              f"largest relative loss gap to single-process torch: {gap:.2e}")
        if not identical or gap > 1e-3:
            raise SystemExit("DDP check failed")
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--batch", type=int, default=256, help="examples per rank")
    parser.add_argument("--gpus", type=int, default=torch.cuda.device_count())
    args = parser.parse_args()
    if args.gpus < 1:
        raise SystemExit("train_ddp.py needs at least one CUDA GPU")
    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(args.gpus, args, port), nprocs=args.gpus, join=True)


if __name__ == "__main__":
    main()
