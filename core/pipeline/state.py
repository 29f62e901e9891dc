"""What flows through the compile pipeline: one :class:`CompileState`, filled stage by stage.

Each stage reads the fields the stages before it wrote and writes its own (the table in
:mod:`tilecraft.pipeline`); nothing is recomputed later — the report is assembled from these
fields.

>>> ScheduleChoice("C", ScheduleKind.TEMPLATE, {"MC": 64}, "tuned").describe()
'C: template {"MC": 64} (tuned)'
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tilecraft.graph import Graph
from tilecraft.kernel_ir.nodes import Kernel
from tilecraft.lower.options import LoweringOptions
from tilecraft.runtime.executable import CompiledKernel
from tilecraft.runtime.report import KernelReport, Report
from tilecraft.target.base import Availability, FusedGroup, Source, Target


class ScheduleKind(str, enum.Enum):
    """How one compute is scheduled — the one answer the schedule stage gives per compute."""

    FUSED = "fused"             # lowered with its fusion group (the fusion stage's kernels)
    TENSORIZED = "tensorized"   # lowered through its AMOS mapping (the mapping stage's choice)
    PRIMITIVES = "primitives"   # FlexTensor's generic schedule, applied by schedule primitives
    TEMPLATE = "template"       # the target's schedule template with these parameters
    DEFAULT = "default"         # the target's template with its own parameters, else the
                                # core's default loop nest


@dataclass(frozen=True)
class ScheduleChoice:
    """The schedule of one compute: its kind, the parameters (a template's or a generic
    schedule's configuration; ``None`` for the target's own choice) and where they came from
    (``"tuned"``, ``"database"``, ``"default"``, ``"fusion"``, ``"tensorize"``)."""

    compute: str
    kind: ScheduleKind
    config: Mapping[str, Any] | None = None
    source: str = "default"

    def describe(self) -> str:
        config = "" if self.config is None else " " + json.dumps(dict(self.config),
                                                                   sort_keys=True, default=str)
        return f"{self.compute}: {self.kind.value}{config} ({self.source})"


@dataclass
class LoweredCompute:
    """The Kernel IR of one compute (of a whole fusion group at its last compute) and the
    seconds its lowering took."""

    compute: str
    kernels: list[Kernel]
    seconds: float


@dataclass(frozen=True)
class GeneratedSource:
    """The source of one kernel, the compute it belongs to and the seconds codegen took."""

    compute: str
    kernel: Kernel
    source: Source
    seconds: float


@dataclass
class CompileState:
    """Everything the stages of one compile produce (see :mod:`tilecraft.pipeline`)."""

    graph: Graph
    target: Target
    availability: Availability
    options: LoweringOptions
    tuning: Any = None
    database: str | None = None
    tensorize: Any = None
    #: leave fusion groups with a ``tunable`` compute apart whatever the database holds (a
    #: compile whose kernels background tuning will swap: ``compile(..., overlap=...)``)
    tunable_apart: bool = False
    #: the plugin manager whose hooks supply passes, cost models and search engines (``None``:
    #: the process-wide one, :func:`tilecraft.target.plugins.get_plugin_manager`)
    plugins: Any = None
    #: the cost model ranking AMOS mappings (by its registered name, see tilecraft.cost)
    cost_model: str = "amos"
    #: graph passes: pass name -> False to skip it (``tilecraft.compile(..., passes=...)``)
    pass_switches: Mapping[str, bool] = field(default_factory=dict)
    #: graph passes: names of the passes applied
    passes_applied: list[str] = field(default_factory=list)
    #: fusion planning: Chimera's plan (``None`` where the graph has no two compute-intensive
    #: computes to chain, or the target no bounded memory level to keep tiles in)
    fusion_plan: Any = None
    #: fusion planning: the groups the target lowers together (and note-only groups for the
    #: planned chains it leaves apart, with the reason)
    groups: list[FusedGroup] = field(default_factory=list)
    #: AMOS mapping: compute -> TensorizedCompute, the decision (MappingDecision: both
    #: predictions and the reason) of every compute with a usable mapping, and the cheap
    #: mapping report's entries
    tensorized: dict[str, Any] = field(default_factory=dict)
    mapping_decisions: dict[str, Any] = field(default_factory=dict)
    tensorized_entries: dict[str, Any] = field(default_factory=dict)
    mapping_entries: list[Any] = field(default_factory=list)
    mapping_notes: list[str] = field(default_factory=list)
    #: schedule: one choice per compute, and what tuning / the database said
    schedules: dict[str, ScheduleChoice] = field(default_factory=dict)
    schedule_notes: list[str] = field(default_factory=list)
    #: lowering: Kernel IR per compute (a fusion group under its last compute)
    lowered: list[LoweredCompute] = field(default_factory=list)
    #: codegen: one source per kernel, parallel to the lowered kernels in order
    sources: list[GeneratedSource] = field(default_factory=list)
    #: build: the compiled kernels and their report rows
    compiled: list[CompiledKernel] = field(default_factory=list)
    kernel_reports: list[KernelReport] = field(default_factory=list)
    #: extra notes of later stages
    notes: list[str] = field(default_factory=list)
    #: report: the Executable's report, assembled from the fields above
    report: Report | None = None

    @property
    def grouped(self) -> dict[str, FusedGroup]:
        """Compute name -> the fusion group lowering it."""
        return {name: group for group in self.groups for name in group.computes}

    @property
    def kernels(self) -> list[Kernel]:
        return [kernel for lowered in self.lowered for kernel in lowered.kernels]


__all__ = ["CompileState", "GeneratedSource", "LoweredCompute", "ScheduleChoice",
           "ScheduleKind"]
