"""TileFlow's search: the genetic and MCTS engines on the core's interface, and the search over
a chain's structures and tiles warm-started from Chimera."""

from __future__ import annotations

import itertools
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from dataflow_helpers import toy_spec  # noqa: E402

from tilecraft.dataflow import DataflowError, ScopeKind  # noqa: E402
from tilecraft.dataflow.chain_space import ChainSpace, Structure  # noqa: E402
from tilecraft.dataflow.search import (  # noqa: E402
    latency,
    proportional_budget,
    search_dataflow,
    search_tiles,
)
from tilecraft.fusion import gemm_chain  # noqa: E402
from tilecraft.search import ChoiceSpace, Space  # noqa: E402
from tilecraft.search.engines import get_engine  # noqa: E402
from tilecraft.search.errors import SearchError  # noqa: E402


def _bowl(points):
    return [1.0 + (x - 6) ** 2 + (y - 1) ** 2 + (z - 3) ** 2 for x, y, z in points]


SPACE = Space([(n, ChoiceSpace(range(9))) for n in "xyz"])


@pytest.mark.parametrize("name", ["genetic", "mcts"])
def test_engines_are_seeded_budgeted_and_never_repeat(name):
    first = get_engine(name).search(SPACE, _bowl, budget_trials=150, seed=3)
    again = get_engine(name).search(SPACE, _bowl, budget_trials=150, seed=3)
    assert [t.point for t in first.history] == [t.point for t in again.history]
    assert first.trials == 150 and len({t.point for t in first.history}) == 150
    assert first.best_cost <= 3.0  # within two unit steps of the optimum (1.0) in 729 points
    warm = get_engine(name, initial_points=[(6, 1, 3)]).search(SPACE, _bowl, 5, seed=0)
    assert warm.history[0].point == (6, 1, 3) and warm.best_cost == 1.0


def test_engines_exhaust_a_small_space_and_refuse_bad_options():
    small = Space([("a", ChoiceSpace(range(3))), ("b", ChoiceSpace(range(2)))])
    for name in ("genetic", "mcts"):
        result = get_engine(name).search(small, lambda ps: [float(sum(p)) for p in ps], 50, 0)
        assert result.trials == 6 and result.best_cost == 0.0
    with pytest.raises(SearchError, match="elite"):
        get_engine("genetic", population=4, elite=5)
    with pytest.raises(SearchError, match="exploration"):
        get_engine("mcts", exploration=-1)


def _slow_dram_spec():
    spec = toy_spec(l1_bytes=16 * 1024, pes=16, cores=2)
    levels = list(spec.memory.levels)
    levels[0] = levels[0].model_copy(update={"bandwidth_bytes_per_cycle": 1.0})
    return spec.model_copy(update={"memory": spec.memory.model_copy(update={"levels": levels})})


def test_tile_search_reaches_the_exhaustive_best_of_a_small_space():
    chain = gemm_chain(16, 8, 8, 16)
    space = ChainSpace(chain, _slow_dram_spec(), orders=["mlkn"], scopes=[ScopeKind.SEQ],
                       levels=["L1"])
    structure = Structure(("m", "l", "k", "n"), ScopeKind.SEQ, "L1")
    exhaustive = min(latency(space.cost(space.tree(structure, space.tiles(p))))
                     for p in itertools.product(*(range(len(v)) for v in space.choices.values())))
    size = math.prod(len(v) for v in space.choices.values())
    best, tiles = search_tiles(space, structure, budget=size, seed=0)
    assert best == exhaustive
    partial, _ = search_tiles(space, structure, budget=size // 4, seed=0)
    assert partial <= 1.5 * exhaustive


def test_dataflow_search_improves_on_chimera_and_layerwise():
    chain = gemm_chain(64, 16, 16, 64)
    spec = _slow_dram_spec()
    space = ChainSpace(chain, spec)
    result = search_dataflow(space, structures=10, tiles_per_structure=30, seed=1)
    assert result.best_cost is not None and result.best_cost.feasible
    assert result.best_seconds <= result.start_seconds < math.inf
    assert result.curve == sorted(result.curve, reverse=True)  # best so far never worsens
    again = search_dataflow(space, structures=10, tiles_per_structure=30, seed=1)
    assert again.best_seconds == result.best_seconds and again.curve == result.curve
    layerwise = ChainSpace(chain, spec, levels=[None], scopes=[ScopeKind.SEQ])
    alone = search_dataflow(layerwise, structures=4, tiles_per_structure=30, seed=1,
                            warm_start=False)
    assert result.best_seconds < alone.best_seconds
    fused = result.best_cost.movement.per_tensor("L1").get("C", 0)
    assert fused == 0 and alone.best_cost.movement.per_tensor("L1")["C"] > 0


def test_a_space_warm_started_from_one_it_contains_never_ends_worse():
    chain = gemm_chain(256, 24, 40, 20)  # whole tiles overflow L1; 40, 20: no powers of two
    spec = _slow_dram_spec()
    structure = Structure(("m", "l", "k", "n"), ScopeKind.SEQ, "L1")
    narrow = ChainSpace(chain, spec, orders=["mlkn"], scopes=[ScopeKind.SEQ], levels=["L1"],
                        tiled=["m"])
    wide = ChainSpace(chain, spec, orders=["mlkn"], scopes=[ScopeKind.SEQ], levels=["L1"])
    small, tiles = search_tiles(narrow, structure, budget=100, seed=0)
    assert tiles["m"] < 256 and small < math.inf  # narrow's best tiles m
    # one more point than the warm start and whole tiles: the wide space's best is no worse
    best, _ = search_tiles(wide, structure, budget=3, seed=0, warm=[tiles])
    cold, _ = search_tiles(wide, structure, budget=3, seed=0)
    assert best <= small < cold
    # TileFlow's space holds the layer-wise structure: warm-started with it, never above it
    layerwise = ChainSpace(chain, spec, levels=[None], scopes=[ScopeKind.SEQ])
    lw_structure = layerwise.structure((0, 0, 0))
    lw_best, lw_tiles = search_tiles(layerwise, lw_structure, budget=60, seed=0)
    found = search_dataflow(ChainSpace(chain, spec), structures=2, tiles_per_structure=2,
                            seed=0, warm=[(lw_structure, lw_tiles)])
    assert found.best_seconds <= min(lw_best, found.start_seconds)
    with pytest.raises(DataflowError, match="loop n is pinned to 24"):
        narrow.exact_tile_point({"m": 8, "n": 8, "k": 40, "l": 20})
    with pytest.raises(DataflowError, match="tile 3 is none of"):
        wide.exact_tile_point({"m": 3})


def test_budget_follows_the_space_size():
    assert proportional_budget(49) == 49  # small spaces: all of them
    assert proportional_budget(1960) == 490  # a quarter
    assert proportional_budget(8 ** 10) == 600  # capped
    assert proportional_budget(100, fraction=0.1, floor=20) == 20
    with pytest.raises(DataflowError, match="fraction"):
        proportional_budget(10, fraction=0)


def test_descent_ends_at_a_local_optimum_no_worse_than_the_rounds():
    chain = gemm_chain(256, 24, 40, 20)
    space = ChainSpace(chain, _slow_dram_spec(), orders=["mlkn"], scopes=[ScopeKind.SEQ],
                       levels=["L1"])
    structure = Structure(("m", "l", "k", "n"), ScopeKind.SEQ, "L1")
    plain, _ = search_tiles(space, structure, budget=4, seed=3)
    rounds, _ = search_tiles(space, structure, budget=4, seed=3, rounds=3)
    best, tiles = search_tiles(space, structure, budget=4, seed=3, rounds=3, refine=True)
    assert best <= rounds <= plain
    point = space.exact_tile_point(tiles)
    for i, values in enumerate(space.choices.values()):  # no single-loop move gains
        for step in (-1, 1):
            if 0 <= point[i] + step < len(values):
                moved = (*point[:i], point[i] + step, *point[i + 1:])
                assert latency(space.cost(space.tree(structure, space.tiles(moved)))) >= best


def test_the_pe_array_maps_one_cores_slice():
    # 4 cores split m = 64 into slices of 16: a tile of all 64 rows still gives each core 16,
    # so the PE rows map 16 rows either way (not 64 rows of which a core runs a quarter)
    from tilecraft.dataflow.chain_space import _example_spec

    space = ChainSpace(gemm_chain(64, 64, 32, 32), _example_spec(), levels=[None],
                       scopes=[ScopeKind.SEQ])
    structure = Structure(("m", "l", "k", "n"), ScopeKind.SEQ, None)
    whole = space.cost(space.tree(structure, {"m": 64, "n": 64, "l": 32, "k": 32}))
    slice_ = space.cost(space.tree(structure, {"m": 16, "n": 64, "l": 32, "k": 32}))
    assert whole.utilization == slice_.utilization == 1.0
    assert whole.cycles == slice_.cycles
