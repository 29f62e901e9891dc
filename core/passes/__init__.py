"""Graph passes: ``graph_pass(graph) -> Graph`` rewrites run by the first stage of
``tilecraft.compile`` (:mod:`tilecraft.pipeline.graph_passes`).

Every pass comes through the ``tilecraft_register_passes`` hook: the core's own are listed in
``DEFAULT_PASSES`` (registered by :mod:`tilecraft.target.builtins`), a plugin adds its own.
A pass must return an equivalent graph: the same outputs (names, shapes, dtypes) computed from
the same inputs; :func:`run_passes` checks that after each pass and names the pass that broke
it.

The core's passes (:data:`DEFAULT_PASSES`, in this order; ``tilecraft.compile(...,
passes={"fold_batch_norm": False})`` turns one off by name):

- :mod:`tilecraft.passes.simplify` (``simplify``): exact algebraic rewrites, reshape /
  transpose chains composed, identity gathers and casts removed;
- :mod:`tilecraft.passes.constant_folding` (``fold_constants``): computes reading only
  constants (``te.constant``) evaluated by the reference and replaced by constants;
- :mod:`tilecraft.passes.batch_norm_folding` (``fold_batch_norm``): a per-channel affine
  normalisation after a conv / matmul with constant weights folded into the weights and a bias;
- :mod:`tilecraft.passes.layout` (``choose_layout``): conv2d rewritten into the layout the
  target's spec prefers (``preferred_layouts``), transposes at the boundaries; a pass with
  ``uses_spec = True`` is handed the target's spec as a second argument;
- :mod:`tilecraft.passes.inline_elementwise` (``inline_elementwise``): elementwise computes
  folded into the memory-bound computes that read them (one consumer, or cheap to recompute);
- :mod:`tilecraft.passes.dead_code` (``eliminate_dead_code``): selects settled over their index
  ranges pruned, computes nothing reads any more dropped.

They rebuild graphs through :mod:`tilecraft.passes.rewriting`. The core's other target-neutral
rewrites work on one compute at a time, and a target's lowering decides where to apply them:

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

#: the core's passes, registered through the plugin hook, in the order they run
DEFAULT_PASSES: list[GraphPass] = []


def _default_passes() -> list[GraphPass]:
    from tilecraft.passes.batch_norm_folding import fold_batch_norm
    from tilecraft.passes.constant_folding import fold_constants
    from tilecraft.passes.dead_code import eliminate_dead_code
    from tilecraft.passes.inline_elementwise import inline_elementwise
    from tilecraft.passes.layout import choose_layout
    from tilecraft.passes.simplify import simplify

    return [simplify, fold_constants, fold_batch_norm, choose_layout, inline_elementwise,
            eliminate_dead_code]


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


def run_passes(graph: Graph, passes: Mapping[str, GraphPass],
               spec: Any = None) -> tuple[Graph, list[str]]:
    """``graph`` after every pass of ``passes`` (name -> pass, in order), and the names of the
    passes applied. A pass with a true attribute ``uses_spec`` is called as
    ``graph_pass(graph, spec)`` (``spec``: the target's
    :class:`~tilecraft.target.spec.TargetSpec`, or ``None``). A pass that raises is reported
    as a :class:`PassError` naming it."""
    applied = []
    for name, graph_pass in passes.items():
        try:
            if getattr(graph_pass, "uses_spec", False):
                result = graph_pass(graph, spec)  # type: ignore[call-arg]
            else:
                result = graph_pass(graph)
        except TilecraftError:
            raise
        except Exception as err:  # a plugin's pass: name it, keep its traceback
            raise PassError(f"graph pass {name!r} raised {type(err).__name__}: {err}; fix or "
                            "uninstall the plugin that registers it") from err
        graph = check_equivalent_interface(graph, result, name)
        applied.append(name)
    return graph, applied


DEFAULT_PASSES.extend(_default_passes())

__all__ = ["DEFAULT_PASSES", "GraphPass", "PassError", "check_equivalent_interface",
           "run_passes"]
