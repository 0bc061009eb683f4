"""How tiledmm computes float32 products: the ``precision`` argument, torch's own setting, and
the codes the operators take (``Precision`` in kernels/plan/gemm_problem.h).

- ``"highest"``: float32 accuracy by the fastest path that has it (the dispatcher decides; see
  docs/precision.md): the exact kernel for K < 32 and for a single output row or column; on
  Hopper 3xTF32 on wgmma, or one float16 product of scaled splits at 32 < K <= 64, or 3xTF32 on
  mma.sync for small outputs over a K too short to split; on other GPUs the exact kernel for
  outputs of at least 128 x 256 that fill the GPU or whose long K is split for accuracy, and
  3xTF32 on the tensor cores for small or narrow outputs.
- ``"ieee"``: exact float32 fused multiply-adds on CUDA cores.
- ``"3xtf32"``: always 3xTF32 (three TF32 tensor-core products per step, float32 partial sums).
- ``"tf32"``: inputs rounded to TF32 (10-bit mantissa), one tensor-core product: about 3e-4
  relative error on randn inputs, like torch's TF32.
- ``None``: follow torch: ``torch.backends.cuda.matmul.fp32_precision`` ("ieee" -> "highest",
  "tf32" -> "tf32"), or where that is "none", ``torch.get_float32_matmul_precision()``
  ("highest" -> "highest", "high" and "medium" -> "tf32").

Only float32 inputs are affected; the CPU backend computes exact float32 whatever the precision.
"""

import torch

CODES = {"ieee": 0, "3xtf32": 1, "tf32": 2, "highest": 3}
NAMES = {code: name for name, code in CODES.items()}
_OTHER_DTYPES = CODES["ieee"]  # the code of other dtypes: the precision is ignored for them
_FROM_TORCH = {"ieee": "highest", "highest": "highest", "tf32": "tf32", "high": "tf32", "medium": "tf32"}


# Under torch.compile the setting is read when the graph is traced (dynamo cannot trace its
# getters); changing it later makes dynamo retrace or pick the matching cached graph. Read through
# torch's C getters: cuBLAS's allow_tf32 flag alone (~0.3k host instructions) where torch's legacy
# and new settings agree; where they disagree (as torch.backends.cuda.matmul.fp32_precision = "tf32"
# alone leaves them) that getter raises, at ~11 us a call, so after its first raise the two settings
# are read instead (~2.8k), the new one first.
_allow_tf32_raised = False


@torch.compiler.assume_constant_result
def torch_setting() -> str:
    """The precision name torch's current float32 matmul setting corresponds to."""
    global _allow_tf32_raised
    if not _allow_tf32_raised:
        try:
            return "tf32" if torch._C._get_cublas_allow_tf32() else "highest"
        except RuntimeError:
            _allow_tf32_raised = True
    setting = torch._C._get_fp32_precision_getter("cuda", "matmul")
    if setting == "none":
        setting = torch._C._get_float32_matmul_precision()
    return _FROM_TORCH[setting]


def resolve(precision, dtype: torch.dtype) -> int:
    """The operator code for ``precision`` (a name or None) applied to inputs of ``dtype``."""
    if precision is None:
        return CODES[torch_setting()] if dtype == torch.float32 else _OTHER_DTYPES
    if precision not in CODES:
        raise ValueError(
            f"tiledmm: precision must be None (follow torch's setting) or one of "
            f"{', '.join(repr(n) for n in CODES)}; got {precision!r}"
        )
    return CODES[precision] if dtype == torch.float32 else _OTHER_DTYPES
