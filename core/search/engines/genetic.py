"""Genetic algorithm over a space (thesis §3.5.2, TileFlow's search over computation order and
resource binding).

A generation is ``population`` points; the ``elite`` best of everything evaluated so far breed
the next: each child takes every sub-space's choice from one of two elite parents (uniform
crossover) and redraws each choice with probability ``mutation``. ``initial_points`` (a warm
start, e.g. Chimera's order and binding) join the first generation.

>>> from tilecraft.search.space import ChoiceSpace, Space
>>> space = Space([(n, ChoiceSpace(range(6))) for n in "abcd"])
>>> cost = lambda ps: [1.0 + sum(abs(v - 3) for v in p) for p in ps]
>>> result = GeneticSearch(population=12).search(space, cost, budget_trials=150, seed=1)
>>> result.best_cost <= 2.0
True
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tilecraft.search.engines.base import SearchEngine, TrialLog
from tilecraft.search.errors import SearchError
from tilecraft.search.space import Point, Space

__all__ = ["GeneticSearch"]


class GeneticSearch(SearchEngine):
    """Elitist genetic search with uniform crossover and per-gene mutation."""

    name = "genetic"

    def __init__(self, population: int = 20, elite: int = 5, mutation: float = 0.2,
                 initial_points: Sequence[Point] = ()):
        if population < 2 or not 1 <= elite <= population:
            raise SearchError(f"GeneticSearch: population={population} must be >= 2 and elite="
                              f"{elite} in [1, population]")
        if not 0 <= mutation <= 1:
            raise SearchError(f"GeneticSearch: mutation={mutation!r} must lie in [0, 1]")
        self.population = population
        self.elite = elite
        self.mutation = mutation
        self.initial_points = tuple(tuple(p) for p in initial_points)

    def run(self, space: Space, log: TrialLog, rng: np.random.Generator) -> None:
        sizes = list(space.sizes.values())
        generation = list(self.initial_points)
        generation += log.random_unvisited(rng, self.population - len(generation))
        while not log.done():
            fresh = [p for p in dict.fromkeys(generation) if not log.visited(p)]
            if fresh:
                log.evaluate(fresh[:log.remaining])
            if log.done():
                return
            ranked = sorted(log.costs, key=log.costs.__getitem__)[:self.elite]
            children: list[Point] = []
            attempts = 0
            while len(children) < self.population and attempts < 20 * self.population:
                attempts += 1
                a, b = (ranked[int(i)] for i in rng.integers(len(ranked), size=2))
                genes = [a[g] if rng.random() < 0.5 else b[g] for g in range(len(sizes))]
                for g, size in enumerate(sizes):
                    if rng.random() < self.mutation:
                        genes[g] = int(rng.integers(size))
                child = tuple(int(v) for v in genes)
                if not log.visited(child) and child not in children:
                    children.append(child)
            if not children:
                children = log.random_unvisited(rng, self.population)
                if not children:
                    log.exhausted = True
                    return
            generation = children
