"""The tuning loop (thesis §4.4-4.5): search engine × isolated measurement × tuning database.

For every compute of a program (after the graph passes compile runs: :func:`tune`'s
``passes``), one *task* — the compute alone, its producers placeholders
(:mod:`tilecraft.tuning.tasks`: what a candidate measures, and the database key) — in the
target's schedule-template space (:meth:`~tilecraft.target.base.Target.template_space`)
where it has one, else in FlexTensor's generic schedule space
(:func:`tilecraft.search.generate_space`): the engine named in the
:class:`~tilecraft.tuning.budget.TuningOptions` explores the template's space; each batch of
points is decoded to template configs and handed to a measurement runner
(:class:`~tilecraft.tuning.runners.MeasureRunner`: this machine's isolated worker processes by
default, a Ray cluster with ``runner=RayRunner(...)``; the compute's small graph is rebuilt in
the worker from its pickled form); every result — failures included — becomes a record of the
tuning database (when one is given; written by this process only) and an event of the event
stream as soon as it is final, so a run killed at any moment (even by SIGKILL) loses at most
the candidates being measured. Points already in
the database (an interrupted run) are not measured again: their recorded cost is reused.

:func:`best_configs` reads the database back under the same keys: the best known config per
compute, which ``tilecraft.compile(..., database=...)`` uses (records keyed by the whole
producer graph, as written before tasks were isolated, are not found: see
:mod:`tilecraft.tuning.tasks`).
"""

from __future__ import annotations

import base64
import math
import pickle
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tilecraft.graph import Graph
from tilecraft.target.base import Target, TemplateSpace
from tilecraft.te.tensor import Tensor
from tilecraft.tuning.budget import TuningOptions, open_event_stream
from tilecraft.tuning.builders import SCHEDULE_BUILDER, TEMPLATE_BUILDER
from tilecraft.tuning.candidate import MeasureInput, MeasureResult
from tilecraft.tuning.database import TuningDatabase
from tilecraft.tuning.record import TuningRecord, canonical_json
from tilecraft.tuning.runners.local import LocalRunner
from tilecraft.tuning.runners.protocol import MeasureRunner
from tilecraft.tuning.tasks import isolate, task_key
from tilecraft.tuning.workload import Workload

__all__ = ["TaskResult", "TuningResult", "best_configs", "best_records", "compute_workload",
           "is_schedule_config", "task_space", "tune", "unpickle_program"]


def unpickle_program(data: str) -> Graph:
    """Workload builder: the graph pickled (and base64-encoded) by :func:`compute_workload`."""
    return pickle.loads(base64.b64decode(data))  # noqa: S301 - written by this process


def compute_workload(tensor: Tensor) -> Workload:
    """The workload of one compute: the compute alone (:func:`~tilecraft.tuning.tasks.isolate`:
    its producers placeholders), rebuildable in a worker process; its key is
    :func:`~tilecraft.tuning.tasks.task_key` of ``tensor``."""
    graph = isolate(tensor)
    data = base64.b64encode(pickle.dumps(graph)).decode()
    return Workload("tilecraft.tuning.tuner:unpickle_program", (data,), name=tensor.name)


@dataclass
class TaskResult:
    """One compute's tuning: the best config, its cost (seconds), GFLOP/s, every trial."""

    compute: str
    workload_key: str
    best_config: dict[str, Any] | None
    best_seconds: float
    flops: int
    trials: list[tuple[dict[str, Any], float, str | None]] = field(default_factory=list)
    stopped_by: str = ""
    seconds: float = 0.0
    #: trials measured by this run; the others reused a cost recorded in the database
    measured: int = 0

    @property
    def best_gflops(self) -> float | None:
        if not self.flops or not math.isfinite(self.best_seconds):
            return None
        return self.flops / self.best_seconds / 1e9

    def time_to_fraction(self, fraction: float = 0.9) -> int | None:
        """Trials until a cost within ``1 / fraction`` of the final best was first measured."""
        if not math.isfinite(self.best_seconds):
            return None
        for index, (_, cost, _) in enumerate(self.trials):
            if cost <= self.best_seconds / fraction:
                return index + 1
        return None


@dataclass
class TuningResult:
    tasks: list[TaskResult]

    def configs(self) -> dict[str, dict[str, Any]]:
        return {t.compute: t.best_config for t in self.tasks if t.best_config is not None}


def _target_ref(target: Target) -> str:
    return target.name


def tune(program: Graph | Tensor | Sequence[Tensor], target: Target,
         options: TuningOptions | str | Mapping[str, Any] | bool | None = None,
         target_ref: str | None = None, skip: Sequence[str] = (),
         plugins: Any = None, runner: MeasureRunner | None = None,
         passes: Mapping[str, bool] | bool | None = None) -> TuningResult:
    """Tune every compute of ``program`` that ``target`` has a template for, except those named
    in ``skip`` (see the module docstring). The computes are those ``tilecraft.compile`` will
    schedule: ``program`` after the registered graph passes, switched by ``passes`` as
    compile's ``passes=`` switches them (``None``: the defaults; ``False``: ``program`` as
    given, e.g. a graph the pipeline's passes made) — so the tasks' keys are the ones compile
    with the database looks up (a consumer that ``inline_elementwise`` gave a producer's body
    is a different workload from the compute written). ``target_ref`` names the target for
    worker processes (its registered name by default; ``"module:factory"`` for a target built
    in-process). The engine named in the options is looked up in the search engines
    registered through the plugin hook of ``plugins`` (a plugin manager; default: the
    process's). ``runner`` measures
    the candidates (default: a :class:`~tilecraft.tuning.runners.local.LocalRunner` of
    ``options.n_workers`` processes, closed at the end; a runner passed in stays open)."""
    from tilecraft.search import get_engine

    opts = TuningOptions.coerce(options)
    graph = program if isinstance(program, Graph) else Graph.from_outputs(
        [program] if isinstance(program, Tensor) else list(program))
    if passes is not False:
        from tilecraft.pipeline.graph_passes import apply_graph_passes

        graph, _ = apply_graph_passes(graph, target.spec,
                                      None if passes is True else passes, plugins)
    events = open_event_stream(opts)
    database = TuningDatabase(opts.database) if opts.database is not None else None
    started = time.monotonic()
    deadline = opts.run_deadline(started)
    tasks: list[TaskResult] = []
    try:
        own = runner is None
        measurer = runner if runner is not None else LocalRunner(
            n_workers=opts.n_workers, settings=opts.measure_settings())
        try:
            for tensor in graph.computes:
                if tensor.name in skip:
                    continue
                alone = isolate(tensor).outputs[0]  # its space and workload: it alone
                template, builder = task_space(alone, target)
                if template is None:
                    continue
                tasks.append(_tune_task(alone, template, builder, target, target_ref or
                                        _target_ref(target), opts, measurer, database, events,
                                        get_engine(opts.engine, manager=plugins),
                                        deadline))
        finally:
            if own:
                measurer.close()
    finally:
        if database is not None:
            database.close()
    return TuningResult(tasks)


def task_space(tensor: Tensor, target: Target) -> tuple[Any, str]:
    """The space one compute is tuned in, and the builder its points are lowered with: the
    target's schedule template where it has one, else FlexTensor's generic schedule space
    (:func:`tilecraft.search.generate_space`, §4.3.2) applied through the schedule primitives.
    ``(None, "")`` when neither exists (e.g. a compute with a single possible schedule). The
    tuner passes the compute alone (:func:`~tilecraft.tuning.tasks.isolate`), so the generic
    space offers no inlining of producers that its workload does not hold."""
    template = target.template_space(tensor)
    if template is not None:
        return template, TEMPLATE_BUILDER
    from tilecraft.errors import TilecraftError
    from tilecraft.search import generate_space

    try:
        space = generate_space(tensor, target.spec)
    except TilecraftError:
        return None, ""
    if space.size < 2:
        return None, ""
    return TemplateSpace(space, space.decode), SCHEDULE_BUILDER


def is_schedule_config(config: Mapping[str, Any]) -> bool:
    """Whether ``config`` is a generic schedule configuration (else a template's)."""
    return "split" in config or "reorder" in config


def _tune_task(tensor: Tensor, template: Any, builder: str, target: Target, target_ref: str,
               opts: TuningOptions, measurer: MeasureRunner, database: TuningDatabase | None,
               events: Any, engine: Any, deadline: float | None) -> TaskResult:
    workload = compute_workload(tensor)
    key = workload.key
    flops = workload.instantiate().flops
    budget = opts.budget(deadline)
    task = TaskResult(tensor.name, key, None, math.inf, flops)
    events.task_start(tensor.name, workload_key=key, target=target.name, flops=flops,
                      trials=budget.trials, seconds=budget.seconds)
    known: dict[str, float] = {}
    if database is not None:
        for record in database.records(key, target.name):
            config = record.schedule.get(tensor.name)
            if config is not None:
                label = canonical_json(config)
                # a config measured more than once keeps its best median (as the database's
                # best() ranks it)
                known[label] = min(known.get(label, math.inf), record.median_cost or math.inf)
    start = time.monotonic()

    def cost(points: list[Any]) -> list[float]:
        configs = [template.decode(p) for p in points]
        fresh = [c for c in configs if canonical_json(c) not in known]
        inputs = [MeasureInput(workload, target_ref, {tensor.name: c}, builder=builder,
                               label=tensor.name) for c in fresh]

        def record(index: int, result: MeasureResult) -> None:
            # each result is stored the moment it is final: a killed run resumes from it
            candidate = inputs[index]
            label = canonical_json(candidate.schedule[tensor.name])
            # two points of one batch may decode to the same config: both are measured, and
            # the config keeps its best median, as the database's best() ranks it
            known[label] = min(known.get(label, math.inf), result.cost)
            if database is not None and not result.pruned:
                database.add(result.to_record(candidate, plugin=target.name))
            events.candidate_result(tensor.name, result, label=label,
                                    **({"node": result.node} if result.node else {}))

        task.measured += len(inputs)
        if inputs:
            batch = measurer.submit(inputs)
            try:
                for index, result in batch.as_completed():
                    record(index, result)
            finally:
                # interrupted (Ctrl-C, a database error): the rest of the batch is dropped
                batch.cancel()
        costs = [known[canonical_json(c)] for c in configs]
        budget.record(costs)
        for config, value in zip(configs, costs):
            error = None if math.isfinite(value) else "failed"
            task.trials.append((config, value, error))
            if value < task.best_seconds:
                task.best_seconds, task.best_config = value, config
        return costs

    trials = int(min(budget.trials, template.space.size))
    remaining = budget.remaining_seconds
    result = engine.search(template.space, cost, budget_trials=trials, seed=opts.seed,
                           budget_seconds=None if math.isinf(remaining) else remaining)
    task.stopped_by = result.stopped_by
    task.seconds = time.monotonic() - start
    events.task_end(tensor.name, reason=result.stopped_by)
    return task


def best_records(graph: Graph, target: Target, database: str | TuningDatabase
                 ) -> dict[str, TuningRecord]:
    """The best recorded measurement per compute of ``graph`` on ``target`` (computes without
    a successful record left out), each looked up under its task's key
    (:func:`~tilecraft.tuning.tasks.task_key`)."""
    db = database if isinstance(database, TuningDatabase) else TuningDatabase(database)
    try:
        found = {}
        for tensor in graph.computes:
            best = db.best(task_key(tensor), target.name, k=1)
            if best and tensor.name in best[0].schedule:
                found[tensor.name] = best[0]
        return found
    finally:
        if db is not database:
            db.close()


def best_configs(graph: Graph, target: Target, database: str | TuningDatabase
                 ) -> dict[str, dict[str, Any]]:
    """The best recorded template config per compute of ``graph`` on ``target``."""
    return {name: dict(record.schedule[name])
            for name, record in best_records(graph, target, database).items()}
