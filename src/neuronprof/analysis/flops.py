"""FLOPs and bytes moved per operator call, from the shapes and dtypes a trace recorded.

These are the usual first-order estimates a roofline needs, not a simulation:

* Element-wise ops: one FLOP per output element (two for ``addcmul``,
  ``addcdiv``, ``lerp``), as ``torch.utils.flop_counter`` counts ``add``/``mul``.
* Reductions (``sum``, ``mean``, ``amax``, ...): one FLOP per input element
  (two for ``var``/``std``/``norm``).
* ``softmax``/``log_softmax``: five FLOPs per element (max, subtract, exp, sum, divide).
* ``layer_norm``/``group_norm``/``batch_norm``: eight per element; ``rms_norm``: four.
* ``mm``/``addmm``/``bmm``/``baddbmm``/``matmul``/``linear``: ``2·M·K·N`` per
  matrix product, as torch counts them.
* ``scaled_dot_product_attention`` and its fused kernels: ``2·B·H·L·S·(E + Ev)``
  forward (the two matrix products; causal masking is not discounted, as in
  torch's flop counter), four matrix products backward.
* Convolutions: ``2 · output elements · (C_in / groups) · kernel size``.
* Copies (``copy_``, ``clone``, ``cat``, ``_to_copy``, ``fill_``): zero FLOPs.

Bytes moved are every tensor input read once plus every output written once,
at the element size of its dtype. Views (``view``, ``t``, ``expand``, ...) move
nothing and have no estimate. An op without a formula, or without recorded
shapes, has no estimate (``None``) rather than a guess.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Optional

__all__ = ["DTYPE_SIZES", "OpCost", "dtype_size", "op_cost"]

DTYPE_SIZES: dict[str, int] = {
    # As torch.profiler writes them in "Input type" (C++ type names)...
    "float": 4,
    "double": 8,
    "c10::Half": 2,
    "c10::BFloat16": 2,
    "long int": 8,
    "long": 8,
    "int": 4,
    "short int": 2,
    "short": 2,
    "signed char": 1,
    "unsigned char": 1,
    "bool": 1,
    "unsigned short": 2,
    "unsigned int": 4,
    "unsigned long": 8,
    "c10::complex<c10::Half>": 4,
    "c10::complex<float>": 8,
    "c10::complex<double>": 16,
    "c10::Float8_e4m3fn": 1,
    "c10::Float8_e4m3fnuz": 1,
    "c10::Float8_e5m2": 1,
    "c10::Float8_e5m2fnuz": 1,
    "c10::Float8_e8m0fnu": 1,
    "c10::Float4_e2m1fn_x2": 1,
    "c10::qint8": 1,
    "c10::quint8": 1,
    "c10::qint32": 4,
    "c10::quint4x2": 1,
    # ...and as torch.dtype names, which other tools write.
    "float32": 4,
    "float64": 8,
    "float16": 2,
    "half": 2,
    "bfloat16": 2,
    "int64": 8,
    "int32": 4,
    "int16": 2,
    "int8": 1,
    "uint8": 1,
    "complex64": 8,
    "complex128": 16,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
}
"""Element size in bytes for each dtype name a trace may record."""

# torch.ScalarType codes, as "Concrete Inputs" records a dtype argument.
_SCALAR_TYPE_SIZES = {0: 1, 1: 1, 2: 2, 3: 4, 4: 8, 5: 2, 6: 4, 7: 8, 8: 4, 9: 8, 10: 16, 11: 1, 15: 2}


def dtype_size(name: str) -> Optional[int]:
    """Return the element size in bytes of a dtype name (``"float"``, ``"c10::BFloat16"``, ``"torch.half"``...).

    Returns ``None`` for a name that is not a tensor dtype (``"Scalar"``, ``""``, ``"TensorList"``).

    Args:
        name: A dtype name as a trace or torch writes it.
    """
    if not isinstance(name, str):
        return None
    size = DTYPE_SIZES.get(name)
    if size is None and name.startswith("torch."):
        size = DTYPE_SIZES.get(name[6:])
    return size


@dataclass(frozen=True)
class OpCost:
    """Estimated work of one call of an operator.

    Attributes:
        flops: Floating-point operations.
        bytes: Bytes read and written (each tensor input once, each output once).
    """

    flops: float
    bytes: float

    @property
    def intensity(self) -> Optional[float]:
        """Arithmetic intensity in FLOP/byte; ``None`` when nothing is moved."""
        return self.flops / self.bytes if self.bytes > 0 else None


Tensor = tuple[tuple[int, ...], int]  # (shape, element size)


class _Args:
    """The inputs of one call: tensors by position, plus the concrete scalar arguments."""

    def __init__(self, dims: Sequence[Any], dtypes: Sequence[str], concrete: Optional[Sequence[str]]) -> None:
        self.tensors: list[Optional[Tensor]] = []
        self.lists: list[Optional[list[Tensor]]] = []
        for i, d in enumerate(dims):
            dtype = dtypes[i] if i < len(dtypes) else ""
            size = dtype_size(dtype)
            self.tensors.append((d, size) if size is not None and _is_shape(d) else None)
            if isinstance(d, tuple) and d and all(_is_shape(x) for x in d) and not _is_shape(d):
                self.lists.append([(x, 4) for x in d])  # a tensor list records no dtype per tensor
            else:
                self.lists.append(None)
        self.concrete = list(concrete) if concrete is not None else []
        first = next((t for t in self.tensors if t is not None), None)
        self.elem = first[1] if first else 4

    def tensor(self, i: int) -> Optional[Tensor]:
        return self.tensors[i] if i < len(self.tensors) else None

    def all_tensors(self) -> list[Tensor]:
        return [t for t in self.tensors if t is not None]

    def in_bytes(self) -> float:
        return float(sum(math.prod(s) * e for s, e in self.all_tensors()))

    def text(self, i: int) -> str:
        return self.concrete[i] if i < len(self.concrete) and isinstance(self.concrete[i], str) else ""


def _is_shape(d: Any) -> bool:
    return isinstance(d, tuple) and all(type(x) is int and x >= 0 for x in d)


def _broadcast(shapes: Sequence[Sequence[int]]) -> Optional[tuple[int, ...]]:
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for axis in range(-ndim, 0):
        size = 1
        for s in shapes:
            if len(s) >= -axis:
                d = s[axis]
                if d != 1:
                    if size not in (1, d):
                        return None
                    size = d
        out.append(size)
    return tuple(out)


def _ints(text: str) -> Optional[list[int]]:
    """Parse ``"[-1]"``, ``"[0, 1]"``, ``"2"`` (a concrete argument) into ints."""
    text = text.strip()
    if not text:
        return None
    found = re.findall(r"-?\d+", text)
    if not found or not re.fullmatch(r"\[?\s*(-?\d+\s*,?\s*)*\]?", text):
        return None
    return [int(x) for x in found]


# -- formula families ------------------------------------------------------------------


def _elementwise(per_element: float) -> Callable[[_Args], Optional[OpCost]]:
    def cost(a: _Args) -> Optional[OpCost]:
        tensors = a.all_tensors()
        if not tensors:
            return None
        out = _broadcast([s for s, _ in tensors])
        if out is None:
            return None
        elem = max(e for _, e in tensors)
        n = math.prod(out)
        return OpCost(per_element * n, a.in_bytes() + n * elem)

    return cost


def _copy(a: _Args) -> Optional[OpCost]:
    lists = [t for lst in a.lists if lst for t in lst]
    if lists:  # cat/stack: read every tensor, write them all again
        moved = sum(math.prod(s) * a.elem for s, _ in lists)
        return OpCost(0.0, 2.0 * moved)
    src = a.tensor(0)
    if src is None:
        return None
    return OpCost(0.0, 2.0 * math.prod(src[0]) * src[1])


def _copy_into(a: _Args) -> Optional[OpCost]:
    tensors = a.all_tensors()
    if not tensors:
        return None
    return OpCost(0.0, a.in_bytes() if len(tensors) > 1 else 2.0 * math.prod(tensors[0][0]) * tensors[0][1])


def _to_copy(a: _Args) -> Optional[OpCost]:
    src = a.tensor(0)
    if src is None:
        return None
    codes = _ints(a.text(1))
    out_elem = _SCALAR_TYPE_SIZES.get(codes[0], src[1]) if codes and len(codes) == 1 else src[1]
    n = math.prod(src[0])
    return OpCost(0.0, n * (src[1] + out_elem))


def _fill(a: _Args) -> Optional[OpCost]:
    dst = a.tensor(0)
    if dst is None:
        return None
    return OpCost(0.0, float(math.prod(dst[0]) * dst[1]))


def _reduction(per_element: float) -> Callable[[_Args], Optional[OpCost]]:
    def cost(a: _Args) -> Optional[OpCost]:
        src = a.tensor(0)
        if src is None:
            return None
        shape, elem = src
        n = math.prod(shape)
        dims = _ints(a.text(1))
        if dims is None or not shape:
            out = 1
        else:
            kept = list(shape)
            for d in dims:
                if -len(shape) <= d < len(shape):
                    kept[d] = 1
            out = math.prod(kept)
        return OpCost(per_element * n, a.in_bytes() + out * elem)

    return cost


def _same_shape_out(per_element: float) -> Callable[[_Args], Optional[OpCost]]:
    """Norms and softmax: the output has the first input's shape."""

    def cost(a: _Args) -> Optional[OpCost]:
        src = a.tensor(0)
        if src is None:
            return None
        n = math.prod(src[0])
        return OpCost(per_element * n, a.in_bytes() + n * src[1])

    return cost


def _matmul_dims(x: tuple[int, ...], y: tuple[int, ...]) -> Optional[tuple[int, int, int, int]]:
    """(batch, M, K, N) of ``x @ y`` with torch.matmul's broadcasting; None if they do not fit."""
    if not x or not y:
        return None
    xs = (1, *x) if len(x) == 1 else x
    ys = (*y, 1) if len(y) == 1 else y
    m, k = xs[-2], xs[-1]
    k2, n = ys[-2], ys[-1]
    if k != k2:
        return None
    batch = _broadcast([xs[:-2], ys[:-2]])
    if batch is None:
        return None
    return math.prod(batch), m, k, n


def _mm(x_index: int) -> Callable[[_Args], Optional[OpCost]]:
    def cost(a: _Args) -> Optional[OpCost]:
        x, y = a.tensor(x_index), a.tensor(x_index + 1)
        if x is None or y is None:
            return None
        dims = _matmul_dims(x[0], y[0])
        if dims is None:
            return None
        b, m, k, n = dims
        return OpCost(2.0 * b * m * k * n, a.in_bytes() + b * m * n * x[1])

    return cost


def _linear(a: _Args) -> Optional[OpCost]:
    x, w = a.tensor(0), a.tensor(1)
    if x is None or w is None or not x[0] or len(w[0]) != 2 or x[0][-1] != w[0][1]:
        return None
    rows = math.prod(x[0][:-1])
    k, n = w[0][1], w[0][0]
    return OpCost(2.0 * rows * k * n, a.in_bytes() + rows * n * x[1])


def _attention(first: int, seq_axis: int, factor: float, backward: bool) -> Callable[[_Args], Optional[OpCost]]:
    def cost(a: _Args) -> Optional[OpCost]:
        q, k, v = a.tensor(first), a.tensor(first + 1), a.tensor(first + 2)
        if q is None or k is None or v is None:
            return None
        qs, ks, vs = q[0], k[0], v[0]
        if min(len(qs), len(ks), len(vs)) < 2:
            return None
        seq_q, seq_k = qs[seq_axis], ks[seq_axis]
        e, ev = qs[-1], vs[-1]
        batch = math.prod(qs) // max(1, seq_q * e)
        flops = factor * 2.0 * batch * seq_q * seq_k * (e + ev)
        written = (math.prod(qs) + math.prod(ks) + math.prod(vs)) * q[1] if backward else batch * seq_q * ev * q[1]
        return OpCost(flops, a.in_bytes() + written)

    return cost


def _conv(stride_at: int, transposed_at: Optional[int], groups_at: int) -> Callable[[_Args], Optional[OpCost]]:
    def cost(a: _Args) -> Optional[OpCost]:
        x, w = a.tensor(0), a.tensor(1)
        if x is None or w is None or len(x[0]) < 3 or len(w[0]) != len(x[0]):
            return None
        spatial = len(x[0]) - 2
        stride = _expand(_ints(a.text(stride_at)), spatial, 1)
        padding = _expand(_ints(a.text(stride_at + 1)), spatial, 0)
        dilation = _expand(_ints(a.text(stride_at + 2)), spatial, 1)
        transposed = transposed_at is not None and a.text(transposed_at).strip().lower() == "true"
        groups_list = _ints(a.text(groups_at))
        groups = groups_list[0] if groups_list and groups_list[0] > 0 else 1
        kernel = w[0][2:]
        out_sp = []
        for i in range(spatial):
            size = x[0][2 + i]
            eff = dilation[i] * (kernel[i] - 1) + 1
            if transposed:
                out_sp.append((size - 1) * stride[i] - 2 * padding[i] + eff)
            else:
                out_sp.append((size + 2 * padding[i] - eff) // max(1, stride[i]) + 1)
        if any(s <= 0 for s in out_sp):
            return None
        c_out = w[0][1] * groups if transposed else w[0][0]
        c_in = x[0][1]
        out_numel = x[0][0] * c_out * math.prod(out_sp)
        flops = 2.0 * out_numel * (c_in // groups) * math.prod(kernel)
        if transposed:  # the same work, counted over the input instead
            flops = 2.0 * math.prod(x[0]) * (w[0][1]) * math.prod(kernel)
        return OpCost(flops, a.in_bytes() + out_numel * x[1])

    return cost


def _expand(values: Optional[list[int]], n: int, default: int) -> list[int]:
    if not values:
        return [default] * n
    if len(values) == 1:
        return values * n
    return (values + [default] * n)[:n]


_FORMULAS: dict[str, Callable[[_Args], Optional[OpCost]]] = {}


def _register(names: str, formula: Callable[[_Args], Optional[OpCost]]) -> None:
    for name in names.split():
        _FORMULAS[name] = formula


_register(
    "add sub rsub mul div true_divide floor_divide pow rsqrt sqrt exp exp2 log log2 log10 log1p expm1 neg abs "
    "relu relu6 gelu silu sigmoid tanh clamp clamp_min clamp_max maximum minimum reciprocal sin cos tan erf erfc "
    "floor ceil round trunc frac sign sgn square hardtanh leaky_relu elu selu celu softplus mish hardswish "
    "hardsigmoid threshold threshold_backward gelu_backward silu_backward sigmoid_backward tanh_backward "
    "eq ne lt gt le ge where masked_fill logical_and logical_or logical_not logical_xor bitwise_and bitwise_or "
    "bitwise_xor bitwise_not remainder fmod atan2 hypot xlogy nan_to_num",
    _elementwise(1.0),
)
_register("addcmul addcdiv lerp", _elementwise(2.0))
_register("sum mean nansum amax amin max min prod argmax argmin all any count_nonzero logsumexp", _reduction(1.0))
_register("var std var_mean std_mean norm linalg_vector_norm", _reduction(2.0))
_register("softmax _softmax log_softmax _log_softmax", _same_shape_out(5.0))
_register("_softmax_backward_data _log_softmax_backward_data", _same_shape_out(3.0))
_register(
    "layer_norm native_layer_norm group_norm native_group_norm batch_norm native_batch_norm "
    "_native_batch_norm_legit _native_batch_norm_legit_no_training instance_norm",
    _same_shape_out(8.0),
)
_register("rms_norm _fused_rms_norm", _same_shape_out(4.0))
_register("mm bmm matmul", _mm(0))
_register("addmm baddbmm addbmm", _mm(1))
_register("linear", _linear)
_register(
    "scaled_dot_product_attention _scaled_dot_product_flash_attention _scaled_dot_product_efficient_attention "
    "_scaled_dot_product_cudnn_attention _scaled_dot_product_flash_attention_for_cpu "
    "_scaled_dot_product_attention_math _scaled_dot_product_fused_attention_overrideable",
    _attention(0, -2, 1.0, backward=False),
)
# These two take (batch, seq, heads, dim) rather than (batch, heads, seq, dim).
_register("_flash_attention_forward _efficient_attention_forward", _attention(0, -3, 1.0, backward=False))
_register(
    "_scaled_dot_product_flash_attention_backward _scaled_dot_product_efficient_attention_backward "
    "_scaled_dot_product_cudnn_attention_backward _scaled_dot_product_flash_attention_for_cpu_backward "
    "_scaled_dot_product_fused_attention_overrideable_backward",
    _attention(1, -2, 2.0, backward=True),
)
_register("_flash_attention_backward _efficient_attention_backward", _attention(1, -3, 2.0, backward=True))
_register("convolution _convolution", _conv(3, 6, 8))
_register("conv1d conv2d conv3d cudnn_convolution mkldnn_convolution", _conv(3, None, 6))
_register("copy_ clone contiguous_ cat stack", _copy)
_register("_copy_from _copy_from_and_resize", _copy_into)
_register("_to_copy", _to_copy)
_register("fill_ zero_ zeros_like ones_like full_like", _fill)


def _base_name(name: str) -> str:
    # "aten::add_.Tensor" -> "add": the in-place variant moves the same bytes.
    base = name.rsplit("::", 1)[-1].split(".", 1)[0]
    if base not in _FORMULAS and base.endswith("_") and not base.startswith("_"):
        base = base[:-1]
    return base


def op_cost(
    name: str,
    input_dims: Optional[Sequence[Any]],
    input_dtypes: Optional[Sequence[str]],
    concrete_inputs: Optional[Sequence[str]] = None,
) -> Optional[OpCost]:
    """Estimate the FLOPs and bytes of one call of ``name`` from its recorded inputs.

    Args:
        name: Operator name, e.g. ``"aten::mm"`` (namespace and overload are ignored).
        input_dims: ``Input Dims`` as recorded: a shape (tuple of ints) per input.
        input_dtypes: ``Input type`` as recorded, one per input.
        concrete_inputs: ``Concrete Inputs`` as recorded (reduction dims, strides...).

    Returns:
        The estimate, or ``None`` when the op has no formula or the trace did
        not record what the formula needs.
    """
    if not input_dims or input_dtypes is None:
        return None
    formula = _FORMULAS.get(_base_name(name))
    if formula is None:
        return None
    try:
        cost = formula(_Args(list(input_dims), list(input_dtypes), concrete_inputs))
    except (ValueError, TypeError, IndexError, ZeroDivisionError, OverflowError):
        return None  # shapes that do not fit the formula: no estimate rather than a wrong one
    if cost is None or not (math.isfinite(cost.flops) and math.isfinite(cost.bytes)) or cost.bytes <= 0:
        return None
    return cost
