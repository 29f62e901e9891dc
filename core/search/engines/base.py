"""What every search engine shares: the interface, the result, and the trial log that
enforces the rules (budgets, never evaluating a point twice, coping with failed candidates).

An engine sees a :class:`~tilecraft.search.space.Space` and a cost function that evaluates a
batch of points and returns their costs in seconds (``math.inf`` for a candidate that failed).
It never manages processes or devices. Given a seed and a deterministic cost it is
deterministic; the ``budget_seconds`` stop, being wall-clock, is the one exception.

>>> from tilecraft.search.space import ChoiceSpace, Space
>>> space = Space([("x", ChoiceSpace(range(5)))])
>>> log = TrialLog(space, lambda points: [abs(p[0] - 3) + 1.0 for p in points], budget_trials=3)
>>> log.evaluate([(0,), (3,), (0,)])  # the repeated point is evaluated once
[4.0, 1.0]
>>> log.best_point, log.best_cost, log.remaining
((3,), 1.0, 1)
"""

from __future__ import annotations

import math
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from tilecraft.search.errors import SearchError
from tilecraft.search.space import Point, Space

__all__ = ["CostFunction", "ResultCallback", "SearchEngine", "SearchResult", "Trial",
           "TrialLog", "performance"]

#: evaluates a batch of points; returns one cost (seconds, ``math.inf`` = failed) per point
CostFunction = Callable[[list[Point]], Sequence[float]]


@dataclass(frozen=True)
class Trial:
    """One evaluated point: its position in the search (0-based), the point and its cost."""

    index: int
    point: Point
    cost: float

    @property
    def failed(self) -> bool:
        return math.isinf(self.cost)


#: called with every trial as soon as its batch is evaluated
ResultCallback = Callable[[Trial], None]


def performance(cost: float) -> float:
    """The thesis's performance value E of a cost: ``1 / cost`` (higher is better), 0 for a
    failed candidate, and a very large value for a zero cost.

    >>> performance(0.5), performance(math.inf)
    (2.0, 0.0)
    """
    if math.isinf(cost):
        return 0.0
    return 1.0 / max(cost, 1e-300)


@dataclass(frozen=True)
class SearchResult:
    """The best point found (``None`` if every candidate failed), its cost, every trial in
    evaluation order, and why the search stopped (``"trials"``, ``"seconds"`` or
    ``"exhausted"``)."""

    best_point: Point | None
    best_cost: float
    history: tuple[Trial, ...]
    stopped_by: str = "trials"
    engine: str = ""

    @property
    def trials(self) -> int:
        return len(self.history)

    def best_so_far(self) -> list[float]:
        """The best cost after each trial (the convergence curve)."""
        curve, best = [], math.inf
        for trial in self.history:
            best = min(best, trial.cost)
            curve.append(best)
        return curve

    def trials_to_reach(self, cost: float) -> int | None:
        """How many trials it took to find a cost at most ``cost`` (``None``: never)."""
        for trial in self.history:
            if trial.cost <= cost:
                return trial.index + 1
        return None


class TrialLog:
    """The search's memory H: every evaluated point with its cost, the best so far, and the
    budgets. :meth:`evaluate` drops points already evaluated (or repeated in the batch),
    truncates the batch to the remaining trial budget, calls the cost function and checks
    what it returns."""

    def __init__(self, space: Space, cost: CostFunction, budget_trials: int,
                 budget_seconds: float | None = None, on_result: ResultCallback | None = None,
                 engine: str = "search"):
        if isinstance(budget_trials, bool) or not isinstance(budget_trials, int) \
                or budget_trials < 0:
            raise SearchError(f"{engine}: budget_trials={budget_trials!r} must be an int >= 0")
        if budget_seconds is not None and not budget_seconds > 0:
            raise SearchError(f"{engine}: budget_seconds={budget_seconds!r} must be > 0 or None")
        if not callable(cost):
            raise SearchError(f"{engine}: cost must be callable (a batch of points -> costs), "
                              f"got {type(cost).__name__}")
        self.space = space
        self.cost = cost
        self.budget_trials = budget_trials
        self.budget_seconds = budget_seconds
        self.on_result = on_result
        self.engine = engine
        self.costs: dict[Point, float] = {}
        self.history: list[Trial] = []
        self.best_point: Point | None = None
        self.best_cost = math.inf
        self.started = time.perf_counter()
        self.exhausted = False

    # budgets ---------------------------------------------------------------------------------

    @property
    def remaining(self) -> int:
        return self.budget_trials - len(self.history)

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def out_of_time(self) -> bool:
        return self.budget_seconds is not None and self.elapsed >= self.budget_seconds

    def done(self) -> bool:
        """Whether the search must stop: no trials or time left, or the space exhausted."""
        return self.remaining <= 0 or self.out_of_time() or self.exhausted \
            or len(self.costs) >= self.space.size

    def stop_reason(self) -> str:
        if self.remaining <= 0:
            return "trials"
        if self.out_of_time():
            return "seconds"
        return "exhausted"

    # evaluation ------------------------------------------------------------------------------

    def visited(self, point: Point) -> bool:
        return point in self.costs

    def performance(self, point: Point) -> float:
        return performance(self.costs[point])

    @property
    def best_performance(self) -> float:
        return performance(self.best_cost)

    def evaluate(self, points: Sequence[Point]) -> list[float]:
        """Evaluate the new points among ``points`` (at most the remaining budget); returns
        their costs, in order."""
        batch: list[Point] = []
        seen: set[Point] = set()
        for point in points:
            point = self.space.check(point)
            if point in self.costs or point in seen:
                continue
            seen.add(point)
            batch.append(point)
        batch = batch[:max(0, self.remaining)]
        if not batch or self.out_of_time():
            return []
        costs = list(self.cost(list(batch)))
        if len(costs) != len(batch):
            raise SearchError(f"{self.engine}: the cost function returned {len(costs)} costs for"
                              f" a batch of {len(batch)} points; return one cost per point")
        checked = []
        for point, cost in zip(batch, costs):
            try:
                value = float(cost)
            except (TypeError, ValueError):
                raise SearchError(f"{self.engine}: the cost of point {point} is {cost!r}, not a "
                                  "number; return seconds, or math.inf for a failed "
                                  "candidate") from None
            if math.isnan(value):
                value = math.inf  # a NaN measurement is a failed candidate
            if value < 0:
                raise SearchError(f"{self.engine}: the cost of point {point} is {value}; costs "
                                  "are seconds >= 0 (math.inf for a failed candidate)")
            checked.append(value)
            trial = Trial(len(self.history), point, value)
            self.costs[point] = value
            self.history.append(trial)
            if value < self.best_cost:
                self.best_point, self.best_cost = point, value
            if self.on_result is not None:
                self.on_result(trial)
        return checked

    def random_unvisited(self, rng: np.random.Generator, count: int,
                         attempts: int = 50) -> list[Point]:
        """Up to ``count`` distinct random points not evaluated yet: random draws first;
        when they keep hitting visited points, the unvisited points of the space are listed
        (shuffled when there are at most ``2**16`` points, else in order)."""
        free_count = self.space.size - len(self.costs)
        if free_count <= 0 or count <= 0:
            return []
        found: list[Point] = []
        chosen: set[Point] = set()
        misses = 0
        while len(found) < min(count, free_count) and misses < attempts * count:
            point = self.space.random_point(rng)
            if point in self.costs or point in chosen:
                misses += 1
                continue
            chosen.add(point)
            found.append(point)
        if len(found) < min(count, free_count):
            if self.space.size <= 1 << 16:
                free = [p for p in self.space.points()
                        if p not in self.costs and p not in chosen]
                order = rng.permutation(len(free))
                found.extend(free[int(i)] for i in order[:count - len(found)])
            else:
                for point in self.space.points():
                    if len(found) >= count:
                        break
                    if point not in self.costs and point not in chosen:
                        found.append(point)
        return found

    def result(self) -> SearchResult:
        return SearchResult(self.best_point, self.best_cost, tuple(self.history),
                            self.stop_reason(), self.engine)


class SearchEngine(ABC):
    """A search over a space given only a batch cost function.

    Subclasses hold their hyper-parameters as attributes and implement :meth:`run`; the
    common rules (budgets, no repeated evaluation, failed candidates) live in
    :class:`TrialLog`.
    """

    #: the registry name (``tilecraft.search.ENGINES``)
    name: str = ""

    def search(self, space: Space, cost: CostFunction, budget_trials: int, seed: int,
               on_result: ResultCallback | None = None,
               budget_seconds: float | None = None) -> SearchResult:
        """Search ``space`` for the point of least ``cost`` with at most ``budget_trials``
        evaluations (and ``budget_seconds`` of wall-clock time, checked between batches)."""
        if not isinstance(space, Space):
            raise SearchError(f"{self.name}: search() needs a tilecraft.search.Space, got "
                              f"{type(space).__name__}; build one with generate_space()")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise SearchError(f"{self.name}: seed={seed!r} must be an int (searches are "
                              "deterministic given their seed)")
        log = TrialLog(space, cost, budget_trials, budget_seconds, on_result, self.name)
        if budget_trials > 0:
            self.run(space, log, np.random.default_rng(int(seed)))
        return log.result()

    @abstractmethod
    def run(self, space: Space, log: TrialLog, rng: np.random.Generator) -> None:
        """Explore ``space``, evaluating points through ``log`` until ``log.done()``."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"
