"""The live progress display of a tuning run: an event sink that writes for people.

On a terminal each task has one line, rewritten in place (``\\r``) as candidates come in and
finished with a newline when the task ends. Elsewhere (a log file, CI) it writes plain lines:
the task's start, each new best, a status line at most every ``plain_interval_s`` seconds,
and the end. When candidates name the node that measured them (a runner's ``node``), the
status line ends with each node's throughput in candidates per minute.

>>> import io
>>> from tilecraft.tuning.events import EventStream
>>> out = io.StringIO()
>>> stream = EventStream([ProgressDisplay(out, tty=False)])
>>> _ = stream.task_start("matmul", target="x86_avx512", flops=2_000_000, trials=10)
>>> stream.candidate_result("matmul", cost=1e-3)
>>> _ = stream.task_end("matmul", reason="trials")
>>> print(out.getvalue(), end="")  # doctest: +ELLIPSIS
[matmul] started on x86_avx512: budget 10 trials
[matmul] trial 1: new best 2.00 GFLOP/s (1.000 ms)
[matmul] done (trials): trials 1/10  best 2.00 GFLOP/s (1.000 ms)  elapsed ...s
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field
from typing import IO, Any

from tilecraft.tuning.events import EventKind, TuningEvent

__all__ = ["ProgressDisplay", "format_cost", "format_status", "format_throughput"]


def format_cost(seconds: float | None) -> str:
    """Seconds in a readable unit.

    >>> format_cost(0.0123), format_cost(4.5e-6), format_cost(None)
    ('12.300 ms', '4.500 us', '-')
    """
    if seconds is None or not math.isfinite(seconds):
        return "-"
    if seconds >= 1:
        return f"{seconds:.3f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3f} ms"
    return f"{seconds * 1e6:.3f} us"


def _best(gflops: float | None, cost: float | None) -> str:
    if gflops is not None:
        return f"{gflops:.2f} GFLOP/s ({format_cost(cost)})"
    return format_cost(cost)


def format_status(task: str, trials: int, trial_budget: float | None, best_gflops: float | None,
                  best_cost: float | None, errors: int, elapsed: float) -> str:
    """One status line of a task.

    >>> format_status("conv2d", 37, 200, 123.456, 1.5e-4, 2, 12.34)
    '[conv2d] trials 37/200  best 123.46 GFLOP/s (150.000 us)  errors 2  elapsed 12.3s'
    """
    budget = f"/{int(trial_budget)}" if trial_budget is not None and \
        math.isfinite(trial_budget) else ""
    text = f"[{task}] trials {trials}{budget}  best {_best(best_gflops, best_cost)}"
    if errors:
        text += f"  errors {errors}"
    return text + f"  elapsed {elapsed:.1f}s"


def format_throughput(per_node: dict[str, int], elapsed: float) -> str:
    """Candidates per minute of each node, busiest first.

    >>> format_throughput({"gpu-a": 30, "gpu-b": 45}, 60.0)
    'nodes gpu-b 45.0/min, gpu-a 30.0/min'
    >>> format_throughput({}, 1.0)
    ''
    """
    if not per_node:
        return ""
    minutes = max(elapsed, 1e-9) / 60.0
    ranked = sorted(per_node.items(), key=lambda item: (-item[1], item[0]))
    return "nodes " + ", ".join(f"{node} {count / minutes:.1f}/min" for node, count in ranked)


@dataclass
class _TaskLine:
    trial_budget: float | None = None
    trials: int = 0
    best_cost: float | None = None
    best_gflops: float | None = None
    errors: int = 0
    elapsed: float = 0.0
    per_node: dict[str, int] = field(default_factory=dict)
    last_plain: float = field(default_factory=time.monotonic)


class ProgressDisplay:
    """An event sink (see :mod:`tilecraft.tuning.events`) drawing per-task progress.

    ``stream`` defaults to ``sys.stderr``; ``tty`` to whether it is a terminal. On a terminal
    the line is redrawn at most every ``min_interval_s`` seconds (new bests and task ends are
    always drawn).
    """

    def __init__(self, stream: IO[str] | None = None, tty: bool | None = None,
                 min_interval_s: float = 0.1, plain_interval_s: float = 10.0):
        self.stream = stream if stream is not None else sys.stderr
        if tty is None:
            isatty = getattr(self.stream, "isatty", None)
            tty = bool(isatty()) if callable(isatty) else False
        self.tty = tty
        self.min_interval_s = min_interval_s
        self.plain_interval_s = plain_interval_s
        self._tasks: dict[str, _TaskLine] = {}
        self._open: str | None = None  # the task whose line is being redrawn
        self._width = 0
        self._last_draw = 0.0

    def __call__(self, event: TuningEvent) -> None:
        data: dict[str, Any] = dict(event.data)
        task = event.task
        if event.kind is EventKind.TASK_START:
            budget = data.get("budget") or {}
            self._tasks[task] = _TaskLine(trial_budget=budget.get("trials"))
            if not self.tty:
                self._write_line(f"[{task}] started on {data.get('target') or '?'}: "
                                 f"{_describe_budget(budget)}")
            else:
                self._draw(task, force=True)
            return
        line = self._tasks.setdefault(task, _TaskLine())
        if "elapsed" in data:
            line.elapsed = float(data["elapsed"])
        if event.kind is EventKind.CANDIDATE_RESULT:
            line.trials = int(data["trial"])
            line.best_cost = data.get("best_cost")
            line.best_gflops = data.get("best_gflops")
            line.errors += data.get("error_kind") is not None
            node = data.get("node")
            if node:
                line.per_node[node] = line.per_node.get(node, 0) + 1
            if self.tty:
                self._draw(task)
            elif time.monotonic() - line.last_plain >= self.plain_interval_s:
                line.last_plain = time.monotonic()
                self._write_line(self._status(task))
        elif event.kind is EventKind.NEW_BEST:
            line.best_cost, line.best_gflops = data.get("cost"), data.get("gflops")
            if self.tty:
                self._draw(task, force=True)
            else:
                self._write_line(f"[{task}] trial {data.get('trial')}: new best "
                                 f"{_best(line.best_gflops, line.best_cost)}")
        elif event.kind is EventKind.TASK_END:
            line.trials = int(data.get("trials", line.trials))
            line.best_cost = data.get("best_cost")
            line.best_gflops = data.get("best_gflops")
            status = self._status(task).split("] ", 1)[1]
            text = f"[{task}] done ({data.get('reason') or 'finished'}): {status}"
            if self.tty:
                self._redraw(task, text)
                self._finish_line()
            else:
                self._write_line(text)

    # drawing ---------------------------------------------------------------------------------
    def _status(self, task: str) -> str:
        line = self._tasks[task]
        text = format_status(task, line.trials, line.trial_budget, line.best_gflops,
                             line.best_cost, line.errors, line.elapsed)
        throughput = format_throughput(line.per_node, line.elapsed)
        return f"{text}  {throughput}" if throughput else text

    def _draw(self, task: str, force: bool = False) -> None:
        now = time.monotonic()
        if not force and task == self._open and now - self._last_draw < self.min_interval_s:
            return
        self._last_draw = now
        self._redraw(task, self._status(task))

    def _redraw(self, task: str, text: str) -> None:
        if self._open is not None and self._open != task:
            self._finish_line()  # another task's line stays as it was
        padding = " " * max(0, self._width - len(text))
        self.stream.write("\r" + text + padding)
        self.stream.flush()
        self._open, self._width = task, len(text)

    def _finish_line(self) -> None:
        if self._open is not None:
            self.stream.write("\n")
            self.stream.flush()
        self._open, self._width = None, 0

    def _write_line(self, text: str) -> None:
        self.stream.write(text + "\n")
        self.stream.flush()

    def close(self) -> None:
        """End an open terminal line."""
        self._finish_line()


def _describe_budget(budget: dict[str, Any]) -> str:
    parts = []
    trials, seconds = budget.get("trials"), budget.get("seconds")
    if trials is not None and math.isfinite(trials):
        parts.append(f"{int(trials)} trials")
    if seconds is not None and math.isfinite(seconds):
        parts.append(f"{seconds:g} s")
    return "budget " + (", ".join(parts) if parts else "unlimited")
