"""Evaluating batches of candidates: measured in isolated worker processes, or estimated.

The target's ``spec.evaluation`` decides how a candidate is costed (thesis §4.4.1):

- ``measure``: workers build and check candidates **in parallel**, then time them **one at a
  time** while every other worker idles, so no build competes with a timing for the cores;
- ``estimate``: the target's model (``Target.estimate``) costs each lowered kernel, in this
  process;
- ``both``: the model ranks the batch; the best ``measure_fraction`` is measured, the rest is
  returned ``pruned``.

Every candidate runs under a hard timeout per phase: a worker that overruns is killed and
replaced, and so is one that crashes. The candidate gets an error kind (``invalid``,
``build``, ``run``, ``timeout``, ``wrong-result``, ``out-of-memory``, see :mod:`.candidate`)
and the batch goes on — a crashing candidate never kills the tuner. Workers are started once
and reused, each under a memory limit (a candidate allocating past it fails as
``out-of-memory``; so does one the kernel's OOM killer ends, a ``SIGKILL`` the tuner did not
send), and *recycled* — stopped and started afresh between candidates — after
``MeasureSettings.recycle_after`` candidates or once their resident memory
(``/proc/PID/statm``) passes ``recycle_rss_bytes``: a worker leaking JIT engines or allocator
arenas is replaced before it matters (TVM's popen pool leaked, apache/tvm#11074).

:meth:`Measurer.submit` measures a batch on a background thread and returns a future, so a
search engine can propose the next batch while this one is measured (the search/execute
overlap of the thesis); batches still run one after another.

>>> from tilecraft.tuning.workload import Workload
>>> with Measurer(n_workers=1) as measurer:                        # doctest: +SKIP
...     [result] = measurer.measure([MeasureInput(Workload.from_catalog("relu[13x17]"),
...                                               "x86_avx512")])
>>> result.ok, result.median > 0                                    # doctest: +SKIP
(True, True)
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import pickle
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from multiprocessing.connection import wait
from typing import Any

from tilecraft.errors import TargetError
from tilecraft.target.spec import EvaluationMode
from tilecraft.tuning.candidate import (
    MeasureInput,
    MeasureResult,
    MeasureSettings,
    Stage,
    describe_exception,
    estimate_candidate,
    failure,
    resolve_target,
)
from tilecraft.tuning.record import ErrorKind
from tilecraft.tuning.worker import WorkerProcess, physical_memory_bytes
from tilecraft.tuning.workload import TuningError

__all__ = ["MeasureInput", "MeasureResult", "MeasureSettings", "Measurer"]

ResultCallback = Callable[[int, MeasureResult], None]


@dataclass
class _Job:
    """A command a worker is carrying out for candidate ``index``."""

    index: int
    token: int
    command: str
    stage: Stage
    started: float
    deadline: float


@dataclass
class _Held:
    """A candidate a worker has built and checked and keeps loaded for timing."""

    worker: WorkerProcess
    generation: int
    token: int
    info: dict[str, Any]


def _stop_all(workers: list[WorkerProcess]) -> None:
    for worker in workers:
        worker.stop(grace_s=0.5)


#: the automatic recycling threshold of a worker's resident memory is at most this
RECYCLE_RSS_CAP_BYTES = 2 << 30


def worker_memory_limit(settings: MeasureSettings, n_workers: int) -> int:
    """Bytes of data memory each of ``n_workers`` workers may use (0: no limit): the setting,
    or three quarters of the physical memory shared by the workers."""
    if settings.memory_limit_bytes is not None:
        return settings.memory_limit_bytes
    physical = physical_memory_bytes()
    return 0 if physical is None else physical * 3 // 4 // n_workers


def recycle_rss_limit(settings: MeasureSettings, memory_limit: int) -> int:
    """Resident bytes past which a worker is recycled (0: never)."""
    if settings.recycle_rss_bytes is not None:
        return settings.recycle_rss_bytes
    if not memory_limit:
        return RECYCLE_RSS_CAP_BYTES
    return min(RECYCLE_RSS_CAP_BYTES, memory_limit // 2)


class Measurer:
    """Costs batches of :class:`MeasureInput` (see the module docstring).

    ``n_workers`` processes build and check in parallel (timing is serial whatever their
    number; on a 2-core machine more than 1 or 2 only adds start-up cost); ``settings`` set
    repeats, minimum time per measurement, the timeout and the correctness check. Use it as a
    context manager, or call :meth:`close`.
    """

    def __init__(self, n_workers: int = 1, settings: MeasureSettings | None = None,
                 startup_timeout_s: float = 60.0):
        if n_workers < 1:
            raise TuningError(f"Measurer: n_workers={n_workers}; use 1 or more worker processes")
        self.n_workers = n_workers
        self.settings = settings or MeasureSettings()
        self.startup_timeout_s = startup_timeout_s
        #: workers replaced because a candidate crashed or hung in them
        self.restarts = 0
        #: workers recycled between candidates: (pid, why), oldest first
        self.recycled: list[tuple[int | None, str]] = []
        self.memory_limit_bytes = worker_memory_limit(self.settings, n_workers)
        self.recycle_rss_bytes = recycle_rss_limit(self.settings, self.memory_limit_bytes)
        self._workers: list[WorkerProcess] = []
        self._tokens = itertools.count(1)
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self._closed = False
        self._finalizer = weakref.finalize(self, _stop_all, self._workers)

    # public ----------------------------------------------------------------------------------
    def measure(self, candidates: Sequence[MeasureInput],
                on_result: ResultCallback | None = None) -> list[MeasureResult]:
        """One result per candidate, in order; ``on_result(index, result)`` is called as
        each one is final."""
        if self._closed:
            raise TuningError("this Measurer was closed; create a new one")
        with self._lock:
            return self._measure(list(candidates), on_result or (lambda index, result: None))

    def submit(self, candidates: Sequence[MeasureInput],
               on_result: ResultCallback | None = None) -> Future[list[MeasureResult]]:
        """:meth:`measure` on a background thread; batches run in submission order."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1,
                                                thread_name_prefix="tilecraft-measure")
        return self._executor.submit(self.measure, list(candidates), on_result)

    def close(self) -> None:
        """Stop the worker processes (waiting for submitted batches first)."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
        with self._lock:
            _stop_all(self._workers)
            self._workers.clear()
            self._closed = True

    def __enter__(self) -> Measurer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def worker_pids(self) -> list[int]:
        return [w.pid for w in self._workers if w.pid is not None and w.alive()]

    # dispatch by evaluation mode -------------------------------------------------------------
    def _measure(self, candidates: list[MeasureInput],
                 on_result: ResultCallback) -> list[MeasureResult]:
        results: list[MeasureResult | None] = [None] * len(candidates)

        def finish(index: int, result: MeasureResult) -> None:
            results[index] = result
            on_result(index, result)

        modes = {ref: self._evaluation_mode(ref) for ref in {c.target for c in candidates}}
        measured: list[int] = []
        both: list[int] = []
        for index, candidate in enumerate(candidates):
            mode = modes[candidate.target]
            if mode is EvaluationMode.ESTIMATE:
                finish(index, estimate_candidate(candidate, resolve_target(candidate.target)))
            elif mode is EvaluationMode.BOTH:
                both.append(index)
            else:
                measured.append(index)
        estimates: dict[int, MeasureResult] = {}
        if both:
            for index in both:
                estimates[index] = estimate_candidate(candidates[index],
                                                      resolve_target(candidates[index].target))
            valid = sorted((i for i in both if estimates[i].ok), key=lambda i: estimates[i].cost)
            keep = set(valid[:math.ceil(self.settings.measure_fraction * len(valid))])
            for index in both:
                estimate = estimates[index]
                if not estimate.ok:
                    finish(index, estimate)
                elif index not in keep:
                    finish(index, dataclasses.replace(estimate, costs=(), pruned=True))
            measured += sorted(keep)

        def finish_measured(index: int, result: MeasureResult) -> None:
            if index in estimates:
                result = dataclasses.replace(result,
                                             estimate_seconds=estimates[index].estimate_seconds)
            finish(index, result)

        if measured:
            try:
                self._measure_isolated(candidates, sorted(measured), finish_measured)
            except BaseException:
                # interrupted mid-batch (Ctrl-C, a callback raising): workers may still be
                # busy with this batch, so they are replaced before the next one
                _stop_all(self._workers)
                raise
        assert all(r is not None for r in results)
        return results  # type: ignore[return-value]

    def _evaluation_mode(self, reference: str) -> EvaluationMode:
        target = resolve_target(reference)
        mode = target.spec.evaluation
        if mode in (EvaluationMode.MEASURE, EvaluationMode.BOTH):
            availability = target.available()
            if not availability.execute:
                raise TargetError(
                    f"target {target.name} evaluates candidates by {mode.value!r}, but this "
                    f"machine cannot execute its code ({availability.explain()}); tune on a "
                    "machine with the device, or with a target that estimates")
        return mode

    # isolated measurement ----------------------------------------------------------------------
    def _ensure_workers(self) -> None:
        while len(self._workers) < self.n_workers:
            self._workers.append(WorkerProcess(self.startup_timeout_s, self.memory_limit_bytes))
        for worker in self._workers:
            if not worker.alive():
                worker.restart()
            else:
                self._recycle_if_due(worker)
        for worker in self._workers:
            worker.wait_ready()

    def _recycle_if_due(self, worker: WorkerProcess) -> None:
        """Stop ``worker`` and start a fresh process when it has measured enough candidates or
        grown too large (call it only while the worker holds no candidate still needed)."""
        if not worker.alive():
            return
        why = None
        after = self.settings.recycle_after
        if after is not None and worker.candidates >= after:
            why = f"it was given {worker.candidates} candidates (recycle_after={after})"
        elif self.recycle_rss_bytes:
            resident = worker.resident_bytes()
            if resident is not None and resident > self.recycle_rss_bytes:
                why = (f"its resident memory grew to {resident} bytes (recycle_rss_bytes="
                       f"{self.recycle_rss_bytes})")
        if why is None:
            return
        self.recycled.append((worker.pid, why))
        worker.stop(grace_s=0.5)
        worker.start()

    def _measure_isolated(self, candidates: list[MeasureInput], indices: list[int],
                          finish: ResultCallback) -> None:
        payloads: dict[int, bytes] = {}
        for index in indices:
            try:
                payloads[index] = pickle.dumps(candidates[index])
            except Exception as err:  # noqa: BLE001 - an unpicklable schedule fails alone
                finish(index, failure(ErrorKind.INVALID, "the candidate cannot be sent to a "
                                      f"worker process: {describe_exception(err)}; make its "
                                      "schedule picklable", Stage.WORKLOAD))
        # in chunks the workers can take before they are due for recycling: a worker holds
        # its built candidates until they are timed, and is recycled only after that
        waiting = list(payloads)
        while waiting:
            self._ensure_workers()
            room = sum(self._room(worker) for worker in self._workers)
            chunk, waiting = waiting[:room], waiting[room:]
            self._measure_chunk({index: payloads[index] for index in chunk}, finish)

    def _room(self, worker: WorkerProcess) -> int:
        """How many more candidates ``worker`` may be given before it is recycled."""
        after = self.settings.recycle_after
        if after is None:
            return 1 << 62
        return max(0, after - worker.candidates)

    def _measure_chunk(self, payloads: dict[int, bytes], finish: ResultCallback) -> None:
        held: dict[int, _Held] = {}

        # phase 1: build and check, every worker busy (a replacement joins once started)
        pending = deque(payloads)
        jobs: dict[WorkerProcess, _Job] = {}
        while pending or jobs:
            starting = []
            # a worker due for recycling gets no more candidates while another has room (the
            # chunk fits the room; a crashed worker's replacement brings more)
            any_room = any(self._room(worker) for worker in self._workers)
            for worker in self._workers:
                if worker in jobs or not pending or (any_room and not self._room(worker)):
                    continue
                if worker.poll_ready():
                    index = pending.popleft()
                    jobs[worker] = self._send(worker, index, "prepare", payloads[index])
                else:
                    starting.append(worker)
            if not jobs:  # every worker is a replacement still starting
                if not wait([w.conn for w in starting], self.startup_timeout_s):
                    raise TuningError(f"no tuning worker process answered within "
                                      f"{self.startup_timeout_s:g} s of starting")
                continue
            for worker, job, outcome in self._await(jobs, wake=starting):
                worker.candidates += 1
                result = self._outcome(job, outcome)
                if result is None:
                    held[job.index] = _Held(worker, worker.generation, job.token, outcome[2])
                else:
                    finish(job.index, result)
                    if not any(h.worker is worker and h.generation == worker.generation
                               for h in held.values()):
                        self._recycle_if_due(worker)

        # phase 2: time, one candidate at a time, the other workers idle
        order = sorted(held)
        for position, index in enumerate(order):
            entry = held[index]
            worker = entry.worker
            if entry.generation != worker.generation or not worker.alive():
                # its worker was replaced after building it (a later candidate crashed it)
                if not worker.alive():
                    self._replace(worker)
                job = self._send(worker, index, "prepare", payloads[index])
                [(_, job, outcome)] = self._await({worker: job})
                worker.candidates += 1
                result = self._outcome(job, outcome)
                if result is not None:
                    finish(index, result)
                    continue
                entry = _Held(worker, worker.generation, job.token, outcome[2])
            job = self._send(worker, index, "time", None, token=entry.token)
            [(_, job, outcome)] = self._await({worker: job})
            result = self._outcome(job, outcome)
            if result is None:
                info = entry.info
                result = MeasureResult(costs=tuple(outcome[2]), flops=info["flops"],
                                       build_seconds=info["build_seconds"],
                                       max_abs_error=info["max_abs_error"],
                                       worker_pid=info["pid"],
                                       total_seconds=info["build_seconds"]
                                       + time.monotonic() - job.started)
            finish(index, result)
            if not any(held[later].worker is worker
                       and held[later].generation == worker.generation
                       for later in order[position + 1:]):
                self._recycle_if_due(worker)

    def _send(self, worker: WorkerProcess, index: int, command: str, payload: bytes | None,
              token: int | None = None) -> _Job:
        worker.wait_ready()
        token = token if token is not None else next(self._tokens)
        now = time.monotonic()
        stage = Stage.WORKLOAD if command == "prepare" else Stage.TIME
        job = _Job(index, token, command, stage, now, now + self.settings.timeout_s)
        if command == "prepare":
            worker.send(("prepare", token, payload, self.settings))
        else:
            worker.send(("time", token, self.settings))
        return job

    def _replace(self, worker: WorkerProcess) -> None:
        self.restarts += 1
        worker.restart()

    def _await(self, jobs: dict[WorkerProcess, _Job], wake: Sequence[WorkerProcess] = ()
               ) -> list[tuple[WorkerProcess, _Job, tuple[Any, ...]]]:
        """Wait until at least one job ends (answer, crash or timeout) or a worker of ``wake``
        has something to say (it finished starting); remove and return the ended jobs with
        their outcome message."""
        ended: list[tuple[WorkerProcess, _Job, tuple[Any, ...]]] = []
        woken = False
        while not ended and jobs and not woken:
            # answers are read before deadlines are checked: one that came while the tuner
            # was busy elsewhere is not a timeout
            by_conn = {worker.conn: worker for worker in jobs}
            nearest = min(job.deadline for job in jobs.values())
            timeout = max(0.0, nearest - time.monotonic())
            wake_conns = [worker.conn for worker in wake]
            for conn in wait(list(by_conn) + wake_conns, timeout):
                if conn not in by_conn:
                    woken = True
                    continue
                worker = by_conn[conn]
                job = jobs[worker]
                try:
                    while conn.poll():
                        message = conn.recv()
                        if message[1] != job.token:
                            continue  # a late answer to a job given up on (none today)
                        if message[0] == "stage":
                            job.stage = Stage(message[2])
                            continue
                        ended.append((worker, job, message))
                        del jobs[worker]
                        break
                except (EOFError, OSError):
                    how = worker.ended()
                    self._replace(worker)
                    ended.append((worker, job, ("crashed", how)))
                    del jobs[worker]
            now = time.monotonic()
            for worker, job in list(jobs.items()):
                if now >= job.deadline:
                    worker.kill()
                    self._replace(worker)
                    ended.append((worker, job, ("timeout",)))
                    del jobs[worker]
        return ended

    def _outcome(self, job: _Job, outcome: tuple[Any, ...]) -> MeasureResult | None:
        """The final result of a job, or None when it prepared the candidate."""
        elapsed = time.monotonic() - job.started
        kind = outcome[0]
        if kind == "prepared":
            return None
        if kind == "timed":
            return None
        if kind == "failed":
            info = outcome[2]
            return failure(ErrorKind(info["kind"]), info["message"], Stage(info["stage"]),
                           flops=info["flops"], max_abs_error=info["max_abs_error"],
                           total_seconds=elapsed)
        if kind == "timeout":
            return failure(ErrorKind.TIMEOUT,
                           f"did not finish within {self.settings.timeout_s:g} s (stage "
                           f"{job.stage.value}); its worker process was killed and replaced",
                           job.stage, total_seconds=elapsed)
        if outcome[1] == "killed by signal SIGKILL":  # not the tuner: it kills only on timeout
            return failure(ErrorKind.OUT_OF_MEMORY,
                           f"the worker process was killed by SIGKILL in stage "
                           f"{job.stage.value}, which the tuner did not send: most likely the "
                           "kernel's out-of-memory killer; the worker was replaced (lower "
                           "MeasureSettings.memory_limit_bytes to fail such candidates sooner)",
                           job.stage, total_seconds=elapsed)
        return failure(job.stage.error_kind,
                       f"the worker process died while the candidate was in stage "
                       f"{job.stage.value}: {outcome[1]}; the worker was replaced",
                       job.stage, total_seconds=elapsed)

    def __repr__(self) -> str:
        return (f"Measurer(n_workers={self.n_workers}, workers={self.worker_pids}, "
                f"restarts={self.restarts}, recycled={len(self.recycled)})")
