"""Cost-table replay: candidates "measured" by looking their cost up, with no noise.

:class:`CostReplay` is an :data:`~tilecraft.tuning.runners.protocol.Evaluator` that answers a
candidate with the cost a table gives its schedule (``math.inf``: the candidate failed, a
``run`` error). Built from a search study's :class:`~tilecraft.search.cost_table.CostTable`
with :meth:`CostReplay.from_cost_table`, it makes tuning runs exactly repeatable: the same
seed gives the same sequence of best configurations whatever runner evaluates it, which is how
the Ray runner is checked against the local one, and how a fleet is simulated without
measurement noise. ``delay_s`` sleeps per candidate (a simulated measurement time);
``crash`` names schedules whose evaluation kills the worker process with ``SIGSEGV`` (fault
injection: a runner must record ``run`` and go on).

:class:`ReplayRunner` evaluates in the caller's process (no workers: the reference every other
runner is compared with).

>>> replay = CostReplay({canonical_json({"C": {"tile": 8}}): 2e-3})
>>> from tilecraft.tuning.workload import Workload
>>> candidate = MeasureInput(Workload("m:f", name="C"), "x86_avx512", {"C": {"tile": 8}})
>>> replay(candidate, MeasureSettings()).cost
0.002
>>> replay(MeasureInput(Workload("m:f"), "x86_avx512", {"C": {"tile": 4}}),
...        MeasureSettings()).error_kind.value
'invalid'
"""

from __future__ import annotations

import math
import os
import signal
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tilecraft.tuning.candidate import MeasureInput, MeasureResult, MeasureSettings, Stage, failure
from tilecraft.tuning.record import ErrorKind, canonical_json
from tilecraft.tuning.runners.protocol import CompletedBatch, Evaluator, RunBatch

__all__ = ["CostReplay", "ReplayRunner"]


class CostReplay:
    """Costs (seconds) keyed by the canonical JSON of a candidate's schedule (see the module
    docstring). Picklable, so a remote worker can replay it."""

    def __init__(self, costs: Mapping[str, float], delay_s: float = 0.0,
                 crash: Iterable[str] = (), flops: int = 0):
        self.costs = {str(label): float(cost) for label, cost in costs.items()}
        self.delay_s = float(delay_s)
        self.crash = frozenset(crash)
        self.flops = int(flops)

    @classmethod
    def from_cost_table(cls, table: Any, template: Any, compute: str, **kwargs: Any
                        ) -> CostReplay:
        """The costs of every point of ``table`` (a :class:`~tilecraft.search.cost_table.
        CostTable` of ``template.space``), keyed as the tuner labels the candidate of that
        point for ``compute``: ``{compute: template.decode(point)}``."""
        return cls({canonical_json({compute: template.decode(point)}): cost
                    for point, cost in table.costs.items()}, **kwargs)

    def __call__(self, candidate: MeasureInput, settings: MeasureSettings) -> MeasureResult:
        started = time.perf_counter()
        label = canonical_json(candidate.schedule)
        if label in self.crash:
            os.kill(os.getpid(), signal.SIGSEGV)
        if self.delay_s:
            time.sleep(self.delay_s)
        cost = self.costs.get(label)
        elapsed = time.perf_counter() - started
        if cost is None:
            return failure(ErrorKind.INVALID, f"the cost table has no cost for schedule {label}; "
                           "replay only configurations of the space it was measured on",
                           Stage.WORKLOAD, total_seconds=elapsed)
        if math.isinf(cost):
            return failure(ErrorKind.RUN, f"the cost table records schedule {label} as failed",
                           Stage.TIME, total_seconds=elapsed, flops=self.flops)
        return MeasureResult(costs=(cost,), flops=self.flops, total_seconds=elapsed,
                             worker_pid=os.getpid())

    def __repr__(self) -> str:
        return f"CostReplay({len(self.costs)} costs, delay_s={self.delay_s:g})"


class ReplayRunner:
    """Evaluates every candidate in this process with ``evaluator`` (a :class:`CostReplay`,
    typically): results are final when :meth:`submit` returns. Not isolated: an evaluator that
    crashes takes this process down."""

    name = "replay"

    def __init__(self, evaluator: Evaluator, settings: MeasureSettings | None = None,
                 node: str = "replay"):
        self.evaluator = evaluator
        self.settings = settings or MeasureSettings()
        self.node = node

    def submit(self, candidates: Sequence[MeasureInput]) -> RunBatch:
        import dataclasses

        return CompletedBatch([dataclasses.replace(self.evaluator(c, self.settings),
                                                   node=self.node) for c in candidates])

    def close(self) -> None:
        pass

    def __enter__(self) -> ReplayRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
