"""Autograd for tiledmm's products, on tiledmm's own kernels.

For C = A @ B: dA = dC @ B^T and dB = A^T @ dC, computed by the same operators on transposed
views (the kernels read them through their strides: nothing is copied, torch.matmul is never
called), and only for the inputs that need a gradient. The backward is itself made of
differentiable operators, so double backward works.

The gradients are computed at the forward's precision (tiledmm/_precision.py). The same rule
serves the dispatcher operators (torch.ops.tiledmm.*, registered below), the public
autograd.Function classes MM and BMM, and the eager Functions through which tiledmm.matmul, mm,
bmm and linear build their graphs (transformable says which runs where).

torch.func's grad and jvp transforms (and jacrev, jacfwd, hessian) need an autograd.Function with
setup_context, which torch.library's registered autograd is not, and forward-mode AD needs a
tangent formula, which it has none of: there, tiledmm.matmul, mm, bmm and linear run MM and BMM
(autograd_function_needed). vmap runs the operators' batching rules (tiledmm/_vmap.py).
"""

import functools
import operator

import torch
from torch._C._functorch import TransformType
from torch._functorch.pyfunctorch import retrieve_all_functorch_interpreters
from torch.autograd import forward_ad

from ._registrations import AUTOCAST_KEYS, autocast_inputs

ops = torch.ops.tiledmm


def _column_major(x):
    # is_contiguous first: one call, where two stride(dim) calls cost ~2.4k host instructions.
    return not x.is_contiguous() and x.stride(-2) == 1 and x.stride(-1) != 1


def _save(ctx, a, b, precision):
    """What the backward needs: each input where the other's gradient is needed, the layout of each
    whose gradient is, the precision."""
    need_a, need_b = ctx.needs_input_grad[:2]
    ctx.save_for_backward(a if need_b else None, b if need_a else None)
    ctx.column_major = (need_a and _column_major(a), need_b and _column_major(b))
    ctx.precision = precision


def _setup_context(ctx, inputs, output, precision_index=2):
    """inputs: (a, b, ...), with the precision code at precision_index (0 if absent)."""
    _save(ctx, inputs[0], inputs[1], inputs[precision_index] if len(inputs) > precision_index else 0)


def _gradients(product, ctx, grad):
    """dA = dC B^T and dB = A^T dC where needed. Each comes out in its input's layout: where that
    is column-major it is computed transposed, (B dC^T)^T or (dC^T A)^T, so that autograd need not
    copy it into that layout (a transposed weight, as in nn.Linear)."""
    a, b = ctx.saved_tensors
    a_col, b_col = ctx.column_major
    need_a, need_b = ctx.needs_input_grad[:2]
    precision = ctx.precision
    grad_a = grad_b = None
    if need_a:
        grad_a = product(b, grad.mT, precision).mT if a_col else product(grad, b.mT, precision)
    if need_b:
        grad_b = product(grad.mT, a, precision).mT if b_col else product(a.mT, grad, precision)
    return grad_a, grad_b


def autograd_function_needed() -> bool:
    """True where the products must run as MM/BMM rather than as the operators: under torch.func's
    grad and jvp transforms (they need an autograd.Function with setup_context, which the
    operators' registered autograd is not) and in forward-mode AD (it has no tangent formula).
    vmap and functionalize alone keep the operators (their batching rules; functionalize has no
    rule for an autograd.Function)."""
    if not torch._C._are_functorch_transforms_active():
        return forward_ad._current_level >= 0
    transforms = [interpreter.key() for interpreter in retrieve_all_functorch_interpreters()]
    if transforms.count(TransformType.Jvp) > 1:
        raise NotImplementedError(
            "tiledmm: forward-mode AD nested in forward-mode AD (jacfwd of jacfwd, jvp of jvp) is not "
            "supported: torch.autograd.Function's second-order tangents come out wrong (a Function "
            "written in plain torch too). Use reverse mode for one of the levels, e.g. "
            "jacfwd(jacrev(f)) as torch.func.hessian does."
        )
    return forward_ad._current_level >= 0 or any(t in (TransformType.Grad, TransformType.Jvp) for t in transforms)


def transformable(op, kernel, kernel_bias, function, eager, compiled):
    """op(a, b, precision) + bias (bias optional: linear's, added as torch's addmm adds it) for mm,
    bmm and the backward and jvp formulas, run the cheapest way that keeps its gradients: traced by
    torch.compile, compiled.apply (the operator's raw twin in the graph), or under a torch.func
    transform the operator (torch.compile traces torch.func's grad and vmap through it);
    where autograd_function_needed(), function.apply, eagerly. Otherwise after autocast's cast
    (autocast_operands): where no gradient can flow, the operator's kernel alone (kernel, op's
    _kernel, under _KERNEL_ONLY), the bias added in place (by kernel_bias, _gemm_nd's, where given:
    _product_plus_bias); where one can, eager.apply, one graph node for the product and its bias, or under vmap, functionalize and torch.jit.trace the operator through its autograd
    kernel (the bias added out of place). The eager paths spare the Python kernels torch.library
    registers for autograd and autocast: the autograd kernel costs ~5 us a call on an H200's host
    without gradients (bench/NOTES.md items 141 and 144) and ~16 us over the operator with them on
    a CPU, where eager.apply costs ~6 (item 154); the bias in the product's node spares an add's
    node and its output (item 165)."""

    def product(a, b, precision=0, bias=None):
        if torch.compiler.is_compiling() and forward_ad._current_level < 0:
            if torch._C._are_functorch_transforms_active():
                return _plus_checked_bias(op(a, b, precision), bias)
            a, b, _ = autocast_operands(a, b)
            return _plus_checked_bias(compiled.apply(a, b, precision), bias)
        # autograd_function_needed() is False where neither a transform nor forward-mode AD is on.
        transformed = torch._C._are_functorch_transforms_active()
        if (transformed or forward_ad._current_level >= 0) and autograd_function_needed():
            return _plus_checked_bias(_apply_eagerly(function, a, b, precision), bias)
        if torch._C._is_any_autocast_enabled():
            a, b, bias = autocast_operands(a, b, bias)
        recorded = transformed or torch._C._is_tracing()  # the operator's own kernels record it
        if not (torch.is_grad_enabled() and (a.requires_grad or b.requires_grad
                                             or (bias is not None and bias.requires_grad))):
            with torch._C._ExcludeDispatchKeyGuard(_KERNEL_ONLY):
                if recorded:
                    out = op(a, b, precision)
                elif bias is None:
                    return kernel(a, b, precision)
                else:
                    return _product_plus_bias(kernel, kernel_bias, a, b, precision, bias)
            # Under vmap a batched bias may not fit in place into an output batched by less;
            # a trace records what its check's run (without gradients) records.
            return _plus_checked_bias(out, bias)
        if recorded:
            return _plus_checked_bias(op(a, b, precision), bias)
        return apply_eager(a, b, precision, bias)

    # Function.apply without its Python wrapper (torch < 2.14), which unwraps torch.func's dead
    # wrappers: none exist where no transform is active, as here.
    apply_eager = torch._C._FunctionBase.__dict__["apply"].__get__(None, eager)
    return product


def _kernel(op):
    """op (an operator's overload packet) called through the dispatcher alone: without the Python
    layers of torch.ops (overload resolution, __torch_function__ handling), ~5k host instructions a
    call fewer (bench/NOTES.md item 206). For calls under the _KERNEL_ONLY guard on operands
    already cast and checked, where no torch function mode has business (the dispatcher's own
    modes and tensor subclasses are still served)."""
    return functools.partial(torch._C._dispatch_call_boxed, op.default._handle)


# Tensors whose products _product_plus_bias may hand to op_bias: not subclasses (DTensor and others
# have rules for the operators, not for op_bias).
_PLAIN_TYPES = (torch.Tensor, torch.nn.Parameter)


def _product_plus_bias(op, op_bias, a, b, precision, bias):
    """op(a, b, precision) with linear's bias added in place, in plain eager under the _KERNEL_ONLY
    guard: by op_bias (_gemm_nd's kernel: the bias in the kernel's epilogue, or added from C++) for
    plain tensors and a 1-D bias of their dtype, else after the product."""
    if (op_bias is not None and bias.dtype == a.dtype and bias.dim() == 1 and type(a) in _PLAIN_TYPES
            and type(b) in _PLAIN_TYPES and type(bias) in _PLAIN_TYPES):
        return op_bias(a, b, False, False, bias, precision)
    return _add_in_place(op(a, b, precision), bias)


def _plain_eager() -> bool:
    """Where transformable's product runs the operator's kernel alone for operands that need no
    gradient: not traced, no torch.func transform or forward-mode AD, no autocast."""
    return not (torch.compiler.is_compiling() or autograd_function_needed() or torch._C._is_any_autocast_enabled())


def plus_bias(out, bias):
    """out + bias (or out, for None), the bias cast as torch.autocast casts linear's: for linear's
    inputs that take matmul's general path (there, as F.linear adds it in place, a bias of any
    floating dtype, the sum in out's dtype)."""
    return out if bias is None else (out + _autocast_bias(out, bias)).to(out.dtype)


def _plus_checked_bias(out, bias):
    """plus_bias for the bias that linear gives a product where a graph records the product
    (torch.compile, torch.func, vmap, jit.trace): out of place, checked as _add_in_place checks it."""
    if bias is None:
        return out
    bias = _autocast_bias(out, bias)
    _check_bias(out, bias)
    return out + bias


def _autocast_bias(out, bias):
    """bias as torch.autocast casts linear's, where autocast is on for out's device."""
    device_type = out.device.type
    if device_type in AUTOCAST_KEYS and torch.is_autocast_enabled(device_type):
        return autocast_inputs(device_type, bias)[0]
    return bias


def _add_in_place(out, bias):
    """out, the product's new output, with bias added in place, as torch's addmm adds it."""
    if bias.dtype == out.dtype and bias.dim() == 1:
        try:
            return out.add_(bias)  # which checks the bias's size and device
        except RuntimeError:
            _check_bias(out, bias)
            raise
    _check_bias(out, bias)
    return out.add_(bias)


def _check_bias(out, bias):
    """Raises where the bias is not what torch's addmm takes: of the product's dtype and device,
    of shape (columns,), (1,) or ()."""
    columns = out.shape[-1]
    if bias.dtype != out.dtype:
        problem = f"a bias of dtype {bias.dtype} for operands of dtype {out.dtype}"
    elif bias.device != out.device and not (bias.dim() == 0 and bias.is_cpu):
        problem = f"a bias on {bias.device} for operands on {out.device}"
    # (Not while jit.trace records sizes as tensors: the add itself rejects a size that does not fit.)
    elif not (bias.dim() == 0 or bias.dim() == 1 and (torch.jit.is_tracing() or bias.shape[0] in (1, columns))):
        problem = f"a bias of shape {list(bias.shape)} for a product with {columns} columns (expected [{columns}])"
    else:
        return
    raise RuntimeError(f"tiledmm.linear: {problem}")


def autocast_operands(a, b, bias=None):
    """(a, b, bias) as the operators' autocast kernel casts a and b (and torch.autocast linear's
    bias), which it does before their autograd (so that a Function saves the cast inputs)."""
    device_type = a.device.type
    if device_type in AUTOCAST_KEYS and torch.is_autocast_enabled(device_type):
        if bias is None:
            return (*autocast_inputs(device_type, a, b), None)
        return autocast_inputs(device_type, a, b, bias)
    return a, b, bias


# Below autograd (as torch._C._AutoDispatchBelowAutograd puts the dispatcher) and below autocast:
# the operator's CPU or CUDA kernel (or a dispatch mode), for operands autocast_operands has cast.
_KERNEL_ONLY = functools.reduce(
    operator.or_,
    (torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, key))
     for key in ("AutogradFunctionality", "AutogradOther", "AutogradNestedTensor", *AUTOCAST_KEYS.values())),
)


@torch.compiler.disable  # traced by torch.compile, the Function would lose its tangents (jvp)
def _apply_eagerly(function, a, b, precision):
    """function.apply(a, b, precision) after autocast's cast."""
    a, b, _ = autocast_operands(a, b)
    return function.apply(a, b, precision)


def _product_functions(name, op, raw, doc, op_bias=None):
    """The public torch.autograd.Function computing op(a, b, precision) (precision: an operator
    code, default 0) forward, its gradients backward, and its tangent in forward mode; and op
    run by transformable, the way its backward and tangent run their products. raw: the operator
    without autograd, for torch.compile's graphs; op_bias: the operator that adds linear's bias to
    the product of two matrices in place (_gemm_nd), or None.

    Under vmap, the Function's forward and backward run on the operators' batching rules
    (tiledmm/_vmap.py)."""

    def product_backward(ctx, grad):
        return _gradients(product, ctx, grad) + (None,)

    def eager_backward(ctx, grad):
        grad_bias = grad.sum_to_size(ctx.bias_shape) if ctx.needs_input_grad[3] else None
        if torch.is_grad_enabled() or not _plain_eager():
            return _gradients(product, ctx, grad) + (None, grad_bias)
        # A first-order backward in plain eager: product would run the kernel alone; so do its
        # two products, under one guard.
        with torch._C._ExcludeDispatchKeyGuard(_KERNEL_ONLY):
            return _gradients(kernel, ctx, grad) + (None, grad_bias)

    class Product(torch.autograd.Function):
        generate_vmap_rule = True
        backward = staticmethod(product_backward)

        @staticmethod
        def forward(a, b, precision=0):
            return op(a, b, precision)

        @staticmethod
        def setup_context(ctx, inputs, output):
            _setup_context(ctx, inputs, output)
            ctx.save_for_forward(inputs[0], inputs[1])

        @staticmethod
        def jvp(ctx, a_tangent, b_tangent, *_):
            # d(A B) = dA B + A dB, each term only where a tangent is given.
            a, b = ctx.saved_tensors
            terms = []
            if a_tangent is not None:
                terms.append(product(a_tangent, b, ctx.precision))
            if b_tangent is not None:
                terms.append(product(a, b_tangent, ctx.precision))
            return terms[0] if len(terms) == 1 else terms[0] + terms[1]

    class Eager(torch.autograd.Function):
        """Product (plus a bias, or None) for eager autograd outside torch.func: the cheapest
        graph node Python builds. forward(ctx, ...) spares apply binding the arguments to
        forward's signature, which it does for a Function with setup_context (~25 us a call on a
        CPU); the operator's kernel runs alone, on inputs already cast (its checks come first:
        they raise before anything is saved), and the bias is added in place (_product_plus_bias)."""

        backward = staticmethod(eager_backward)

        @staticmethod
        def forward(ctx, a, b, precision, bias):
            with torch._C._ExcludeDispatchKeyGuard(_KERNEL_ONLY):
                if bias is None:
                    out = kernel(a, b, precision)
                else:
                    out = _product_plus_bias(kernel, kernel_bias, a, b, precision, bias)
                    ctx.bias_shape = bias.shape
            _save(ctx, a, b, precision)
            return out

    class Compiled(torch.autograd.Function):
        """Product as torch.compile traces it: forward and backward on raw, which has no Python
        autograd kernel, so that a compiled graph's calls go straight to the kernel (torch.library's
        autograd kernel costs ~9 us a call on a CPU, also with gradients off, as compiled graphs
        run: bench/NOTES.md item 187). Its backward is not differentiable (torch.compile has no
        double backward)."""

        @staticmethod
        def forward(ctx, a, b, precision):
            _save(ctx, a, b, precision)
            return raw(a, b, precision)

        @staticmethod
        def backward(ctx, grad):
            return _gradients(raw, ctx, grad) + (None,)

    kernel, kernel_bias = _kernel(op), op_bias and _kernel(op_bias)  # kernel_bias: see _product_plus_bias
    product = transformable(op, kernel, kernel_bias, Product, Eager, Compiled)
    _name(Product, name)
    _name(Eager, f"Tiledmm{name}")  # its graph nodes: grad_fn=<TiledmmMMBackward>
    Product.__doc__ = doc
    return Product, product


def _name(function, name):
    """Names an autograd.Function and the class of its graph nodes (<name>Backward)."""
    function.__name__ = function.__qualname__ = name
    function._backward_cls.__name__ = function._backward_cls.__qualname__ = f"{name}Backward"


MM, mm = _product_functions(
    "MM", ops.mm, ops._mm_raw,
    "C = A @ B for 2-D A (m, k) and B (k, n) on tiledmm's kernels: ``MM.apply(a, b, precision_code)``.",
    ops._gemm_nd,
)
BMM, bmm = _product_functions(
    "BMM", ops.bmm, ops._bmm_raw,
    "C[i] = A[i] @ B[i] for 3-D A (b, m, k) and B (b, k, n): ``BMM.apply(a, b, precision_code)``.",
)


def _register(name, product, precision_index):
    def setup_context(ctx, inputs, output):
        _setup_context(ctx, inputs, output, precision_index)

    def backward(ctx, grad):
        # Operators take arguments after the two matrices (precision, a configuration): no gradient.
        return _gradients(product, ctx, grad) + (None,) * (len(ctx.needs_input_grad) - 2)

    torch.library.register_autograd(f"tiledmm::{name}", backward, setup_context=setup_context)


def _gemm_nd_setup_context(ctx, inputs, output):
    """inputs: (a, b, ta, tb, bias, precision), precision absent where it is the default 0."""
    a, b, ta, tb, bias = inputs[:5]
    ctx.save_for_backward(a, b)
    ctx.transposed, ctx.precision = (ta, tb), inputs[5] if len(inputs) > 5 else 0
    ctx.bias_shape = None if bias is None else bias.shape


def _gemm_nd_backward(ctx, grad):
    """The operator's gradients on its folded operands, C = A B with A = fold(a) (transposed where
    ta) and B = fold(b) (where tb): dA = dC B^T, dB = A^T dC, each unfolded to its input's shape;
    by mm, so that they are differentiable in turn."""
    a, b = ctx.saved_tensors
    ta, tb = ctx.transposed
    need_a, need_b, _, _, need_bias = ctx.needs_input_grad[:5]
    fold = lambda x, t: x.reshape(-1, x.shape[-1]).mT if t else x.reshape(-1, x.shape[-1])  # noqa: E731
    rows = grad.reshape(-1, grad.shape[-1])
    grad_a = grad_b = grad_bias = None
    if need_a:
        grad_a = mm(rows, fold(b, tb).mT, ctx.precision)
        grad_a = (grad_a.mT if ta else grad_a).reshape(a.shape)
    if need_b:
        grad_b = mm(fold(a, ta).mT, rows, ctx.precision)
        grad_b = (grad_b.mT if tb else grad_b).reshape(b.shape)
    if need_bias:
        grad_bias = rows.sum(0).sum_to_size(ctx.bias_shape)
    return (grad_a, grad_b, None, None, grad_bias) + (None,) * (len(ctx.needs_input_grad) - 5)


torch.library.register_autograd("tiledmm::_gemm_nd", _gemm_nd_backward, setup_context=_gemm_nd_setup_context)


_gemm_nd_kernel = _kernel(ops._gemm_nd)


class _EagerRows(torch.autograd.Function):
    """x @ W^T + bias (linear; transposed) or x @ W + bias (matmul's rows times one matrix), bias
    optional, as one graph node for eager autograd outside torch.func, on inputs of any leading
    dimensions: the operator reads x's rows and W as they are stored, so no view is made on the way
    in or out (a view costs ~7-9k host instructions, bench/NOTES.md item 172), and the backward
    computes dx and dW the same way, dW in W's layout (computed transposed for a column-major W,
    so that autograd need not copy it)."""

    @staticmethod
    def forward(ctx, x, w, transposed, precision, bias):
        with torch._C._ExcludeDispatchKeyGuard(_KERNEL_ONLY):
            out = _gemm_nd_kernel(x, w, False, transposed, bias, precision)
        need_x, need_w = ctx.needs_input_grad[:2]
        ctx.save_for_backward(x if need_w else None, w if need_x else None)
        # dW = dy^T x where W is read transposed (or is column-major), else x^T dy. One attribute:
        # each costs host time.
        ctx.plan = (transposed, transposed != (need_w and _column_major(w)), precision,
                    None if bias is None else bias.shape)
        return out

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        need_x, need_w, _, _, need_bias = ctx.needs_input_grad
        transposed, w_from_dy, precision, bias_shape = ctx.plan
        grad_bias = grad.sum_to_size(bias_shape) if need_bias else None

        def products(gemm):
            grad_x = gemm(grad, w, False, not transposed, None, precision) if need_x else None
            if not need_w:
                return grad_x, None
            grad_w = gemm(grad, x, True, False, None, precision) if w_from_dy else gemm(x, grad, True, False, None, precision)
            return grad_x, grad_w.mT if w_from_dy != transposed else grad_w

        if torch.is_grad_enabled() or not _plain_eager():
            grad_x, grad_w = products(ops._gemm_nd)  # through the operator's autograd: differentiable
        else:
            with torch._C._ExcludeDispatchKeyGuard(_KERNEL_ONLY):
                grad_x, grad_w = products(_gemm_nd_kernel)
        return grad_x, grad_w, None, None, grad_bias


_name(_EagerRows, "TiledmmRows")  # its graph nodes: grad_fn=<TiledmmRowsBackward>
_apply_rows = torch._C._FunctionBase.__dict__["apply"].__get__(None, _EagerRows)


def rows_in_plain_eager(x, w, transposed, bias, precision):
    """x @ w^T (transposed) or x @ w, plus bias (None, or 1-D of the operands' dtype after
    autocast's cast), in plain eager on plain tensors of at least 2 (x) and exactly 2 (w)
    dimensions: the operator alone without gradients, else one _EagerRows node. None where another
    path must run it (torch.compile, torch.func, forward-mode AD, vmap, jit.trace, tensor
    subclasses, other biases) or where the operator refused the operands: there linear's or
    matmul's general path runs, with its checks' words."""
    if not (type(x) in _PLAIN_TYPES and type(w) in _PLAIN_TYPES and (bias is None or type(bias) in _PLAIN_TYPES)
            and x.dim() >= 2 and w.dim() == 2):
        return None
    # (autograd_function_needed() can be True only under a transform or in forward-mode AD.)
    if (torch.compiler.is_compiling() or torch._C._are_functorch_transforms_active() or forward_ad._current_level >= 0
            or torch._C._is_tracing()):
        return None
    if torch._C._is_any_autocast_enabled():
        x, w, bias = autocast_operands(x, w, bias)
    if bias is not None and (bias.dtype != x.dtype or bias.dim() != 1):
        return None
    try:
        if not (torch.is_grad_enabled() and (x.requires_grad or w.requires_grad
                                             or (bias is not None and bias.requires_grad))):
            with torch._C._ExcludeDispatchKeyGuard(_KERNEL_ONLY):
                return _gemm_nd_kernel(x, w, False, transposed, bias, precision)
        return _apply_rows(x, w, transposed, precision, bias)
    except RuntimeError:
        return None


_register("mm", mm, 2)
_register("bmm", bmm, 2)
_register("_bmm_with_config", bmm, 4)  # (a, b, tile, splits, precision)
