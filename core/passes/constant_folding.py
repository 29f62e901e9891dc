"""Constant folding: computes that read only constants are evaluated now, by the numpy
reference interpreter (the oracle, so the folded value is the value every target would have
computed), and replaced by constants of the same name, shape and dtype.

A compute whose inputs are all constants or folded computes folds, in topological order, so
whole constant subgraphs (a weight transposed, reshaped and scaled) collapse into one
constant (a compute reading nothing folds too). Results larger than ``max_elements`` stay
computes: folding would trade a cheap kernel for a large argument (a constant broadcast to a
big tensor, say).

>>> import numpy as np
>>> from tilecraft import te, ops
>>> from tilecraft.graph import Graph
>>> X = te.placeholder((2, 3), name="X")
>>> W = te.constant(np.arange(6, dtype=np.float32).reshape(3, 2), name="W")
>>> Y = ops.matmul(X, ops.transpose(ops.transpose(W, name="Wt"), name="Wtt"), name="Y")
>>> folded = fold_constants(Graph.from_outputs([Y]))
>>> [t.name for t in folded.constants], [t.name for t in folded.computes]
(['Wtt'], ['Y'])
"""

from __future__ import annotations

from tilecraft.graph import Graph
from tilecraft.passes.rewriting import rebuild_graph
from tilecraft.reference.evaluator import evaluate
from tilecraft.te.tensor import Tensor, constant

#: the largest constant folding makes (elements)
DEFAULT_MAX_ELEMENTS = 1 << 24


class FoldConstants:
    """The pass (``max_elements``: the largest result it folds)."""

    name = "fold_constants"

    def __init__(self, max_elements: int = DEFAULT_MAX_ELEMENTS):
        self.max_elements = max_elements

    def __call__(self, graph: Graph) -> Graph:
        values: dict[Tensor, object] = {t: t.constant_value for t in graph.constants}
        replacements: dict[Tensor, Tensor] = {}
        for tensor in graph.computes:
            if tensor.size > self.max_elements \
                    or not all(producer in values for producer in tensor.inputs):
                continue
            value = evaluate(tensor, values)  # type: ignore[arg-type]
            values[tensor] = value
            if tensor.ndim:  # a 0-d result (a loss's seed gradient) stays a compute
                replacements[tensor] = constant(value, tensor.dtype, name=tensor.name)
        return rebuild_graph(graph, replacements)


fold_constants = FoldConstants()

__all__ = ["DEFAULT_MAX_ELEMENTS", "FoldConstants", "fold_constants"]
