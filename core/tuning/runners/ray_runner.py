"""The Ray measurement runner: candidates measured across a Ray cluster's devices.

Each device kind is a Ray *custom resource* named after the target
(:func:`~tilecraft.tuning.runners.protocol.device_resource`: ``{"x86_avx512": 1}``,
``{"nvidia_tc:h100": 1}``), which the cluster's nodes declare
(``ray start --resources '{"nvidia_tc:h100": 8}'``). The runner starts one worker (a Ray
actor holding one unit of its kind) per unit the cluster offers, so a candidate runs only on
a node whose device can execute it, and each device measures **one candidate at a time** —
timings stay clean. A worker evaluates candidates in its own process with the runner's
evaluator (:func:`~tilecraft.tuning.runners.evaluate.evaluate_candidate`: build, check against
the reference, time; or a :class:`~tilecraft.tuning.runners.replay.CostReplay`).

Build on any node, measure on the device node: with the default evaluator, each candidate is
first built by a Ray *task* that asks for CPUs only (``build_resources``, default one CPU), so
it runs on any node (:func:`~tilecraft.tuning.runners.transfer.build_candidate`: lower,
generate code, compile); the built code travels as bytes through Ray's object store (never a
path on another node's disk) to a device worker, which only loads, checks and times it
(:func:`~tilecraft.tuning.runners.transfer.measure_built`). A cluster can keep builds off the
device nodes by declaring a build resource on the other nodes (``ray start --resources
'{"tilecraft_build": 4}'``) and passing ``build_resources={"tilecraft_build": 1}``. A custom
evaluator (a cost table) runs whole on the device worker.

Faults: a worker that dies (a segfaulting candidate, a killed process) is restarted by Ray; its
candidate is tried again ``retries`` times on a fresh worker (a worker killed from outside
loses nothing) and then recorded as ``run`` (a candidate that kills every worker it meets).
A candidate past its time limit (``2 * settings.timeout_s``: build + time) is ``timeout`` and
its worker is killed and restarted. A device kind no node offers any more (a node lost) fails
its remaining candidates as ``device-lost``, and so does a kind whose every worker died for
good (killed, its node gone); later batches of a lost kind get ``device-lost`` at once.
A build past ``settings.timeout_s`` is ``timeout``, a build worker that dies a ``build``
failure. Results reach the driver, which alone writes the
tuning database.

Ray is an optional extra: ``pip install 'tilecraft[ray]'``.

>>> RayRunner.__name__                                              # doctest: +SKIP
'RayRunner'
"""

from __future__ import annotations

import dataclasses
import os
import socket
import sys
import threading
import time
from collections import defaultdict, deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tilecraft.tuning.candidate import (
    MeasureInput,
    MeasureResult,
    MeasureSettings,
    Stage,
    describe_exception,
    failure,
    resolve_target,
)
from tilecraft.tuning.record import ErrorKind
from tilecraft.tuning.runners.evaluate import evaluate_candidate
from tilecraft.tuning.runners.protocol import Evaluator, QueueBatch, RunBatch, device_resource
from tilecraft.tuning.runners.transfer import (
    ROLE_COUNTS,
    BuiltCandidate,
    build_candidate,
    measure_built,
)
from tilecraft.tuning.workload import TuningError

__all__ = ["DeviceWorker", "RayRunner", "import_ray"]

#: how long the build workers may take to start (import, resolve the targets) before the
#: first builds, whose timeouts do not count it
_WARM_UP_S = 120.0


def import_ray() -> Any:
    """The ``ray`` module, or a :class:`TuningError` saying how to install it."""
    try:
        import ray
    except ImportError:
        raise TuningError("the Ray runner needs Ray, which is not installed; install the "
                          "extra: pip install 'tilecraft[ray]' (or use the local runner)"
                          ) from None
    return ray


def _check_reachable(address: str | None, timeout_s: float = 10.0) -> None:
    """A TuningError at once when ``address`` names a host:port nothing listens on (``ray.init``
    would wait on it for minutes); ``None``, ``"auto"``, ``"local"`` and ``ray://`` pass."""
    if not address or address in ("auto", "local") or "://" in address:
        return
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise TuningError(f"the Ray address {address!r} is not host:port, 'auto' or ray://...")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as err:
        raise TuningError(f"cannot reach the Ray cluster at {address!r} ({err}); is `ray start "
                          "--head` running there, and the port open? Or use the local runner"
                          ) from None


def _extend_path(sys_path: Sequence[str]) -> None:
    for entry in sys_path:  # the driver's modules (targets, builders named by path)
        if entry not in sys.path:
            sys.path.append(entry)


def build_task(sys_path: Sequence[str], candidate: MeasureInput, settings: MeasureSettings
               ) -> tuple[MeasureResult | None, BuiltCandidate | None]:
    """A Ray build task's body: ``(result, None)`` when nothing is left to measure (a failure,
    an estimate), else ``(None, built)`` — two Ray objects, so the driver reads only the small
    first one and the built code goes from the object store to the device worker."""
    _extend_path(sys_path)
    built = build_candidate(candidate, settings)
    if isinstance(built, MeasureResult):
        return dataclasses.replace(built, node=socket.gethostname(), worker_pid=os.getpid()), None
    return None, built


def warm_task(sys_path: Sequence[str], targets: Sequence[str]) -> int:
    """Import the build code and resolve ``targets`` in a Ray worker process (Ray reuses it
    for the build tasks that follow, whose clocks then do not count a cold start)."""
    _extend_path(sys_path)
    for target in targets:
        resolve_target(target)
    return os.getpid()


class DeviceWorker:
    """One device's measuring process (a Ray actor holding one unit of its kind's resource)."""

    def __init__(self, sys_path: Sequence[str], kind: str):
        _extend_path(sys_path)
        self.kind = kind
        self.node = socket.gethostname()

    def info(self) -> tuple[str, int]:
        """(node, pid): answered once the worker has started."""
        return self.node, os.getpid()

    def evaluate(self, candidate: MeasureInput, settings: MeasureSettings,
                 evaluator: Evaluator) -> MeasureResult:
        result = evaluator(candidate, settings)
        return dataclasses.replace(result, node=self.node, worker_pid=os.getpid())

    def measure(self, built: BuiltCandidate, settings: MeasureSettings) -> MeasureResult:
        """Load, check and time a candidate built elsewhere (no building here)."""
        result = measure_built(built, settings)
        return dataclasses.replace(result, node=self.node, worker_pid=os.getpid())

    def role_counts(self) -> dict[str, int]:
        """What this process did: candidates ``measure``d, ``build``s (none, when building
        happens elsewhere), ``device-build``s (code that could not travel)."""
        return dict(ROLE_COUNTS)


@dataclass
class _Slot:
    """A worker of the pool and what it is doing."""

    kind: str
    actor: Any
    number: int
    ready: Any = None  # the ref of its info() call while it (re)starts


@dataclass
class _Task:
    index: int
    slot: _Slot
    started: float
    attempts: int
    built: Any = None  # the ref of the candidate's built code (None: evaluated whole)


@dataclass
class _Build:
    index: int
    started: float
    built: Any  # the ref of the BuiltCandidate (the task's second object)


class RayRunner:
    """Measures candidates on a Ray cluster (see the module docstring).

    ``address``: the cluster to join (``"auto"``: the one this machine belongs to; None:
    the one this process already joined, else a new local one); ``evaluator``: how a worker
    evaluates a candidate; ``retries``: attempts again after a worker dies; ``init_options``:
    more ``ray.init`` arguments when the runner connects; ``max_workers_per_kind``: at most
    this many workers per device kind (default: one per unit the cluster offers);
    ``build_resources``: the Ray resources of a build task (default one CPU, any node; used
    with the default evaluator only).
    """

    name = "ray"

    def __init__(self, address: str | None = None, settings: MeasureSettings | None = None,
                 evaluator: Evaluator | None = None, retries: int = 1,
                 init_options: dict[str, Any] | None = None, poll_s: float = 0.2,
                 max_workers_per_kind: int | None = None,
                 build_resources: dict[str, float] | None = None):
        self.ray = import_ray()
        self.settings = settings or MeasureSettings()
        self.evaluator = evaluator or evaluate_candidate
        #: build on any node, measure on the device node (the default evaluator)
        self.split_build = evaluator is None or evaluator is evaluate_candidate
        self.build_resources = dict(build_resources or {"CPU": 1})
        self.retries = retries
        self.poll_s = poll_s
        self.max_workers_per_kind = max_workers_per_kind
        self._owns_ray = False
        if address is not None or not self.ray.is_initialized():
            _check_reachable(address)
            options = {"include_dashboard": False, "log_to_driver": False,
                       "ignore_reinit_error": True, **(init_options or {})}
            try:
                # no address: a new local cluster, never one found running on this machine
                self.ray.init(address="local" if address is None else address, **options)
            except Exception as err:  # noqa: BLE001 - ConnectionError, RuntimeError, ...
                raise TuningError(f"cannot join the Ray cluster at {address!r} "
                                  f"({describe_exception(err).splitlines()[0]}); start one with "
                                  "`ray start --head --resources '{\"x86_avx512\": 1}'`, or use "
                                  "the local runner") from None
            self._owns_ray = True
        self._pools: dict[str, list[_Slot]] = {}
        self._lost: set[str] = set()  # kinds whose every worker died for good
        self._warm_targets: set[str] = set()  # resolved in the build workers already
        self._lock = threading.Lock()
        self.restarts = 0
        #: candidates finished per node (the progress display's throughput)
        self.finished: dict[str, int] = defaultdict(int)

    # pool ----------------------------------------------------------------------------------
    def device_units(self, kind: str) -> int:
        """Units of resource ``kind`` the cluster offers now."""
        return int(self.ray.cluster_resources().get(kind, 0))

    def _pool(self, kind: str) -> list[_Slot]:
        if kind in self._pools or kind in self._lost:
            return self._pools.get(kind, [])
        units = self.device_units(kind)
        if units < 1:
            offered = sorted(k for k in self.ray.cluster_resources()
                             if k not in ("CPU", "GPU", "memory", "object_store_memory")
                             and not k.startswith("node:"))
            raise TuningError(f"no node of the Ray cluster offers the device resource {kind!r} "
                              f"(custom resources: {', '.join(offered) or 'none'}); start a "
                              f"node with the device: ray start --resources '{{\"{kind}\": 1}}'")
        if self.max_workers_per_kind is not None:
            units = min(units, self.max_workers_per_kind)
        remote = self.ray.remote(DeviceWorker).options(
            resources={kind: 1}, num_cpus=0, max_restarts=-1, max_task_retries=0)
        slots = []
        for number in range(units):
            actor = remote.remote(list(sys.path), kind)
            slots.append(_Slot(kind, actor, number, actor.info.remote()))
        self._pools[kind] = slots
        return slots

    def worker_pids(self) -> list[int]:
        """The process ids of the running workers (waits for them to start)."""
        slots = [s for pool in self._pools.values() for s in pool]
        return [pid for _, pid in self.ray.get([s.actor.info.remote() for s in slots])]

    def role_counts(self) -> list[dict[str, int]]:
        """What each running worker did (see :meth:`DeviceWorker.role_counts`)."""
        slots = [s for pool in self._pools.values() for s in pool]
        return self.ray.get([s.actor.role_counts.remote() for s in slots])

    # batches -------------------------------------------------------------------------------
    def submit(self, candidates: Sequence[MeasureInput]) -> RunBatch:
        """Dispatch ``candidates`` to the devices of their kind on a background thread."""
        candidates = list(candidates)
        kinds = [device_resource(c.target) for c in candidates]
        for kind in set(kinds):
            self._pool(kind)  # a kind no node offers fails here, before anything runs
        batch = QueueBatch(len(candidates))

        def work() -> None:
            with self._lock:
                try:
                    self._dispatch(candidates, kinds, batch)
                except BaseException as err:  # noqa: BLE001 - handed to the reading thread
                    batch.put_error(err)

        if candidates:
            threading.Thread(target=work, name="tilecraft-ray-runner", daemon=True).start()
        return batch

    def _build_parallelism(self) -> int:
        """Build tasks in flight at once: as many as the cluster has units of the build
        resources (so a build's clock starts about when it does)."""
        offered = self.ray.cluster_resources()
        units = [offered.get(name, 0) / amount for name, amount in self.build_resources.items()
                 if amount > 0]
        return max(1, int(min(units, default=1)))

    def _build_placement(self) -> dict[str, Any]:
        """Ray options placing a build task: CPUs and the other build resources."""
        return {"num_cpus": self.build_resources.get("CPU", 0),
                "resources": {k: v for k, v in self.build_resources.items() if k != "CPU"}}

    def _warm_builders(self, builders: int, sys_path: list[str],
                       candidates: list[MeasureInput]) -> None:
        targets = sorted({c.target for c in candidates} - self._warm_targets)
        if not targets:
            return
        warm = self.ray.remote(warm_task).options(**self._build_placement())
        refs = [warm.remote(sys_path, targets) for _ in range(builders)]
        self.ray.wait(refs, num_returns=len(refs), timeout=_WARM_UP_S)
        self._warm_targets.update(targets)

    def _dispatch(self, candidates: list[MeasureInput], kinds: list[str],
                  batch: QueueBatch) -> None:
        ray = self.ray
        limit_s = 2 * self.settings.timeout_s
        pending: dict[str, deque[tuple[int, int, Any]]] = defaultdict(deque)
        to_build: deque[int] = deque()
        running: dict[Any, _Task] = {}
        building: dict[Any, _Build] = {}
        busy: set[int] = set()

        def finish(index: int, result: MeasureResult) -> None:
            self.finished[result.node or "?"] += 1
            batch.put(index, result)

        for index, kind in enumerate(kinds):
            if kind in self._lost:
                finish(index, _lost(kind))
            elif self.split_build:
                to_build.append(index)
            else:
                pending[kind].append((index, 0, None))
        evaluator = None if self.split_build else ray.put(self.evaluator)
        build = ray.remote(build_task).options(
            num_returns=2, max_retries=0, **self._build_placement())
        builders = self._build_parallelism() if self.split_build else 0
        sys_path = list(sys.path)
        if builders:
            self._warm_builders(builders, sys_path, candidates)

        while ((to_build or building or any(pending.values()) or running)
               and not batch.cancelled):
            while to_build and len(building) < builders:
                index = to_build.popleft()
                result_ref, built_ref = build.remote(sys_path, candidates[index], self.settings)
                building[result_ref] = _Build(index, time.monotonic(), built_ref)
            for kind, queue in pending.items():
                for slot in self._pools.get(kind, ()):
                    if not queue:
                        break
                    if slot.ready is None and id(slot) not in busy:
                        index, attempts, built = queue.popleft()
                        if built is None:
                            ref = slot.actor.evaluate.remote(candidates[index], self.settings,
                                                             evaluator)
                        else:  # the built code goes from the object store to the worker
                            ref = slot.actor.measure.remote(built, self.settings)
                        running[ref] = _Task(index, slot, time.monotonic(), attempts, built)
                        busy.add(id(slot))
            starting = {s.ready: s for pool in self._pools.values() for s in pool
                        if s.ready is not None}
            waiting = list(running) + list(building) + list(starting)
            if not waiting:
                self._fail_lost(pending, finish)
                if any(pending.values()):
                    raise TuningError("the Ray runner has candidates but no worker to give "
                                      "them to; this is a bug of the runner")
                continue
            deadlines = ([t.started + limit_s for t in running.values()]
                         + [b.started + self.settings.timeout_s for b in building.values()])
            nearest = min(deadlines, default=time.monotonic() + self.poll_s)
            timeout = max(0.0, min(self.poll_s, nearest - time.monotonic()))
            done, _ = ray.wait(waiting, num_returns=1, timeout=timeout)
            if not done and starting:  # workers restarting for long: is their node gone?
                self._fail_lost(pending, finish)
            for ref in done:
                if ref in starting:
                    self._started(starting[ref], pending, finish)
                elif ref in building:
                    self._built(building.pop(ref), ref, kinds, pending, finish)
                else:
                    self._measured(running.pop(ref), ref, busy, pending, finish)
            now = time.monotonic()
            for ref, task in list(running.items()):
                if now >= task.started + limit_s:
                    del running[ref]
                    busy.discard(id(task.slot))
                    ray.kill(task.slot.actor, no_restart=False)
                    self.restarts += 1
                    task.slot.ready = task.slot.actor.info.remote()
                    finish(task.index, failure(
                        ErrorKind.TIMEOUT, f"did not finish within {limit_s:g} s on its Ray "
                        f"worker ({task.slot.kind} #{task.slot.number}); the worker was killed "
                        "and restarted", Stage.TIME, total_seconds=now - task.started))
            for ref, job in list(building.items()):
                if now >= job.started + self.settings.timeout_s:
                    del building[ref]
                    ray.cancel(ref, force=True)
                    finish(job.index, failure(
                        ErrorKind.TIMEOUT, f"its build did not finish within "
                        f"{self.settings.timeout_s:g} s; the build task was cancelled",
                        Stage.BUILD, total_seconds=now - job.started))
        if batch.cancelled:
            for task in running.values():  # a cancelled candidate may run for long
                ray.kill(task.slot.actor, no_restart=False)
                task.slot.ready = task.slot.actor.info.remote()
            for ref in building:
                ray.cancel(ref, force=True)

    def _built(self, job: _Build, ref: Any, kinds: list[str],
               pending: dict[str, deque[tuple[int, int, Any]]], finish: Any) -> None:
        """A build task finished: its result (a failure, an estimate), or the candidate
        queued for a device worker of its kind."""
        try:
            result = self.ray.get(ref)
        except self.ray.exceptions.RayError as err:
            cause = str(err).splitlines()[0][:300]
            finish(job.index, failure(
                ErrorKind.BUILD, f"the Ray build task died or failed while building the "
                f"candidate ({cause})", Stage.BUILD, total_seconds=time.monotonic() - job.started))
            return
        if result is not None:
            finish(job.index, result)
        elif kinds[job.index] in self._lost:
            finish(job.index, _lost(kinds[job.index]))
        else:
            pending[kinds[job.index]].append((job.index, 0, job.built))

    def _measured(self, task: _Task, ref: Any, busy: set[int],
                  pending: dict[str, deque[tuple[int, int, Any]]], finish: Any) -> None:
        ray = self.ray
        busy.discard(id(task.slot))
        try:
            finish(task.index, ray.get(ref))
        except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError) as err:
            self._worker_died(task, err, pending, finish)
        except ray.exceptions.RayError as err:
            finish(task.index, failure(ErrorKind.RUN, "the Ray worker failed to evaluate the "
                                       f"candidate: {err}", Stage.TIME))

    def _started(self, slot: _Slot, pending: dict[str, deque[tuple[int, int, Any]]],
                 finish: Any) -> None:
        try:
            self.ray.get(slot.ready)
            slot.ready = None
        except self.ray.exceptions.ActorDiedError:  # dead for good (a restarting one queues)
            pool = self._pools[slot.kind]
            pool.remove(slot)
            if not pool:
                self._lost.add(slot.kind)
                self._fail_lost(pending, finish)
        except self.ray.exceptions.RayError:
            if self.device_units(slot.kind) < 1:
                self._fail_lost(pending, finish)
            slot.ready = slot.actor.info.remote()  # still restarting: ask again

    def _worker_died(self, task: _Task, err: Exception,
                     pending: dict[str, deque[tuple[int, int, Any]]], finish: Any) -> None:
        slot = task.slot
        self.restarts += 1
        slot.ready = slot.actor.info.remote()  # Ray restarts it; wait for that
        if task.attempts < self.retries:
            pending[slot.kind].appendleft((task.index, task.attempts + 1, task.built))
            return
        cause = str(err).splitlines()[0][:300]
        finish(task.index, failure(
            ErrorKind.RUN, f"the Ray worker ({slot.kind} #{slot.number}) died while evaluating "
            f"the candidate, {task.attempts + 1} time(s) ({cause}); Ray restarted it",
            Stage.TIME, total_seconds=time.monotonic() - task.started))

    def _fail_lost(self, pending: dict[str, deque[tuple[int, int, Any]]], finish: Any) -> None:
        """Fail the pending candidates of kinds no node offers any more (or whose every
        worker died for good)."""
        for kind, queue in pending.items():
            if queue and (kind in self._lost or self.device_units(kind) < 1):
                self._lost.add(kind)
                while queue:
                    index, _, _ = queue.popleft()
                    finish(index, _lost(kind))

    def close(self) -> None:
        """Stop the workers (and the Ray connection when this runner made it)."""
        with self._lock:
            for pool in self._pools.values():
                for slot in pool:
                    try:
                        self.ray.kill(slot.actor, no_restart=True)
                    except Exception:  # noqa: BLE001, S110 - already gone
                        pass
            self._pools.clear()
            if self._owns_ray:
                self.ray.shutdown()
                self._owns_ray = False

    def __enter__(self) -> RayRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        units = {kind: len(pool) for kind, pool in self._pools.items()}
        return f"RayRunner(workers={units}, restarts={self.restarts})"


def _lost(kind: str) -> MeasureResult:
    return failure(ErrorKind.DEVICE_LOST, f"no worker of the Ray cluster can measure on "
                   f"{kind!r} any more (its node was lost, or its workers died for good); the "
                   "records measured so far are kept", None)
