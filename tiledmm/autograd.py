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

from ._precision import CODES as _PRECISION_CODES
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
    _kernel), the bias added in place (by kernel_bias, _gemm_nd's, where given:
    _product_plus_bias); where one can, one graph node for the product and its bias (eager: the
    apply of the eager Function of each precision code, _eager_functions), or under
    vmap, functionalize and torch.jit.trace the operator through its autograd kernel (the bias
    added out of place). The eager paths spare the Python kernels torch.library
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
            if recorded:
                with torch._C._ExcludeDispatchKeyGuard(_KERNEL_ONLY):
                    out = op(a, b, precision)
                # Under vmap a batched bias may not fit in place into an output batched by less;
                # a trace records what its check's run (without gradients) records.
                return _plus_checked_bias(out, bias)
            if bias is None:
                return kernel(a, b, precision)
            return _product_plus_bias(kernel, kernel_bias, a, b, precision, bias)
        apply_eager = None if recorded else eager.get(precision)
        if apply_eager is None:  # recorded, or a precision code that the operator will refuse
            return _plus_checked_bias(op(a, b, precision), bias)
        return apply_eager(a, b) if bias is None else apply_eager(a, b, bias)

    return product


def _kernel(op):
    """op's (an operator's overload packet) CPU or CUDA kernel alone, kernel(a, b, *arguments), for
    operands already cast and checked, where no torch function mode has business and gradients
    are not recorded: without the Python layers of torch.ops (overload resolution,
    __torch_function__ handling; ~5k host instructions a call, bench/NOTES.md item 206). Plain
    CUDA tensors outside dispatch modes go straight to the CUDA kernel (redispatch_boxed: ~4k
    instructions fewer than the guard's object, item 207); the rest through the dispatcher below
    autograd and autocast (the _KERNEL_ONLY guard), which serves tensor subclasses, dispatch modes,
    every device, and the profiler (a redispatch records no operator). The callers check that any
    other tensor argument (linear's bias) is plain."""
    handle = op.default._handle
    cuda_kernel = functools.partial(handle.redispatch_boxed, _CUDA_KERNEL)
    dispatch = functools.partial(torch._C._dispatch_call_boxed, handle)

    def kernel(a, b, *arguments):
        if (a.is_cuda and type(a) in _PLAIN_TYPES and type(b) in _PLAIN_TYPES and not _dispatch_modes()
                and not _profiling()):
            return cuda_kernel(a, b, *arguments)
        with torch._C._ExcludeDispatchKeyGuard(_KERNEL_ONLY):
            return dispatch(a, b, *arguments)

    return kernel


# Tensors whose products _product_plus_bias may hand to op_bias: not subclasses (DTensor and others
# have rules for the operators, not for op_bias).
_PLAIN_TYPES = (torch.Tensor, torch.nn.Parameter)


def _product_plus_bias(op, op_bias, a, b, precision, bias):
    """op(a, b, precision) with linear's bias added in place, in plain eager (op and op_bias:
    _kernel's): by op_bias (_gemm_nd's kernel: the bias in the kernel's epilogue, or added from
    C++) for plain tensors and a 1-D bias of their dtype, else after the product."""
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
_CUDA_KERNEL = torch._C.DispatchKeySet(torch._C.DispatchKey.CUDA)
_dispatch_modes = torch._C._len_torch_dispatch_stack  # the torch dispatch modes active (and infra modes)
_profiling = torch._C._autograd._profiler_enabled


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
    eager = {}  # filled once product exists: the Functions' backward runs product
    product = transformable(op, kernel, kernel_bias, Product, eager, Compiled)
    eager.update(_eager_functions(f"Tiledmm{name}", kernel, kernel_bias, product))
    _name(Product, name)
    Product.__doc__ = doc
    return Product, product


def _name(function, name):
    """Names an autograd.Function and the class of its graph nodes (<name>Backward)."""
    function.__name__ = function.__qualname__ = name
    function._backward_cls.__name__ = function._backward_cls.__qualname__ = f"{name}Backward"


def _function(name, forward, backward):
    """The apply of an autograd.Function of forward(ctx, ...) and backward, whose graph nodes are
    <name>Backward. apply is called without its Python wrapper (torch < 2.14), which unwraps
    torch.func's dead wrappers: none exist where these run, in plain eager. forward(ctx, ...)
    spares apply binding the arguments to forward's signature, which it does for a Function with
    setup_context (~25 us a call on a CPU)."""
    function = type(name, (torch.autograd.Function,), {"forward": staticmethod(forward), "backward": staticmethod(backward)})
    _name(function, name)
    return torch._C._FunctionBase.__dict__["apply"].__get__(None, function)


def _eager_functions(name, kernel, kernel_bias, product):
    """For each precision code, the apply of an autograd.Function that computes kernel(a, b,
    precision) (plus a bias) for eager autograd outside torch.func, the cheapest graph node Python
    builds: {precision: apply(a, b[, bias])}. Its arguments are tensors only (the precision is the
    Function's): apply checks each argument twice, ~1.7k host instructions a call for each that is
    not one (bench/NOTES.md item 207); the configuration is read from the closure, where a
    partial's keywords or another call would cost as much again."""

    def backward(ctx, grad):
        # product's gradients, through the operators' autograd where gradients are recorded (double
        # backward), else by their kernels alone; and the bias's, where one was given.
        if torch.is_grad_enabled() or not _plain_eager():
            grad_a, grad_b = _gradients(product, ctx, grad)
        else:
            grad_a, grad_b = _gradients(kernel, ctx, grad)
        needs = ctx.needs_input_grad
        return grad_a, grad_b, grad.sum_to_size(ctx.bias_shape) if len(needs) > 2 and needs[2] else None

    def function(precision):
        def forward(ctx, a, b, bias=None):
            # On inputs already cast; the kernel's checks raise before anything is saved.
            if bias is None:
                out = kernel(a, b, precision)
            else:
                ctx.bias_shape = bias.shape
                out = _product_plus_bias(kernel, kernel_bias, a, b, precision, bias)
            _save(ctx, a, b, precision)
            return out

        return _function(name, forward, backward)

    return {precision: function(precision) for precision in _PRECISION_CODES.values()}


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


def _rows_functions(transposed):
    """x @ W^T (transposed: linear's) or x @ W (matmul's rows times one matrix), plus a bias, as one
    graph node for eager autograd outside torch.func, on inputs of any leading dimensions: for each
    precision code, the apply of its autograd.Function, {precision: apply(x, w[, bias])}, tensors
    its only arguments (_eager_functions says why). The operator reads x's rows and W as they are
    stored, so no view is made on the way in or out (a view costs ~7-9k host instructions,
    bench/NOTES.md item 172), and the backward computes dx and dW the same way, dW in W's layout
    (computed transposed for a column-major W, so that autograd need not copy it). Graph nodes:
    TiledmmRowsBackward."""

    def function(precision):
        def forward(ctx, x, w, bias=None):
            out = _gemm_nd_kernel(x, w, False, transposed, bias, precision)
            need_x, need_w = ctx.needs_input_grad[:2]
            ctx.save_for_backward(x if need_w else None, w if need_x else None)
            # dW = dy^T x where W is read transposed (or is column-major), else x^T dy. One
            # attribute: each costs host time.
            ctx.plan = (transposed != (need_w and _column_major(w)), None if bias is None else bias.shape)
            return out

        def backward(ctx, grad):
            # Through the operator's autograd where gradients are recorded (double backward), else
            # its kernel.
            x, w = ctx.saved_tensors
            needs = ctx.needs_input_grad
            w_from_dy, bias_shape = ctx.plan
            gemm = ops._gemm_nd if torch.is_grad_enabled() or not _plain_eager() else _gemm_nd_kernel
            grad_x = gemm(grad, w, False, not transposed, None, precision) if needs[0] else None
            grad_w = None
            if needs[1]:
                grad_w = gemm(grad, x, True, False, None, precision) if w_from_dy else gemm(x, grad, True, False, None, precision)
                grad_w = grad_w.mT if w_from_dy != transposed else grad_w
            return grad_x, grad_w, grad.sum_to_size(bias_shape) if bias_shape is not None and needs[2] else None

        return _function("TiledmmRows", forward, backward)

    return {precision: function(precision) for precision in _PRECISION_CODES.values()}


_apply_rows = (_rows_functions(False), _rows_functions(True))  # indexed by transposed


def rows_in_plain_eager(x, w, transposed, bias, precision):
    """x @ w^T (transposed) or x @ w, plus bias (None, or 1-D of the operands' dtype after
    autocast's cast), in plain eager on plain tensors of at least 2 (x) and exactly 2 (w)
    dimensions: the operator alone without gradients, else one graph node (_rows_functions). None where another
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
            return _gemm_nd_kernel(x, w, False, transposed, bias, precision)
        apply = _apply_rows[transposed].get(precision)
        if apply is None:  # a precision code that the operator refuses: the general path's error
            return None
        return apply(x, w) if bias is None else apply(x, w, bias)
    except RuntimeError:
        return None


_register("mm", mm, 2)
_register("bmm", bmm, 2)
_register("_bmm_with_config", bmm, 4)  # (a, b, tile, splits, precision)
