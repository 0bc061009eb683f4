import pytest
import torch

from _util import NO_GPU


@pytest.fixture(params=["cpu", "cuda"])
def device(request):
    """Every semantic test runs on the CPU kernel and, where there is a GPU, on the CUDA kernels."""
    if request.param == "cuda" and not torch.cuda.is_available():
        pytest.skip(NO_GPU)
    return request.param


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
