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

from tilecraft.pipeline.state import CompileState


class GraphPasses:
    """Runs the registered graph passes on ``state.graph``."""

    name = "graph_passes"

    def run(self, state: CompileState) -> CompileState:
        from tilecraft.passes import run_passes
        from tilecraft.target.plugins import collect

        passes = collect("passes", state.plugins)
        unknown = sorted(set(state.pass_switches) - set(passes))
        if unknown:
            from tilecraft.passes import PassError

            raise PassError(f"passes={dict(state.pass_switches)!r} names unknown graph pass(es) "
                            f"{', '.join(unknown)}; the registered ones are: "
                            f"{', '.join(passes) or '(none)'}")
        passes = {name: graph_pass for name, graph_pass in passes.items()
                  if state.pass_switches.get(name,
                                             getattr(graph_pass, "enabled_by_default", True))}
        if passes:
            state.graph, state.passes_applied = run_passes(state.graph, passes,
                                                           spec=state.target.spec)
        return state

    def describe(self, state: CompileState) -> str:
        applied = ", ".join(state.passes_applied) or "none registered"
        return f"passes applied: {applied}\n{state.graph}"
