"""The chains the fused CUDA kernel computes, recognised in a graph (thesis ch. 3, Fig. 3.9):

- a GEMM chain ``E = (A @ B) @ D``;
- attention ``E = softmax(scale * (A @ B)) @ D`` (``ops.scale`` optional; ``ops.softmax``'s
  five computes over the last axis);

all float16, each product a ``matmul`` or ``batch_matmul`` with row-major operands
(``A[b, i, k]``, ``B[b, k, j]``; a batch of one may index its batch with 0).

>>> from tilecraft import ops, te
>>> from tilecraft.graph import Graph
>>> A = te.placeholder((2, 17, 24), name="A", dtype="float16")
>>> B = te.placeholder((2, 24, 33), name="B", dtype="float16")
>>> D = te.placeholder((2, 33, 40), name="D", dtype="float16")
>>> T = ops.batch_matmul(A, B, name="T")
>>> E = ops.batch_matmul(ops.softmax(ops.scale(T, 0.125, name="Ts"), name="S"), D, name="E")
>>> chain = match_chain(Graph.from_outputs([E]).computes[-1])
>>> chain.shape, chain.softmax, chain.scale, chain.names[0], chain.names[-1]
((2, 17, 24, 33, 40), True, 0.125, 'T', 'E')
"""

from __future__ import annotations

from dataclasses import dataclass

from tilecraft.dtypes import DType
from tilecraft.te.expr import (
    Binary,
    BinaryOp,
    Cast,
    Const,
    Expr,
    Load,
    Reduce,
    ReduceOp,
    Unary,
    UnaryOp,
)
from tilecraft.te.tensor import Tensor

__all__ = ["ConvGeometry", "FusedChain", "match_chain", "relu_input"]


@dataclass(frozen=True)
class ConvGeometry:
    """A convolution chain's first convolution (NCHW input ``batch x channels x height x
    width``, ``kernel_h x kernel_w`` window, ``stride``, ``pad`` on every side) giving an
    ``out_h x out_w`` image; the second one is 1x1 (:mod:`.conv_chain`)."""

    batch: int
    channels: int
    height: int
    width: int
    kernel_h: int
    kernel_w: int
    stride: int
    pad: int
    out_h: int
    out_w: int


@dataclass(frozen=True)
class FusedChain:
    """``E[b] = middle(A[b] @ B[b]) @ D[b]``: ``computes`` in order, first the product ``T``,
    last ``E``; ``softmax`` over the rows of ``T`` (after ``scale`` when not None), or
    ``relu``. With ``conv``, ``A`` is the image of a convolution chain seen as an implicit
    GEMM (rows: output pixels, columns: channel x window), ``B`` and ``D`` its weights."""

    a: Tensor
    b: Tensor
    d: Tensor
    e: Tensor
    computes: tuple[Tensor, ...]
    softmax: bool = False
    scale: float | None = None
    relu: bool = False
    conv: ConvGeometry | None = None

    @property
    def batch(self) -> int:
        if self.conv is not None:
            return 1
        return self.a.shape[0] if self.a.ndim == 3 else 1

    @property
    def m(self) -> int:
        if self.conv is not None:
            return self.conv.batch * self.conv.out_h * self.conv.out_w
        return self.a.shape[-2]

    @property
    def k(self) -> int:
        if self.conv is not None:
            return self.conv.channels * self.conv.kernel_h * self.conv.kernel_w
        return self.a.shape[-1]

    @property
    def l(self) -> int:  # noqa: E743
        return self.b.shape[0] if self.conv is not None else self.b.shape[-1]

    @property
    def n(self) -> int:
        return self.d.shape[0] if self.conv is not None else self.d.shape[-1]

    @property
    def shape(self) -> tuple[int, int, int, int, int]:
        """``(batch, M, K, L, N)``."""
        return (self.batch, self.m, self.k, self.l, self.n)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.computes)

    @property
    def flops(self) -> int:
        return 2 * self.batch * self.m * self.l * (self.k + self.n)


def _strip(expr: Expr) -> Expr:
    while isinstance(expr, Cast):
        expr = expr.x
    return expr


def _index_matches(index: Expr, axis: object, extent: int) -> bool:
    """``index`` is ``axis`` itself, or the constant 0 of an axis of extent 1."""
    if index is axis or index == axis:
        return True
    return extent == 1 and isinstance(index, Const) and index.value == 0


def _product_operands(tensor: Tensor) -> tuple[Tensor, Tensor] | None:
    """``(lhs, rhs)`` when ``tensor`` is ``sum_r lhs[b, i, r] * rhs[b, r, j]`` (or 2-D) of
    float16 tensors into a float16 result, else None."""
    body = getattr(tensor.op, "body", None)
    axes = tuple(getattr(tensor.op, "axes", ()))
    if not isinstance(body, Reduce) or body.op is not ReduceOp.SUM or len(body.axes) != 1 \
            or len(axes) not in (2, 3) or tensor.dtype is not DType.FLOAT16:
        return None
    product = _strip(body.body)
    if not isinstance(product, Binary) or product.op is not BinaryOp.MUL:
        return None
    lhs, rhs = _strip(product.a), _strip(product.b)
    if not (isinstance(lhs, Load) and isinstance(rhs, Load)):
        return None
    r = body.axes[0]
    *lead, i, j = axes
    want_lhs, want_rhs = (*lead, i, r), (*lead, r, j)
    for load, want in ((lhs, want_lhs), (rhs, want_rhs)):
        if load.tensor.dtype is not DType.FLOAT16 or load.tensor.ndim != len(want):
            return None
        if not all(_index_matches(index, axis, extent) for index, axis, extent in
                   zip(load.indices, want, load.tensor.shape, strict=True)):
            return None
    return lhs.tensor, rhs.tensor


def _body(tensor: Tensor) -> Expr | None:
    body = getattr(tensor.op, "body", None)
    return None if body is None else _strip(body)


def _single_load(expr: Expr) -> Tensor | None:
    expr = _strip(expr)
    return expr.tensor if isinstance(expr, Load) else None


def _scale_of(tensor: Tensor) -> tuple[Tensor, float] | None:
    """``(x, c)`` when ``tensor`` is ``x * c`` elementwise (casts allowed), else None."""
    body = _body(tensor)
    if not isinstance(body, Binary) or body.op is not BinaryOp.MUL:
        return None
    for load, const in ((body.a, body.b), (body.b, body.a)):
        source, const = _single_load(load), _strip(const)
        if source is not None and isinstance(const, Const) and source.shape == tensor.shape:
            return source, float(const.value)
    return None


def _scaled_load(expr: Expr) -> tuple[Load, float | None] | None:
    """``(load, c)`` when ``expr`` is ``load * c`` (casts allowed), ``(load, None)`` when it is a
    load, else None: a softmax's input as the inline_elementwise pass leaves it (the scale folded
    into the row max and the exponent)."""
    expr = _strip(expr)
    if isinstance(expr, Load):
        return expr, None
    if isinstance(expr, Binary) and expr.op is BinaryOp.MUL:
        for load, const in ((_strip(expr.a), _strip(expr.b)), (_strip(expr.b), _strip(expr.a))):
            if isinstance(load, Load) and isinstance(const, Const):
                return load, float(const.value)
    return None


def _softmax_input(tensor: Tensor
                   ) -> tuple[Tensor, tuple[Tensor, ...], float | None] | None:
    """``(x, computes, scale)`` when ``tensor`` is ``ops.softmax(x)`` over the last axis — its
    five computes (max, sub, exp, sum, tensor), or four when the graph passes folded the
    subtraction into the exponent, with ``x * scale`` read in place of ``x`` when they folded
    an ``ops.scale`` in (``scale`` None otherwise) — else None."""
    body = _body(tensor)
    if not isinstance(body, Binary) or body.op is not BinaryOp.DIV:
        return None
    exp, total = _single_load(body.a), _single_load(body.b)
    if exp is None or total is None:
        return None
    exp_body, total_body = getattr(exp.op, "body", None), getattr(total.op, "body", None)
    if not (isinstance(exp_body, Unary) and exp_body.op is UnaryOp.EXP
            and isinstance(total_body, Reduce) and total_body.op is ReduceOp.SUM
            and _single_load(total_body.body) is exp and total.ndim == tensor.ndim - 1):
        return None
    sub = _single_load(exp_body.x)
    sub_body = getattr(sub.op, "body", None) if sub is not None else _strip(exp_body.x)
    if not (isinstance(sub_body, Binary) and sub_body.op is BinaryOp.SUB):
        return None
    value, row_max = _scaled_load(sub_body.a), _single_load(sub_body.b)
    max_body = getattr(row_max.op, "body", None) if row_max is not None else None
    if value is None or not (isinstance(max_body, Reduce) and max_body.op is ReduceOp.MAX):
        return None
    (load, scale), reduced_value = value, _scaled_load(max_body.body)
    if reduced_value is None or reduced_value[0].tensor is not load.tensor \
            or reduced_value[1] != scale:
        return None
    # the reductions run over the last axis: the reduced axis indexes x's last dimension
    reduced = max_body.axes
    if len(reduced) != 1 or reduced_value[0].indices[-1] is not reduced[0]:
        return None
    assert row_max is not None
    middle = (row_max, sub, exp, total, tensor) if sub is not None else (
        row_max, exp, total, tensor)
    return load.tensor, middle, scale


def relu_input(tensor: Tensor) -> Tensor | None:
    """``x`` when ``tensor`` is ``ops.relu(x)`` (``max(x, 0)``, casts allowed), else None."""
    body = _body(tensor)
    if not isinstance(body, Binary) or body.op is not BinaryOp.MAX:
        return None
    for value, zero in ((body.a, body.b), (body.b, body.a)):
        source, zero = _single_load(value), _strip(zero)
        if source is not None and isinstance(zero, Const) and zero.value == 0 \
                and source.shape == tensor.shape:
            return source
    return None


def match_chain(e: Tensor) -> FusedChain | None:
    """The chain ending in the product ``e`` (module docstring), or None; a convolution
    chain (:func:`.conv_chain.match_conv_chain`) otherwise."""
    second = _product_operands(e)
    if second is None:
        from tilecraft_nvidia_tc.fusion.conv_chain import match_conv_chain

        return match_conv_chain(e)
    middle, d = second
    computes: list[Tensor] = []
    softmax, scale, relu = False, None, False
    below = relu_input(middle)
    if below is not None:
        computes, middle, relu = [middle], below, True
    found = None if relu else _softmax_input(middle)
    if found is not None:
        middle, softmax_computes, scale = found
        computes = list(softmax_computes)
        softmax = True
        scaled = _scale_of(middle) if scale is None else None
        if scaled is not None:
            computes.insert(0, middle)
            middle, scale = scaled
    first = _product_operands(middle)
    if first is None or middle.shape[:-1] != e.shape[:-1]:
        return None
    a, b = first
    if a.ndim != d.ndim or (a.ndim == 3 and not (a.shape[0] == b.shape[0] == d.shape[0])):
        return None
    return FusedChain(a, b, d, e, (middle, *computes, e), softmax, scale, relu)
