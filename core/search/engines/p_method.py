"""The P-method (thesis §4.4.1, Fig. 4.9): simulated-annealing start points, then every
direction of every start — the Q-method without its learned direction choice.

>>> from tilecraft.search.space import Space, SplitSpace
>>> space = Space([("a", SplitSpace(64, 3)), ("b", SplitSpace(36, 2))])
>>> def cost(points):
...     values = [space.values(p) for p in points]
...     return [1.0 + sum((f - 4) ** 2 for f in v["a"]) + sum((f - 6) ** 2 for f in v["b"])
...             for v in values]
>>> result = PMethodSearch().search(space, cost, budget_trials=80, seed=1)
>>> space.values(result.best_point), result.best_cost
({'a': (4, 4, 4), 'b': (6, 6)}, 1.0)
"""

from __future__ import annotations

import numpy as np

from tilecraft.search.engines.annealing import select_starts
from tilecraft.search.engines.base import SearchEngine, TrialLog
from tilecraft.search.errors import SearchError
from tilecraft.search.space import Point, Space

__all__ = ["PMethodSearch"]


class PMethodSearch(SearchEngine):
    """Each round: pick ``starts`` start points by simulated annealing (``gamma``,
    ``pool_size``) and evaluate all their unvisited neighbours as one batch. The search
    begins with ``initial_points`` random points."""

    name = "p"

    def __init__(self, starts: int = 1, initial_points: int = 8, gamma: float = 5.0,
                 pool_size: int = 64):
        for key, value in {"starts": starts, "initial_points": initial_points,
                           "pool_size": pool_size}.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise SearchError(f"PMethodSearch: {key}={value!r} must be an int >= 1")
        if gamma < 0:
            raise SearchError(f"PMethodSearch: gamma={gamma!r} must be >= 0")
        self.starts, self.initial_points = starts, initial_points
        self.gamma, self.pool_size = gamma, pool_size

    def run(self, space: Space, log: TrialLog, rng: np.random.Generator) -> None:
        log.evaluate(log.random_unvisited(rng, self.initial_points))
        exhausted: set[Point] = set()
        while not log.done():
            starts = select_starts(log, rng, self.starts, self.gamma, self.pool_size, exhausted)
            if not starts:
                fresh = log.random_unvisited(rng, self.starts)
                if not fresh:
                    log.exhausted = True
                    return
                log.evaluate(fresh)
                continue
            batch: list[Point] = []
            for point in starts:
                batch.extend(e for _, e in space.neighbours(point)
                             if not log.visited(e) and e not in batch)
                exhausted.add(point)
            log.evaluate(batch)
