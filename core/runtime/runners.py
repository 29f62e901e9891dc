"""Runners: how a loaded kernel is run and timed. Every runner comes through the
``tilecraft_register_runners`` hook (the core's are ``DEFAULT_RUNNERS``, registered by
:mod:`tilecraft.target.builtins`); the tuner's measurement (:func:`tilecraft.tuning.candidate.
time_candidate`) times candidates with the runner its settings name (default ``in_process``).

A runner has a ``name`` and ``run(function, arrays, *, repeat, warmup, number=1) ->
list[float]``: after ``warmup`` untimed calls of ``function(arrays)``, ``repeat``
measurements, each the mean seconds of ``number`` consecutive calls.

>>> runner = InProcessRunner()
>>> calls = []
>>> seconds = runner.run(lambda arrays: calls.append(1), {}, repeat=3)
>>> len(seconds), len(calls)
(3, 4)
>>> get_runner("in_process").name
'in_process'
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from tilecraft.errors import TilecraftError

DEFAULT_RUNNER = "in_process"


class RunnerError(TilecraftError):
    """A runner is unknown or does not follow the contract."""


class InProcessRunner:
    """Runs a kernel function in this process and times it (no isolation: a crashing kernel
    takes the process down; the tuner calls it inside its isolated worker processes)."""

    name = "in_process"

    def run(self, function: Any, arrays: Mapping[str, np.ndarray], *, repeat: int = 3,
            warmup: int = 1, number: int = 1) -> list[float]:
        """Seconds per call of each of ``repeat`` measurements of ``number`` calls, after
        ``warmup`` untimed calls."""
        clock = time.perf_counter
        for _ in range(warmup):
            function(arrays)
        seconds = []
        for _ in range(repeat):
            start = clock()
            for _ in range(number):
                function(arrays)
            seconds.append((clock() - start) / number)
        return seconds


#: the core's runners, registered through the plugin hook
DEFAULT_RUNNERS: list[Any] = [InProcessRunner()]


def get_runner(name: str = DEFAULT_RUNNER, manager: Any = None) -> Any:
    """The runner registered as ``name`` through the hook of ``manager`` (default: the
    process's plugin manager); a :class:`RunnerError` naming the registered ones if none is."""
    from tilecraft.target.plugins import collect

    runners = collect("runners", manager)
    runner = runners.get(name) if isinstance(name, str) else None
    if runner is None:
        raise RunnerError(f"unknown runner {name!r}; the runners are "
                          f"{', '.join(sorted(runners)) or 'none'}")
    if not callable(getattr(runner, "run", None)):
        raise RunnerError(f"runner {name!r} ({type(runner).__name__}) has no run(function, "
                          "arrays, *, repeat, warmup, number) method")
    return runner


__all__ = ["DEFAULT_RUNNER", "DEFAULT_RUNNERS", "InProcessRunner", "RunnerError", "get_runner"]
