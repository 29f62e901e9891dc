"""``tilecraft.compile`` as a named sequence of stages (the thesis's compile flow, §2.6: graph
level, operator level, instruction level; like Triton's backend stages, each stage's name
doubles as its dump file's suffix).

========  ==================  =========================================================
position  stage (name)        output (field of :class:`CompileState`)
========  ==================  =========================================================
1         ``graph_passes``    ``graph`` after the passes registered through the hook
2         ``fusion``          ``groups``: what the target lowers together, with tiles
3         ``mapping``         ``tensorized`` computes; ``mapping_entries`` for the report
4         ``schedule``        ``schedules``: one :class:`ScheduleChoice` per compute
5         ``kernel_ir``       ``lowered``: Kernel IR per compute (the target's lowering)
6         ``codegen``         ``sources``: one per kernel
7         ``build``           ``compiled`` kernels (built and loaded, emulated or source)
8         ``report``          ``report``, assembled from the fields above
========  ==================  =========================================================

:func:`run_pipeline` runs them and returns the state; ``tilecraft.compile(...,
dump_stages=DIR)`` and ``tilecraft compile --dump-stages DIR`` write each stage's output
(``NN-<name>.txt``; the generated sources under ``06-codegen/``).

>>> [stage.name for stage in default_stages()]
['graph_passes', 'fusion', 'mapping', 'schedule', 'kernel_ir', 'codegen', 'build', 'report']
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tilecraft.errors import TargetError
from tilecraft.graph import Graph
from tilecraft.pipeline.build import Build, make_runner
from tilecraft.pipeline.codegen import Codegen, source_suffix
from tilecraft.pipeline.fusion_planning import FusionPlanning
from tilecraft.pipeline.graph_passes import GraphPasses
from tilecraft.pipeline.lowering import Lowering
from tilecraft.pipeline.mapping import AmosMapping
from tilecraft.pipeline.report import ReportAssembly
from tilecraft.pipeline.schedule import ScheduleSelection
from tilecraft.pipeline.stage import Pipeline, Stage, StageDumpError
from tilecraft.pipeline.state import (
    CompileState,
    GeneratedSource,
    LoweredCompute,
    ScheduleChoice,
    ScheduleKind,
)
from tilecraft.target.base import Target


def default_stages() -> list[Stage]:
    """The stages of ``tilecraft.compile``, in order."""
    return [GraphPasses(), FusionPlanning(), AmosMapping(), ScheduleSelection(), Lowering(),
            Codegen(), Build(), ReportAssembly()]


def run_pipeline(graph: Graph, target: Target, *, tuning: Any = None,
                 database: str | None = None, tensorize: Any = None, plugins: Any = None,
                 cost_model: str = "amos", dump_stages: str | Path | None = None,
                 stages: list[Stage] | None = None,
                 passes: Any = None, tunable_apart: bool = False) -> CompileState:
    """Run ``stages`` (default: :func:`default_stages`) on ``graph`` for ``target`` and return
    the state every stage filled; with ``dump_stages`` each stage's output is written there.
    ``plugins``: the plugin manager supplying the hooks' extensions (default: the process's);
    ``cost_model``: the registered cost model ranking AMOS mappings; ``passes``: graph pass
    name -> ``False`` to skip it; ``tunable_apart``: leave every fusion group with a tunable
    compute apart (see :class:`~tilecraft.target.base.FusedGroup`)."""
    from tilecraft.lower import LoweringOptions

    availability = target.available()
    if not availability.codegen:
        raise TargetError(f"target {target.name} cannot generate code on this machine: "
                          f"{availability.explain()}")
    state = CompileState(graph=graph, target=target, availability=availability,
                         options=LoweringOptions.from_spec(target.spec), tuning=tuning,
                         database=database, tensorize=tensorize, plugins=plugins,
                         cost_model=cost_model, pass_switches=dict(passes or {}),
                         tunable_apart=tunable_apart)
    return Pipeline(default_stages() if stages is None else stages).run(state, dump_stages)


__all__ = [
    "AmosMapping", "Build", "Codegen", "CompileState", "FusionPlanning", "GeneratedSource",
    "GraphPasses",
    "LoweredCompute", "Lowering", "Pipeline", "ReportAssembly", "ScheduleChoice",
    "ScheduleKind", "ScheduleSelection", "Stage", "StageDumpError", "default_stages",
    "make_runner", "run_pipeline", "source_suffix",
]
