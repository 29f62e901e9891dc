"""Stage 3, AMOS mapping (thesis ch. 5): which computes are lowered through a mapping onto
one of the target's intrinsics, and the mapping report of every compute.

Which computes: those ``tensorize=`` names (``True``/``"auto"``: every compute with a usable
mapping, see :mod:`tilecraft.intrin.tensorize`). Without ``tensorize=`` nothing is tensorized,
even where the model predicts a mapping pays: on x86 the target's own templates already use
those instructions and ran 3-7x faster than the mapped loop nests (measured on this 2-core Zen
4: 256^3 uint8 x int8 GEMM 712 vs 150 GOP/s through vpdpbusd, fp32 182 vs 55 GFLOP/s through
fma_f32x16_bcast, 128x512x128 bf16 272 vs 39 GFLOP/s through vdpbf16ps), so choosing by the
model alone would change and slow the x86 kernels. Tensorized computes leave their fusion
groups.

The mappings are ranked by the cost model named ``cost_model`` (default ``"amos"``, AMOS's
analytical model), found among those registered through the ``tilecraft_register_cost_models``
hook (:mod:`tilecraft.cost`).

The report: Algorithm 4 matching of every compute on every intrinsic (cheap: no functional
check, at most 50 ms a compute), made here once and read by the report stage — never matched
again after code generation.

>>> AmosMapping.name
'mapping'
"""

from __future__ import annotations

from tilecraft.pipeline.state import CompileState

#: seconds the cheap mapping report may spend on one compute before it is left out
REPORT_BUDGET_SECONDS = 0.05


class AmosMapping:
    """Plans tensorization and matches every compute for the report."""

    name = "mapping"

    def run(self, state: CompileState) -> CompileState:
        from tilecraft.cost import get_cost_model
        from tilecraft.intrin.report import compile_mapping_entries, tensorized_entry
        from tilecraft.intrin.tensorize import plan_tensorization

        spec = state.target.spec
        model = get_cost_model(state.cost_model, state.plugins)
        state.tensorized = plan_tensorization(state.graph, spec, state.tensorize, model)
        if state.tensorized:
            state.groups = [group for group in state.groups
                            if not any(name in state.tensorized for name in group.computes)]
        state.mapping_entries, state.mapping_notes = compile_mapping_entries(
            state.graph, spec, REPORT_BUDGET_SECONDS, model)
        state.tensorized_entries = {name: tensorized_entry(item)
                                    for name, item in state.tensorized.items()}
        return state

    def describe(self, state: CompileState) -> str:
        from tilecraft.intrin.report import format_mapping_table

        lines = []
        for name, item in state.tensorized.items():
            how = "forced" if item.forced else "the model's best"
            lines.append(f"tensorized {name}: {item.ranked.mapping} ({how})")
        if not state.tensorized:
            lines.append("tensorized: none (tensorize= not given)")
        if state.mapping_entries:
            lines.append(format_mapping_table(state.mapping_entries))
        lines.extend(f"note: {note}" for note in state.mapping_notes)
        return "\n".join(lines)
