"""Stage 3, AMOS mapping (thesis ch. 5): which computes are lowered through a mapping onto
one of the target's intrinsics, and the mapping report of every compute.

Which computes: the stage compares predictions (:mod:`tilecraft.intrin.decision`). For every
compute with a usable mapping, the best mapping's predicted time (the kernel
:func:`~tilecraft.intrin.lowering.lower_mapped` generates) is weighed against that of what the
target would do otherwise — its own lowering where it has one
(:meth:`~tilecraft.target.base.Target.native_lowering`: x86's micro-kernel templates, which
already use those instructions), else the core's default loop nest — and the mapping is chosen
when it is predicted :data:`~tilecraft.intrin.decision.MAPPING_MARGIN` times faster. Computes
the fusion stage grouped stay in their groups. ``tensorize=`` overrides
(:mod:`tilecraft.intrin.tensorize`): names or ``True`` force a mapping, ``False`` / ``"off"``
turns tensorization off; tensorized computes leave their fusion groups. Every decision, with
both predictions and its reason, is in this stage's output and in the compile report's notes.

The mappings are ranked by the cost model named ``cost_model`` (default ``"amos"``, AMOS's
analytical model), found among those registered through the ``tilecraft_register_cost_models``
hook (:mod:`tilecraft.cost`).

The report: Algorithm 4 matching of every compute on every intrinsic (cheap: no functional
check, at most :data:`~tilecraft.intrin.decision.SURVEY_MAX_MAPPINGS` mappings ranked a
compute, within 50 ms), made here once — the same matching the decisions read — and read by
the report stage, never matched again after code generation.

>>> AmosMapping.name
'mapping'
"""

from __future__ import annotations

import dataclasses

from tilecraft.pipeline.state import CompileState


class AmosMapping:
    """Decides which computes are tensorized and matches every compute for the report."""

    name = "mapping"

    def run(self, state: CompileState) -> CompileState:
        from tilecraft.cost import get_cost_model
        from tilecraft.intrin.decision import decide_mappings
        from tilecraft.intrin.report import tensorized_entry

        model = get_cost_model(state.cost_model, state.plugins)
        grouped = {name: group.computes for group in state.groups for name in group.computes}
        plan = decide_mappings(state.graph, state.target, state.options, state.tensorize,
                               model=model, grouped=grouped)
        state.tensorized = plan.tensorized
        state.mapping_decisions = plan.decisions
        if state.tensorized:
            state.groups = [group for group in state.groups
                            if not any(name in state.tensorized for name in group.computes)]
        state.mapping_entries = plan.entries
        state.mapping_notes = [f"mapping {decision.describe()}"
                               for decision in plan.decisions.values()] + plan.notes
        surveyed = {(entry.operator, entry.intrinsic): entry for entry in plan.entries}
        for name, item in state.tensorized.items():
            entry = surveyed.get((name, item.intrinsic.name))
            if item.automatic and entry is not None:  # the survey's entry: not matched again
                note = f"compiled through this mapping: {plan.decisions[name].reason}"
                state.tensorized_entries[name] = dataclasses.replace(entry, notes=(note,))
            else:
                state.tensorized_entries[name] = tensorized_entry(item)
        return state

    def describe(self, state: CompileState) -> str:
        from tilecraft.intrin.report import format_mapping_table

        lines = []
        for decision in state.mapping_decisions.values():
            lines.append(decision.describe())
            if decision.alternative_basis:
                lines.append(f"  {decision.alternative}: {decision.alternative_basis}")
        if not state.mapping_decisions:
            lines.append("tensorized: none (no compute has a usable mapping)")
        for name, item in state.tensorized.items():
            how = "forced" if item.forced else "the model's best"
            lines.append(f"tensorized {name}: {item.ranked.mapping} ({how})")
        if state.mapping_entries:
            lines.append(format_mapping_table(state.mapping_entries))
        decided = {f"mapping {decision.describe()}"
                   for decision in state.mapping_decisions.values()}
        lines.extend(f"note: {note}" for note in state.mapping_notes if note not in decided)
        return "\n".join(lines)
