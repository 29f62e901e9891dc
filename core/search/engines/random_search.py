"""Random search: distinct uniformly random points, in batches (the baseline of thesis
Fig. 4.9, where AutoTVM samples new points at random).

>>> from tilecraft.search.space import ChoiceSpace, Space
>>> space = Space([("x", ChoiceSpace(range(10))), ("y", ChoiceSpace(range(10)))])
>>> result = RandomSearch().search(space, lambda ps: [float(x + y) for x, y in ps],
...                                budget_trials=100, seed=0)
>>> result.best_cost, result.trials, len({t.point for t in result.history})
(0.0, 100, 100)
"""

from __future__ import annotations

import numpy as np

from tilecraft.search.engines.base import SearchEngine, TrialLog
from tilecraft.search.errors import SearchError
from tilecraft.search.space import Space

__all__ = ["RandomSearch"]


class RandomSearch(SearchEngine):
    """Evaluates ``batch_size`` new random points at a time until the budget is spent."""

    name = "random"

    def __init__(self, batch_size: int = 8):
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise SearchError(f"RandomSearch: batch_size={batch_size!r} must be an int >= 1")
        self.batch_size = batch_size

    def run(self, space: Space, log: TrialLog, rng: np.random.Generator) -> None:
        while not log.done():
            points = log.random_unvisited(rng, min(self.batch_size, log.remaining))
            if not points:
                log.exhausted = True
                return
            log.evaluate(points)
