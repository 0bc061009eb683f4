"""tiledmm: matrix products on tiledmm's own tiled CUDA kernels, with torch.matmul's semantics.

    from tiledmm import matmul
    c = matmul(a, b)  # any shape, layout and dtype torch.matmul accepts (float32/64, float16, bfloat16)

The operators live in PyTorch's dispatcher as ``torch.ops.tiledmm.mm`` and ``torch.ops.tiledmm.bmm``
(CUDA and CPU kernels, fake kernels for torch.compile, autograd, autocast).
``tiledmm.nn.Linear`` is a drop-in ``torch.nn.Linear``; ``with tiledmm.enable():`` runs an
unchanged model's matrix products on tiledmm.
"""

import torch  # noqa: F401  loads libtorch, which the extension links against

try:
    from . import _C  # noqa: F401  loading the library registers the operators
except ImportError as error:  # pragma: no cover - only without a built extension
    raise ImportError(
        "tiledmm's compiled extension (tiledmm._C) is missing or failed to load. Install tiledmm "
        "with `pip install .` (or from a wheel); when working in the source tree, run tests with "
        "`pytest tests`, not `python -m pytest`, so the source folder does not shadow the "
        f"installed package. Cause: {error}"
    ) from error

from . import _registrations  # noqa: F401  fake kernels and autocast for the operators
from . import nn
from .autograd import BMM, MM
from .functional import bmm, explain, linear, matmul, mm
from .mode import enable
from . import _vmap  # noqa: F401,E402  batching rules for torch.func.vmap
if torch.distributed.is_available():
    from . import _dtensor  # noqa: F401,E402  sharding rules for DTensor

__all__ = ["matmul", "mm", "bmm", "linear", "explain", "MM", "BMM", "nn", "enable"]
__version__ = "0.1.0"
