"""The programmatic compile API.

>>> import numpy as np
>>> import tilecraft as tc
>>> from tilecraft import te
>>> A = te.placeholder((5, 7), name="A")
>>> B = te.compute((5, 7), lambda i, j: te.max(A[i, j], 0.0), name="B")
>>> exe = tc.compile(tc.Graph.from_outputs([B]), target="x86_avx512")  # doctest: +SKIP
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from tilecraft.errors import GraphError, TargetError
from tilecraft.graph import Graph
from tilecraft.kernel_ir.nodes import Kernel
from tilecraft.runtime.executable import CompiledKernel, Executable, KernelRunner
from tilecraft.runtime.report import KernelReport, Report
from tilecraft.target.base import Capability, Target
from tilecraft.te.tensor import Tensor


def _as_graph(program: Graph | Tensor | Sequence[Tensor]) -> Graph:
    if isinstance(program, Graph):
        return program
    if isinstance(program, Tensor):
        return Graph.from_outputs([program])
    if isinstance(program, Sequence) and program and all(isinstance(t, Tensor) for t in program):
        return Graph.from_outputs(list(program))
    raise GraphError(f"compile expects a Graph, a Tensor or a list of Tensors, got "
                     f"{type(program).__name__}")


def _resolve_target(target: str | Target) -> Target:
    if isinstance(target, Target):
        return target
    if not isinstance(target, str):
        raise TargetError(f"target={target!r}: give a target name such as 'x86_avx512' (see "
                          "`tilecraft targets`) or a Target instance")
    from tilecraft.target.registry import get_target

    return get_target(target)


def compile(program: Graph | Tensor | Sequence[Tensor],  # noqa: A001
            target: str | Target = "x86_avx512", tuning: Any = None,
            database: str | None = None, tensorize: Any = None) -> Executable:
    """Lower every compute of ``program`` to Kernel IR, generate code for ``target`` and, where
    this machine can, build and load it (or emulate it).

    ``tuning`` (a :class:`~tilecraft.tuning.TuningOptions`, a preset name such as ``"quick"``,
    a mapping of its fields, or ``True``) first tunes the target's schedule templates of the
    computes that are not fused (:func:`tilecraft.tuning.tuner.tune`); ``database`` (a tuning
    database file, also taken from the tuning options) supplies the best known parameters when
    no tuning is asked for. A target this machine can only compile for still yields an
    Executable with the generated sources (``exe.sources``); calling it raises a TargetError
    that says why.
    """
    from tilecraft.intrin import tensorize as mapped
    from tilecraft.lower import LoweringOptions, lower_compute
    from tilecraft.tuning.builders import lower_compute_with_config
    from tilecraft.tuning.tuner import is_schedule_config

    graph = _as_graph(program)
    tgt = _resolve_target(target)
    availability = tgt.available()
    if not availability.codegen:
        raise TargetError(f"target {tgt.name} cannot generate code on this machine: "
                          f"{availability.explain()}")
    capability = availability.capability
    options = LoweringOptions.from_spec(tgt.spec)
    report = Report(target=tgt.name, capability=availability.explain())
    compiled: list[CompiledKernel] = []
    start = time.perf_counter()
    plan = mapped.plan_tensorization(graph, tgt.spec, tensorize)
    groups = [group for group in tgt.fuse(graph, options)
              if not any(name in plan for name in group.computes)]  # tensorized: not fused
    grouped = {name: group for group in groups for name in group.computes}
    for group in groups:
        report.notes.extend(group.notes)
    configs = _tuned_configs(graph, tgt, tuning, database, set(grouped) | set(plan), report)
    for tensor in graph.computes:
        group = grouped.get(tensor.name)
        if group is not None and tensor.name != group.computes[-1]:
            continue  # lowered with the group, at its last compute
        if group is not None:
            kernels = list(group.kernels)
        elif tensor.name in plan:
            kernels = mapped.lower_tensorized(plan[tensor.name], options)
        else:
            start = time.perf_counter()
            config = configs.get(tensor.name)
            if config is not None and is_schedule_config(config):
                kernels = lower_compute_with_config(graph, tensor, config, tgt)
            else:
                kernels = tgt.lower_compute(tensor, options, config) or \
                    [lower_compute(tensor, options)]
        for kernel in kernels:
            source = tgt.codegen(kernel)
            runner, mode = _make_runner(tgt, kernel, source, capability)
            elapsed = time.perf_counter() - start
            start = time.perf_counter()
            compiled.append(CompiledKernel(kernel, source, runner))
            report.kernels.append(KernelReport(
                name=kernel.name, statement=tensor.statement(),
                schedule=str(kernel.attrs.get("schedule", "default")), language=source.language,
                source_lines=source.text.count("\n") + 1, source_bytes=len(source.text),
                mode=mode, compile_seconds=elapsed))
    from tilecraft.intrin.report import attach_mapping_report

    attach_mapping_report(report, graph, tgt.spec)  # AMOS (§5.7); <= 50 ms a compute, no raise
    mapped.report_tensorized(plan, compiled, report)  # measured next to predicted
    reason = None
    if capability not in (Capability.EXECUTE, Capability.EMULATE):
        reason = availability.explain()
    return Executable(graph, tgt.name, compiled, report, unavailable_reason=reason)


def _tuned_configs(graph: Graph, tgt: Target, tuning: Any, database: str | None,
                   fused: set[str], report: Report) -> dict[str, dict[str, Any]]:
    """Template configs per compute: tuned now, or the best known in ``database``."""
    if tuning is None and database is None:
        return {}
    from tilecraft.tuning.budget import TuningOptions
    from tilecraft.tuning.tuner import best_configs, tune

    if tuning is not None and tuning is not False:
        options = TuningOptions.coerce(tuning)
        if database is not None and options.database is None:
            options = options.replace(database=database)
        result = tune(graph, tgt, options, skip=sorted(fused))
        for task in result.tasks:
            gflops = task.best_gflops
            report.notes.append(
                f"tuned {task.compute}: {len(task.trials)} trials, best "
                f"{'failed' if gflops is None else f'{gflops:.1f} GFLOP/s'} with "
                f"{task.best_config} (stopped by {task.stopped_by})")
        return result.configs()
    configs = best_configs(graph, tgt, database)
    for name, config in configs.items():
        report.notes.append(f"{name}: best known parameters from {database}: {config}")
    return configs


def _make_runner(tgt: Target, kernel: Kernel, source,
                 capability: Capability) -> tuple[KernelRunner | None, str]:
    if capability is Capability.EXECUTE:
        return tgt.load(tgt.build(source)), "native"
    if capability is Capability.EMULATE:
        return (lambda arrays, _k=kernel: tgt.emulate(_k, arrays)), "emulated"
    if capability is Capability.COMPILE_ONLY:
        tgt.build(source)
    return None, "source"
