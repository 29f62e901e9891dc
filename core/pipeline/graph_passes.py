"""Stage 1, graph passes: every pass registered through the ``tilecraft_register_passes``
hook (the core's :data:`tilecraft.passes.DEFAULT_PASSES` first, then the plugins'), in order,
each checked to keep the graph's outputs and inputs (:func:`tilecraft.passes.run_passes`).

>>> GraphPasses.name
'graph_passes'
"""

from __future__ import annotations

from tilecraft.pipeline.state import CompileState


class GraphPasses:
    """Runs the registered graph passes on ``state.graph``."""

    name = "graph_passes"

    def run(self, state: CompileState) -> CompileState:
        from tilecraft.passes import run_passes
        from tilecraft.target.plugins import collect

        passes = collect("passes", state.plugins)
        if passes:
            state.graph, state.passes_applied = run_passes(state.graph, passes)
        return state

    def describe(self, state: CompileState) -> str:
        applied = ", ".join(state.passes_applied) or "none registered"
        return f"passes applied: {applied}\n{state.graph}"
