"""The joint mapping x schedule search of thesis §5.6: enumerate the verified mappings, give
every mapping the same schedule dimensions, and let a search engine walk the product with the
hierarchical performance model (:mod:`tilecraft.intrin.perfmodel`) as its cost — or a
measurement, through a callback, where a target can run the mapped kernel.

The space (:class:`JointSpace`, built from :mod:`tilecraft.search`'s typed sub-spaces):

- ``mapping``: which verified mapping, ordered by the model's cost under each mapping's
  default schedule (so a ``+1`` / ``-1`` move goes to a mapping of similar cost);
- ``tile_<loop>``: for every loop of the nest around the intrinsic (the intrinsic's loops over
  their tiles, ``outer_spatial``, ``outer_reduce``) a split of the next power of two above its
  largest extent into one factor per level (a :class:`~tilecraft.search.SplitSpace`, whose
  moves shift a factor of two from one level to another); applied to a mapping, each level's
  factor is clamped to what is left of the loop and the top level takes the rest;
- ``order``: the loop order (used at every level; loops that are 1 for every mapping are left
  out).

Infeasible points (tiles that overflow a memory) cost ``math.inf``. The search starts from
nothing the model knows, so :func:`explore` also costs the best-ranked mapping under its
default schedule (:func:`~tilecraft.intrin.perfmodel.default_schedule`) and keeps it when the
search finds nothing better. With a seed the search is deterministic.

>>> from tilecraft import te, ops
>>> from tilecraft.intrin.examples import wmma
>>> from tilecraft.intrin.perfmodel import gpu_spec_example
>>> A = te.placeholder((64, 48), "float16", name="A")
>>> B = te.placeholder((48, 96), "float16", name="B")
>>> C = ops.matmul(A, B, out_dtype="float32", name="C")
>>> result = explore(C, wmma(16, 16, 16), gpu_spec_example(), budget_trials=60, seed=0)
>>> result.best.cost.feasible, result.search.trials
(True, 60)
>>> result.best.seconds <= result.space.default().seconds
True
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tilecraft.errors import InputError
from tilecraft.intrin.mapping import MappingError, Reason, ReasonKind
from tilecraft.intrin.perfmodel import (
    CostBreakdown,
    RankedMapping,
    ScheduleParams,
    TileSchedule,
    default_order,
    estimate,
    model_hierarchy,
    rank_mappings,
)
from tilecraft.search import (
    ChoiceSpace,
    ReorderSpace,
    SearchResult,
    Space,
    SplitSpace,
    get_engine,
)
from tilecraft.search.space import Point
from tilecraft.target.intrinsic import IntrinsicDecl
from tilecraft.target.spec import TargetSpec
from tilecraft.te.tensor import Tensor

#: most loops whose every order the ``order`` sub-space lists (5! = 120); with more loops it
#: lists the default order and its rotations
MAX_ORDERED_LOOPS = 5


@dataclass(frozen=True)
class JointCandidate:
    """One point of the joint space: the mapping, the schedule it decodes to, the model's
    cost, and the measured time when a ``measure`` callback gave one."""

    point: Point
    ranked: RankedMapping
    schedule: TileSchedule
    cost: CostBreakdown
    measured_seconds: float | None = None

    @property
    def seconds(self) -> float:
        """The model's prediction (``math.inf`` when infeasible)."""
        return self.cost.seconds if self.cost.feasible else math.inf

    def __str__(self) -> str:
        return f"{self.ranked.mapping} with {self.schedule}: {self.seconds:.4g} s predicted"


#: measures one candidate (seconds; ``math.inf`` for a failure)
MeasureFunction = Callable[[JointCandidate], float]


def _power_of_two(limit: int) -> int:
    value = 1
    while value < limit:
        value *= 2
    return value


class JointSpace:
    """The joint mapping x schedule space of ``compute`` on ``intrinsic`` for ``spec`` (see
    the module docstring); ``ranked`` are the mappings to search (by default every verified
    mapping ``match`` finds, ranked by the model)."""

    def __init__(self, compute: Tensor, intrinsic: IntrinsicDecl, spec: TargetSpec,
                 ranked: Sequence[RankedMapping] | None = None):
        if ranked is None:
            ranked = rank_mappings(compute, intrinsic, spec)
        ranked = [entry for entry in ranked if entry.verified]
        if not ranked:
            from tilecraft.intrin.matching import match

            reasons = match(compute, intrinsic).reasons
            raise MappingError(f"{compute.name} has no verified mapping onto {intrinsic.name}, "
                               "so there is nothing to explore; pick another intrinsic",
                               reasons or (Reason(ReasonKind.EMPTY_MAPPING,
                                                  "no mapping was given"),))
        ranked.sort(key=lambda entry: (not entry.usable, entry.seconds))
        self.compute, self.intrinsic, self.spec = compute, intrinsic, spec
        self.ranked: tuple[RankedMapping, ...] = tuple(ranked)
        self.hierarchy = model_hierarchy(spec, intrinsic)
        names = ranked[0].nest.names
        depth = self.hierarchy.depth
        subspaces: list[tuple[str, Any]] = [("mapping", ChoiceSpace(range(len(ranked))))]
        for name in names:
            largest = max(entry.nest.dim(name).extent for entry in ranked)
            subspaces.append((f"tile_{name}", SplitSpace(_power_of_two(largest), depth)))
        moving = [name for name in default_order(ranked[0].nest)
                  if max(entry.nest.dim(name).extent for entry in ranked) > 1]
        self.fixed_order = [name for name in default_order(ranked[0].nest) if name not in moving]
        if not moving:
            orders = ReorderSpace(["-"])  # one loop-free order: a single-choice sub-space
        elif len(moving) <= MAX_ORDERED_LOOPS:
            orders = ReorderSpace(moving)
        else:
            rotations = [tuple(moving[k:] + moving[:k]) for k in range(len(moving))]
            orders = ReorderSpace(moving, permutations=rotations)
        subspaces.append(("order", orders))
        self.space = Space(subspaces, decoder=self._decode,
                           name=f"{compute.name}@{intrinsic.name}",
                           notes=(f"{len(ranked)} verified mapping(s), {depth} model levels",))

    def _decode(self, values: dict[str, Any]) -> tuple[int, ScheduleParams]:
        depth = self.hierarchy.depth
        tiles = {name: tuple(values[f"tile_{name}"][depth - 1 - level]
                             for level in range(depth - 1))
                 for name in self.ranked[0].nest.names}
        order = [*self.fixed_order, *(n for n in values["order"] if n != "-")]
        return values["mapping"], ScheduleParams.of(tiles, order)

    def candidate(self, point: Point) -> JointCandidate:
        """The mapping and schedule ``point`` stands for, with the model's cost."""
        index, params = self.space.decode(point)
        entry = self.ranked[index]
        schedule = params.apply(entry.nest, self.hierarchy.depth)
        return JointCandidate(tuple(point), entry, schedule,
                              estimate(entry.nest, self.hierarchy, schedule))

    def default(self) -> JointCandidate:
        """The best-ranked mapping under its default schedule (often not a point of the
        space: its factors need not be powers of two); ``point`` is ``()``."""
        entry = self.ranked[0]
        return JointCandidate((), entry, entry.cost.schedule, entry.cost)

    def cost(self, points: list[Point]) -> list[float]:
        """The model's seconds for each point (``math.inf`` when infeasible): a batch cost
        function for :mod:`tilecraft.search` engines."""
        return [self.candidate(point).seconds for point in points]


@dataclass(frozen=True)
class ExploreResult:
    """The best candidate found, the search's record, and the space."""

    best: JointCandidate
    search: SearchResult
    space: JointSpace
    measured: tuple[tuple[Point, float], ...] = ()

    def describe(self) -> str:
        lines = [f"explored {self.search.trials} of {self.space.space.size} points of "
                 f"{self.space.space.name} with {self.search.engine} "
                 f"(stopped by {self.search.stopped_by})", f"best: {self.best}"]
        if self.best.measured_seconds is not None:
            lines.append(f"measured: {self.best.measured_seconds:.4g} s")
        lines.append(self.best.cost.describe())
        return "\n".join(lines)


def explore(compute: Tensor, intrinsic: IntrinsicDecl, spec: TargetSpec, *,
            engine: str = "q", budget_trials: int = 200, seed: int = 0,
            measure: MeasureFunction | None = None,
            engine_options: dict[str, Any] | None = None,
            ranked: Sequence[RankedMapping] | None = None) -> ExploreResult:
    """Search the joint mapping x schedule space of ``compute`` on ``intrinsic`` with the
    search engine ``engine`` (``"q"``, ``"p"``, ``"random"``) for ``budget_trials`` points.
    The cost is the model's prediction; with ``measure`` it is ``measure(candidate)`` for
    every candidate the model finds feasible (the model still prunes the infeasible ones)."""
    if isinstance(budget_trials, bool) or not isinstance(budget_trials, int) \
            or budget_trials < 1:
        raise InputError(f"explore: budget_trials={budget_trials!r} must be an int >= 1")
    space = JointSpace(compute, intrinsic, spec, ranked)
    measured: dict[Point, float] = {}

    def cost(points: list[Point]) -> list[float]:
        costs = []
        for point in points:
            candidate = space.candidate(point)
            if measure is None or not candidate.cost.feasible:
                costs.append(candidate.seconds)
                continue
            measured[tuple(point)] = float(measure(candidate))
            costs.append(measured[tuple(point)])
        return costs

    search = get_engine(engine, **(engine_options or {})).search(
        space.space, cost, budget_trials=budget_trials, seed=seed)
    default = space.default()
    if measure is not None and default.cost.feasible:
        default = JointCandidate((), default.ranked, default.schedule, default.cost,
                                 float(measure(default)))
    candidates = []
    if search.best_point is not None:
        best = space.candidate(search.best_point)
        candidates.append(JointCandidate(best.point, best.ranked, best.schedule, best.cost,
                                         measured.get(search.best_point)))
    if default.cost.feasible:
        candidates.append(default)
    if not candidates:
        raise MappingError(f"every one of the {search.trials} candidates of {compute.name} on "
                           f"{intrinsic.name} was infeasible or failed to measure; raise "
                           "budget_trials or check the target's memory sizes",
                           (Reason(ReasonKind.UNSUPPORTED, "no feasible candidate found"),))

    def score(candidate: JointCandidate) -> float:
        return candidate.seconds if measure is None else (
            math.inf if candidate.measured_seconds is None else candidate.measured_seconds)

    best = min(candidates, key=score)  # the search's best wins ties
    return ExploreResult(best, search, space, tuple(measured.items()))
