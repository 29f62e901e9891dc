"""Monte Carlo tree search over a space, one sub-space per tree level (thesis §3.5.2, TileFlow's
tile-size search).

A search-tree node fixes the choices of the first ``d`` sub-spaces. Each iteration descends by
the upper confidence bound ``mean + c * sqrt(ln N / n)`` while every choice of a node has been
tried, expands one untried choice, completes the point at random (the rollout), evaluates it
and propagates the reward ``best cost / cost`` (0 for a failed point) back up. Points given as
``initial_points`` (a warm start, e.g. Chimera's analytical tiles) are evaluated first and
propagated the same way.

>>> from tilecraft.search.space import ChoiceSpace, Space
>>> space = Space([(n, ChoiceSpace(range(8))) for n in "xyz"])
>>> cost = lambda ps: [1.0 + abs(x - 5) + abs(y - 2) + abs(z - 7) for x, y, z in ps]
>>> result = MonteCarloTreeSearch().search(space, cost, budget_trials=120, seed=0)
>>> result.best_cost <= 2.0, result.trials
(True, 120)
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from tilecraft.search.engines.base import SearchEngine, TrialLog
from tilecraft.search.errors import SearchError
from tilecraft.search.space import Point, Space

__all__ = ["MonteCarloTreeSearch"]


class MonteCarloTreeSearch(SearchEngine):
    """UCB tree search; ``exploration`` is the constant ``c``."""

    name = "mcts"

    def __init__(self, exploration: float = 0.7, initial_points: Sequence[Point] = (),
                 rollouts_per_batch: int = 4):
        if not exploration >= 0:
            raise SearchError(f"MonteCarloTreeSearch: exploration={exploration!r} must be >= 0")
        if rollouts_per_batch < 1:
            raise SearchError("MonteCarloTreeSearch: rollouts_per_batch must be >= 1")
        self.exploration = float(exploration)
        self.initial_points = tuple(tuple(p) for p in initial_points)
        self.rollouts_per_batch = rollouts_per_batch

    def run(self, space: Space, log: TrialLog, rng: np.random.Generator) -> None:
        sizes = list(space.sizes.values())
        visits: dict[Point, int] = {}
        value: dict[Point, float] = {}

        def propagate(point: Point, cost: float) -> None:
            reward = 0.0 if math.isinf(cost) else min(1.0, log.best_cost / max(cost, 1e-300))
            for depth in range(len(point) + 1):
                prefix = point[:depth]
                visits[prefix] = visits.get(prefix, 0) + 1
                value[prefix] = value.get(prefix, 0.0) + reward

        if self.initial_points:
            for point, cost in zip(self.initial_points, log.evaluate(list(self.initial_points))):
                propagate(point, cost)
        stale = 0
        while not log.done():
            batch = [self._descend(sizes, visits, value, rng)
                     for _ in range(min(self.rollouts_per_batch, log.remaining))]
            fresh = [p for p in dict.fromkeys(batch) if not log.visited(p)]
            costs = log.evaluate(fresh)
            for point in batch:
                propagate(point, log.costs.get(point, math.inf))
            stale = 0 if costs else stale + 1
            if stale > 50:  # the tree keeps finding evaluated points: fall back to random ones
                extra = log.random_unvisited(rng, min(self.rollouts_per_batch, log.remaining))
                if not extra:
                    log.exhausted = True
                    return
                for point, cost in zip(extra, log.evaluate(extra)):
                    propagate(point, cost)
                stale = 0

    def _descend(self, sizes: list[int], visits: dict[Point, int], value: dict[Point, float],
                 rng: np.random.Generator) -> Point:
        prefix: Point = ()
        while len(prefix) < len(sizes):
            size = sizes[len(prefix)]
            untried = [c for c in range(size) if (*prefix, c) not in visits]
            if untried:
                prefix = (*prefix, int(untried[int(rng.integers(len(untried)))]))
                break
            parent = math.log(max(1, visits.get(prefix, 1)))
            scores = [value[(*prefix, c)] / visits[(*prefix, c)]
                      + self.exploration * math.sqrt(parent / visits[(*prefix, c)])
                      for c in range(size)]
            prefix = (*prefix, int(np.argmax(scores)))
        rest = tuple(int(rng.integers(size)) for size in sizes[len(prefix):])
        return (*prefix, *rest)
