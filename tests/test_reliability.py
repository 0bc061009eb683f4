"""Reliability: IEEE special values, repeated calls without leaks, concurrency on streams and
threads, CUDA graphs, torch.compile's cudagraph mode, several GPUs, and sizes past 2^31."""

import concurrent.futures
import os

import pytest
import torch

import tiledmm
from _util import check_against_reference, operands, requires_gpu


def _with_specials(rows, cols, dtype, device, count):
    x = torch.randn(rows, cols, dtype=dtype, device=device)
    flat = x.view(-1)
    where = torch.randperm(flat.numel(), device=device)[:count]
    flat[where] = torch.tensor([float("inf"), float("-inf"), float("nan")], dtype=dtype, device=device)[
        torch.arange(count, device=device) % 3]
    return x


SPECIAL_CASES = [(torch.float32, p) for p in (None, "ieee", "3xtf32", "tf32")] + [
    (torch.float64, None), (torch.bfloat16, None)]


@pytest.mark.parametrize("dtype,precision", SPECIAL_CASES, ids=[f"{str(d)[6:]}-{p}" for d, p in SPECIAL_CASES])
@pytest.mark.parametrize("layout", ["nn", "tt"])
def test_special_values_propagate_like_ieee(device, dtype, precision, layout):
    """NaN and +-Inf give non-finite outputs exactly where IEEE arithmetic does, finite elsewhere,
    on every path (3xTF32 recomputes the outputs its split turns into NaN)."""
    m, k, n = 37, 300, 29
    a = _with_specials(m, k, dtype, device, 5)
    b = _with_specials(k, n, dtype, device, 5)
    if layout == "tt":
        a, b = a.T.contiguous().T, b.T.contiguous().T
    out = tiledmm.matmul(a, b, precision=precision)
    # The reference mask: every product a[i, p] * b[p, j] summed in float64, elementwise.
    exact = (a.double()[:, :, None] * b.double()[None, :, :]).sum(1)
    assert torch.equal(torch.isfinite(out), torch.isfinite(exact))
    assert torch.equal(torch.isnan(out), torch.isnan(exact))
    if device == "cuda":
        assert torch.equal(torch.isfinite(out), torch.isfinite(torch.matmul(a, b)))
    finite = torch.isfinite(exact)
    torch.testing.assert_close(out[finite].double(), exact[finite], rtol=2e-2, atol=5e-1)


def _rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_no_leaks_over_10000_calls(device):
    a, b = operands(33, 17, 9, "tn", torch.float32, device)
    for _ in range(200):  # warm up caches and allocator pools
        tiledmm.matmul(a, b)
    if device == "cuda":
        torch.cuda.synchronize()
        gpu_before = torch.cuda.memory_allocated()
    host_before = _rss_bytes()
    for _ in range(10_000):
        tiledmm.matmul(a, b)
    if device == "cuda":
        torch.cuda.synchronize()
        assert torch.cuda.memory_allocated() == gpu_before
    growth = _rss_bytes() - host_before
    assert growth < 4 << 20, f"host memory grew by {growth} bytes over 10,000 calls"


@requires_gpu
def test_several_threads_on_several_streams():
    def work(seed):
        generator = torch.Generator(device="cuda").manual_seed(seed)
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            results = []
            for i in range(20):
                a = torch.randn(257, 129 + i, device="cuda", generator=generator)
                b = torch.randn(129 + i, 65, device="cuda", generator=generator)
                results.append((tiledmm.matmul(a, b), a, b))
        stream.synchronize()
        return results

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        for results in pool.map(work, range(4)):
            for out, a, b in results:
                check_against_reference(out, a, b)


@requires_gpu
@pytest.mark.parametrize("shape", [(300, 200, 100), (64, 70001, 48)], ids=["plain", "split_k"])
def test_cuda_graph_capture_and_replay(shape):
    m, k, n = shape
    a, b = operands(m, k, n, "tn", torch.float32, "cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        tiledmm.mm(a, b)  # warm up outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = tiledmm.mm(a, b)
    for _ in range(3):  # new inputs in the captured buffers, then replay
        a.copy_(torch.randn_like(a))
        b.copy_(torch.randn_like(b))
        graph.replay()
        torch.cuda.synchronize()
        check_against_reference(out, a, b)


@requires_gpu
def test_compile_reduce_overhead():
    model = torch.nn.Sequential(tiledmm.nn.Linear(64, 96), torch.nn.GELU(), tiledmm.nn.Linear(96, 32)).cuda()
    compiled = torch.compile(model, mode="reduce-overhead")
    with torch.no_grad():
        for _ in range(5):
            x = torch.randn(40, 64, device="cuda")
            torch.testing.assert_close(compiled(x).clone(), model(x), rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_operands_on_two_gpus_are_refused():
    with pytest.raises(RuntimeError, match=r"same device, got a on cuda:0 and b on cuda:1"):
        tiledmm.mm(torch.randn(3, 4, device="cuda:0"), torch.randn(4, 5, device="cuda:1"))


def _peak_delta(fn):
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = fn()
    torch.cuda.synchronize()
    return out, torch.cuda.max_memory_allocated() - before


@requires_gpu
def test_output_past_2_31_elements():
    """A 65536 x 40000 bfloat16 output (2.6e9 elements): rows everywhere, the last included, are
    right, and the op needs no memory beyond its output."""
    if torch.cuda.get_device_properties(0).total_memory < 40e9:
        pytest.skip("needs a GPU with 40 GB")
    m, k, n = 65536, 64, 40000
    a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(k, n, dtype=torch.bfloat16, device="cuda")
    junk = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")  # poison
    del junk
    out, peak = _peak_delta(lambda: tiledmm.mm(a, b))
    assert out.numel() > 2**31
    assert peak == out.untyped_storage().nbytes(), peak
    rows = torch.cat([torch.arange(0, m, 4099, device="cuda"), torch.tensor([m - 1], device="cuda")])
    check_against_reference(out[rows], a[rows], b)
    assert torch.isfinite(out[-1]).all() and torch.isfinite(out[:, -1]).all()
    del out
    torch.cuda.empty_cache()
    theirs, torch_peak = _peak_delta(lambda: torch.matmul(a, b))
    print(f"\noutput of {m}x{n} bf16: peak {peak / 2**30:.2f} GiB, torch.matmul {torch_peak / 2**30:.2f} GiB")


@requires_gpu
def test_reduction_over_2_20():
    """K = 2^20: split K, within 2x torch's error; the workspace is small and documented."""
    m, k, n = 96, 2**20, 80
    a, b = operands(m, k, n, "tn", torch.float32, "cuda")
    assert "split K" in tiledmm.explain(a, b)
    out, peak = _peak_delta(lambda: tiledmm.mm(a, b))
    check_against_reference(out, a, b, strict=True)
    _, torch_peak = _peak_delta(lambda: torch.matmul(a, b))
    output_bytes = out.untyped_storage().nbytes()
    assert peak - output_bytes <= 256 << 20
    print(f"\nK = 2^20: output {output_bytes} B, tiledmm peak {peak} B (workspace {peak - output_bytes} B), "
          f"torch.matmul peak {torch_peak} B")
