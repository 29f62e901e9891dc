"""Simulated-annealing start-point selection (thesis §4.4.1), shared by the Q- and P-methods.

From the evaluated set H, a random pool of candidates is drawn (the best point always among
them); each candidate ``p`` is kept with probability ``exp(-gamma * (E* - E_p) / E*)``, where
``E`` is performance (``1 / cost``, 0 for a failed candidate) and ``E*`` the best performance
so far, by flipping a coin per candidate. Several starts may be chosen at once (a beam).

>>> import math
>>> probability(2.0, 2.0, gamma=5.0), round(probability(1.0, 2.0, gamma=5.0), 4)
(1.0, 0.0821)
"""

from __future__ import annotations

import math
from collections.abc import Set

import numpy as np

from tilecraft.search.engines.base import TrialLog
from tilecraft.search.errors import SearchError
from tilecraft.search.space import Point

__all__ = ["probability", "select_starts"]

#: coin-flip rounds before falling back to the best candidates
_ROUNDS = 3


def probability(performance: float, best: float, gamma: float) -> float:
    """The chance a point of ``performance`` is chosen as a start when the best is ``best``."""
    if best <= 0:
        return 1.0  # nothing has succeeded yet: every point is as good a start
    return math.exp(-gamma * (best - performance) / best)


def select_starts(log: TrialLog, rng: np.random.Generator, count: int, gamma: float,
                  pool_size: int, exclude: Set[Point] = frozenset()) -> list[Point]:
    """Up to ``count`` start points from the evaluated points not in ``exclude`` (points
    with no unexplored direction left), best first; empty when there are none."""
    if count < 1 or pool_size < 1 or gamma < 0:
        raise SearchError(f"select_starts: count={count}, pool_size={pool_size}, gamma={gamma};"
                          " need count >= 1, pool_size >= 1, gamma >= 0")
    candidates = [point for point in log.costs if point not in exclude]
    if not candidates:
        return []
    if len(candidates) > pool_size:
        picks = np.sort(rng.choice(len(candidates), size=pool_size, replace=False))
        pool = [candidates[int(i)] for i in picks]
        if log.best_point is not None and log.best_point not in exclude \
                and log.best_point not in pool:
            pool[-1] = log.best_point
    else:
        pool = candidates
    best = log.best_performance
    chances = np.array([probability(log.performance(p), best, gamma) for p in pool])
    chosen: list[Point] = []
    for _ in range(_ROUNDS):
        flips = rng.random(len(pool)) < chances
        chosen.extend(p for p, kept in zip(pool, flips) if kept and p not in chosen)
        if len(chosen) >= count:
            break
    if not chosen:
        chosen = [max(pool, key=log.performance)]
    chosen.sort(key=log.performance, reverse=True)  # stable: ties keep their pool order
    return chosen[:count]
