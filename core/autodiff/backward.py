"""Graph-level backward (issue 18 item 2): the gradient graph of a loss, chaining the
operator gradients of :func:`tilecraft.autodiff.compute_gradient` from the loss back to the
parameters, with the forward activations the gradients read kept as graph outputs.

The result is a te program like any other: ``tc.compile(bw.graph, target)`` plans its fusion,
maps its contractions (a conv's weight gradient is one) onto the same micro-kernels and
schedules it as it would a forward graph. :meth:`BackwardGraph.split` cuts it in two where a
framework would: a forward graph returning the loss and the saved activations, and a gradient
graph reading them as placeholders.

>>> import numpy as np
>>> import tilecraft as tc
>>> from tilecraft import ops, te
>>> x = te.placeholder((4, 3), name="x")
>>> w = te.placeholder((2, 3), name="w")
>>> loss = ops.mean(ops.tanh(ops.dense(x, w, name="y"), name="h"), name="loss")
>>> bw = backward(tc.Graph.from_outputs([loss]), loss, wrt=[w])
>>> [t.name for t in bw.graph.outputs], [t.name for t in bw.saved]
(['loss', 'grad_w', 'y'], ['y'])
>>> forward, gradients = bw.split()
>>> sorted(t.name for t in gradients.inputs)
['x', 'y']
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tilecraft.autodiff.grad import gradient_totals
from tilecraft.errors import AutodiffError
from tilecraft.graph import Graph
from tilecraft.te.expr import Const
from tilecraft.te.tensor import Tensor, compute, constant, placeholder


@dataclass(frozen=True)
class BackwardGraph:
    """The forward computes, the gradients and what links them.

    ``graph``: outputs the forward graph's outputs (the loss first), then ``gradients`` (one
    per ``wrt`` tensor, in order), then ``saved`` when ``keep_activations``. ``saved``: the
    forward computes a gradient compute reads. ``grad_of``: the gradient compute of each
    forward tensor on a path from ``wrt`` to the loss, by name. ``seed``: the loss's gradient
    (ones, a te.constant or a 0-d compute).
    """

    forward: Graph
    loss: Tensor
    wrt: tuple[Tensor, ...]
    gradients: tuple[Tensor, ...]
    saved: tuple[Tensor, ...]
    grad_of: dict[str, Tensor]
    seed: Tensor
    graph: Graph

    @property
    def gradient_computes(self) -> tuple[Tensor, ...]:
        """The computes of ``graph`` that the forward graph does not have."""
        forward = set(self.forward.topological_order())
        return tuple(t for t in self.graph.computes if t not in forward)

    def split(self) -> tuple[Graph, Graph]:
        """(forward graph returning its outputs and the saved activations, gradient graph
        returning the gradients and reading each saved activation as a placeholder of its
        name)."""
        forward = Graph.from_outputs([*self.forward.outputs, *self.saved])
        from tilecraft.passes.rewriting import rebuild_graph

        stand_ins = {t: placeholder(t.shape, t.dtype, name=t.name) for t in self.saved}
        gradients = rebuild_graph(Graph.from_outputs(list(self.gradients)), stand_ins)
        return forward, gradients


def ones_seed(loss: Tensor) -> Tensor:
    """``d loss / d loss``: ones of the loss's shape (a 0-d loss gets a 0-d compute)."""
    if loss.ndim == 0:
        return compute((), lambda *z: Const(1.0, loss.dtype), name=f"grad_{loss.name}")
    return constant(np.ones(loss.shape, loss.dtype.numpy), loss.dtype, name=f"grad_{loss.name}")


def backward(graph: Graph, loss: Tensor | str, wrt: Sequence[Tensor | str] | None = None, *,
             keep_activations: bool = True, strict: bool = True) -> BackwardGraph:
    """The backward graph of ``loss`` (a compute of ``graph``, or its name) with respect to
    ``wrt`` (tensors or names; by default every float input of ``graph``).

    The loss's gradient is seeded with ones (a scalar loss: 1), so the graph has no input
    beyond the forward graph's. With ``strict`` (the default) a ``wrt`` tensor the loss does not
    depend on raises an AutodiffError naming it; ``strict=False`` gives it zeros.
    """
    if not isinstance(graph, Graph):
        raise AutodiffError(f"backward takes a tilecraft Graph, got {type(graph).__name__}; "
                            "build one with tc.Graph.from_outputs([loss])")
    loss = graph.tensor(loss) if isinstance(loss, str) else loss
    if loss not in graph.dag:
        raise AutodiffError(f"loss {loss.name} is not a tensor of the graph; pass one of its "
                            f"computes ({', '.join(t.name for t in graph.outputs)} are outputs)")
    if not loss.dtype.is_float:
        raise AutodiffError(f"loss {loss.name} is {loss.dtype.value}: a loss must be a float "
                            "tensor")
    if wrt is None:
        wrt = [t for t in graph.inputs if t.dtype.is_float]
    targets = tuple(graph.tensor(t) if isinstance(t, str) else t for t in wrt)
    seed = ones_seed(loss)
    totals = gradient_totals(loss, targets, seed)
    gradients = []
    for tensor in targets:
        if id(tensor) in totals:
            gradients.append(totals[id(tensor)])
            continue
        if strict:
            raise AutodiffError(f"loss {loss.name} does not depend on {tensor.name}; drop it "
                                "from wrt (or pass strict=False for a zero gradient)")
        gradients.append(compute(tensor.shape, lambda *z, t=tensor: Const(0.0, t.dtype),
                                 name=f"grad_{tensor.name}"))
    forward_tensors = set(graph.topological_order())
    by_id = {id(t): t for t in graph.topological_order()}
    grad_of = {by_id[key].name: value for key, value in totals.items() if key in by_id}
    gradient_graph = Graph.from_outputs(gradients)
    saved = tuple(dict.fromkeys(
        producer for t in gradient_graph.computes if t not in forward_tensors
        for producer in t.inputs if producer in forward_tensors and not producer.is_placeholder))
    outputs = [loss, *(t for t in graph.outputs if t is not loss), *gradients]
    if keep_activations:
        outputs += [t for t in saved if t not in outputs]
    return BackwardGraph(graph, loss, targets, tuple(gradients), saved, grad_of, seed,
                         Graph.from_outputs(outputs))


__all__ = ["BackwardGraph", "backward", "ones_seed"]
