"""Stage 2, fusion planning (thesis ch. 3): Chimera's planner decides which compute-intensive
computes chain together, where the memory-bound computes between them go, and the tiles
(:func:`tilecraft.fusion.plan_fusion`, from the target spec's memory levels and peaks); the
target then lowers the planned chains its kernels can express
(:meth:`~tilecraft.target.base.Target.fuse`), each group with its kernels, and says why it
leaves any planned chain apart. Computes in no group are scheduled one by one; a group without
computes only carries a note.

The planner runs only where there is something to chain — two or more compute-intensive
computes — and the target has a bounded memory level to keep tiles in.

>>> FusionPlanning.name
'fusion'
"""

from __future__ import annotations

from tilecraft.fusion.classify import is_compute_intensive
from tilecraft.graph import Graph
from tilecraft.pipeline.state import CompileState
from tilecraft.target.memory import MemoryKind
from tilecraft.target.spec import TargetSpec


def chain_plan(graph: Graph, spec: TargetSpec):
    """Chimera's fusion plan of ``graph`` for ``spec``, or ``None`` when the graph has fewer
    than two compute-intensive computes or the spec no bounded cache or scratchpad level."""
    from tilecraft.fusion import plan_fusion

    if sum(1 for tensor in graph.computes if is_compute_intensive(tensor)) < 2:
        return None
    if not any(level.size_bytes is not None
               and level.kind in (MemoryKind.CACHE, MemoryKind.SCRATCHPAD)
               for level in spec.memory.levels):
        return None
    return plan_fusion(graph, spec)


class FusionPlanning:
    """Plans the fusion of ``state.graph`` and asks the target for the groups it lowers."""

    name = "fusion"

    def run(self, state: CompileState) -> CompileState:
        state.fusion_plan = chain_plan(state.graph, state.target.spec)
        state.groups = list(state.target.fuse(state.graph, state.options, state.fusion_plan))
        state.notes.extend(dataflow_notes(state.graph, state.target.spec))
        return state

    def describe(self, state: CompileState) -> str:
        lines = []
        if state.fusion_plan is None:
            lines.append("no fusion plan (fewer than two compute-intensive computes)")
        else:
            lines.append(str(state.fusion_plan))
        fused = [group for group in state.groups if group.computes]
        lines.append(f"{len(fused)} fused group(s) lowered by {state.target.name}")
        for group in fused:
            kernels = ", ".join(kernel.name for kernel in group.kernels)
            lines.append(f"  {' -> '.join(group.computes)}: kernels {kernels}")
        lines.extend(f"note: {note}" for group in state.groups for note in group.notes)
        lines.extend(f"note: {note}" for note in state.notes if note.startswith(_TILEFLOW))
        return "\n".join(lines)


_TILEFLOW = "TileFlow: "


def dataflow_notes(graph: Graph, spec: TargetSpec) -> list[str]:
    """TileFlow's choices (:mod:`tilecraft.dataflow.graph_plan`) for the topologies that are not
    chains — two compute-intensive computes sharing an input, a GEMM chain with a residual —
    with both trees' predicted traffic: decisions of the model, reported (no target lowers a
    shared-input pair as one kernel yet). Chains of more than 6 loops (convolutions) are left
    out: their tile search would take seconds per site."""
    from tilecraft.dataflow.graph_plan import (
        plan_residuals,
        plan_shared_inputs,
        residual_sites,
        shared_input_pairs,
    )
    from tilecraft.errors import TilecraftError

    if not (shared_input_pairs(graph) or residual_sites(graph)) or not any(
            level.size_bytes is not None and level.kind in (MemoryKind.CACHE,
                                                            MemoryKind.SCRATCHPAD)
            for level in spec.memory.levels):
        return []
    try:
        choices = [*plan_shared_inputs(graph, spec, max_loops=6),
                   *plan_residuals(graph, spec, max_loops=6)]
    except TilecraftError as err:
        return [f"{_TILEFLOW}dataflows beyond chains not modelled: {err}"]
    return [f"{_TILEFLOW}{choice}" for choice in choices]
