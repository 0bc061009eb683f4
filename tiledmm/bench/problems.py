"""The benchmark's problems: the five reference problems of shared/anchors.md and the extra
layouts worth tracking, and the model suite (the products of two models' training steps).
Layout letters: n = the operand as stored, t = a transposed view."""

from typing import NamedTuple


class Problem(NamedTuple):
    name: str
    m: int
    k: int
    n: int
    layout: str  # "nn", "tn", "nt" or "tt"
    batch: int = 1  # over 1: batch independent products of 3-D operands
    suite: str = ""  # the model of a model-suite problem, for its summary


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

# The model suite: per model, the tokens of one training step and its linear layers'
# (in-features, out-features).
MODELS = {
    "gpt2": (8192, {"qkv": (768, 2304), "attn_out": (768, 768), "mlp_fc": (768, 3072),
                    "mlp_proj": (3072, 768), "lm_head": (768, 50304)}),
    "llama3": (4096, {"qkv": (4096, 6144), "attn_out": (4096, 4096), "gate_up": (4096, 28672),
                      "down": (14336, 4096), "lm_head": (4096, 128256)}),
}
# GPT-2's attention: (batch = sequences x heads, sequence length, head dimension).
GPT2_ATTENTION = (96, 512, 64)


def linear_products(suite, layer, tokens, d_in, d_out):
    """The three products of a linear layer's training step, each timed on its own: the forward
    y = x @ W^T (x (T, d_in), W (d_out, d_in) read transposed), the input gradient dx = dy @ W
    and the weight gradient dW = dy^T @ x (dy (T, d_out) read transposed)."""
    return [
        Problem(f"{suite}.{layer}.fwd", tokens, d_in, d_out, "nt", suite=suite),
        Problem(f"{suite}.{layer}.dgrad", tokens, d_out, d_in, "nn", suite=suite),
        Problem(f"{suite}.{layer}.wgrad", d_out, tokens, d_in, "tn", suite=suite),
    ]


def model_problems(divisor=1, tokens=None, attention=GPT2_ATTENTION):
    """Every model's linear-layer products, then GPT-2's attention scores q @ k^T and output
    p @ v. divisor, tokens and attention shrink it to the CPU fallback's miniature of the same
    structure (features divided by divisor, at least 1; tokens in place of each model's)."""
    problems = []
    for suite, (model_tokens, layers) in MODELS.items():
        for layer, (d_in, d_out) in layers.items():
            problems += linear_products(suite, layer, tokens or model_tokens, max(1, d_in // divisor),
                                        max(1, d_out // divisor))
    batch, seq, head = attention
    return problems + [Problem("gpt2.attn.scores", seq, head, seq, "nt", batch, "gpt2"),
                       Problem("gpt2.attn.out", seq, seq, head, "nn", batch, "gpt2")]


MODEL_PROBLEMS = model_problems()
CPU_MODEL_PROBLEMS = model_problems(divisor=64, tokens=64, attention=(2, 16, 8))


def decode_problems(tokens=(1, 8, 32, 128), divisor=1):
    """Every model's linear layers' forward x @ W^T while generating: a few tokens a step (one a
    sequence of the batch), so outputs of few rows whose weights' bytes outweigh their products;
    rows named by model, layer and tokens, summarized per model."""
    return [Problem(f"{suite}.{layer}.t{t}", t, max(1, d_in // divisor), max(1, d_out // divisor), "nt",
                    suite=f"{suite}-decode")
            for suite, (_, layers) in MODELS.items() for layer, (d_in, d_out) in layers.items() for t in tokens]


DECODE_PROBLEMS = decode_problems()
CPU_DECODE_PROBLEMS = decode_problems(tokens=(1, 4), divisor=64)


def short_k_problems(shapes):
    """Products whose K is a few K tiles (the output's writes weigh as much as the products): each
    (batch, m, k, n, layout) as a row named by its K, shape and layout."""
    return [Problem(f"k{k}.{f'{batch}x' if batch > 1 else ''}{m}x{n}.{layout}", m, k, n, layout, batch, "short-k")
            for batch, m, k, n, layout in shapes]


# The short-K suite: K from 64 to 256 over large outputs, small ones and batches of attention's
# (sequence 512, head dimension 64 or 128), where the short-K tiles and the Hopper GEMM core meet.
SHORT_K_PROBLEMS = short_k_problems([
    (96, 512, 64, 512, "nt"), (96, 512, 128, 512, "nt"), (1, 8192, 64, 8192, "nt"), (1, 8192, 80, 4096, "nt"),
    (1, 8192, 96, 8192, "nt"), (1, 8192, 128, 8192, "nn"), (1, 8192, 128, 8192, "tn"), (1, 4096, 192, 4096, "nn"),
    (1, 8192, 256, 8192, "nt"), (1, 2048, 256, 1024, "nn"), (8, 1024, 192, 1024, "nn"), (1, 2048, 128, 2048, "nt")])
CPU_SHORT_K_PROBLEMS = short_k_problems([(2, 16, 8, 16, "nt"), (1, 64, 16, 48, "nn"), (1, 48, 24, 64, "tn")])
