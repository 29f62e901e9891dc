"""The machine-readable event stream of a tuning run: JSON Lines, or a Python callback.

Every event is one JSON object on one line with ``event`` (its kind), ``task``, ``time``
(Unix seconds), ``v`` (the stream's schema version) and the kind's own fields:

==================  =======================================================================
``task_start``      ``workload_key``, ``target``, ``flops``, ``budget`` ({trials, seconds})
``candidate_result`` ``trial`` (1-based in the task), ``cost`` (median seconds or null),
                    ``gflops`` (or null), ``error_kind`` (or null), ``error_message``,
                    ``label``, ``elapsed``, ``best_cost``, ``best_gflops``
``new_best``        ``trial``, ``cost``, ``gflops``, ``label``, ``elapsed``
``task_end``        ``trials``, ``best_cost``, ``best_gflops``, ``best_trial``, ``elapsed``,
                    ``reason`` (why it stopped), ``errors`` ({error kind: count})
``kernel_swap``     ``cost``, ``previous_cost`` (seconds), ``kernels`` (names), ``label``,
                    ``swap`` (1-based count): an overlapped executable now runs a better
                    kernel (``tilecraft.compile(..., overlap=True)``)
==================  =======================================================================

Non-finite numbers are written as ``null``, so every line is strict JSON.

>>> seen = []
>>> stream = EventStream([seen.append], clock=lambda: 100.0)
>>> _ = stream.task_start("matmul", workload_key="k", target="x86_avx512", flops=2000)
>>> stream.candidate_result("matmul", cost=1e-6)
>>> [e.kind.value for e in seen]
['task_start', 'candidate_result', 'new_best']
>>> seen[2].data["gflops"]
2.0
>>> TuningEvent.from_json(seen[1].to_json()).data["trial"]
1
"""

from __future__ import annotations

import enum
import json
import math
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from tilecraft.tuning.candidate import MeasureResult
from tilecraft.tuning.workload import TuningError

__all__ = ["EVENT_SCHEMA_VERSION", "EventKind", "EventSink", "EventStream", "JsonLinesWriter",
           "TaskProgress", "TuningEvent", "read_events"]

EVENT_SCHEMA_VERSION = 1


class EventKind(str, enum.Enum):
    TASK_START = "task_start"
    CANDIDATE_RESULT = "candidate_result"
    NEW_BEST = "new_best"
    TASK_END = "task_end"
    KERNEL_SWAP = "kernel_swap"


_REQUIRED: dict[EventKind, tuple[str, ...]] = {
    EventKind.TASK_START: ("workload_key", "target", "flops", "budget"),
    EventKind.CANDIDATE_RESULT: ("trial", "cost", "gflops", "error_kind", "error_message",
                                 "label", "elapsed", "best_cost", "best_gflops"),
    EventKind.NEW_BEST: ("trial", "cost", "gflops", "label", "elapsed"),
    EventKind.TASK_END: ("trials", "best_cost", "best_gflops", "best_trial", "elapsed",
                         "reason", "errors"),
    EventKind.KERNEL_SWAP: ("cost", "previous_cost", "kernels", "label", "swap"),
}


def _finite(value: Any) -> Any:
    """JSON has no inf/nan: they become null (recursively)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


@dataclass(frozen=True)
class TuningEvent:
    """One event: its kind, task, Unix time and kind-specific fields."""

    kind: EventKind
    task: str
    time: float
    data: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"event": self.kind.value, "task": self.task, "time": self.time,
                "v": EVENT_SCHEMA_VERSION, **_finite(dict(self.data))}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"), allow_nan=False, default=str)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> TuningEvent:
        """Parse and check one event (a :class:`TuningError` naming what is wrong)."""
        try:
            kind = EventKind(raw.get("event"))
        except ValueError:
            raise TuningError(f"not a tuning event: 'event' is {raw.get('event')!r}; expected "
                              f"one of {', '.join(k.value for k in EventKind)}") from None
        if raw.get("v") != EVENT_SCHEMA_VERSION:
            raise TuningError(f"{kind.value} event has schema version {raw.get('v')!r}; this "
                              f"tilecraft reads version {EVENT_SCHEMA_VERSION}")
        missing = [name for name in ("task", "time", *_REQUIRED[kind]) if name not in raw]
        if missing:
            raise TuningError(f"{kind.value} event lacks {', '.join(missing)}")
        if not isinstance(raw["task"], str) or not isinstance(raw["time"], (int, float)):
            raise TuningError(f"{kind.value} event: 'task' must be a string and 'time' a "
                              "number")
        data = {k: v for k, v in raw.items() if k not in ("event", "task", "time", "v")}
        return cls(kind, raw["task"], float(raw["time"]), data)

    @classmethod
    def from_json(cls, line: str) -> TuningEvent:
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as err:
            raise TuningError(f"not a JSON line ({err}): {line[:80]!r}") from None
        if not isinstance(raw, dict):
            raise TuningError(f"a tuning event is a JSON object, got {type(raw).__name__}")
        return cls.from_dict(raw)


EventSink = Callable[[TuningEvent], None]


class JsonLinesWriter:
    """An event sink writing one JSON line per event to a file (path, appended) or an open
    text stream; each line is flushed, so a reader can follow the run live."""

    def __init__(self, destination: str | Path | IO[str]):
        if isinstance(destination, (str, Path)):
            self._handle: IO[str] = Path(destination).open("a", encoding="utf-8")
            self._owned = True
        else:
            self._handle = destination
            self._owned = False

    def __call__(self, event: TuningEvent) -> None:
        self._handle.write(event.to_json() + "\n")
        self._handle.flush()

    def close(self) -> None:
        if self._owned and not self._handle.closed:
            self._handle.close()


def read_events(path: str | Path) -> list[TuningEvent]:
    """The events of a JSON Lines file, each checked (errors name the line)."""
    events = []
    with Path(path).open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                events.append(TuningEvent.from_json(line))
            except TuningError as err:
                raise TuningError(f"{path}, line {number}: {err}") from None
    return events


@dataclass
class TaskProgress:
    """What the stream knows about one task so far."""

    task: str
    started: float
    flops: int = 0
    trials: int = 0
    best_cost: float = math.inf
    best_gflops: float | None = None
    best_trial: int | None = None
    errors: Counter[str] = field(default_factory=Counter)

    def gflops(self, cost: float | None) -> float | None:
        if cost is None or not math.isfinite(cost) or cost <= 0 or not self.flops:
            return None
        return self.flops / cost / 1e9


class EventStream:
    """Builds the events of tuning tasks and hands each to every sink.

    It keeps each task's progress (trial count, best cost) so that callers only report what
    happened: :meth:`candidate_result` numbers the trial and emits ``new_best`` itself when the
    cost improves. ``clock`` gives the events' Unix time; elapsed times use a monotonic clock.
    """

    def __init__(self, sinks: Iterable[EventSink] = (), clock: Callable[[], float] = time.time):
        self.sinks: list[EventSink] = list(sinks)
        self._clock = clock
        self.tasks: dict[str, TaskProgress] = {}

    def add_sink(self, sink: EventSink) -> None:
        self.sinks.append(sink)

    def emit(self, kind: EventKind, task: str, **data: Any) -> TuningEvent:
        event = TuningEvent(kind, task, self._clock(), data)
        for sink in self.sinks:
            sink(event)
        return event

    def _progress(self, task: str) -> TaskProgress:
        if task not in self.tasks:
            raise TuningError(f"task {task!r} has not started; call task_start({task!r}, ...) "
                              "first")
        return self.tasks[task]

    def task_start(self, task: str, *, workload_key: str = "", target: str = "",
                   flops: int = 0, trials: float | None = None, seconds: float | None = None,
                   **extra: Any) -> TaskProgress:
        progress = TaskProgress(task, time.monotonic(), flops=flops)
        self.tasks[task] = progress
        self.emit(EventKind.TASK_START, task, workload_key=workload_key, target=target,
                  flops=flops, budget={"trials": trials, "seconds": seconds}, **extra)
        return progress

    def candidate_result(self, task: str, result: MeasureResult | None = None, *,
                         cost: float | None = None, error_kind: str | None = None,
                         error_message: str = "", label: str = "", **extra: Any) -> None:
        """Report one evaluated candidate: a :class:`MeasureResult`, or its cost (seconds) or
        error kind directly."""
        progress = self._progress(task)
        if result is not None:
            cost = result.median
            error_kind = result.error_kind.value if result.error_kind is not None else None
            error_message = result.error_message
            if result.pruned:
                extra.setdefault("pruned", True)
            if result.estimate_seconds is not None:
                extra.setdefault("estimate", result.estimate_seconds)
        progress.trials += 1
        if error_kind is not None:
            progress.errors[error_kind] += 1
            cost = None
        elapsed = time.monotonic() - progress.started
        improved = cost is not None and math.isfinite(cost) and cost < progress.best_cost
        if improved:
            progress.best_cost = cost  # type: ignore[assignment]
            progress.best_gflops = progress.gflops(cost)
            progress.best_trial = progress.trials
        self.emit(EventKind.CANDIDATE_RESULT, task, trial=progress.trials, cost=cost,
                  gflops=progress.gflops(cost), error_kind=error_kind,
                  error_message=error_message[:500], label=label, elapsed=elapsed,
                  best_cost=progress.best_cost, best_gflops=progress.best_gflops, **extra)
        if improved:
            self.emit(EventKind.NEW_BEST, task, trial=progress.trials, cost=cost,
                      gflops=progress.best_gflops, label=label, elapsed=elapsed)

    def task_end(self, task: str, reason: str = "", **extra: Any) -> TaskProgress:
        """``reason`` says why the task stopped (``trials``, ``seconds``, ``patience``,
        ``space exhausted`` ...)."""
        progress = self._progress(task)
        self.emit(EventKind.TASK_END, task, trials=progress.trials,
                  best_cost=progress.best_cost, best_gflops=progress.best_gflops,
                  best_trial=progress.best_trial, elapsed=time.monotonic() - progress.started,
                  reason=reason, errors=dict(progress.errors), **extra)
        return progress

    def close(self) -> None:
        """Close the sinks that can be closed (files this stream's writers opened)."""
        for sink in self.sinks:
            close = getattr(sink, "close", None)
            if callable(close):
                close()
