"""Modules that compute on tiledmm."""

import torch

from .functional import linear


class Linear(torch.nn.Linear):
    """A drop-in :class:`torch.nn.Linear` whose product runs on tiledmm.

    Same constructor, initialisation, parameters and ``state_dict`` keys; ``forward`` computes
    ``x @ W.T + b`` through the transposed-B layout, reading the weight in place.
    """

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return linear(input, self.weight, self.bias)
