"""Stage 4, schedule: one :class:`~tilecraft.pipeline.state.ScheduleChoice` per compute —
the single answer to "what schedule does this compute get".

In order of precedence: the fusion group's (``fused``), the AMOS mapping's (``tensorized``),
the parameters tuning found now or the tuning database holds (``template`` for a target
template's parameters, ``primitives`` for FlexTensor's generic schedule, applied by the
schedule primitives), else the target's own choice (``default``: its template with its own
parameters, or the schedule its spec's lowering strategy builds with the primitives:
:mod:`tilecraft.schedule.strategies`).

>>> ScheduleSelection.name
'schedule'
"""

from __future__ import annotations

from typing import Any

from tilecraft.pipeline.state import CompileState, ScheduleChoice, ScheduleKind


class ScheduleSelection:
    """Chooses every compute's schedule (tuning now or the database, where asked)."""

    name = "schedule"

    def run(self, state: CompileState) -> CompileState:
        from tilecraft.tuning.tuner import is_schedule_config

        tunable = {group.tunable for group in state.groups if group.tunable}
        fixed = (set(state.grouped) - tunable) | set(state.tensorized)
        configs, source = self._configs(state, fixed)
        self._apart(state, configs)
        grouped = state.grouped
        for tensor in state.graph.computes:
            name = tensor.name
            if name in grouped:
                choice = ScheduleChoice(name, ScheduleKind.FUSED, None, "fusion")
            elif name in state.tensorized:
                choice = ScheduleChoice(name, ScheduleKind.TENSORIZED, None, "tensorize")
            elif name in configs:
                config = configs[name]
                kind = ScheduleKind.PRIMITIVES if is_schedule_config(config) \
                    else ScheduleKind.TEMPLATE
                choice = ScheduleChoice(name, kind, config, source)
            else:
                choice = ScheduleChoice(name, ScheduleKind.DEFAULT)
            state.schedules[name] = choice
        return state

    @staticmethod
    def _apart(state: CompileState, configs: dict[str, dict[str, Any]]) -> None:
        """Leave apart each fusion group whose tunable compute has parameters (tuned now or
        from the database) or whose compile overlaps tuning; forget the parameters of the
        tunable computes of the groups kept (their kernels are the group's)."""
        kept = []
        for group in state.groups:
            if group.tunable and (state.tunable_apart or group.tunable in configs):
                why = "tuning swaps its kernels" if state.tunable_apart and \
                    group.tunable not in configs else f"{group.tunable} has tuned parameters"
                state.schedule_notes.append(
                    f"{' -> '.join(group.computes)} run apart, not fused: {why} (the fused "
                    "kernel takes the template's default parameters)")
                continue
            kept.append(group)
            configs.pop(group.tunable, None)
        state.groups = kept

    def _configs(self, state: CompileState, fixed: set[str]
                 ) -> tuple[dict[str, dict[str, Any]], str]:
        """Parameters per compute: tuned now, or the best known in the database."""
        tuning, database = state.tuning, state.database
        if tuning is None and database is None:
            return {}, "default"
        from tilecraft.tuning.budget import TuningOptions
        from tilecraft.tuning.tuner import best_configs, tune

        if tuning is not None and tuning is not False:
            options = TuningOptions.coerce(tuning)
            if database is not None and options.database is None:
                options = options.replace(database=database)
            result = tune(state.graph, state.target, options, skip=sorted(fixed),
                          plugins=state.plugins, passes=False)  # passes already run
            for task in result.tasks:
                gflops = task.best_gflops
                state.schedule_notes.append(
                    f"tuned {task.compute}: {len(task.trials)} trials, best "
                    f"{'failed' if gflops is None else f'{gflops:.1f} GFLOP/s'} with "
                    f"{task.best_config} (stopped by {task.stopped_by})")
            return result.configs(), "tuned"
        configs = best_configs(state.graph, state.target, database)
        for name, config in configs.items():
            state.schedule_notes.append(
                f"{name}: best known parameters from {database}: {config}")
        return configs, "database"

    def describe(self, state: CompileState) -> str:
        lines = [choice.describe() for choice in state.schedules.values()]
        lines.extend(f"note: {note}" for note in state.schedule_notes)
        return "\n".join(lines)
