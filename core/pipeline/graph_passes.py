"""Stage 1, graph passes: every pass registered through the ``tilecraft_register_passes``
hook (the core's :data:`tilecraft.passes.DEFAULT_PASSES` first, then the plugins'), in order,
each checked to keep the graph's outputs and inputs (:func:`tilecraft.passes.run_passes`);
``tilecraft.compile(..., passes={name: False})`` skips a pass by name, ``{name: True}`` runs
one that declares ``enabled_by_default = False`` (off unless asked for); a pass that declares
``uses_spec = True`` is called as ``graph_pass(graph, spec)`` with the target's spec (how
``choose_layout`` learns the layouts a target prefers).

>>> GraphPasses.name
'graph_passes'
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tilecraft.graph import Graph
from tilecraft.pipeline.state import CompileState


def apply_graph_passes(graph: Graph, spec: Any, switches: Mapping[str, bool] | None = None,
                       plugins: Any = None) -> tuple[Graph, list[str]]:
    """``graph`` after the passes registered through ``plugins``' hook (default: the process's)
    that ``switches`` (pass name -> on/off; a pass's ``enabled_by_default`` otherwise) leave
    on, with the names of those applied: what the graph-passes stage does, for callers outside
    the pipeline (:func:`tilecraft.tuning.tuner.tune` makes its tasks from the computes compile
    will schedule). An unknown name in ``switches`` raises :class:`~tilecraft.passes.PassError`."""
    from tilecraft.passes import run_passes
    from tilecraft.target.plugins import collect

    switches = dict(switches or {})
    passes = collect("passes", plugins)
    unknown = sorted(set(switches) - set(passes))
    if unknown:
        from tilecraft.passes import PassError

        raise PassError(f"passes={switches!r} names unknown graph pass(es) "
                        f"{', '.join(unknown)}; the registered ones are: "
                        f"{', '.join(passes) or '(none)'}")
    passes = {name: graph_pass for name, graph_pass in passes.items()
              if switches.get(name, getattr(graph_pass, "enabled_by_default", True))}
    if not passes:
        return graph, []
    return run_passes(graph, passes, spec=spec)


class GraphPasses:
    """Runs the registered graph passes on ``state.graph``."""

    name = "graph_passes"

    def run(self, state: CompileState) -> CompileState:
        graph, applied = apply_graph_passes(state.graph, state.target.spec,
                                            state.pass_switches, state.plugins)
        if applied:
            state.graph, state.passes_applied = graph, applied
        return state

    def describe(self, state: CompileState) -> str:
        applied = ", ".join(state.passes_applied) or "none registered"
        return f"passes applied: {applied}\n{state.graph}"
