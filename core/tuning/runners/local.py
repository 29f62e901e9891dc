"""The default measurement runner: this machine's pool of isolated worker processes.

:class:`LocalRunner` puts the :class:`~tilecraft.tuning.measure.Measurer` behind the
:class:`~tilecraft.tuning.runners.protocol.MeasureRunner` protocol, unchanged: workers build
and check in parallel, time one candidate at a time, are replaced when a candidate crashes or
hangs them, and are recycled after ``MeasureSettings.recycle_after`` candidates or once their
resident memory passes ``recycle_rss_bytes``. The batch is measured on a background thread;
its results reach the caller's thread (which alone writes the database) as they finish.
Cancelling a batch stops its workers at the next result (fresh ones start for the next batch).

>>> from tilecraft.tuning.workload import Workload
>>> with LocalRunner(n_workers=1) as runner:                       # doctest: +SKIP
...     batch = runner.submit([MeasureInput(Workload.from_catalog("relu[13x17]"), "x86_avx512")])
...     [(index, result)] = list(batch.as_completed())
>>> index, result.ok, result.node == socket.gethostname()           # doctest: +SKIP
(0, True, True)
"""

from __future__ import annotations

import dataclasses
import socket
import threading
from collections.abc import Sequence

from tilecraft.tuning.candidate import MeasureInput, MeasureResult, MeasureSettings
from tilecraft.tuning.measure import Measurer
from tilecraft.tuning.runners.protocol import QueueBatch, RunBatch

__all__ = ["LocalRunner"]


class _Cancelled(BaseException):
    """Raised inside the measurer's result callback to stop a cancelled batch."""


class LocalRunner:
    """The isolated process pool of this machine (see the module docstring); ``n_workers``
    processes build candidates, ``settings`` say how they are timed and checked."""

    name = "local"

    def __init__(self, n_workers: int = 1, settings: MeasureSettings | None = None,
                 startup_timeout_s: float = 60.0):
        self.measurer = Measurer(n_workers=n_workers, settings=settings,
                                 startup_timeout_s=startup_timeout_s)
        self.settings = self.measurer.settings
        self.node = socket.gethostname()
        self._lock = threading.Lock()

    def submit(self, candidates: Sequence[MeasureInput]) -> RunBatch:
        """Measure ``candidates`` on a background thread (batches run one after another)."""
        batch = QueueBatch(len(candidates))
        node = self.node

        def on_result(index: int, result: MeasureResult) -> None:
            if batch.cancelled:
                raise _Cancelled
            batch.put(index, dataclasses.replace(result, node=node))

        def work() -> None:
            with self._lock:
                try:
                    self.measurer.measure(list(candidates), on_result=on_result)
                except _Cancelled:
                    pass
                except BaseException as err:  # noqa: BLE001 - handed to the reading thread
                    batch.put_error(err)

        if candidates:
            threading.Thread(target=work, name="tilecraft-local-runner", daemon=True).start()
        return batch

    def close(self) -> None:
        """Stop the worker processes (after the batch being measured)."""
        with self._lock:
            self.measurer.close()

    def __enter__(self) -> LocalRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def restarts(self) -> int:
        return self.measurer.restarts

    @property
    def recycled(self) -> list[tuple[int | None, str]]:
        return self.measurer.recycled

    def __repr__(self) -> str:
        return f"LocalRunner({self.measurer!r})"
