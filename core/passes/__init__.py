"""Graph passes: ``graph_pass(graph) -> Graph`` rewrites run by the first stage of
``tilecraft.compile`` (:mod:`tilecraft.pipeline.graph_passes`).

Every pass comes through the ``tilecraft_register_passes`` hook: the core's own are listed in
``DEFAULT_PASSES`` (registered by :mod:`tilecraft.target.builtins`), a plugin adds its own.
A pass must return an equivalent graph: the same outputs (names, shapes, dtypes) computed from
the same inputs; :func:`run_passes` checks that after each pass and names the pass that broke
it.

The core registers no graph pass today, on purpose: a graph is built from its outputs
(:meth:`~tilecraft.graph.Graph.from_outputs`), so it holds no dead compute to remove. The
core's target-neutral rewrites work on one compute at a time, and a target's lowering decides
where to apply them:

- :mod:`tilecraft.passes.contraction`: a compute seen as a batched matrix product (axes sorted
  into batch / m / n / k), and the dot-product contractions of int8 and bfloat16 operands;
- :mod:`tilecraft.passes.group_split`: a grouped convolution's output axis split in two, which
  makes it a batched contraction over the groups (the split compute writes the same memory
  through a view of another shape, so it is no graph pass: a graph pass keeps every output's
  shape);
- :mod:`tilecraft.passes.transposed_conv`: a transposed convolution recognised and rewritten as
  a matrix product plus a col2im gather.

>>> from tilecraft import te
>>> from tilecraft.graph import Graph
>>> A = te.placeholder((4,), name="A")
>>> B = te.compute((4,), lambda i: A[i] + 1.0, name="B")
>>> class Keep:
...     name = "keep"
...     def __call__(self, graph):
...         return graph
>>> graph, applied = run_passes(Graph.from_outputs([B]), {"keep": Keep()})
>>> applied, [t.name for t in graph.outputs]
(['keep'], ['B'])
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from tilecraft.errors import TilecraftError
from tilecraft.graph import Graph

#: a graph pass: an equivalent graph for a graph
GraphPass = Callable[[Graph], Graph]

#: the core's passes, registered through the plugin hook (none today: see the module docstring)
DEFAULT_PASSES: list[GraphPass] = []


class PassError(TilecraftError):
    """A graph pass failed or returned something that is not an equivalent graph."""


def _signature(tensors: Any) -> list[tuple[str, tuple[int, ...], str]]:
    return [(t.name, tuple(t.shape), t.dtype.value) for t in tensors]


def check_equivalent_interface(before: Graph, after: Any, pass_name: str) -> Graph:
    """``after`` if it is a Graph with ``before``'s outputs and inputs (names, shapes, dtypes);
    else a :class:`PassError` naming the pass and what changed."""
    if not isinstance(after, Graph):
        raise PassError(f"graph pass {pass_name!r} returned {type(after).__name__}; a pass must "
                        "return a tilecraft.Graph (return its argument to change nothing)")
    for what, old, new in (("outputs", before.outputs, after.outputs),
                           ("inputs", before.inputs, after.inputs)):
        if _signature(old) != _signature(new):
            raise PassError(f"graph pass {pass_name!r} changed the graph's {what} from "
                            f"{_signature(old)} to {_signature(new)}; a pass must keep them "
                            "(names, shapes and dtypes) and only rewrite the computes")
    return after


def run_passes(graph: Graph, passes: Mapping[str, GraphPass]) -> tuple[Graph, list[str]]:
    """``graph`` after every pass of ``passes`` (name -> pass, in order), and the names of the
    passes applied. A pass that raises is reported as a :class:`PassError` naming it."""
    applied = []
    for name, graph_pass in passes.items():
        try:
            result = graph_pass(graph)
        except TilecraftError:
            raise
        except Exception as err:  # a plugin's pass: name it, keep its traceback
            raise PassError(f"graph pass {name!r} raised {type(err).__name__}: {err}; fix or "
                            "uninstall the plugin that registers it") from err
        graph = check_equivalent_interface(graph, result, name)
        applied.append(name)
    return graph, applied


__all__ = ["DEFAULT_PASSES", "GraphPass", "PassError", "check_equivalent_interface",
           "run_passes"]
