"""The joint mapping x schedule search (thesis §5.6)."""

from __future__ import annotations

import math

import pytest

from tilecraft import ops, te
from tilecraft.errors import InputError
from tilecraft.intrin.examples import wmma
from tilecraft.intrin.explore import JointSpace, explore
from tilecraft.intrin.mapping import MappingError
from tilecraft.intrin.perfmodel import gpu_spec_example, rank_mappings
from tilecraft.search import SplitSpace
from tilecraft.search.errors import SearchError


def gemm(m: int, k: int, n: int):
    A = te.placeholder((m, k), "float16", name="A")
    B = te.placeholder((k, n), "float16", name="B")
    return ops.matmul(A, B, out_dtype="float32", name="C")


def conv2d():
    x = te.placeholder((1, 4, 6, 6), "float16", name="x")
    w = te.placeholder((8, 4, 3, 3), "float16", name="w")
    return ops.conv2d(x, w, out_dtype="float32", name="y")


def brute_force(space: JointSpace) -> float:
    return min(space.cost(list(space.space.points())))


def test_space_has_a_mapping_dimension_and_split_dimensions_per_loop() -> None:
    space = JointSpace(conv2d(), wmma(16, 16, 16), gpu_spec_example())
    names = space.space.names
    assert names[0] == "mapping" and names[-1] == "order"
    assert space.space.sizes["mapping"] == 35
    assert set(names[1:-1]) == {"tile_i1", "tile_i2", "tile_r1", "tile_outer_spatial",
                                "tile_outer_reduce"}
    split = space.space.subspaces["tile_outer_spatial"]
    # the largest outer spatial extent is 16 (h x w of the mapping i1 <- n): split 16 in 3
    assert isinstance(split, SplitSpace) and (split.extent, split.parts) == (16, 3)
    # mappings are ordered by the model, best first
    seconds = [entry.seconds for entry in space.ranked]
    assert seconds == sorted(seconds)
    # a point decodes to a mapping and a schedule of its nest; the top takes the rest
    point = space.space.encode({"mapping": 0, "tile_i1": (1, 1, 1), "tile_i2": (1, 1, 1),
                                "tile_r1": (4, 1, 1), "tile_outer_spatial": (16, 1, 1),
                                "tile_outer_reduce": (16, 1, 1),
                                "order": space.space.subspaces["order"].value(0)})
    candidate = space.candidate(point)
    assert candidate.ranked is space.ranked[0]
    for dim in candidate.ranked.nest.dims:
        assert math.prod(candidate.schedule.of(dim.name)) >= dim.extent
    assert candidate.schedule.of("i1")[-1] == candidate.ranked.nest.dim("i1").extent


def test_explore_finds_the_model_optimum_of_a_small_space() -> None:
    compute, mma, spec = gemm(64, 32, 48), wmma(16, 16, 16), gpu_spec_example()
    space = JointSpace(compute, mma, spec)
    # i1: 4 tiles, i2: 3 (split as 4), r1: 2; three levels; 6 orders
    assert space.space.size == 6 * 6 * 3 * 6
    best = brute_force(space)
    result = explore(compute, mma, spec, engine="q", budget_trials=150, seed=0)
    assert result.search.trials == 150
    assert result.best.seconds == best
    assert result.best.seconds <= space.default().seconds
    assert result.best.cost.feasible and result.best.point != ()


@pytest.mark.parametrize("engine", ["q", "p", "random"])
def test_explore_is_deterministic_with_a_seed(engine: str) -> None:
    compute, mma, spec = conv2d(), wmma(16, 16, 16), gpu_spec_example()
    ranked = rank_mappings(compute, mma, spec)
    first, second = (explore(compute, mma, spec, engine=engine, budget_trials=40, seed=3,
                             ranked=ranked) for _ in range(2))
    assert [t.point for t in first.search.history] == [t.point for t in second.search.history]
    assert first.best.point == second.best.point and first.best.seconds == second.best.seconds
    other = explore(compute, mma, spec, engine=engine, budget_trials=40, seed=4, ranked=ranked)
    assert [t.point for t in other.search.history] != [t.point for t in first.search.history]


def test_explore_beats_or_keeps_the_default_schedule() -> None:
    compute, mma, spec = conv2d(), wmma(16, 16, 16), gpu_spec_example()
    result = explore(compute, mma, spec, budget_trials=80, seed=0)
    assert result.best.seconds <= result.space.default().seconds
    # the search explored several mappings, not just the first
    mappings = {t.point[0] for t in result.search.history}
    assert len(mappings) > 3
    assert "explored 80 of" in result.describe()


def test_explore_measures_through_the_callback() -> None:
    compute, mma, spec = gemm(64, 32, 48), wmma(16, 16, 16), gpu_spec_example()
    seen = []

    def measure(candidate) -> float:
        seen.append(candidate.point)
        # a "device" that prefers the opposite of the model: most calls per register tile
        return 1.0 / math.prod(candidate.schedule.of(n)[0] for n in ("i1", "i2", "r1"))

    result = explore(compute, mma, spec, engine="random", budget_trials=60, seed=1,
                     measure=measure)
    assert result.best.measured_seconds is not None
    assert result.best.measured_seconds == min(t.cost for t in result.search.history)
    assert len(seen) == len(result.measured) + 1  # every feasible trial, and the default
    assert result.best.measured_seconds < 1.0


def test_explore_errors() -> None:
    compute, mma, spec = gemm(32, 32, 32), wmma(16, 16, 16), gpu_spec_example()
    with pytest.raises(InputError, match="budget_trials=0 must be an int >= 1"):
        explore(compute, mma, spec, budget_trials=0)
    with pytest.raises(SearchError, match="unknown search engine 'annealing'"):
        explore(compute, mma, spec, engine="annealing", budget_trials=5)
    relu = ops.relu(te.placeholder((4, 4), name="X"), name="R")
    with pytest.raises(MappingError, match="R has no verified mapping onto wmma_16x16x16"):
        JointSpace(relu, mma, spec)
    ints = ops.matmul(te.placeholder((4, 4), "int8", name="P"),
                      te.placeholder((4, 4), "int8", name="Q"), out_dtype="int32", name="S")
    with pytest.raises(MappingError, match="P is int8 but operand Src1"):
        JointSpace(ints, mma, spec)
