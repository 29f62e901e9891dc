"""Worker processes that build, check and time candidates in isolation.

Each worker is a fresh Python interpreter (``sys.executable``) started with
:mod:`subprocess`, talking to the tuner over a private socket pair wrapped in a
:class:`multiprocessing.connection.Connection` (pickled messages). It is never forked: a forked
copy of a process running llvmlite and thread pools can deadlock. It is not a
``multiprocessing`` *spawn* child either, because a spawn child re-imports the parent's
``__main__`` module, which re-runs a user's script that has no ``if __name__ == "__main__"``
guard; a fresh interpreter imports only tilecraft and the modules candidates name. It gets the
parent's ``sys.path``, as a spawn child would.

A worker ignores Ctrl-C (the tuner shuts it down) and exits when its parent dies or its
connection closes. It may be given a memory limit (``RLIMIT_DATA``: heap and private mappings,
not code or stacks), set before any candidate runs: a candidate allocating past it gets a
``MemoryError`` — the ``out-of-memory`` error kind — instead of swapping the machine or waking
the kernel's OOM killer. A candidate that segfaults, aborts, calls ``os._exit`` or hangs takes only
its worker down; :class:`WorkerProcess` (the tuner's side) reports how it ended and starts a
replacement.

Protocol (tuple messages; candidates travel pickled, so a payload the worker cannot unpickle
fails that candidate, not the worker)::

    tuner -> worker   ("init", sys_path, memory_limit_bytes)
                      ("prepare", token, pickled MeasureInput, settings)
                      ("time", token, settings) ("drop", token) ("stop",)
    worker -> tuner   ("ready", pid) ("stage", token, stage) ("prepared", token, info)
                      ("failed", token, info) ("timed", token, costs)

>>> describe_exit(-11)
'killed by signal SIGSEGV'
>>> describe_exit(3)
'exited with status 3'
>>> resident_bytes(os.getpid()) is None or resident_bytes(os.getpid()) > 0
True
"""

from __future__ import annotations

import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection
from typing import Any, NoReturn

from tilecraft.tuning.candidate import (
    CandidateFailure,
    MeasureSettings,
    PreparedCandidate,
    Stage,
    check_candidate,
    describe_exception,
    prepare_candidate,
    time_candidate,
)
from tilecraft.tuning.workload import TuningError

__all__ = ["WorkerProcess", "describe_exit", "limit_memory", "physical_memory_bytes",
           "resident_bytes", "serve"]

_LAUNCH = "from tilecraft.tuning.worker import main; main()"


def describe_exit(returncode: int | None) -> str:
    """How a process ended, in words."""
    if returncode is None:
        return "still running"
    if returncode < 0:
        try:
            return f"killed by signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exited with status {returncode}"


def resident_bytes(pid: int) -> int | None:
    """The resident memory of process ``pid`` (``/proc/PID/statm``), or None when unknown."""
    try:
        with open(f"/proc/{pid}/statm", encoding="ascii") as handle:
            pages = int(handle.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE")


def physical_memory_bytes() -> int | None:
    """This machine's physical memory, or None when the system does not say."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def limit_memory(limit_bytes: int) -> None:
    """Cap this process's data memory (``RLIMIT_DATA``) at ``limit_bytes`` (0: no cap); a hard
    limit already lower wins."""
    if limit_bytes <= 0:
        return
    import resource

    _, hard = resource.getrlimit(resource.RLIMIT_DATA)
    if hard != resource.RLIM_INFINITY:
        limit_bytes = min(limit_bytes, hard)
    resource.setrlimit(resource.RLIMIT_DATA, (limit_bytes, hard))


# the worker's side ---------------------------------------------------------------------------
def _watch_parent(parent: int) -> None:
    """Exit when the tuner is gone (a candidate stuck in native code would outlive it)."""
    while True:
        time.sleep(0.5)
        if os.getppid() != parent:
            os._exit(1)


def _failure_info(err: CandidateFailure, flops: int = 0) -> dict[str, Any]:
    return {"kind": err.kind.value, "stage": err.stage.value, "message": err.message,
            "flops": flops, "max_abs_error": err.max_abs_error}


def serve(conn: Connection) -> None:
    """The worker's loop: answer commands until ``stop`` or the connection closes."""
    held: dict[int, PreparedCandidate] = {}
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        command = message[0]
        if command == "stop":
            return
        if command == "init":
            for entry in message[1]:
                if entry not in sys.path:
                    sys.path.append(entry)
            if len(message) > 2:
                limit_memory(int(message[2]))
            conn.send(("ready", os.getpid()))
        elif command == "prepare":
            _, token, payload, settings = message
            conn.send(_prepare(conn, token, payload, settings, held))
        elif command == "time":
            _, token, settings = message
            conn.send(_time(conn, token, settings, held))
        elif command == "drop":
            held.pop(message[1], None)


def _prepare(conn: Connection, token: int, payload: bytes, settings: MeasureSettings,
             held: dict[int, PreparedCandidate]) -> tuple[Any, ...]:
    def on_stage(stage: Stage) -> None:
        conn.send(("stage", token, stage.value))

    flops = 0
    candidate = None
    try:
        try:
            candidate = pickle.loads(payload)
        except Exception as err:  # noqa: BLE001 - e.g. a schedule class not importable here
            raise CandidateFailure(Stage.WORKLOAD.error_kind, Stage.WORKLOAD,
                                   "the worker cannot unpickle the candidate ("
                                   f"{describe_exception(err)}); define its schedule and "
                                   "builder in importable modules") from err
        prepared = prepare_candidate(candidate, on_stage)
        flops = prepared.instance.flops
        error = check_candidate(prepared, on_stage) if settings.check else None
    except CandidateFailure as err:
        if candidate is not None and not flops:
            flops = candidate.workload.built_flops()
        return ("failed", token, _failure_info(err, flops))
    held[token] = prepared
    return ("prepared", token, {"build_seconds": prepared.build_seconds, "flops": flops,
                                "max_abs_error": error, "pid": os.getpid()})


def _time(conn: Connection, token: int, settings: MeasureSettings,
          held: dict[int, PreparedCandidate]) -> tuple[Any, ...]:
    prepared = held.pop(token, None)
    if prepared is None:
        err = CandidateFailure(Stage.TIME.error_kind, Stage.TIME,
                               f"this worker holds no prepared candidate {token}")
        return ("failed", token, _failure_info(err))
    try:
        costs = time_candidate(prepared, settings,
                               lambda stage: conn.send(("stage", token, stage.value)))
    except CandidateFailure as err:
        return ("failed", token, _failure_info(err, prepared.instance.flops))
    return ("timed", token, costs)


def main() -> None:
    """Entry of a worker process: ``python -c '...main()' FD`` with FD its end of the
    socket pair."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    fd = int(sys.argv[1])
    threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True).start()
    conn = Connection(fd)
    try:
        serve(conn)
    finally:
        conn.close()


# the tuner's side ----------------------------------------------------------------------------
class WorkerProcess:
    """One worker, seen from the tuner: start, send, receive, kill, replace.

    ``generation`` counts starts, so a tuner can tell that a candidate prepared by an earlier
    process of this worker is gone; ``candidates`` counts the candidates the current process
    was given (the tuner recycles it after enough). ``memory_limit_bytes`` caps the process's
    data memory (0: no cap).
    """

    def __init__(self, startup_timeout_s: float = 60.0, memory_limit_bytes: int = 0):
        self.startup_timeout_s = startup_timeout_s
        self.memory_limit_bytes = memory_limit_bytes
        self.generation = 0
        self.candidates = 0
        self.popen: subprocess.Popen[bytes] | None = None
        self.conn: Connection | None = None
        self.pid: int | None = None
        self._ready = False

    def start(self) -> None:
        """Launch a fresh process (returns at once; :meth:`wait_ready` waits for it)."""
        ours, theirs = socket.socketpair()
        try:
            self.popen = subprocess.Popen(
                [sys.executable, "-c", _LAUNCH, str(theirs.fileno())],
                pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, close_fds=True)
        finally:
            theirs.close()
        self.conn = Connection(ours.detach())
        self.pid = self.popen.pid
        self.generation += 1
        self.candidates = 0
        self._ready = False
        self.conn.send(("init", list(sys.path), self.memory_limit_bytes))

    @property
    def started(self) -> bool:
        return self.popen is not None

    def wait_ready(self) -> None:
        """Block until the process has imported tilecraft and answered; a worker that cannot
        start is a :class:`TuningError` (nothing could be measured)."""
        if not self.poll_ready(self.startup_timeout_s):
            self._failed_to_start(f"did not answer within {self.startup_timeout_s:g} s")

    def poll_ready(self, timeout: float = 0.0) -> bool:
        """Whether the process has answered (waiting up to ``timeout``); a TuningError when
        it died or answered something else."""
        if self._ready:
            return True
        assert self.conn is not None and self.popen is not None
        try:
            if not self.conn.poll(timeout):
                return False
            message = self.conn.recv()
        except (EOFError, OSError):
            self._failed_to_start(describe_exit(self._reap()))
        if message[0] != "ready":
            self._failed_to_start(f"answered {message!r} instead of 'ready'")
        self._ready = True
        return True

    def _failed_to_start(self, why: str) -> NoReturn:
        self.kill()
        raise TuningError(f"a tuning worker process (pid {self.pid}) failed to start: {why}; "
                          f"run `{sys.executable} -c \"import tilecraft.tuning.worker\"` to see "
                          "the error")

    def send(self, message: tuple[Any, ...]) -> None:
        assert self.conn is not None
        self.conn.send(message)

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def resident_bytes(self) -> int | None:
        """The process's resident memory now (None when stopped or unknown)."""
        return resident_bytes(self.pid) if self.pid is not None and self.alive() else None

    def _reap(self, timeout: float = 5.0) -> int | None:
        assert self.popen is not None
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def ended(self) -> str:
        """After the connection broke: how the process ended (it is reaped)."""
        code = self._reap()
        if code is None:
            self.kill()
            return "closed its connection and was killed"
        return describe_exit(code)

    def kill(self) -> None:
        """Kill the process now (SIGKILL) and release its connection."""
        if self.popen is not None and self.popen.poll() is None:
            self.popen.kill()
            self._reap()
        self._close_conn()

    def restart(self) -> None:
        self.kill()
        self.start()

    def stop(self, grace_s: float = 2.0) -> None:
        """Ask the process to exit, kill it if it does not within ``grace_s``."""
        if self.popen is None:
            return
        if self.popen.poll() is None and self.conn is not None:
            try:
                self.conn.send(("stop",))
            except OSError:
                pass
            try:
                self.popen.wait(grace_s)
            except subprocess.TimeoutExpired:
                pass
        self.kill()

    def _close_conn(self) -> None:
        if self.conn is not None:
            try:
                self.conn.close()
            except OSError:
                pass
            self.conn = None
        self._ready = False

    def __repr__(self) -> str:
        state = "running" if self.alive() else "stopped"
        return f"<WorkerProcess pid={self.pid} generation={self.generation} {state}>"
