"""The analytical tile solver of Chimera (thesis §3.4.3, Eq. 3.14-3.21).

For each distinct data-movement structure of the chain's orders (:mod:`.orders`), minimise DV
subject to MU <= capacity: first over real tile sizes (:mod:`.relaxed`; Eq. 3.18 is the closed
form for the GEMM chain), then over the integer tiles around that point that respect the loop
constraints (micro-kernel multiples and lower bounds, :mod:`.constraints`), keeping the one that
moves the fewest bytes. The best order over all structures wins.

With a target spec the chain is solved for several memory levels (Eq. 3.20-3.21): each level d
gets its own order and tiles ``S_d``, with ``MU_d <= MC_d`` and cost ``DV_d / bw_d`` (``bw_d``:
bandwidth from the level outside it). Levels are solved innermost first; an outer level's tiles
are multiples of the inner level's, and at outer levels a producer's private loops stay whole
(its reduction must finish inside the innermost fused block, §3.3.2). The bottleneck is the
level with the largest cost. A level too small for even the smallest tiles is skipped; a chain
that fits no level falls back to unfused code, and the solution says why.

On a chip with several compute units, ``parallel`` (a
:class:`~tilecraft.fusion.parallel.ParallelExecution`) says which loops' outermost tiles are
the blocks dealt out to the units: the outermost level's integer tiles are then scored by the
most loaded unit's time (arithmetic plus ``DV / bw``, times ``ceil(B / P) / B``) instead of by
``DV`` alone, and every trip count of those loops is a candidate.

>>> from tilecraft.fusion.examples import gemm_chain
>>> chain = gemm_chain(1024, 512, 768, 512)
>>> solution = solve_chain(chain, capacity_bytes=256 * 1024)
>>> solution.fused, " ".join(solution.order)
(True, 'm l k n')
>>> solution.tiles
{'m': 205, 'n': 1, 'l': 256, 'k': 1}
>>> solution.level.usage_bytes <= 256 * 1024
True
>>> at_least_16 = LoopConstraint(minimum=16)
>>> tiny = solve_chain(chain, capacity_bytes=64, constraints={"n": at_least_16, "k": at_least_16})
>>> tiny.fused
False
>>> print(tiny.reason)
chain C -> E does not fit on_chip: even the smallest tiles (m=1 n=16 l=1 k=16) need 132 bytes
    (operator C), more than its 64 bytes; falling back to unfused code
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from tilecraft.fusion.chain import Chain, FusionError
from tilecraft.fusion.constraints import (
    Constraints,
    LoopConstraint,
    check_constraints,
    merge_constraints,
)
from tilecraft.fusion.dataflow import DataMovement, analyze
from tilecraft.fusion.orders import dataflow_classes
from tilecraft.fusion.parallel import ParallelExecution
from tilecraft.fusion.polynomial import SymbolKind
from tilecraft.fusion.relaxed import Monomials, minimize
from tilecraft.target.memory import MemoryKind
from tilecraft.target.spec import TargetSpec

#: exhaustive rounding up to this many integer candidates, coordinate descent beyond
_MAX_COMBINATIONS = 4096


@dataclass(frozen=True)
class LevelSolution:
    """The order and tiles chosen for one memory level, and what they cost."""

    level: str
    capacity_bytes: float
    order: tuple[str, ...]
    tiles: Mapping[str, int]
    volume_bytes: float
    usage_bytes: float
    relaxed_tiles: Mapping[str, float]
    relaxed_volume_bytes: float
    movement: DataMovement = field(repr=False)
    bandwidth_bytes_per_cycle: float | None = None
    structures: int = 0
    #: with a :class:`ParallelExecution`: the blocks and the most loaded unit's cycles
    blocks: int | None = None
    makespan_cycles: float | None = None

    @property
    def cost_cycles(self) -> float | None:
        """Eq. 3.20: ``DV_d / bw_d`` (``None`` without a bandwidth)."""
        if self.bandwidth_bytes_per_cycle is None:
            return None
        return self.volume_bytes / self.bandwidth_bytes_per_cycle

    def describe(self) -> str:
        tiles = " ".join(f"{loop}={tile}" for loop, tile in self.tiles.items())
        cost = "" if self.cost_cycles is None else f", {self.cost_cycles:,.0f} cycles"
        spread = "" if self.makespan_cycles is None else (
            f"; {self.blocks} blocks, the most loaded unit {self.makespan_cycles:,.0f} cycles")
        return (f"{self.level}: order {' '.join(self.order)}, tiles {tiles}; moves "
                f"{self.volume_bytes:,.0f} bytes{cost}, uses {self.usage_bytes:,.0f} of "
                f"{self.capacity_bytes:,.0f} bytes{spread}")


@dataclass(frozen=True)
class ChainSolution:
    """Result of :func:`solve_chain`: per-level orders and tiles, or why the chain stays
    unfused."""

    chain: Chain
    fused: bool
    reason: str
    levels: tuple[LevelSolution, ...] = ()
    skipped: tuple[tuple[str, str], ...] = ()
    seconds: float = 0.0

    @property
    def level(self) -> LevelSolution:
        """The innermost solved level: where the intermediate tiles are kept."""
        if not self.levels:
            raise FusionError(f"chain {self.chain.names} was not fused: {self.reason}")
        return self.levels[-1]

    @property
    def order(self) -> tuple[str, ...]:
        return self.level.order

    @property
    def tiles(self) -> dict[str, int]:
        return dict(self.level.tiles)

    @property
    def bottleneck(self) -> LevelSolution:
        """The level with the largest data-movement cost (Eq. 3.21's max)."""
        if not self.levels:
            raise FusionError(f"chain {self.chain.names} was not fused: {self.reason}")
        return max(self.levels, key=lambda s: (s.cost_cycles or 0.0, s.volume_bytes))

    @property
    def cost_cycles(self) -> float | None:
        return self.bottleneck.cost_cycles if self.levels else None

    def tile_tree(self):  # -> TileTree (import cycle)
        from tilecraft.fusion.tiletree import TileTree

        return TileTree.from_solution(self)

    def __str__(self) -> str:
        head = f"chain {self.chain.names}: {'fused' if self.fused else 'not fused'}"
        lines = [head, f"  {self.reason}"]
        lines += [f"  {level.describe()}" for level in self.levels]
        lines += [f"  skipped {name}: {why}" for name, why in self.skipped]
        return "\n".join(lines)


def solve_chain(chain: Chain, capacity_bytes: float | None = None, *,
                spec: TargetSpec | None = None, levels: Sequence[str] | None = None,
                constraints: Constraints | None = None, capacity_fraction: float = 1.0,
                legal_only: bool = True,
                parallel: ParallelExecution | None = None) -> ChainSolution:
    """Choose loop orders and tile sizes for ``chain``.

    Give either ``capacity_bytes`` (one on-chip level) or a target ``spec``, whose memory
    ``levels`` (default: its bounded cache and scratchpad levels) are solved by Eq. 3.21;
    ``capacity_fraction`` of each level's size is usable. ``constraints`` bound tiles per loop.
    ``parallel``: how the outermost level's blocks spread over the chip's units (see the
    module docstring).
    """
    started = time.perf_counter()
    if (capacity_bytes is None) == (spec is None):
        raise FusionError("solve_chain needs exactly one of capacity_bytes (a single on-chip "
                          "level) and spec (the target's memory hierarchy)")
    if not 0 < capacity_fraction <= 1:
        raise FusionError(f"capacity_fraction = {capacity_fraction} must lie in (0, 1]")
    checked = check_constraints(chain, constraints)
    if parallel is not None:
        parallel.check(chain)
    if spec is None:
        assert capacity_bytes is not None
        if not capacity_bytes > 0:
            raise FusionError(f"capacity_bytes = {capacity_bytes} must be positive")
        targets = [("on_chip", capacity_bytes * capacity_fraction, None)]
    else:
        targets = _spec_levels(spec, levels, capacity_fraction)
    solved: list[LevelSolution] = []
    skipped: list[tuple[str, str]] = []
    inner_tiles: dict[str, int] | None = None
    whole = {lp for i in range(len(chain.ops) - 1) for lp in chain.private_loops(i)}
    outermost = targets[0][0]
    for name, capacity, bandwidth in reversed(targets):
        level_constraints = checked if inner_tiles is None else merge_constraints(
            checked, {lp: LoopConstraint(t, t) for lp, t in inner_tiles.items()})
        result = _solve_level(chain, name, capacity, bandwidth, level_constraints,
                              whole if solved else set(), legal_only,
                              parallel if name == outermost else None)
        if isinstance(result, str):
            skipped.append((name, result))
            continue
        solved.append(result)
        inner_tiles = dict(result.tiles)
    elapsed = time.perf_counter() - started
    if not solved:
        reason = skipped[-1][1] if len(skipped) == 1 else "; ".join(why for _, why in skipped)
        return ChainSolution(chain, False, f"{reason}; falling back to unfused code",
                             (), tuple(reversed(skipped)), elapsed)
    solved.reverse()
    inner = solved[-1]
    reason = (f"intermediates kept in {inner.level}; order {' '.join(inner.order)} moves "
              f"{inner.volume_bytes:,.0f} bytes into it")
    if len(solved) > 1:
        neck = max(solved, key=lambda s: s.cost_cycles or 0.0)
        reason += f"; bottleneck {neck.level} ({neck.cost_cycles:,.0f} cycles)"
    return ChainSolution(chain, True, reason, tuple(solved), tuple(reversed(skipped)), elapsed)


def _spec_levels(spec: TargetSpec, names: Sequence[str] | None,
                 fraction: float) -> list[tuple[str, float, float | None]]:
    hierarchy = spec.memory
    if names is None:
        chosen = [lv.name for lv in hierarchy.levels if lv.size_bytes is not None
                  and lv.kind in (MemoryKind.CACHE, MemoryKind.SCRATCHPAD)]
        if not chosen:
            raise FusionError(f"target {spec.name} has no bounded cache or scratchpad level to "
                              "keep fused tiles in; pass levels= or capacity_bytes=")
    else:
        chosen = list(names)
    result = []
    for name in sorted(chosen, key=hierarchy.index):
        level = hierarchy.level(name)
        if level.size_bytes is None:
            raise FusionError(f"memory level {name} of target {spec.name} is unbounded; fused "
                              "tiles need a level with size_bytes")
        position = hierarchy.index(name)
        bandwidth = hierarchy.levels[position - 1].bandwidth_bytes_per_cycle if position else None
        result.append((name, level.size_bytes * fraction, bandwidth))
    return result


def solve_order(chain: Chain, order: Sequence[str] | str, capacity_bytes: float,
                constraints: Constraints | None = None, level: str = "on_chip") -> LevelSolution:
    """Tiles for one given loop ``order`` (outermost first) under ``capacity_bytes``: the
    relaxed optimum and the best integer tiles around it. A :class:`FusionError` says when
    even the smallest tiles do not fit."""
    problem = _LevelProblem(chain, level, capacity_bytes, None,
                            check_constraints(chain, constraints), set(), None)
    if problem.infeasible:
        raise FusionError(problem.infeasible)
    return problem.solve(tuple(order), structures=1)


class _LevelProblem:
    """One memory level: bounds, usage constraints and the per-order solve."""

    def __init__(self, chain: Chain, level: str, capacity: float, bandwidth: float | None,
                 constraints: Mapping[str, LoopConstraint], whole: set[str],
                 parallel: ParallelExecution | None) -> None:
        self.chain, self.level, self.capacity = chain, level, capacity
        self.bandwidth, self.constraints, self.parallel = bandwidth, constraints, parallel
        extents = self.extents = chain.extents
        fixed = set(chain.fixed_loops()) | whole
        self.lower = {lp: extents[lp] if lp in fixed else constraints[lp].smallest(extents[lp])
                      for lp in chain.loop_names}
        self.upper = {lp: self.lower[lp] if lp in fixed else constraints[lp].largest(extents[lp])
                      for lp in chain.loop_names}
        self.variables = [lp for lp in chain.loop_names if self.lower[lp] < self.upper[lp]]
        self.pinned = {lp: self.lower[lp] for lp in chain.loop_names
                       if lp not in self.variables}
        probe = analyze(chain, chain.loop_names)
        at_lower = [probe.usage(i, True).evaluate(extents, self.lower)
                    for i in range(len(chain.ops))]
        worst = max(range(len(at_lower)), key=at_lower.__getitem__)
        self.infeasible = ""
        if at_lower[worst] > capacity:
            smallest = " ".join(f"{lp}={self.lower[lp]}" for lp in chain.loop_names)
            self.infeasible = (
                f"chain {chain.names} does not fit {level}: even the smallest tiles "
                f"({smallest}) need {at_lower[worst]:,.0f} bytes (operator "
                f"{chain.ops[worst].name}), more than its {capacity:,.0f} bytes")
        self.usages = [Monomials(*probe.usage(i, True).relaxed_arrays(
            extents, self.variables, self.pinned)) for i in range(len(chain.ops))]
        self.low = np.array([self.lower[lp] for lp in self.variables], dtype=float)
        self.high = np.array([self.upper[lp] for lp in self.variables], dtype=float)

    def solve(self, order: tuple[str, ...], structures: int) -> LevelSolution:
        chain, extents = self.chain, self.extents
        movement = analyze(chain, order)
        volume = movement.volume(in_bytes=True)
        objective = Monomials(*volume.relaxed_arrays(extents, self.variables, self.pinned))
        relaxed = minimize(objective, self.usages, self.capacity, self.low, self.high)
        real = dict(zip(self.variables, relaxed.tiles.tolist()))
        used = volume.loops(SymbolKind.TILE) | volume.loops(SymbolKind.TRIPS)
        for lp in self.variables:
            if lp not in used:  # a tile that moves nothing only costs memory
                real[lp] = float(self.lower[lp])
        scorer = _Scorer(chain, self.parallel, self.bandwidth, self.capacity)
        tiles, moved, usage = _round(movement, real, self.constraints, self.pinned, scorer)
        relaxed_full = {lp: float(real[lp]) if lp in real else float(self.pinned[lp])
                        for lp in chain.loop_names}
        relaxed_volume = float(movement.evaluate(relaxed_full, relaxed=True).volume_bytes)
        blocks = makespan = None
        if self.parallel is not None:
            blocks = self.parallel.blocks(chain, tiles)
            makespan = scorer.cycles(moved, self.parallel.makespan_fraction(chain, tiles),
                                     self.parallel.padding(chain, tiles))
        return LevelSolution(self.level, self.capacity, movement.order, tiles, moved, usage,
                             relaxed_full, relaxed_volume, movement, self.bandwidth,
                             structures, blocks, makespan)


def _solve_level(chain: Chain, level: str, capacity: float, bandwidth: float | None,
                 constraints: Mapping[str, LoopConstraint], whole: set[str],
                 legal_only: bool, parallel: ParallelExecution | None) -> LevelSolution | str:
    """The best order and tiles for one level, or why nothing fits."""
    problem = _LevelProblem(chain, level, capacity, bandwidth, constraints, whole, parallel)
    if problem.infeasible:
        return problem.infeasible
    classes = dataflow_classes(chain, legal_only=legal_only)
    best: tuple[tuple[float, float, float, str], LevelSolution] | None = None
    for cls in classes:
        solution = problem.solve(cls.order, len(classes))
        key = (solution.makespan_cycles or 0.0, solution.volume_bytes, solution.usage_bytes,
               " ".join(cls.order))
        if best is None or key < best[0]:
            best = (key, solution)
    assert best is not None
    return best[1]


class _Scorer:
    """What the integer rounding minimises: the bytes moved, or — with a
    :class:`ParallelExecution` — the most loaded unit's cycles (ties: fewer bytes, less
    memory)."""

    def __init__(self, chain: Chain, parallel: ParallelExecution | None,
                 bandwidth: float | None, capacity: float) -> None:
        self.chain, self.parallel, self.capacity = chain, parallel, capacity
        self.bandwidth = bandwidth
        self.compute = 0.0 if parallel is None else parallel.compute_cycles(chain)

    def cycles(self, moved, fraction, padding=1.0):  # floats or arrays
        """One unit's cycles for the chain (its arithmetic ``padding`` times the chain's), times
        the most loaded unit's share."""
        movement = 0.0 if self.bandwidth is None else moved / self.bandwidth
        return (self.compute * padding + movement) * fraction

    def extra_candidates(self, loop: str, constraint: LoopConstraint, extent: int) -> list[int]:
        """Every trip count of a parallel loop (tiles rounded up to the constraint's multiple),
        so that splits balancing the units are reachable."""
        if self.parallel is None or loop not in self.parallel.loops:
            return []
        low = constraint.smallest(extent)
        result = set()
        for trips in range(1, min(extent, _MAX_TRIP_CANDIDATES) + 1):
            tile = constraint.multiple_of * math.ceil(math.ceil(extent / trips)
                                                      / constraint.multiple_of)
            tile = max(low, tile)
            result.add(min(extent if tile >= extent else tile, constraint.largest(extent)))
        return sorted(result)

    def grid(self, moved: np.ndarray, usage: np.ndarray,
             tiles: Mapping[str, np.ndarray]) -> np.ndarray:
        """Scores of many candidates (``inf`` where they do not fit)."""
        if self.parallel is None:
            score = moved
        else:
            fraction = self.parallel.makespan_fractions(self.chain, tiles, len(moved))
            padding = self.parallel.paddings(self.chain, tiles, len(moved))
            score = self.cycles(moved, fraction, padding)
        return np.where(usage <= self.capacity, score, np.inf)

    def one(self, moved: float, usage: float, tiles: Mapping[str, int]) -> tuple[float, ...]:
        if usage > self.capacity:
            return (math.inf, usage)
        if self.parallel is None:
            return (moved, usage)
        fraction = self.parallel.makespan_fraction(self.chain, tiles)
        padding = self.parallel.padding(self.chain, tiles)
        return (self.cycles(moved, fraction, padding), moved, usage)


#: a parallel loop offers tiles for up to this many trips
_MAX_TRIP_CANDIDATES = 64


def _round(movement: DataMovement, real: Mapping[str, float],
           constraints: Mapping[str, LoopConstraint], pinned: Mapping[str, int],
           scorer: _Scorer) -> tuple[dict[str, int], float, float]:
    """The feasible integer tiles near ``real`` with the best score."""
    chain = movement.chain
    extents = chain.extents
    options = {lp: constraints[lp].candidates(value, extents[lp]) for lp, value in real.items()}
    smallest = {lp: constraints[lp].smallest(extents[lp]) for lp in real}
    for lp in real:  # the all-smallest point is feasible: keep it reachable
        extra = scorer.extra_candidates(lp, constraints[lp], extents[lp])
        options[lp] = sorted({*options[lp], smallest[lp], *extra})
    names = list(options)
    count = math.prod(len(v) for v in options.values())
    if count <= _MAX_COMBINATIONS:
        grid = list(itertools.product(*(options[lp] for lp in names))) if names else [()]
        columns = np.array(grid, dtype=np.int64).reshape(len(grid), len(names))
        tiles = {lp: columns[:, i] for i, lp in enumerate(names)}
        tiles.update({lp: np.full(len(grid), t, dtype=np.int64) for lp, t in pinned.items()})
        values = movement.evaluate(tiles)
        moved = np.asarray(values.volume_bytes, dtype=float) * np.ones(len(grid))
        usage = np.asarray(values.usage_bytes, dtype=float) * np.ones(len(grid))
        score = scorer.grid(moved, usage, tiles)
        pick = int(np.lexsort((usage, moved, score))[0])
        if np.isfinite(score[pick]):
            chosen = {lp: int(columns[pick, i]) for i, lp in enumerate(names)}
            return _ordered(chain, chosen, pinned), float(moved[pick]), float(usage[pick])
    return _descend(movement, options, smallest, pinned, scorer)


def _descend(movement: DataMovement, options: Mapping[str, list[int]],
             smallest: Mapping[str, int], pinned: Mapping[str, int],
             scorer: _Scorer) -> tuple[dict[str, int], float, float]:
    """Coordinate descent over the candidates, from the smallest tiles."""
    chain = movement.chain
    current = dict(smallest)

    def score(tiles: Mapping[str, int]) -> tuple[tuple[float, ...], float, float]:
        full = {**tiles, **pinned}
        values = movement.evaluate(full)
        moved, usage = float(values.volume_bytes), float(values.usage_bytes)
        return scorer.one(moved, usage, full), moved, usage

    best = score(current)
    for _ in range(3):
        improved = False
        for lp, values in options.items():
            for value in values:
                trial = {**current, lp: value}
                trial_score = score(trial)
                if trial_score[0] < best[0]:
                    best, current, improved = trial_score, trial, True
        if not improved:
            break
    return _ordered(chain, current, pinned), best[1], best[2]


def _ordered(chain: Chain, chosen: Mapping[str, int], pinned: Mapping[str, int]) -> dict[str, int]:
    return {lp: int(chosen[lp]) if lp in chosen else int(pinned[lp]) for lp in chain.loop_names}
