"""The measurement-runner protocol: where a batch of tuning candidates is measured.

The tuner hands a runner a batch of candidates (:class:`~tilecraft.tuning.candidate.MeasureInput`)
and reads back one :class:`~tilecraft.tuning.candidate.MeasureResult` per candidate *as each
finishes*, in whatever order they finish. A candidate that fails still gets a result, typed by
its :class:`~tilecraft.tuning.record.ErrorKind`: ``build``, ``run`` (its worker died, e.g. a
segfault), ``timeout``, ``wrong-result``, ``device-lost`` (no machine with its device is left),
``invalid``, ``out-of-memory``. A batch can be cancelled: its unfinished candidates are dropped
(they get no result and nothing is recorded for them).

(Not to be confused with :mod:`tilecraft.runtime.runners`, which time one loaded kernel inside a
worker: a measurement runner decides *which worker, on which machine* measures a candidate.)

Runners: :class:`~tilecraft.tuning.runners.local.LocalRunner` (the isolated process pool of
this machine, the default), :class:`~tilecraft.tuning.runners.ray_runner.RayRunner` (a Ray
cluster, the ``tilecraft[ray]`` extra) and
:class:`~tilecraft.tuning.runners.replay.ReplayRunner` (costs looked up in a cost table, for
studies and tests). Only the runner's driver-side process writes the tuning database.

>>> from tilecraft.tuning.candidate import MeasureResult
>>> batch = QueueBatch(2)
>>> batch.put(1, MeasureResult(costs=(2.0,))); batch.put(0, MeasureResult(costs=(1.0,)))
>>> [(index, result.cost) for index, result in batch.as_completed()]
[(1, 2.0), (0, 1.0)]
>>> device_resource("nvidia_tc:h100"), device_resource("x86_avx512")
('nvidia_tc:h100', 'x86_avx512')
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol, runtime_checkable

from tilecraft.tuning.candidate import MeasureInput, MeasureResult, MeasureSettings
from tilecraft.tuning.workload import TuningError

__all__ = ["CompletedBatch", "Evaluator", "MeasureRunner", "QueueBatch", "RunBatch",
           "device_resource"]

#: ``evaluator(candidate, settings) -> result``: how a worker of a runner evaluates one
#: candidate (build, check and time it, or look its cost up); must be picklable
Evaluator = Callable[[MeasureInput, MeasureSettings], MeasureResult]


def device_resource(target: str) -> str:
    """The name of the device kind a candidate for ``target`` must run on: the target's name
    with its variant (``"nvidia_tc:h100"``), as Ray custom resources and runner nodes name it.
    A ``module:factory`` reference is resolved to the name of the target it builds."""
    base = target.partition(":")[0]
    if ":" in target and ("." in base or "/" in base):
        from tilecraft.tuning.candidate import resolve_target

        return resolve_target(target).name
    return target


class RunBatch:
    """A submitted batch: results as they finish, cancellation, results in order."""

    def __init__(self, size: int):
        self.size = size
        self.cancelled = False

    def as_completed(self, timeout: float | None = None
                     ) -> Iterator[tuple[int, MeasureResult]]:
        """``(index, result)`` pairs as candidates finish, each index once; stops when every
        candidate has its result or the batch is cancelled. ``timeout`` (seconds) bounds the
        wait for the *next* result: a :class:`TuningError` when it passes."""
        raise NotImplementedError

    def cancel(self) -> None:
        """Drop the unfinished candidates (their workers are stopped or replaced as needed);
        :meth:`as_completed` ends after the results already in."""
        self.cancelled = True

    def results(self) -> list[MeasureResult]:
        """Every result, in submission order (waits for all of them)."""
        found: list[MeasureResult | None] = [None] * self.size
        for index, result in self.as_completed():
            found[index] = result
        missing = [i for i, r in enumerate(found) if r is None]
        if missing:
            raise TuningError(f"the batch was cancelled before candidates {missing} finished")
        return found  # type: ignore[return-value]


class QueueBatch(RunBatch):
    """A batch whose results a runner's background thread puts in a queue (thread-safe);
    ``put_error`` passes an exception of the runner itself to the reader."""

    def __init__(self, size: int, on_cancel: Callable[[], None] | None = None):
        super().__init__(size)
        self._queue: queue.Queue[tuple[int, Any]] = queue.Queue()
        self._on_cancel = on_cancel
        self._lock = threading.Lock()

    def put(self, index: int, result: MeasureResult) -> None:
        self._queue.put((index, result))

    def put_error(self, error: BaseException) -> None:
        self._queue.put((-1, error))

    def as_completed(self, timeout: float | None = None
                     ) -> Iterator[tuple[int, MeasureResult]]:
        seen: set[int] = set()
        while len(seen) < self.size:
            try:
                if self.cancelled:  # only the results already in
                    index, item = self._queue.get_nowait()
                else:
                    index, item = self._queue.get(timeout=timeout)
            except queue.Empty:
                if self.cancelled:
                    return
                raise TuningError(f"no candidate result within {timeout:g} s; the runner's "
                                  "workers may be lost (cancel the batch and retry)") from None
            if index < 0:
                raise item
            if index in seen:
                continue
            seen.add(index)
            yield index, item

    def cancel(self) -> None:
        with self._lock:
            if self.cancelled:
                return
            super().cancel()
        if self._on_cancel is not None:
            self._on_cancel()


class CompletedBatch(QueueBatch):
    """A batch whose results are all known at submission (evaluated in the caller)."""

    def __init__(self, results: Sequence[MeasureResult]):
        super().__init__(len(results))
        for index, result in enumerate(results):
            self.put(index, result)


@runtime_checkable
class MeasureRunner(Protocol):
    """Where candidates are measured (see the module docstring). ``name`` says which runner
    it is (``local``, ``ray``, ``replay``) in events and progress."""

    name: str

    def submit(self, candidates: Sequence[MeasureInput]) -> RunBatch:
        """Start measuring ``candidates``; results come from the returned batch."""
        ...

    def close(self) -> None:
        """Release workers and connections (waiting for nothing)."""
        ...

    def __enter__(self) -> MeasureRunner: ...

    def __exit__(self, *exc: object) -> None: ...
