"""TileFlow's search (thesis §3.5.2): a genetic algorithm over computation order and resource
binding, and for every structure it proposes, Monte Carlo tree search over the tile sizes.

Both are the core's search engines (``"genetic"``, ``"mcts"``) on :class:`Space` objects, with
the model's latency (seconds) as the cost and ``math.inf`` for trees that do not fit. Both are
warm-started from Chimera's analytical solution: its order bound ``Seq`` in the innermost level
joins the first generation, and its tiles are the first point of every fused structure's tile
search.

>>> from tilecraft.fusion import gemm_chain
>>> from tilecraft.dataflow.chain_space import ChainSpace, _example_spec
>>> space = ChainSpace(gemm_chain(128, 64, 64, 64), _example_spec())
>>> result = search_dataflow(space, structures=6, tiles_per_structure=20, seed=0)
>>> result.best_seconds <= result.start_seconds, result.evaluations <= 6 * 20 + 1
(True, True)
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tilecraft.dataflow.chain_space import ChainSpace, Structure
from tilecraft.dataflow.cost import TreeCost
from tilecraft.dataflow.errors import DataflowError
from tilecraft.dataflow.tree import DataflowTree
from tilecraft.search.engines.genetic import GeneticSearch
from tilecraft.search.engines.mcts import MonteCarloTreeSearch
from tilecraft.search.space import Point

#: the model's verdict on one tree: seconds (``math.inf`` when it does not fit)
Objective = Callable[[TreeCost], float]


def latency(cost: TreeCost) -> float:
    return cost.seconds if cost.feasible else math.inf


@dataclass
class DataflowSearchResult:
    """The best tree found, its cost, and the convergence: the best seconds after each
    evaluated tree, and the wall time per evaluation."""

    best_tree: DataflowTree | None
    best_cost: TreeCost | None
    best_seconds: float
    start_seconds: float
    curve: list[float] = field(default_factory=list)
    wall_seconds: float = 0.0

    @property
    def evaluations(self) -> int:
        return len(self.curve)

    @property
    def seconds_per_evaluation(self) -> float:
        return self.wall_seconds / max(1, self.evaluations)


class _Evaluator:
    def __init__(self, space: ChainSpace, objective: Objective):
        self.space = space
        self.objective = objective
        self.best: tuple[float, DataflowTree | None, TreeCost | None] = (math.inf, None, None)
        self.curve: list[float] = []

    def __call__(self, structure: Structure, tiles: dict[str, int]) -> float:
        try:
            tree = self.space.tree(structure, tiles)
            cost = self.space.cost(tree)
        except DataflowError:
            value, tree, cost = math.inf, None, None
        else:
            value = self.objective(cost)
        if value < self.best[0]:
            self.best = (value, tree, cost)
        self.curve.append(self.best[0])
        return value


def search_tiles(space: ChainSpace, structure: Structure, budget: int, seed: int,
                 evaluator: _Evaluator | None = None,
                 start: dict[str, int] | None = None) -> tuple[float, dict[str, int] | None]:
    """MCTS over ``space``'s tiles for one structure; the best seconds and tiles."""
    evaluator = evaluator or _Evaluator(space, latency)
    tile_space = space.tile_space()
    initial: list[Point] = [space.tile_point(start)] if start else []
    result = MonteCarloTreeSearch(initial_points=initial).search(
        tile_space, lambda points: [evaluator(structure, space.tiles(p)) for p in points],
        budget_trials=budget, seed=seed)
    best = space.tiles(result.best_point) if result.best_point is not None else None
    return result.best_cost, best


def search_dataflow(space: ChainSpace, structures: int = 40, tiles_per_structure: int = 100,
                    seed: int = 0, objective: Objective = latency,
                    warm_start: bool = True) -> DataflowSearchResult:
    """GA over ``space``'s structures (at most ``structures`` of them), MCTS over each one's
    tiles (``tiles_per_structure`` trees each), warm-started from Chimera."""
    evaluator = _Evaluator(space, objective)
    started = time.perf_counter()
    start_seconds = math.inf
    initial: list[Point] = []
    chimera_tiles: dict[str, int] | None = None
    if warm_start:
        chimera, chimera_tiles = space.chimera_start()
        initial = [space.structure_point(chimera)]
        start_seconds = evaluator(chimera, chimera_tiles)
    structure_space = space.structure_space()

    def cost(points: list[Point]) -> list[float]:
        values = []
        for index, point in enumerate(points):
            structure = space.structure(point)
            start = chimera_tiles if structure.level is not None else None
            best, _ = search_tiles(space, structure, tiles_per_structure,
                                   seed + 7919 * (len(evaluator.curve) + index), evaluator,
                                   start)
            values.append(best)
        return values

    population = min(8, max(2, structures // 3))
    GeneticSearch(population=population, elite=min(3, population),
                  initial_points=initial).search(structure_space, cost,
                                                 budget_trials=structures, seed=seed)
    best_seconds, best_tree, best_cost = evaluator.best
    return DataflowSearchResult(best_tree, best_cost, best_seconds, start_seconds,
                                evaluator.curve, time.perf_counter() - started)


__all__ = ["DataflowSearchResult", "Objective", "latency", "search_dataflow", "search_tiles"]
