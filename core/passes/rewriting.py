"""Rebuilding a graph with some tensors replaced: the one mechanism every graph pass uses.

Tensors are immutable and compared by identity, so replacing one compute means rebuilding
every compute downstream of it. :func:`rebuild_graph` does that in topological order: each
compute whose body loads a replaced (or rebuilt) tensor gets a new body reading the new one,
keeping its name, axes and dtype; computes no output depends on any more are left out.

>>> from tilecraft import te
>>> from tilecraft.graph import Graph
>>> A = te.placeholder((4,), name="A")
>>> B = te.compute((4,), lambda i: A[i] * 2.0, name="B")
>>> C = te.compute((4,), lambda i: B[i] + 1.0, name="C")
>>> B2 = te.compute((4,), lambda i: A[i] + A[i], name="B")
>>> print(rebuild_graph(Graph.from_outputs([C]), {B: B2}))
graph(A: float32[4]) -> (C):
  B[i] = A[i] + A[i]
  C[i] = B[i] + 1.0
"""

from __future__ import annotations

from collections.abc import Mapping

from tilecraft.graph import Graph
from tilecraft.te.expr import Expr, Load
from tilecraft.te.tensor import ComputeOp, Tensor
from tilecraft.te.visit import transform


def with_body(tensor: Tensor, body: Expr, name: str | None = None) -> Tensor:
    """A compute like ``tensor`` (same axes, shape and dtype) with another ``body``."""
    assert isinstance(tensor.op, ComputeOp)
    if body.dtype != tensor.dtype:
        from tilecraft.te.expr import Cast

        body = Cast(tensor.dtype, body)
    return Tensor(name or tensor.name, tensor.shape, tensor.dtype,
                  ComputeOp(tensor.op.axes, body))


def relink(tensor: Tensor, new: Mapping[Tensor, Tensor]) -> Tensor:
    """``tensor`` with every load of a key of ``new`` reading its value instead (``tensor``
    itself when it reads none of them)."""
    if not isinstance(tensor.op, ComputeOp) or not any(t in new for t in tensor.inputs):
        return tensor

    def swap(expr: Expr) -> Expr | None:
        if isinstance(expr, Load) and expr.tensor in new:
            indices = tuple(transform(index, swap) for index in expr.indices)
            return Load(new[expr.tensor], indices)
        return None

    return with_body(tensor, transform(tensor.op.body, swap))


def rebuild_graph(graph: Graph, replacements: Mapping[Tensor, Tensor]) -> Graph:
    """``graph`` with each key of ``replacements`` replaced by its value. A value may read
    tensors of the old graph (they are relinked too), also through tensors of its own that
    are not in the graph (e.g. a folded conv's bias reading the folded conv, which reads the
    old graph); a replaced output must keep its name. Returns ``graph`` itself when there is
    nothing to replace."""
    if not replacements:
        return graph
    in_graph = set(graph.topological_order())
    new: dict[Tensor, Tensor] = {}
    linked: dict[Tensor, Tensor] = {}  # tensors of the values, outside the graph, relinked

    def link(tensor: Tensor) -> Tensor:
        """``tensor`` (a value or a tensor it reads) reading the rebuilt graph."""
        if tensor in in_graph:  # rebuilt already: the topological order reaches it first
            return new.get(tensor, tensor)
        done = linked.get(tensor)
        if done is None:
            swaps = {t: linked_t for t in tensor.inputs if (linked_t := link(t)) is not t}
            done = linked[tensor] = relink(tensor, swaps) if swaps else tensor
        return done

    for tensor in graph.topological_order():
        replaced = replacements.get(tensor, tensor)
        replaced = relink(tensor, new) if replaced is tensor else link(replaced)
        if replaced is not tensor:
            new[tensor] = replaced
    for out in graph.outputs:
        if new.get(out, out).name != out.name:
            raise AssertionError(f"output {out.name} replaced by {new[out].name}: a graph pass "
                                 "must keep output names")
    return Graph.from_outputs([new.get(out, out) for out in graph.outputs])


__all__ = ["rebuild_graph", "relink", "with_body"]
