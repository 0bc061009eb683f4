"""Sharding rules for DTensor (torch.distributed.tensor): tiledmm's operators on sharded operands.

Each rule lists, for one mesh dimension, an output placement and the input placements it needs;
DTensor expands them over the mesh and redistributes inputs that match none. They mirror
aten.mm's and aten.bmm's: a free dimension sharded in one input shards the output, a sharded
inner dimension gives a Partial sum, and a product is linear in each input (Partial x Replicate).
The backward runs the same operators, so gradients follow the same rules.
"""

import torch
from torch.distributed.tensor import Partial, Replicate, Shard
from torch.distributed.tensor.experimental import register_sharding

ops = torch.ops.tiledmm


def _product_rules(rank):
    """(output, [a, b]) placements for mm (rank 2) or bmm (rank 3: the batch dimension first)."""
    rows, cols = rank - 2, rank - 1  # a is (..., m, k), b (..., k, n), the output (..., m, n)
    rules = [
        ([Replicate()], [Replicate(), Replicate()]),
        ([Shard(rows)], [Shard(rows), Replicate()]),  # a's rows: the output's rows
        ([Shard(cols)], [Replicate(), Shard(cols)]),  # b's columns: the output's columns
        ([Partial()], [Shard(cols), Shard(rows)]),  # k: each rank a partial sum
        ([Partial()], [Partial(), Replicate()]),
        ([Partial()], [Replicate(), Partial()]),
    ]
    if rank == 3:
        rules.append(([Shard(0)], [Shard(0), Shard(0)]))  # the batch
    return rules


@register_sharding([ops.mm.default, ops._mm_raw.default])
def _mm_sharding(a, b, precision=0):
    return _product_rules(2)


@register_sharding([ops.bmm.default, ops._bmm_raw.default, ops._bmm_with_config.default])
def _bmm_sharding(a, b, *config):
    return _product_rules(3)
