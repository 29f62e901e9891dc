"""Algebraic simplification: rewrites that leave every value bit for bit the same.

- in every body: ``x * 1``, ``1 * x``, ``x / 1``, ``x - 0`` and ``x + (-0.0)`` become ``x``
  (``x + 0`` too for integers; a float ``x + 0.0`` is kept: it turns -0.0 into +0.0), a cast
  to the type a value already has disappears, and so does a round trip through a type that
  holds every value exactly (float16 -> float32 -> float16, int8 -> int32 -> int8);
- data movement: a compute that only gathers another (its body one load: a ``reshape``, a
  ``transpose``, an identity ``cast``) reading another such compute reads the first one's
  source directly, with the two index maps composed (reshape of reshape is one reshape,
  transpose of transpose one transpose);
- a gather that is the identity (a reshape to the same shape, transposes that cancel) is
  removed, its consumers reading its source; an output keeps its name as a plain copy.

>>> from tilecraft import te, ops
>>> from tilecraft.graph import Graph
>>> A = te.placeholder((2, 3, 4), name="A")
>>> T = ops.transpose(ops.transpose(A, (1, 0, 2), name="T1"), (1, 0, 2), name="T2")
>>> Y = ops.relu(T, name="Y")
>>> print(simplify(Graph.from_outputs([Y])))
graph(A: float32[2, 3, 4]) -> (Y):
  Y[i0, i1, i2] = max(A[i0, i1, i2], 0.0)
"""

from __future__ import annotations

import math

import numpy as np

from tilecraft.dtypes import DType
from tilecraft.graph import Graph
from tilecraft.passes.rewriting import rebuild_graph, with_body
from tilecraft.reference.evaluator import evaluate
from tilecraft.te.expr import Binary, BinaryOp, Cast, Const, Expr, Load
from tilecraft.te.tensor import ComputeOp, Tensor, placeholder
from tilecraft.te.visit import children, rebuild, substitute

#: (narrow, wide): every value of ``narrow`` converts to ``wide`` and back unchanged
EXACT_WIDENING = frozenset({
    (DType.FLOAT16, DType.FLOAT32), (DType.BFLOAT16, DType.FLOAT32),
    (DType.INT8, DType.INT32), (DType.UINT8, DType.INT32),
    (DType.INT8, DType.FLOAT32), (DType.UINT8, DType.FLOAT32),
    (DType.INT8, DType.FLOAT16), (DType.UINT8, DType.FLOAT16),
})

#: the largest gather whose index map is checked element by element (elements)
MAX_MAP_ELEMENTS = 1 << 24


def _is(expr: Expr, value: float) -> bool:
    return isinstance(expr, Const) and not isinstance(expr.value, bool) \
        and float(expr.value) == value


def _negative_zero(expr: Expr) -> bool:
    return isinstance(expr, Const) and isinstance(expr.value, float) and expr.value == 0.0 \
        and math.copysign(1.0, expr.value) < 0


def _simplify_node(expr: Expr) -> Expr:
    """One rewrite at the root of ``expr`` (children already simplified), or ``expr``."""
    if isinstance(expr, Cast):
        inner = expr.x
        if inner.dtype == expr.to:
            return inner
        if isinstance(inner, Cast) and inner.x.dtype == expr.to \
                and (expr.to, inner.to) in EXACT_WIDENING:
            return inner.x
        return expr
    if not isinstance(expr, Binary):
        return expr
    a, b, op = expr.a, expr.b, expr.op
    keep_a, keep_b = a.dtype == expr.dtype, b.dtype == expr.dtype
    integer = expr.dtype.is_int
    if op is BinaryOp.MUL:
        if _is(b, 1) and keep_a:
            return a
        if _is(a, 1) and keep_b:
            return b
    elif op is BinaryOp.DIV and _is(b, 1) and keep_a and not integer:
        return a
    elif op is BinaryOp.FLOORDIV and _is(b, 1) and keep_a and integer:
        return a
    elif op is BinaryOp.SUB and _is(b, 0) and keep_a:
        return a
    elif op is BinaryOp.ADD:
        if keep_a and (_negative_zero(b) or (integer and _is(b, 0))):
            return a
        if keep_b and (_negative_zero(a) or (integer and _is(a, 0))):
            return b
    return expr


def simplify_expr(expr: Expr) -> Expr:
    """``expr`` with the exact rewrites of this module applied bottom-up.

    >>> from tilecraft import te
    >>> A = te.placeholder((4,), "float16", name="A")
    >>> i = te.reduce_axis(4, name="i")
    >>> str(simplify_expr(A[i].astype("float32").astype("float16") * 1.0 - 0.0))
    'A[i]'
    """
    kids = children(expr)
    new_kids = tuple(simplify_expr(kid) for kid in kids)
    if any(new is not old for new, old in zip(new_kids, kids)):
        expr = rebuild(expr, new_kids)
    return _simplify_node(expr)


def gathered(tensor: Tensor) -> Load | None:
    """The load a pure gather compute (body: one load of a tensor of its dtype) consists of."""
    if not isinstance(tensor.op, ComputeOp) or tensor.reduce_axes:
        return None
    body = tensor.op.body
    if isinstance(body, Load) and body.tensor.dtype == tensor.dtype:
        return body
    return None


def index_map(tensor: Tensor, load: Load) -> np.ndarray | None:
    """For a gather ``tensor[axes] = source[load.indices]``: the flat source offset read by
    each output element (row-major), or ``None`` when the tensors are too large to check."""
    source = load.tensor
    if max(tensor.size, source.size) > MAX_MAP_ELEMENTS:
        return None
    offsets = placeholder(source.shape, DType.INT32, name=source.name)
    twin = Tensor(tensor.name, tensor.shape, DType.INT32,
                  ComputeOp(tensor.axes, Load(offsets, load.indices)))
    iota = np.arange(source.size, dtype=np.int32).reshape(source.shape)
    return evaluate(twin, {offsets: iota}).reshape(-1)


def _reshape_body(tensor: Tensor, source: Tensor) -> Expr:
    """The clean row-major reshape of ``source`` to ``tensor``'s shape, on ``tensor``'s axes."""
    from tilecraft.ops.layout import reshape

    clean = reshape(source, tensor.shape, name=tensor.name)
    return substitute(clean.body, dict(zip(clean.axes, tensor.axes)))


class Simplify:
    """The pass."""

    name = "simplify"

    def __call__(self, graph: Graph) -> Graph:
        outputs = set(graph.outputs)
        replacements: dict[Tensor, Tensor] = {}
        for tensor in graph.computes:
            body = simplify_expr(tensor.body)
            current = tensor if body is tensor.body else with_body(tensor, body)
            load = gathered(current)
            composed = False
            if load is not None:
                inner = replacements.get(load.tensor, load.tensor)
                inner_load = gathered(inner)
                if inner_load is not None:  # compose the two index maps
                    mapping = dict(zip(inner.axes, load.indices))
                    load = Load(inner_load.tensor,
                                tuple(substitute(index, mapping) for index in inner_load.indices))
                    current, composed = with_body(tensor, load), True
                current = self._normalise_gather(current, load, composed, tensor in outputs)
            if current is not tensor:
                replacements[tensor] = current
        return rebuild_graph(graph, replacements)

    @staticmethod
    def _normalise_gather(tensor: Tensor, load: Load, composed: bool, is_output: bool) -> Tensor:
        source = load.tensor
        if tensor.size != source.size:
            return tensor
        same_shape = tensor.shape == source.shape
        if same_shape and load.indices == tensor.axes:
            flat_identity = True
        else:
            offsets = index_map(tensor, load)
            flat_identity = offsets is not None and bool(
                np.array_equal(offsets, np.arange(tensor.size)))
        if not flat_identity:
            return tensor
        if same_shape:
            if not is_output:
                return source  # consumers read the source directly
            return with_body(tensor, Load(source, tensor.axes)) \
                if load.indices != tensor.axes else tensor
        # a row-major reinterpretation: one clean reshape (composed maps read badly)
        return with_body(tensor, _reshape_body(tensor, source)) if composed else tensor


simplify = Simplify()

__all__ = ["EXACT_WIDENING", "MAX_MAP_ELEMENTS", "Simplify", "gathered", "index_map",
           "simplify", "simplify_expr"]
