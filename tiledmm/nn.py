"""Modules that compute on tiledmm."""

from __future__ import annotations

import torch

from .functional import linear


class Linear(torch.nn.Linear):
    """A drop-in :class:`torch.nn.Linear` whose product runs on tiledmm.

    Same constructor, initialisation, parameters and ``state_dict`` keys, plus a keyword-only
    ``precision`` (see :func:`tiledmm.matmul`; None follows torch's setting); ``forward``
    computes ``x @ W.T + b`` through the transposed-B layout, reading the weight in place.
    """

    def __init__(self, *args, precision: str | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.precision = precision

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return linear(input, self.weight, self.bias, precision=self.precision)
