"""Stage 5, lowering: every compute's Kernel IR, by the schedule the schedule stage chose —
a fusion group's kernels (at its last compute), the AMOS mapping's loop nest, the schedule
primitives applying a generic schedule, the target's own template (``Target.lower_compute``),
or, where the target has none, the core's lowering strategy its spec selects (CPU, GPU, NPU or
FPGA: :mod:`tilecraft.schedule.strategies`).

>>> Lowering.name
'kernel_ir'
"""

from __future__ import annotations

import time

from tilecraft.kernel_ir.nodes import Kernel
from tilecraft.pipeline.state import CompileState, LoweredCompute, ScheduleChoice, ScheduleKind
from tilecraft.te.tensor import Tensor


class Lowering:
    """Lowers every compute of ``state.graph`` to Kernel IR."""

    name = "kernel_ir"

    def run(self, state: CompileState) -> CompileState:
        grouped = state.grouped
        for tensor in state.graph.computes:
            group = grouped.get(tensor.name)
            if group is not None and tensor.name != group.computes[-1]:
                continue  # lowered with the group, at its last compute
            start = time.perf_counter()
            if group is not None:
                kernels = list(group.kernels)
            else:
                kernels = self._lower(state, tensor, state.schedules[tensor.name])
            state.lowered.append(LoweredCompute(tensor.name, kernels,
                                                time.perf_counter() - start))
        return state

    @staticmethod
    def _lower(state: CompileState, tensor: Tensor, choice: ScheduleChoice) -> list[Kernel]:
        if choice.kind is ScheduleKind.TENSORIZED:
            from tilecraft.intrin.tensorize import lower_tensorized

            return lower_tensorized(state.tensorized[tensor.name], state.options,
                                    state.target)
        if choice.kind is ScheduleKind.PRIMITIVES:
            from tilecraft.tuning.builders import lower_compute_with_config

            return lower_compute_with_config(state.graph, tensor, dict(choice.config or {}),
                                             state.target)
        from tilecraft.lower import lower_compute

        config = None if choice.config is None else dict(choice.config)
        return state.target.lower_compute(tensor, state.options, config) or \
            [lower_compute(tensor, state.options)]

    def describe(self, state: CompileState) -> str:
        from tilecraft.kernel_ir.printer import kernel_to_str

        return "\n\n".join(kernel_to_str(kernel) for kernel in state.kernels)
