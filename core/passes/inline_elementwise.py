"""Elementwise computes inlined into the memory-bound computes that read them.

Every compute of a graph becomes a kernel that writes its whole result to memory and the next
kernel reads it back; for a chain of memory-bound computes (a bias add, a scale, a reshape,
softmax's subtract) that traffic is the whole cost. This pass folds such a compute ``E`` (no
reduction, not a graph output) into its consumers: each load ``E[idx]`` becomes ``E``'s body
with ``E``'s axes replaced by ``idx``, so ``softmax(scores * 0.125)`` reads ``scores`` once per
pass instead of writing a scaled copy, and a bias add before a head split is done by the split.

``E`` is inlined when every consumer may take it and

- one load of one consumer reads it (nothing is computed twice), or
- it reads at most one tensor of its own size (smaller operands: biases, per-row statistics)
  and calls no transcendental function: recomputing it per consumer costs a few arithmetic
  instructions and reads no more than reading ``E`` would.

On by default; ``tilecraft.compile(..., passes={"inline_elementwise": False})`` keeps one
kernel per compute. A compute's tuning key is its body (:func:`tilecraft.tuning.tasks.task_key`),
so a consumer that took an inlined body has a new key: :func:`tilecraft.tuning.tuner.tune` runs
the same graph passes as compile before it makes its tasks, so the records it writes are the
ones compile looks up. BERT-base layer on x86, 1 thread: 41 -> 25 computes, 99 -> 90 ms.

A consumer that is a sum of products (a matrix product, a convolution) never takes it: its
operands stay tensors, as the targets' contraction templates pack them. The result is exact:
the same arithmetic on the same values, in the same order per element, and a float16 or
bfloat16 body rounded where the compute would have stored it.

>>> from tilecraft import te
>>> from tilecraft.graph import Graph
>>> A = te.placeholder((4, 8), name="A")
>>> B = te.constant([1.0] * 8, "float32", name="B")
>>> S = te.compute((4, 8), lambda i, j: A[i, j] + B[j], name="S")
>>> R = te.compute((4, 8), lambda i, j: S[i, j] * 2.0, name="R")
>>> after = inline_elementwise(Graph.from_outputs([R]))
>>> [t.name for t in after.computes]
['R']
>>> print(after.tensor("R").statement())
R[i, j] = (A[i, j] + B[j]) * 2.0
"""

from __future__ import annotations

from tilecraft.dtypes import DType
from tilecraft.graph import Graph
from tilecraft.passes.rewriting import rebuild_graph, with_body
from tilecraft.te.expr import Binary, BinaryOp, Cast, Expr, Load, Reduce, ReduceOp, Unary, UnaryOp
from tilecraft.te.tensor import ComputeOp, Tensor
from tilecraft.te.visit import loads_in, substitute, transform, walk

#: unary operations cheap enough to compute once per consumer
_CHEAP_UNARY = frozenset({UnaryOp.NEG, UnaryOp.ABS, UnaryOp.FLOOR, UnaryOp.CEIL, UnaryOp.ROUND})


def _strip_casts(expr: Expr) -> Expr:
    while isinstance(expr, Cast):
        expr = expr.x
    return expr


def is_product_sum(tensor: Tensor) -> bool:
    """A sum over a product of two loads (a matrix product, a convolution)."""
    body = tensor.op.body if isinstance(tensor.op, ComputeOp) else None
    if not isinstance(body, Reduce) or body.op is not ReduceOp.SUM:
        return False
    product = _strip_casts(body.body)
    return isinstance(product, Binary) and product.op is BinaryOp.MUL and all(
        isinstance(_strip_casts(x), Load) for x in (product.a, product.b))


def _cheap(tensor: Tensor) -> bool:
    """At most one operand of ``tensor``'s size, no transcendental function."""
    large = [t for t in tensor.inputs if t.size * 2 > tensor.size]
    return len(large) <= 1 and not any(
        isinstance(node, Unary) and node.op not in _CHEAP_UNARY
        for node in walk(tensor.op.body))


class InlineElementwise:
    """The pass."""

    name = "inline_elementwise"
    enabled_by_default = True

    def __call__(self, graph: Graph) -> Graph:
        outputs = set(graph.outputs)
        order = graph.topological_order()
        inlined: set[Tensor] = set()
        for tensor in order:
            if not isinstance(tensor.op, ComputeOp) or tensor in outputs \
                    or tensor.reduce_axes or tensor.ndim == 0:
                continue
            consumers = graph.consumers(tensor)
            if not consumers or any(is_product_sum(c) for c in consumers):
                continue
            loads = sum(load.tensor is tensor for c in consumers for load in loads_in(c.op.body))
            if loads == 1 or _cheap(tensor):
                inlined.add(tensor)
        if not inlined:
            return graph
        bodies: dict[Tensor, Expr] = {}  # inlined computes' bodies, themselves expanded

        def expand(expr: Expr) -> Expr:
            def swap(node: Expr) -> Expr | None:
                if isinstance(node, Load) and node.tensor in bodies:
                    indices = tuple(transform(index, swap) for index in node.indices)
                    return substitute(bodies[node.tensor],
                                      dict(zip(node.tensor.op.axes, indices)))
                return None

            return transform(expr, swap)

        replacements: dict[Tensor, Tensor] = {}
        for tensor in order:
            if not isinstance(tensor.op, ComputeOp):
                continue
            reads_inlined = any(t in bodies for t in tensor.inputs)
            body = expand(tensor.op.body) if reads_inlined else tensor.op.body
            if tensor in inlined:
                # a half type's arithmetic runs unrounded in float32 and is rounded when the
                # compute stores it: the inlined body keeps that rounding as a Cast (which
                # rounds even from the same half type, tilecraft.reference.numerics)
                rounds = tensor.dtype in (DType.FLOAT16, DType.BFLOAT16) \
                    and not isinstance(body, Load)
                bodies[tensor] = body if body.dtype == tensor.dtype and not rounds \
                    else Cast(tensor.dtype, body)
            elif reads_inlined:
                replacements[tensor] = with_body(tensor, body)
        return rebuild_graph(graph, replacements)


inline_elementwise = InlineElementwise()

__all__ = ["InlineElementwise", "inline_elementwise", "is_product_sum"]
