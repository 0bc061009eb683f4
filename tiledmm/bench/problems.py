"""The benchmark's problems: the five reference problems of shared/anchors.md and the extra
layouts worth tracking. Layout letters: n = the operand as stored, t = a transposed view."""

from typing import NamedTuple


class Problem(NamedTuple):
    name: str
    m: int
    k: int
    n: int
    layout: str  # "nn", "tn", "nt" or "tt"


PROBLEMS = [
    Problem("square", 4096, 4096, 4096, "nn"),
    Problem("standard", 2048, 8192, 4096, "nn"),
    Problem("transA", 2048, 8192, 4096, "tn"),
    Problem("irregular", 8205, 2949, 5921, "nn"),
    Problem("smallK", 32768, 64, 32768, "nn"),
    Problem("largeK", 256, 524288, 256, "nn"),
    Problem("linear", 8192, 4096, 4096, "nt"),  # nn.Linear: x @ W.T
]

# The CPU fallback (no GPU): small versions of the same problems.
CPU_PROBLEMS = [
    Problem("square", 256, 256, 256, "nn"),
    Problem("transA", 128, 512, 256, "tn"),
    Problem("irregular", 257, 93, 185, "nn"),
    Problem("linear", 256, 256, 256, "nt"),
]
