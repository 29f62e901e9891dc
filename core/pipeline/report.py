"""Stage 8, report: the Executable's report assembled from what the stages produced — the
fusion groups' notes, the schedule stage's notes, the kernels built, the mapping stage's
entries — and, for tensorized computes that run natively, their measured time next to the
model's prediction.

>>> ReportAssembly.name
'report'
"""

from __future__ import annotations

from tilecraft.pipeline.state import CompileState
from tilecraft.runtime.report import Report


class ReportAssembly:
    """Builds ``state.report`` from the earlier stages' outputs."""

    name = "report"

    def run(self, state: CompileState) -> CompileState:
        from tilecraft.intrin.report import attach_mapping_report
        from tilecraft.intrin.tensorize import report_tensorized

        report = Report(target=state.target.name, capability=state.availability.explain())
        for group in state.groups:
            report.notes.extend(group.notes)
        report.notes.extend(state.schedule_notes)
        report.kernels.extend(state.kernel_reports)
        attach_mapping_report(report, state.mapping_entries, state.mapping_notes)
        report_tensorized(state.tensorized, state.compiled, report, state.tensorized_entries)
        report.notes.extend(state.notes)
        state.report = report
        return state

    def describe(self, state: CompileState) -> str:
        return str(state.report)
