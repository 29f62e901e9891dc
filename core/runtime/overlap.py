"""Search overlapped with execution (thesis §4.6.3, Fig. 4.6): an Executable that runs at once
on the default (or best recorded) kernels while tuning goes on in a background thread, and
swaps in each compute's kernels as soon as a better schedule is measured.

``tilecraft.compile(graph, target, tuning=..., overlap=True)`` returns an
:class:`OverlappedExecutable`. Fig. 4.6's three designs:

* compile then run (``overlap=False``): tune every operator, compile, then execute;
* synchronous overlap (``overlap="sync"``): each call waits for the next search stage (a batch
  of candidates of one operator, or an operator's end) and runs with what it produced;
* asynchronous overlap (``overlap=True`` or ``"async"``): calls never wait; each runs the
  newest kernels of every operator.

A swap is atomic: the new kernels are built aside, then the executable's plan — one reference
— is replaced (:meth:`Executable.install`); a running call keeps the plan it started with.
A candidate replaces the running kernels of its compute only when its measured median beats
the running kernels' (timed in this process when the compute's task starts, then the cost of
the last swap). Every swap is a ``kernel_swap`` event of the tuning's event stream and a
:class:`KernelSwap` in ``exe.swaps``. An exception of the background tuning is raised by the
next call (once) and by :meth:`OverlappedExecutable.wait` (always): it is never lost.

>>> OverlapMode.coerce(True), OverlapMode.coerce("sync")
(<OverlapMode.ASYNC: 'async'>, <OverlapMode.SYNC: 'sync'>)
"""

from __future__ import annotations

import enum
import json
import math
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tilecraft.graph import Graph
from tilecraft.runtime.executable import CompiledKernel, Executable
from tilecraft.runtime.report import KernelReport
from tilecraft.te.tensor import Tensor
from tilecraft.tuning.workload import TuningError

__all__ = ["BackgroundTuningError", "KernelSwap", "OverlapMode", "OverlappedExecutable",
           "compile_overlapped", "isolate", "tunable_computes"]


class BackgroundTuningError(TuningError):
    """The background tuning of an overlapped executable failed (the cause is chained)."""


class OverlapMode(str, enum.Enum):
    """How calls and the background search share time (Fig. 4.6, designs 2 and 3)."""

    SYNC = "sync"     # a call waits for the next search stage
    ASYNC = "async"   # a call never waits

    @classmethod
    def coerce(cls, value: Any) -> OverlapMode:
        if value is True:
            return cls.ASYNC
        if isinstance(value, str):
            try:
                return cls(value)
            except ValueError:
                pass
        raise TuningError(f"overlap={value!r}: give True, 'async' or 'sync' (or False for "
                          "compile then run)")


@dataclass(frozen=True)
class KernelSwap:
    """One swap: the compute, its schedule config, the measured cost of the new kernels and
    of those they replace (seconds), the new kernels' names, and when (seconds after the
    executable was returned)."""

    compute: str
    config: dict[str, Any]
    cost: float
    previous_cost: float
    kernels: tuple[str, ...]
    elapsed: float


class _Stopped(Exception):
    """Raised in the tuner's event sink to end the background tuning (close())."""


class OverlappedExecutable(Executable):
    """An :class:`Executable` whose kernels improve while it runs (see the module docstring).
    ``wait()`` until the tuning ends, ``close()`` to stop it; also a context manager."""

    def __init__(self, state: Any, options: Any, mode: OverlapMode,
                 unavailable_reason: str | None = None):
        super().__init__(state.graph, state.target.name, state.compiled, state.report,
                         unavailable_reason=unavailable_reason)
        self.mode = mode
        self.options = options
        self.swaps: list[KernelSwap] = []
        #: the TuningResult, once the background tuning has ended
        self.tuning_result: Any = None
        self._state = state
        # per compute (in execution order): its kernels and their report rows
        self._segments: dict[str, tuple[list[CompiledKernel], list[KernelReport]]] = {}
        for item, compiled, report in zip(state.sources, state.compiled, state.kernel_reports):
            kernels, reports = self._segments.setdefault(item.compute, ([], []))
            kernels.append(compiled)
            reports.append(report)
        self._costs: dict[str, float] = {}  # compute -> measured cost of its running kernels
        self._swap_lock = threading.Lock()
        self._stages = threading.Condition()
        self._stages_done = 0
        self._stages_used = 0
        self._results_in_task = 0
        self._stage_pending = False
        self._done = threading.Event()
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._error_raised = False
        self._started = time.monotonic()
        # finding the tunable computes builds their search spaces: in the background
        self._tunable: list[tuple[str, Graph]] | None = None
        if options.database is not None:
            self._recorded_costs(str(options.database))
        self._sink, self._writer = _user_sink(options.events)
        self._thread = threading.Thread(target=self._tune, name="tilecraft-overlap",
                                        daemon=True)
        self._thread.start()

    def _recorded_costs(self, database: str) -> None:
        """The recorded median cost of every compute whose schedule the compile took from the
        database (the same task keys as tuning: :mod:`tilecraft.tuning.tasks`): a candidate
        replaces those kernels only when it beats their record."""
        from tilecraft.tuning.tuner import best_records

        taken = {name for name, choice in self._state.schedules.items()
                 if choice.source == "database"}
        for name, record in best_records(self._state.graph, self._state.target,
                                         database).items():
            if name in taken and name in self._segments:
                self._costs[name] = record.median_cost or math.inf

    # the background thread -------------------------------------------------------------------
    def _tune(self) -> None:
        from tilecraft.tuning.runners.local import LocalRunner
        from tilecraft.tuning.tuner import TuningResult, tune

        state, options = self._state, self.options
        runner = LocalRunner(n_workers=options.n_workers, settings=options.measure_settings())
        tasks: list[Any] = []
        try:
            deadline = options.run_deadline(time.monotonic())
            if self._tunable is None:
                self._tunable = tunable_computes(state)
            for _, graph in self._tunable:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    break
                sub = options.replace(events=self._on_event, **(
                    {} if remaining is None else {"total_seconds": remaining}))
                tasks.extend(tune(graph, state.target, sub, plugins=state.plugins,
                                  runner=runner, passes=False).tasks)
            for task in tasks:
                gflops = task.best_gflops
                self.report.notes.append(
                    f"tuned {task.compute} while running: {len(task.trials)} trials, best "
                    f"{'failed' if gflops is None else f'{gflops:.1f} GFLOP/s'} (stopped by "
                    f"{task.stopped_by})")
        except _Stopped:
            self.report.notes.append("background tuning stopped by close()")
        except BaseException as err:  # noqa: BLE001 - handed to the caller, never lost
            self._error = err
        finally:
            self.tuning_result = TuningResult(tasks)
            runner.close()
            self._done.set()
            with self._stages:
                self._stages.notify_all()
            if self._writer is not None:
                self._writer.close()

    def _on_event(self, event: Any) -> None:
        """The tuner's event sink: the user's sink first, then baselines, swaps and stages."""
        from tilecraft.tuning.events import EventKind

        if self._stop.is_set():
            raise _Stopped
        if self._sink is not None:
            self._sink(event)
        if event.kind is EventKind.TASK_START:
            self._results_in_task = 0
            if event.task in self._segments and event.task not in self._costs:
                self._costs[event.task] = self._time_running(event.task)
        elif event.kind is EventKind.NEW_BEST:
            cost = event.data.get("cost")
            if cost is not None and cost < self._costs.get(event.task, math.inf):
                self._swap(event.task, json.loads(event.data["label"]), float(cost))
            self._end_stage()
        elif event.kind is EventKind.CANDIDATE_RESULT:
            # a stage (a batch of one task) ends with its last result, after the swap its
            # new_best (the next event, if any) may bring
            self._end_stage()
            self._results_in_task += 1
            self._stage_pending = self._results_in_task % int(self.options.batch_size) == 0
        elif event.kind is EventKind.TASK_END:
            self._stage_pending = True
            self._end_stage()

    def _end_stage(self) -> None:
        """Count the stage whose last result has been handled, if one is pending: a call of
        the synchronous mode waits for it."""
        if not self._stage_pending:
            return
        self._stage_pending = False
        with self._stages:
            self._stages_done += 1
            self._stages.notify_all()

    def _time_running(self, compute: str) -> float:
        """Median seconds of the kernels computing ``compute`` now, run here on arrays of
        their parameters' shapes (inf where they cannot run here). Kernels the executable ran
        once at load (a constant weight's packing) are left out, as calls and tuning
        candidates leave them out."""
        from tilecraft.runtime.runners import InProcessRunner

        kernels, _ = self._segments[compute]
        if any(entry.runner is None for entry in kernels):
            return math.inf
        precomputed = self._plan.precomputed
        kernels = [entry for entry in kernels
                   if not set(entry.kernel.outputs) <= set(precomputed)]
        if not kernels:
            return math.inf
        rng = np.random.default_rng(0)
        arrays = [{p.name: _array(p.shape, p.dtype.numpy, rng) for p in entry.kernel.params}
                  for entry in kernels]

        def run(_: Any) -> None:
            for entry, args in zip(kernels, arrays):
                entry.runner(args)  # type: ignore[misc]

        runner = InProcessRunner()
        once = min(runner.run(run, {}, repeat=1, warmup=int(self.options.warmup)))
        number = max(1, int(float(self.options.min_seconds) / max(once, 1e-9)))
        seconds = runner.run(run, {}, repeat=int(self.options.repeats), warmup=0,
                             number=number)
        return float(np.median(seconds))

    def _swap(self, compute: str, config: dict[str, Any], cost: float) -> None:
        """Build ``compute``'s kernels under ``config`` aside, then install them."""
        from tilecraft.tuning.events import EventKind, TuningEvent

        compiled, reports = _build_compute(self._state, compute, config)
        with self._swap_lock:
            self._segments[compute] = (compiled, reports)
            self.install([k for kernels, _ in self._segments.values() for k in kernels],
                         [r for _, rows in self._segments.values() for r in rows])
            previous = self._costs.get(compute, math.inf)
            self._costs[compute] = cost
            names = tuple(entry.kernel.name for entry in compiled)
            self.swaps.append(KernelSwap(compute, config, cost, previous, names,
                                         time.monotonic() - self._started))
            number = len(self.swaps)
        if self._sink is not None:
            self._sink(TuningEvent(EventKind.KERNEL_SWAP, compute, time.time(), {
                "cost": cost, "previous_cost": previous, "kernels": list(names),
                "label": json.dumps(config, sort_keys=True, separators=(",", ":")),
                "swap": number}))

    # the caller's side -------------------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> np.ndarray | tuple[np.ndarray, ...]:
        self._raise_background_error(once=True)
        if self.mode is OverlapMode.SYNC:
            with self._stages:
                self._stages.wait_for(lambda: self._done.is_set() or
                                      self._stages_done > self._stages_used)
                self._stages_used = self._stages_done
            self._raise_background_error(once=True)
        return super().__call__(*args, **kwargs)

    def _raise_background_error(self, once: bool) -> None:
        error = self._error
        if error is None or (once and self._error_raised):
            return
        self._error_raised = True
        raise BackgroundTuningError(f"the background tuning of the {self.target_name} "
                                    f"executable failed: {type(error).__name__}: {error}; the "
                                    "executable keeps running its current kernels") from error

    @property
    def tuning_done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the background tuning ends (True) or ``timeout`` seconds pass (False);
        raises the tuning's error if it failed."""
        finished = self._done.wait(timeout)
        if finished:
            self._thread.join()
            self._raise_background_error(once=False)
        return finished

    def close(self) -> None:
        """Stop the background tuning (at its next result) and wait for it; the executable
        keeps its current kernels and stays callable."""
        self._stop.set()
        self._done.wait()
        self._thread.join()

    def __enter__(self) -> OverlappedExecutable:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "tuning" if not self.tuning_done else "tuned"
        return (f"OverlappedExecutable(target={self.target_name!r}, {self.mode.value}, "
                f"{state}, swaps={len(self.swaps)})")


def isolate(graph: Graph, tensor: Tensor) -> Graph:
    """``tensor`` alone (:func:`tilecraft.tuning.tasks.isolate`, which tuning, the database
    keys and compile share; ``graph`` is not needed and kept for callers).

    >>> from tilecraft import te
    >>> A = te.placeholder((4,), name="A")
    >>> B = te.compute((4,), lambda i: A[i] * 2.0, name="B")
    >>> C = te.compute((4,), lambda i: B[i] + 1.0, name="C")
    >>> print(isolate(Graph.from_outputs([C]), C))
    graph(B: float32[4]) -> (C):
      C[i] = B[i] + 1.0
    """
    from tilecraft.tuning.tasks import isolate as isolate_task

    return isolate_task(tensor)


def tunable_computes(state: Any) -> list[tuple[str, Graph]]:
    """The computes of a compile state that tuning may improve (not fused, not tensorized,
    with a search space), each alone (:func:`tilecraft.tuning.tasks.isolate`), in execution
    order."""
    from tilecraft.pipeline.state import ScheduleKind
    from tilecraft.tuning.tasks import isolate as isolate_task
    from tilecraft.tuning.tuner import task_space

    found = []
    for tensor in state.graph.computes:
        choice = state.schedules.get(tensor.name)
        if choice is None or choice.kind in (ScheduleKind.FUSED, ScheduleKind.TENSORIZED):
            continue
        graph = isolate_task(tensor)
        if task_space(graph.outputs[0], state.target)[0] is not None:
            found.append((tensor.name, graph))
    return found


def _array(shape: Any, dtype: np.dtype, rng: np.random.Generator) -> np.ndarray:
    shape = tuple(int(s) for s in shape)
    if np.issubdtype(dtype, np.floating):
        return rng.standard_normal(shape).astype(dtype)
    return np.zeros(shape, dtype=dtype)


def _user_sink(events: Any) -> tuple[Any, Any]:
    """The tuning options' event destination as a callable, and the writer to close."""
    from tilecraft.tuning.events import JsonLinesWriter

    if events is None:
        return None, None
    if isinstance(events, (str, Path)):
        writer = JsonLinesWriter(events)
        return writer, writer
    return events, None


def _build_compute(state: Any, compute: str, config: dict[str, Any]
                   ) -> tuple[list[CompiledKernel], list[KernelReport]]:
    """``compute``'s kernels under ``config``: lowered, generated and built (or emulated) as
    the pipeline's stages do; the compile state's schedule of it is updated."""
    from tilecraft.pipeline.build import build_kernel
    from tilecraft.pipeline.lowering import Lowering
    from tilecraft.pipeline.state import ScheduleChoice, ScheduleKind
    from tilecraft.tuning.tuner import is_schedule_config

    tensor = next(t for t in state.graph.computes if t.name == compute)
    kind = ScheduleKind.PRIMITIVES if is_schedule_config(config) else ScheduleKind.TEMPLATE
    choice = ScheduleChoice(compute, kind, config, "tuned")
    started = time.perf_counter()
    kernels = Lowering._lower(state, tensor, choice)
    compiled, reports = [], []
    for kernel in kernels:
        source = state.target.codegen(kernel)
        runner, mode, artifact = build_kernel(state.target, kernel, source,
                                              state.availability.capability,
                                              state.availability.build)
        compiled.append(CompiledKernel(kernel, source, runner))
        reports.append(KernelReport(
            name=kernel.name, statement=tensor.statement(),
            schedule=str(kernel.attrs.get("schedule", "default")), language=source.language,
            source_lines=source.text.count("\n") + 1, source_bytes=len(source.text),
            mode=mode, compile_seconds=time.perf_counter() - started,
            build_summary=str(artifact.meta.get("summary", "")) if artifact else ""))
        started = time.perf_counter()
    state.schedules[compute] = choice
    return compiled, reports


def compile_overlapped(graph: Any, target: Any, tuning: Any, overlap: Any, *,
                       database: str | None = None, tensorize: Any = None,
                       dump_stages: Any = None, passes: Any = None) -> OverlappedExecutable:
    """What ``tilecraft.compile(..., overlap=...)`` does: compile with the best recorded (else
    default) schedules, return at once, tune in the background."""
    from tilecraft.pipeline import run_pipeline
    from tilecraft.target.base import Capability
    from tilecraft.tuning.budget import TuningOptions

    mode = OverlapMode.coerce(overlap)
    options = TuningOptions.coerce(tuning)
    if options is None:
        raise TuningError("overlap=True tunes in the background: give tuning= as well (a "
                          "preset name such as 'quick', a dict of options or TuningOptions)")
    if database is not None and options.database is None:
        options = options.replace(database=database)
    known = None if options.database is None else str(options.database)
    # a GEMM fused with its epilogue would take only default parameters: tuning swaps the
    # GEMM's kernels, so it runs apart from its epilogue here
    state = run_pipeline(graph, target, database=known, tensorize=tensorize,
                         dump_stages=dump_stages, passes=passes, tunable_apart=True)
    assert state.report is not None
    reason = None
    if state.availability.capability not in (Capability.EXECUTE, Capability.EMULATE):
        reason = state.availability.explain()
    return OverlappedExecutable(state, options, mode, unavailable_reason=reason)
