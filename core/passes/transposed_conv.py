"""A transposed convolution as a matrix product followed by a col2im gather (PyTorch's path).

:func:`tilecraft.ops.conv_transpose2d` is written in gather form: every output element sums
over all input channels and all kernel taps, and a select keeps only the taps whose input
position exists (``t % stride == 0``). With stride ``s`` only ``1 / s^nd`` of the products
are real; the rest multiply by a discarded value. The scatter form does only the real work:

1. ``cols[g, o, r..., n, i...] = sum_c w[g*Cg + c, o, r...] * x[n, g*Cg + c, i...]`` — the
   product of every weight tap with every input pixel, a batched contraction (batch ``g``,
   rows ``(o, r...)``, columns ``(n, i...)``, reduction ``c``) that a target's matrix-product
   kernels run near peak;
2. ``y[n, g*Og + o, Y...] = sum_r cols[g, o, r..., n, (Y + p - r*d) / s...]`` over the taps
   whose division is exact and in range — a memory-bound gather of ``prod(kernel)`` values
   per output element.

:func:`as_transposed_conv` recognises the gather form by reading the stride, padding and
dilation off the input's index expressions and checking that the operator rebuilt from them
is the very same compute (statement for statement), so nothing else is ever taken for one.

>>> from tilecraft import ops, te
>>> x = te.placeholder((1, 4, 5, 5), name="x")
>>> w = te.placeholder((4, 3, 4, 4), name="w")
>>> y = ops.conv_transpose2d(x, w, stride=2, padding=1, name="y")
>>> conv = as_transposed_conv(y)
>>> conv.stride, conv.padding, conv.dilation, conv.groups
((2, 2), (1, 1), (1, 1), 1)
>>> cols, gather = transposed_as_gemm(conv)
>>> print(cols.statement())
y_cols[g, o, rh, rw, n, h, w] = sum(w[g, rc, o, rh, rw] * x[n, g, rc, h, w], axis=[rc])
>>> gather.shape == y.shape, [t.name for t in gather.inputs]
(True, ['y_cols'])
"""

from __future__ import annotations

from dataclasses import dataclass

from tilecraft import ops, te
from tilecraft.dtypes import DType
from tilecraft.ops.conv import KERNEL_NAMES, SPATIAL_NAMES
from tilecraft.te.expr import Binary, BinaryOp, Const, Expr, IterVar, Load, Reduce, Select
from tilecraft.te.tensor import Tensor

_BUILDERS = {1: ops.conv_transpose1d, 2: ops.conv_transpose2d, 3: ops.conv_transpose3d}


@dataclass(frozen=True)
class TransposedConv:
    """A recognised transposed convolution: ``tensor`` = conv_transpose(``x``, ``w``, ...)."""

    tensor: Tensor
    x: Tensor
    w: Tensor
    stride: tuple[int, ...]
    padding: tuple[int, ...]
    dilation: tuple[int, ...]
    groups: int

    @property
    def flops(self) -> int:
        """The real multiply-adds (taps that hit an input), times two."""
        batch, in_channels, *spatial = self.x.shape
        _, out_per_group, *kernel = self.w.shape
        total = 2 * batch * in_channels * out_per_group
        for extent in (*spatial, *kernel):
            total *= extent
        return total


def _const(expr: Expr) -> int | None:
    return int(expr.value) if isinstance(expr, Const) else None


def _window(index: Expr) -> tuple[int, int, int, IterVar] | None:
    """``(stride, padding, dilation, tap)`` of one input index of the gather form:
    ``max(min((y + p - r*d) // s, in - 1), 0)``, or ``y + p - r*d`` when ``s == 1``."""
    stride = 1
    if isinstance(index, Binary) and index.op is BinaryOp.MAX:
        inner = index.a
        if not (_const(index.b) == 0 and isinstance(inner, Binary) and inner.op is BinaryOp.MIN
                and isinstance(inner.a, Binary) and inner.a.op is BinaryOp.FLOORDIV):
            return None
        stride = _const(inner.a.b) or 0
        index = inner.a.a
    if not (isinstance(index, Binary) and index.op is BinaryOp.SUB) or stride < 1:
        return None
    offset, tap_term = index.a, index.b
    padding = 0
    if isinstance(offset, Binary) and offset.op is BinaryOp.ADD:
        padding = _const(offset.b) or 0
        offset = offset.a
    dilation = 1
    if isinstance(tap_term, Binary) and tap_term.op is BinaryOp.MUL:
        dilation = _const(tap_term.b) or 0
        tap_term = tap_term.a
    if not isinstance(offset, IterVar) or not isinstance(tap_term, IterVar) or dilation < 1:
        return None
    return stride, padding, dilation, tap_term


def as_transposed_conv(tensor: Tensor) -> TransposedConv | None:
    """``tensor`` as a float32 transposed convolution in the gather form of
    :mod:`tilecraft.ops.conv_transpose`, or ``None``."""
    if tensor.is_placeholder or tensor.dtype is not DType.FLOAT32:
        return None
    body = tensor.body
    if not (isinstance(body, Reduce) and isinstance(body.body, Binary)
            and body.body.op is BinaryOp.MUL and isinstance(body.body.a, Select)
            and isinstance(body.body.a.true_value, Load) and isinstance(body.body.b, Load)):
        return None
    x_load, w_load = body.body.a.true_value, body.body.b
    x, w = x_load.tensor, w_load.tensor
    nd = x.ndim - 2
    if nd not in _BUILDERS or w.ndim != x.ndim or tensor.ndim != x.ndim:
        return None
    if x.dtype is not DType.FLOAT32 or w.dtype is not DType.FLOAT32:
        return None
    windows = [_window(index) for index in x_load.indices[2:]]
    if any(window is None for window in windows):
        return None
    stride = tuple(wd[0] for wd in windows)  # type: ignore[index]
    padding = tuple(wd[1] for wd in windows)  # type: ignore[index]
    dilation = tuple(wd[2] for wd in windows)  # type: ignore[index]
    out_per_group = w.shape[1]
    if tensor.shape[1] % out_per_group:
        return None
    groups = tensor.shape[1] // out_per_group
    extra = []
    for d in range(nd):
        natural = ((x.shape[2 + d] - 1) * stride[d] - 2 * padding[d]
                   + dilation[d] * (w.shape[2 + d] - 1) + 1)
        extra.append(tensor.shape[2 + d] - natural)
    try:
        rebuilt = _BUILDERS[nd](x, w, stride=stride, padding=padding, output_padding=extra,
                                dilation=dilation, groups=groups, name=tensor.name)
    except Exception:  # noqa: BLE001 - parameters that do not make an operator: not one
        return None
    if rebuilt.shape != tensor.shape or rebuilt.statement() != tensor.statement():
        return None
    return TransposedConv(tensor, x, w, stride, padding, dilation, groups)


def transposed_as_gemm(conv: TransposedConv) -> tuple[Tensor, Tensor]:
    """The two computes of the scatter form (see the module docstring): ``<y>_cols``, a
    batched contraction, and the gather ``<y>`` (same name and shape as ``conv.tensor``),
    which reads ``<y>_cols`` as a placeholder (its kernel takes the workspace as a
    parameter)."""
    x, w, groups = conv.x, conv.w, conv.groups
    nd = x.ndim - 2
    batch, in_channels, *in_spatial = x.shape
    _, out_per_group, *kernel = w.shape
    in_per_group = in_channels // groups
    name = conv.tensor.name
    # views of the operands with the group split off the channel dimension (same memory)
    w_view = te.placeholder((groups, in_per_group, out_per_group, *kernel), w.dtype, name=w.name)
    x_view = te.placeholder((batch, groups, in_per_group, *in_spatial), x.dtype, name=x.name)
    rc = te.reduce_axis(in_per_group, "rc")

    def cols_body(g, o, *rest):
        taps, n, pixels = rest[:nd], rest[nd], rest[nd + 1:]
        return te.sum(w_view[(g, rc, o, *taps)] * x_view[(n, g, rc, *pixels)], axis=rc)

    cols_shape = (groups, out_per_group, *kernel, batch, *in_spatial)
    cols = te.compute(cols_shape, _named(cols_body, ["g", "o", *KERNEL_NAMES[nd], "n",
                                                     *SPATIAL_NAMES[nd]]), name=f"{name}_cols")
    cols_in = te.placeholder(cols_shape, cols.dtype, name=cols.name)
    taps = [te.reduce_axis(extent, tap) for extent, tap in zip(kernel, KERNEL_NAMES[nd])]

    def gather_body(n, channel, *out):
        conditions, source = [], []
        for d, (y, tap) in enumerate(zip(out, taps)):
            s, p, dil = conv.stride[d], conv.padding[d], conv.dilation[d]
            t = y + p - tap * dil
            conditions += [t >= 0, t < in_spatial[d] * s]
            if s > 1:
                conditions.append(te.eq(t % s, 0))
            source.append(te.maximum(te.minimum(t // s, in_spatial[d] - 1), 0))
        group = channel // out_per_group if groups > 1 else 0
        inner = channel % out_per_group if groups > 1 else channel
        value = cols_in[(group, inner, *taps, n, *source)]
        return te.sum(te.select(te.all_of(*conditions), value, te.const(0.0, cols.dtype)),
                      axis=taps)

    gather = te.compute(conv.tensor.shape,
                        _named(gather_body, ["n", "o", *SPATIAL_NAMES[nd]]), name=name)
    return cols, gather


def _named(body, names: list[str]):
    """``body`` with positional parameters named ``names`` (te names the axes after them)."""
    import inspect

    parameters = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_ONLY)
                  for n in names]

    def wrapper(*axes):
        return body(*axes)

    wrapper.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    return wrapper


__all__ = ["TransposedConv", "as_transposed_conv", "transposed_as_gemm"]
