"""TileFlow's search (thesis §3.5.2): a genetic algorithm over computation order and resource
binding, and for every structure it proposes, Monte Carlo tree search over the tile sizes.

Both are the core's search engines (``"genetic"``, ``"mcts"``) on :class:`Space` objects, with
the model's latency (seconds) as the cost and ``math.inf`` for trees that do not fit. Both are
warm-started from Chimera's analytical solution: its order bound ``Seq`` in the innermost level
joins the first generation, and its tiles are the first point of every fused structure's tile
search.

Searches respect containment: where one space contains another's points (FLAT-RGran's tiles
include FLAT-HGran's; TileFlow's structures include Fused-Layer's), the larger is warm-started
from the smaller's best (``warm``), which is evaluated first, so it never ends worse. Every tile
search also tries the point of whole tiles. The budget of a search can follow the size of its
space (:func:`proportional_budget`): a fixed number of points covers a small space and samples a
10-loop one too thinly.

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
from collections.abc import Callable, Mapping, Sequence
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
        self.best_point: tuple[Structure, dict[str, int]] | None = None
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
            self.best_point = (structure, dict(tiles))
        self.curve.append(self.best[0])
        return value


def proportional_budget(size: int, fraction: float = 0.25, floor: int = 60,
                        cap: int = 600) -> int:
    """Points to evaluate in a space of ``size`` points: ``fraction`` of it, at least ``floor``
    (or the whole space) and at most ``cap``.

    >>> proportional_budget(49), proportional_budget(1960), proportional_budget(10 ** 9)
    (49, 490, 600)
    """
    if not 0 < fraction <= 1 or floor < 1 or cap < floor:
        raise DataflowError(f"proportional_budget: fraction={fraction} must lie in (0, 1], "
                            f"floor={floor} >= 1 and cap={cap} >= floor")
    return min(size, max(floor, min(cap, math.ceil(fraction * size))))


def search_tiles(space: ChainSpace, structure: Structure, budget: int, seed: int,
                 evaluator: _Evaluator | None = None,
                 start: dict[str, int] | None = None,
                 warm: Sequence[Mapping[str, int]] = (), rounds: int = 1,
                 tolerance: float = 0.01,
                 refine: bool = False) -> tuple[float, dict[str, int] | None]:
    """MCTS over ``space``'s tiles for one structure; the best seconds and tiles. The search
    first evaluates ``warm`` (best tiles of spaces this one contains: they must be points of
    it), ``start`` and whole tiles, so it never ends above any of them. With ``rounds`` > 1
    it searches again from its best (twice the points of the round before, the next seed)
    until a round gains less than ``tolerance`` (until convergence); with ``refine`` each
    round ends with a descent to the nearest local optimum (single-loop moves)."""
    evaluator = evaluator or _Evaluator(space, latency)
    best, tiles = _tile_round(space, structure, budget, seed, evaluator, start, warm)
    if refine and tiles is not None:
        best, tiles = _descend(space, structure, evaluator, best, tiles)
    for round_ in range(1, rounds):
        if tiles is None:
            break
        again, found = _tile_round(space, structure, budget * 2 ** round_, seed + round_,
                                   evaluator, None, [tiles])
        if refine and found is not None:
            again, found = _descend(space, structure, evaluator, again, found)
        gained = again < best * (1 - tolerance)
        if again < best:
            best, tiles = again, found
        if not gained:
            break
    return best, tiles


def _descend(space: ChainSpace, structure: Structure, evaluator: _Evaluator, best: float,
             tiles: dict[str, int]) -> tuple[float, dict[str, int]]:
    """Steepest descent from ``tiles`` over single-loop moves to the next tile choice up or
    down, until no move gains: a local optimum of the tile space."""
    point = space.exact_tile_point(tiles)
    sizes = [len(values) for values in space.choices.values()]
    seen = {point: best}
    while True:
        moves = [(*point[:i], point[i] + step, *point[i + 1:])
                 for i in range(len(point)) for step in (-1, 1) if 0 <= point[i] + step < sizes[i]]
        for move in moves:
            if move not in seen:
                seen[move] = evaluator(structure, space.tiles(move))
        step = min(moves, key=seen.__getitem__, default=point)
        if not seen[step] < seen[point]:
            return seen[point], space.tiles(point)
        point = step


def _tile_round(space: ChainSpace, structure: Structure, budget: int, seed: int,
                evaluator: _Evaluator, start: dict[str, int] | None,
                warm: Sequence[Mapping[str, int]]) -> tuple[float, dict[str, int] | None]:
    tile_space = space.tile_space()
    initial: list[Point] = [space.exact_tile_point(tiles) for tiles in warm]
    if start:
        initial.append(space.tile_point(start))
    initial.append(space.tile_point(space.chain.extents))
    initial = list(dict.fromkeys(initial))
    result = MonteCarloTreeSearch(initial_points=initial).search(
        tile_space, lambda points: [evaluator(structure, space.tiles(p)) for p in points],
        budget_trials=max(budget, len(initial)), seed=seed)
    best = space.tiles(result.best_point) if result.best_point is not None else None
    return result.best_cost, best


def search_dataflow(space: ChainSpace, structures: int | None = 40,
                    tiles_per_structure: int | None = 100, seed: int = 0,
                    objective: Objective = latency, warm_start: bool = True,
                    warm: Sequence[tuple[Structure, Mapping[str, int]]] = (),
                    rounds: int = 1, tolerance: float = 0.01,
                    refine: bool = False) -> DataflowSearchResult:
    """GA over ``space``'s structures (at most ``structures`` of them), MCTS over each one's
    tiles (``tiles_per_structure`` trees each; ``None``: :func:`proportional_budget` of the
    structure or tile space), warm-started from Chimera and from ``warm``: the best
    (structure, tiles) of spaces this one contains, evaluated first and seeding the first
    generation and their structures' tile searches. With ``rounds`` > 1 the search runs
    again from its best (the next seed) until a round gains less than ``tolerance``;
    ``refine``: each tile search ends with a descent to a local optimum."""
    evaluator = _Evaluator(space, objective)
    started = time.perf_counter()
    start_seconds = math.inf
    initial: list[Point] = []
    chimera_tiles: dict[str, int] | None = None
    warm_tiles: dict[Structure, list[Mapping[str, int]]] = {}
    for structure, tiles in warm:
        initial.append(space.admit(structure))
        warm_tiles.setdefault(structure, []).append(tiles)
        evaluator(structure, space.tiles(space.exact_tile_point(tiles)))
    if warm_start:
        chimera, chimera_tiles = space.chimera_start()
        initial.insert(0, space.structure_point(chimera))
        start_seconds = evaluator(chimera, chimera_tiles)
    structure_space = space.structure_space()
    if structures is None:
        structures = proportional_budget(structure_space.size, floor=12, cap=48)
    if tiles_per_structure is None:
        tiles_per_structure = proportional_budget(space.tile_space().size)

    def cost(points: list[Point]) -> list[float]:
        values = []
        for index, point in enumerate(points):
            structure = space.structure(point)
            start = chimera_tiles if structure.level is not None else None
            best, _ = search_tiles(space, structure, tiles_per_structure,
                                   seed + 7919 * (len(evaluator.curve) + index), evaluator,
                                   start, warm_tiles.get(structure, ()), refine=refine)
            values.append(best)
        return values

    for round_ in range(rounds):
        before = evaluator.best[0]
        if round_ and evaluator.best_point is not None:
            structure, tiles = evaluator.best_point
            initial.insert(0, space.admit(structure))
            if all(tiles[lp] in values for lp, values in space.choices.items()):
                warm_tiles.setdefault(structure, []).insert(0, tiles)  # not Chimera's own
        initial = list(dict.fromkeys(initial))
        population = max(len(initial), min(8, max(2, structures // 3)))
        GeneticSearch(population=population, elite=min(3, population),
                      initial_points=initial).search(structure_space, cost,
                                                     budget_trials=structures, seed=seed + round_)
        if round_ and not evaluator.best[0] < before * (1 - tolerance):
            break
    best_seconds, best_tree, best_cost = evaluator.best
    return DataflowSearchResult(best_tree, best_cost, best_seconds, start_seconds,
                                evaluator.curve, time.perf_counter() - started)


__all__ = ["DataflowSearchResult", "Objective", "latency", "proportional_budget",
           "search_dataflow", "search_tiles"]
