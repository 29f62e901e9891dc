"""Tuning options, their presets, and the budget of one tuning task.

Budgets count per task (one operator of a graph): ``trials`` candidates evaluated and
``seconds`` of wall time; ``total_seconds`` caps the whole run; ``patience`` stops a task after
that many trials without a better cost. The presets (explicit fields override them):

==============================  =======  ========  =========
field                            quick    default   thorough
==============================  =======  ========  =========
trials (per task)                32       200       1000
seconds (per task)               60       600       3600
patience (trials, no progress)   16       64        none
batch_size (candidates a round)  8        16        32
repeats (timed measurements)     3        5         10
min_seconds (per measurement)    0.002    0.01      0.05
warmup (untimed runs)            1        1         2
timeout_s (per candidate phase)  5        10        30
==============================  =======  ========  =========

>>> options = TuningOptions(preset="quick", trials=10)
>>> options.trials, options.seconds, options.repeats
(10, 60.0, 3)
>>> budget = Budget(trials=3)
>>> budget.record([1.0, 0.5]); budget.next_batch(8)
1
>>> budget.record([0.7]); budget.exhausted, budget.stop_reason
(True, 'trials')
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tilecraft.tuning.candidate import MeasureSettings
from tilecraft.tuning.events import EventSink, EventStream, JsonLinesWriter
from tilecraft.tuning.workload import TuningError

__all__ = ["PRESETS", "Budget", "TuningOptions", "open_event_stream"]

PRESETS: dict[str, dict[str, Any]] = {
    "quick": {"trials": 32, "seconds": 60.0, "patience": 16, "batch_size": 8, "repeats": 3,
              "min_seconds": 0.002, "warmup": 1, "timeout_s": 5.0},
    "default": {"trials": 200, "seconds": 600.0, "patience": 64, "batch_size": 16,
                "repeats": 5, "min_seconds": 0.01, "warmup": 1, "timeout_s": 10.0},
    "thorough": {"trials": 1000, "seconds": 3600.0, "patience": None, "batch_size": 32,
                 "repeats": 10, "min_seconds": 0.05, "warmup": 2, "timeout_s": 30.0},
}

@dataclass(frozen=True)
class TuningOptions:
    """Everything a tuning run is told (see the module docstring for the presets).

    A preset field left ``None`` takes the preset's value; ``math.inf`` lifts a limit.
    ``engine`` names the search engine (registered through the search-engine hook, see
    :func:`tilecraft.search.get_engine`: "q", "p", "random" or a plugin's),
    ``seed`` makes the search repeatable, ``database`` is the tuning-database file (None: no
    database), ``n_workers`` the processes building candidates, ``events`` a JSON Lines file
    or a callback receiving every :class:`~tilecraft.tuning.events.TuningEvent`, ``progress``
    the live display on stderr (None: when stderr is a terminal). ``memory_limit_bytes``,
    ``recycle_after`` and ``recycle_rss_bytes`` bound the worker processes' memory (see
    :class:`~tilecraft.tuning.candidate.MeasureSettings`).
    """

    preset: str = "default"
    trials: int | float | None = None
    seconds: float | None = None
    total_seconds: float | None = None
    patience: int | None = None
    batch_size: int | None = None
    repeats: int | None = None
    min_seconds: float | None = None
    warmup: int | None = None
    timeout_s: float | None = None
    measure_fraction: float = 0.25
    engine: str = "q"
    seed: int = 0
    database: str | Path | None = None
    n_workers: int = 1
    events: str | Path | EventSink | None = None
    progress: bool | None = None
    memory_limit_bytes: int | None = None
    recycle_after: int | None = 500
    recycle_rss_bytes: int | None = None

    def __post_init__(self) -> None:
        if self.preset not in PRESETS:
            raise TuningError(f"unknown tuning preset {self.preset!r}; use one of "
                              f"{', '.join(PRESETS)}")
        for name, value in PRESETS[self.preset].items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, value)
        self._validate()

    def _validate(self) -> None:
        problems = []

        def positive(name: str, integer: bool = False, allow_inf: bool = False) -> None:
            value = getattr(self, name)
            if value is None:
                return
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                problems.append(f"{name}={value!r} is not a number")
            elif allow_inf and value == math.inf:
                return
            elif not value > 0:
                problems.append(f"{name}={value!r} must be positive")
            elif not math.isfinite(value):
                problems.append(f"{name}={value!r} must be finite (math.inf lifts only the "
                                "trials, seconds, total_seconds and patience limits)")
            elif integer and value != int(value):
                problems.append(f"{name}={value!r} must be a whole number")

        for name in ("trials", "patience"):
            positive(name, integer=True, allow_inf=True)
        for name in ("seconds", "total_seconds"):
            positive(name, allow_inf=True)
        for name in ("batch_size", "repeats", "n_workers"):
            positive(name, integer=True)
        for name in ("min_seconds", "timeout_s"):
            positive(name)
        if not isinstance(self.warmup, int) or self.warmup < 0:
            problems.append(f"warmup={self.warmup!r} must be 0 or more")
        if not 0 < self.measure_fraction <= 1:
            problems.append(f"measure_fraction={self.measure_fraction!r} must be in (0, 1]")
        if not isinstance(self.engine, str) or not self.engine:
            problems.append(f"engine={self.engine!r} must be an engine name")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool):
            problems.append(f"seed={self.seed!r} must be an integer")
        if self.events is not None and not isinstance(self.events, (str, Path)) \
                and not callable(self.events):
            problems.append(f"events={self.events!r} must be a file path or a callable")
        if not problems:
            try:
                self.measure_settings()
            except TuningError as err:
                problems.append(str(err))
        if problems:
            raise TuningError("invalid tuning options: " + "; ".join(problems))

    # building from what users pass -----------------------------------------------------------
    @classmethod
    def coerce(cls, value: TuningOptions | str | bool | Mapping[str, Any] | None
               ) -> TuningOptions | None:
        """What ``tc.compile(..., tuning=value)`` accepts: None/False (no tuning), True (the
        default preset), a preset name, a dict of fields, or TuningOptions.

        >>> TuningOptions.coerce("thorough").trials
        1000
        >>> TuningOptions.coerce({"preset": "quick", "seed": 7}).seed
        7
        """
        if value is None or value is False:
            return None
        if value is True:
            return cls()
        if isinstance(value, TuningOptions):
            return value
        if isinstance(value, str):
            return cls(preset=value)
        if isinstance(value, Mapping):
            known = {f.name for f in dataclasses.fields(cls)}
            unknown = sorted(set(value) - known)
            if unknown:
                raise TuningError(f"unknown tuning option(s) {', '.join(unknown)}; known: "
                                  f"{', '.join(sorted(known))}")
            return cls(**dict(value))
        raise TuningError(f"tuning= takes a preset name ({', '.join(PRESETS)}), a dict, "
                          f"TuningOptions, True or None; got {type(value).__name__}")

    def replace(self, **changes: Any) -> TuningOptions:
        return dataclasses.replace(self, **changes)

    # what the parts of a tuner need ------------------------------------------------------------
    def measure_settings(self, check: bool = True) -> MeasureSettings:
        return MeasureSettings(warmup=int(self.warmup), repeats=int(self.repeats),
                               min_seconds=float(self.min_seconds),
                               timeout_s=float(self.timeout_s), check=check,
                               measure_fraction=self.measure_fraction,
                               memory_limit_bytes=self.memory_limit_bytes,
                               recycle_after=self.recycle_after,
                               recycle_rss_bytes=self.recycle_rss_bytes)

    def budget(self, deadline: float | None = None,
               clock: Callable[[], float] = time.monotonic) -> Budget:
        """A fresh budget for one task; ``deadline`` (on ``clock``) is the run's end."""
        return Budget(trials=self.trials, seconds=self.seconds, patience=self.patience,
                      deadline=deadline, clock=clock)

    def run_deadline(self, started: float) -> float | None:
        """The run's deadline on the monotonic clock, from ``total_seconds``."""
        if self.total_seconds is None or self.total_seconds == math.inf:
            return None
        return started + self.total_seconds

    def describe(self) -> dict[str, Any]:
        """The options as JSON-able data (for reports and events; a callback is named)."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        if callable(data["events"]):
            data["events"] = getattr(data["events"], "__name__", repr(data["events"]))
        for name in ("database", "events"):
            if isinstance(data[name], Path):
                data[name] = str(data[name])
        return data


def open_event_stream(options: TuningOptions, extra_sinks: Iterable[EventSink] = ()
                      ) -> EventStream:
    """The event stream ``options`` ask for: their JSON Lines file or callback, and the
    progress display when asked (or when stderr is a terminal)."""
    import sys

    from tilecraft.tuning.progress import ProgressDisplay

    sinks: list[EventSink] = list(extra_sinks)
    if isinstance(options.events, (str, Path)):
        sinks.append(JsonLinesWriter(options.events))
    elif options.events is not None:
        sinks.append(options.events)
    show = options.progress if options.progress is not None else sys.stderr.isatty()
    if show:
        sinks.append(ProgressDisplay())
    return EventStream(sinks)


class Budget:
    """How much of one task's budget is used: trials, elapsed seconds, trials since the last
    improvement; ``None`` or ``math.inf`` lifts a limit."""

    def __init__(self, trials: float | None = None, seconds: float | None = None,
                 patience: float | None = None, deadline: float | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.trials = math.inf if trials is None else trials
        self.seconds = math.inf if seconds is None else seconds
        self.patience = math.inf if patience is None else patience
        self.deadline = deadline
        self._clock = clock
        self.started = clock()
        self.used = 0
        self.best = math.inf
        self.since_best = 0

    @property
    def elapsed(self) -> float:
        return self._clock() - self.started

    @property
    def remaining_trials(self) -> float:
        return max(0, self.trials - self.used)

    @property
    def remaining_seconds(self) -> float:
        left = self.seconds - self.elapsed
        if self.deadline is not None:
            left = min(left, self.deadline - self._clock())
        return max(0.0, left)

    def record(self, costs: Iterable[float]) -> None:
        """Count evaluated candidates (their costs, ``math.inf`` for failures)."""
        for cost in costs:
            self.used += 1
            if cost < self.best:
                self.best, self.since_best = cost, 0
            else:
                self.since_best += 1

    @property
    def stop_reason(self) -> str | None:
        """Why the task must stop now: ``trials``, ``seconds``, ``deadline``, ``patience``,
        or None while budget is left."""
        if self.used >= self.trials:
            return "trials"
        if self.elapsed >= self.seconds:
            return "seconds"
        if self.deadline is not None and self._clock() >= self.deadline:
            return "deadline"
        if self.since_best >= self.patience:
            return "patience"
        return None

    @property
    def exhausted(self) -> bool:
        return self.stop_reason is not None

    def next_batch(self, batch_size: int) -> int:
        """How many candidates the next round may evaluate (0 when exhausted)."""
        if self.exhausted:
            return 0
        return int(min(batch_size, self.remaining_trials))

    def __repr__(self) -> str:
        return (f"Budget(used={self.used}/{self.trials}, elapsed={self.elapsed:.1f}/"
                f"{self.seconds} s, since_best={self.since_best})")
