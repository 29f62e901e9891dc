"""BatchNorm folded into the convolution before it.

An inference batch norm is, per channel ``c``, ``y = x * a[c] + b[c]`` with ``a = gamma /
sqrt(var + eps)`` and ``b = beta - mean * a``. After a convolution (or any sum of products)
whose weights are constants, ``a`` goes into the weights and ``b`` becomes a bias:
``conv(x, W) * a[k] + b[k] == conv(x, W * a[k]) + b[k]``. A bias added between the two
(``conv -> bias_add -> batch_norm``) folds along: its ``+ bias[k]`` becomes ``+ bias[k] *
a[k]``.

Recognition is structural, not by name: the normalising compute reads the producer at its
own index only, and everything else it reads is a constant indexed by one axis (the
channel); its body is affine in the producer's value (sums, differences, products and
quotients with producer-free terms), so ``a`` and ``b`` are evaluated by the reference
interpreter. The producer is a sum over the product of two loads, one of a constant weight
indexed by the channel axis once and by nothing else on that position. Anything else — weights
that are inputs, a conv read by another consumer, a non-affine normalisation — is left alone.

>>> import numpy as np
>>> from tilecraft import te, ops
>>> from tilecraft.graph import Graph
>>> rng = np.random.default_rng(0)
>>> x = te.placeholder((1, 3, 6, 6), name="x")
>>> w = te.constant(rng.standard_normal((4, 3, 3, 3)), "float32", name="w")
>>> stats = [te.constant(rng.random(4) + 0.5, "float32", name=n) for n in "mvgb"]
>>> y = ops.batch_norm(ops.conv2d(x, w, name="conv"), *stats, name="bn")
>>> folded = fold_batch_norm(Graph.from_outputs([y]))
>>> [t.name for t in folded.computes], sorted(t.name for t in folded.constants)
(['conv', 'bn'], ['bn_bias', 'w_folded'])
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tilecraft.dtypes import DType
from tilecraft.graph import Graph
from tilecraft.passes.rewriting import rebuild_graph, with_body
from tilecraft.reference.evaluator import evaluate
from tilecraft.te.expr import (
    Binary,
    BinaryOp,
    Cast,
    Const,
    Expr,
    IterVar,
    Load,
    Reduce,
    ReduceOp,
    Unary,
    UnaryOp,
)
from tilecraft.te.tensor import Tensor, compute, constant
from tilecraft.te.visit import loads_in, substitute, transform, vars_in

Affine = tuple[Expr | None, Expr | None]  # (coefficient, offset); None stands for zero


def _add(a: Expr | None, b: Expr | None, subtract: bool = False) -> Expr | None:
    if b is None:
        return a
    if a is None:
        return Unary(UnaryOp.NEG, b) if subtract else b
    return Binary(BinaryOp.SUB if subtract else BinaryOp.ADD, a, b)


def _scale(a: Expr | None, factor: Expr, op: BinaryOp) -> Expr | None:
    return None if a is None else Binary(op, a, factor)


def affine_in(expr: Expr, value: Load) -> Affine | None:
    """``(a, b)`` with ``expr == a * value + b`` (``a``, ``b`` free of ``value``), or
    ``None`` when ``expr`` is not affine in ``value``."""
    if expr == value:
        return Const(1.0, DType.FLOAT32), None
    if value not in loads_in(expr):
        return None, expr
    if isinstance(expr, Cast) and expr.to == DType.FLOAT32 and expr.x.dtype.is_float:
        return affine_in(expr.x, value)
    if isinstance(expr, Unary) and expr.op is UnaryOp.NEG:
        inner = affine_in(expr.x, value)
        return None if inner is None else (_add(None, inner[0], True), _add(None, inner[1], True))
    if not isinstance(expr, Binary):
        return None
    left, right = affine_in(expr.a, value), affine_in(expr.b, value)
    if left is None or right is None:
        return None
    if expr.op in (BinaryOp.ADD, BinaryOp.SUB):
        subtract = expr.op is BinaryOp.SUB
        return _add(left[0], right[0], subtract), _add(left[1], right[1], subtract)
    if expr.op is BinaryOp.MUL and right[0] is None:
        return _scale(left[0], expr.b, expr.op), _scale(left[1], expr.b, expr.op)
    if expr.op is BinaryOp.MUL and left[0] is None:
        return _scale(right[0], expr.a, expr.op), _scale(right[1], expr.a, expr.op)
    if expr.op is BinaryOp.DIV and right[0] is None:
        return _scale(left[0], expr.b, expr.op), _scale(left[1], expr.b, expr.op)
    return None


@dataclass(frozen=True)
class ChannelAffine:
    """``tensor == source * scale[c] + shift[c]``, ``c`` the axis at ``position``."""

    tensor: Tensor
    source: Tensor
    position: int
    scale: np.ndarray
    shift: np.ndarray


def _per_channel(expr: Expr | None, axes: tuple[IterVar, ...], fill: float) -> tuple[set, Expr]:
    if expr is None:
        return set(), Const(fill, DType.FLOAT32)
    return {v for v in vars_in(expr) if v in axes}, expr


def channel_affine(tensor: Tensor) -> ChannelAffine | None:
    """``tensor`` seen as a per-channel affine function of the one compute it reads at its own
    index, with constant scale and shift; ``None`` if it is not one."""
    if tensor.reduce_axes or not tensor.dtype.is_float or tensor.ndim == 0:
        return None
    sources = [load for load in loads_in(tensor.body) if not load.tensor.is_constant]
    if not sources or any(load != sources[0] for load in sources):
        return None
    value = sources[0]
    if value.indices != tensor.axes or value.tensor.shape != tensor.shape \
            or value.tensor.is_placeholder:
        return None
    found = affine_in(tensor.body, value)
    if found is None or found[0] is None:
        return None
    used_a, coef = _per_channel(found[0], tensor.axes, 1.0)
    used_b, offset = _per_channel(found[1], tensor.axes, 0.0)
    used = used_a | used_b
    if len(used) > 1 or any(not isinstance(v, IterVar) for e in (coef, offset)
                            for v in vars_in(e) if v not in tensor.axes):
        return None
    position = tensor.axes.index(next(iter(used))) if used else min(1, tensor.ndim - 1)
    channel = tensor.axes[position]
    arrays = []
    for expr in (coef, offset):
        vector = compute((tensor.shape[position],),
                         lambda c, e=expr: substitute(e, {channel: c}).astype("float32"),
                         name=f"{tensor.name}_channel")
        arrays.append(evaluate(vector, {}).astype(np.float64))
    return ChannelAffine(tensor, value.tensor, position, arrays[0], arrays[1])


def _weight_load(conv: Tensor, position: int) -> Load | None:
    """The constant weight load of a sum of two products indexed by ``conv``'s axis at
    ``position`` exactly once (that index is the axis itself)."""
    body = conv.body
    if not isinstance(body, Reduce) or body.op is not ReduceOp.SUM:
        return None
    product = body.body
    if not isinstance(product, Binary) or product.op is not BinaryOp.MUL:
        return None
    channel = conv.axes[position]
    for factor in (product.a, product.b):
        load = factor.x if isinstance(factor, Cast) else factor
        if isinstance(load, Load) and load.tensor.is_constant:
            hits = [q for q, index in enumerate(load.indices) if channel in vars_in(index)]
            if len(hits) == 1 and load.indices[hits[0]] == channel:
                return load
    return None


class FoldBatchNorm:
    """The pass."""

    name = "fold_batch_norm"

    def __call__(self, graph: Graph) -> Graph:
        outputs = set(graph.outputs)
        replacements: dict[Tensor, Tensor] = {}
        for tensor in graph.computes:
            found = channel_affine(tensor)
            if found is None:
                continue
            stages = [found]
            inner = channel_affine(found.source)
            if inner is not None and inner.position == found.position \
                    and self._private(graph, found.source, outputs):
                stages.append(inner)  # conv -> bias -> normalisation
            conv = stages[-1].source
            if conv in replacements or not self._private(graph, conv, outputs):
                continue
            scale, shift = np.ones_like(found.scale), np.zeros_like(found.shift)
            for stage in stages:  # outermost first: y = s1 * (s2 * conv + b2) + b1
                shift = shift + scale * stage.shift
                scale = scale * stage.scale
            if len(stages) == 1 and np.all(scale == 1.0):
                continue  # already a conv and a bias
            folded = self._fold(tensor, conv, found.position, scale, shift)
            if folded is not None:
                replacements.update(folded)
        return rebuild_graph(graph, replacements)

    @staticmethod
    def _private(graph: Graph, tensor: Tensor, outputs: set[Tensor]) -> bool:
        return tensor not in outputs and len(graph.consumers(tensor)) == 1

    @staticmethod
    def _fold(tensor: Tensor, conv: Tensor, position: int, scale: np.ndarray,
              shift: np.ndarray) -> dict[Tensor, Tensor] | None:
        load = _weight_load(conv, position) if conv.reduce_axes else None
        if load is None or not np.all(np.isfinite(scale)) or not np.all(np.isfinite(shift)):
            return None
        weight = load.tensor
        axis = next(q for q, index in enumerate(load.indices) if index == conv.axes[position])
        shape = [1] * weight.ndim
        shape[axis] = weight.shape[axis]
        scaled = weight.constant_value.astype(np.float64) * scale.reshape(shape)
        new_weight = constant(scaled, weight.dtype, name=f"{weight.name}_folded")
        new_conv = with_body(conv, substitute_tensor(conv.body, weight, new_weight))
        bias = constant(shift, conv.dtype, name=f"{tensor.name}_bias")
        channel = tensor.axes[position]
        biased = with_body(tensor, (new_conv[tensor.axes].astype("float32")
                                    + bias[(channel,)].astype("float32")).astype(tensor.dtype))
        return {conv: new_conv, tensor: biased}


def substitute_tensor(expr: Expr, old: Tensor, new: Tensor) -> Expr:
    """``expr`` reading ``new`` wherever it read ``old``."""

    def swap(node: Expr) -> Expr | None:
        if isinstance(node, Load) and node.tensor is old:
            return Load(new, node.indices)
        return None

    return transform(expr, swap)


fold_batch_norm = FoldBatchNorm()

__all__ = ["ChannelAffine", "FoldBatchNorm", "affine_in", "channel_affine", "fold_batch_norm"]
