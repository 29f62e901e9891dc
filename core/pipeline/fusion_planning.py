"""Stage 2, fusion planning: which computes the target lowers together, with their tiles
(:meth:`~tilecraft.target.base.Target.fuse`; thesis ch. 3). Computes in no group are
scheduled one by one; a group without computes only carries a note (a chain left unfused and
why).

>>> FusionPlanning.name
'fusion'
"""

from __future__ import annotations

from tilecraft.pipeline.state import CompileState


class FusionPlanning:
    """Asks the target for its fusion groups of ``state.graph``."""

    name = "fusion"

    def run(self, state: CompileState) -> CompileState:
        state.groups = list(state.target.fuse(state.graph, state.options))
        return state

    def describe(self, state: CompileState) -> str:
        fused = [group for group in state.groups if group.computes]
        lines = [f"{len(fused)} fused group(s)"]
        for group in fused:
            kernels = ", ".join(kernel.name for kernel in group.kernels)
            lines.append(f"  {' -> '.join(group.computes)}: kernels {kernels}")
        lines.extend(f"note: {note}" for group in state.groups for note in group.notes)
        return "\n".join(lines)
