"""Search-efficiency studies: engines replayed over many seeds against one cost table.

:func:`replay` runs an engine once per seed on a :class:`~tilecraft.search.cost_table.CostTable`
(no measurement: the costs are looked up, so the runs are cheap and deterministic);
:func:`summarize` turns the runs into the numbers of thesis Fig. 4.9: how many measurements an
engine needs to reach the space's optimum, 95% and 90% of it (the median over seeds, and how
many seeds got there within the budget), and what fraction of the optimum it reaches after a
few fixed budgets (median over seeds). "Reaching x% of the optimum" means measuring a point
whose performance (``1 / cost``) is at least x% of the best point's.

>>> from tilecraft.search.cost_table import CostTable
>>> from tilecraft.search.engines import RandomSearch
>>> from tilecraft.search.space import ChoiceSpace, Space
>>> space = Space([("x", ChoiceSpace(range(10))), ("y", ChoiceSpace(range(10)))])
>>> table = CostTable.from_function("toy", space, lambda p: 1.0 + abs(p[0] - 7) + abs(p[1] - 2))
>>> runs = replay(RandomSearch(), table, budget=100, seeds=range(5))
>>> summary = summarize("random", runs, table, fractions=(1.0,), budgets=(100,))
>>> summary.reached[1.0][0], summary.quality[100]  # every seed finds it within 100 trials
(5, 1.0)
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tilecraft.search.cost_table import CostTable
from tilecraft.search.engines.base import SearchEngine, SearchResult
from tilecraft.search.errors import SearchError

__all__ = ["EngineSummary", "format_trials", "replay", "summarize"]


def replay(engine: SearchEngine, table: CostTable, budget: int,
           seeds: Iterable[int]) -> list[SearchResult]:
    """One search of ``table.space`` per seed, with at most ``budget`` trials, on the table's
    costs. The table must cover the space."""
    if not table.complete:
        raise SearchError(f"cost table {table.name!r} covers {len(table)} of "
                          f"{table.space.size} points; replay needs every point measured")
    cost = table.cost_function()
    return [engine.search(table.space, cost, budget_trials=budget, seed=int(seed))
            for seed in seeds]


@dataclass(frozen=True)
class EngineSummary:
    """One engine on one table over several seeds.

    ``reached[f]``: ``(seeds that reached fraction f of the optimum, median measurements to
    get there)`` — the median counts a seed that never got there as ``math.inf``, so it is
    finite only when more than half of the seeds got there. ``quality[b]``: median fraction
    of the optimum reached after ``b`` measurements. ``seeds``: how many runs.
    """

    label: str
    seeds: int
    budget: int
    reached: dict[float, tuple[int, float]]
    quality: dict[int, float]


def _trials_to(result: SearchResult, threshold: float) -> float:
    found = result.trials_to_reach(threshold)
    return math.inf if found is None else float(found)


def summarize(label: str, runs: Sequence[SearchResult], optimum: float | CostTable,
              fractions: Sequence[float] = (1.0, 0.95, 0.9),
              budgets: Sequence[int] = (20, 50, 100)) -> EngineSummary:
    """The study's numbers for ``runs`` of one engine (see :class:`EngineSummary`) on a space
    whose least cost is ``optimum`` (a number, or the cost table's)."""
    if not runs:
        raise SearchError(f"summarize({label!r}): no runs; replay at least one seed")
    best = optimum.optimum if isinstance(optimum, CostTable) else float(optimum)
    if not 0 < best < math.inf:
        raise SearchError(f"summarize({label!r}): optimum={best}; it must be a finite cost > 0")
    budget = max(r.trials for r in runs)
    reached: dict[float, tuple[int, float]] = {}
    for fraction in fractions:
        needed = [_trials_to(r, best / fraction * (1 + 1e-12)) for r in runs]
        reached[fraction] = (sum(math.isfinite(n) for n in needed), _median(needed))
    quality: dict[int, float] = {}
    for limit in budgets:
        fractions_of = []
        for run in runs:
            curve = run.best_so_far()
            reached_cost = curve[min(limit, len(curve)) - 1] if curve else math.inf
            fractions_of.append(0.0 if math.isinf(reached_cost) else best / reached_cost)
        quality[limit] = statistics.median(fractions_of)
    return EngineSummary(label, len(runs), budget, reached, quality)


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    low, high = ordered[middle - 1], ordered[middle]
    return math.inf if math.isinf(high) else (low + high) / 2


def format_trials(count: int, seeds: int, median: float, budget: int) -> str:
    """``"42 (20/20)"``: the median measurements and the seeds that got there; ``">B"``
    when more than half never did within the budget ``B``.

    >>> format_trials(20, 20, 41.5, 200), format_trials(7, 20, math.inf, 200)
    ('42 (20/20)', '>200 (7/20)')
    """
    shown = f">{budget}" if math.isinf(median) else f"{median:.0f}"
    return f"{shown} ({count}/{seeds})"
