"""Search-efficiency studies: cost tables (replayed costs), slices of a space, the replay and
its summary, and the Q-method's learned-versus-random ablation — all on synthetic costs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from tilecraft import te
from tilecraft.errors import TilecraftError
from tilecraft.search import (
    ChoiceSpace,
    QMethodSearch,
    SearchError,
    Space,
    SplitSpace,
    generate_space,
)
from tilecraft.search import cost_table as cost_table_module
from tilecraft.search.cost_table import CostTable, CostTableError, space_signature
from tilecraft.search.engines import PMethodSearch, RandomSearch
from tilecraft.search.slicing import full_point, slice_space
from tilecraft.search.study import format_trials, replay, summarize
from tilecraft.target.spec import load_spec


def matmul_space() -> Space:
    """The generated schedule space (about 10^7 points) of a 256x384x512 matmul on a toy
    target, as in test_search_engines.py."""
    spec = load_spec({
        "name": "toy", "api_version": 1, "version": "0",
        "memory": {"levels": [
            {"name": "DRAM", "size_bytes": None, "bandwidth_bytes_per_cycle": 8, "kind": "dram"},
            {"name": "register", "size_bytes": 2048, "bandwidth_bytes_per_cycle": 192,
             "kind": "registers"}]},
        "compute": {"cores": 2, "frequency_hz": 1e9, "vector_bits": 512},
        "primitives": ["split", "fuse", "reorder", "unroll", "vectorize", "parallel", "cache",
                       "compute_at"],
        "fixed_decisions": {"vector_lanes": 16},
        "loop_kinds": ["serial", "parallel", "vector", "unrolled"],
        "evaluation": "estimate", "capabilities": {"models_performance": True}})
    A = te.placeholder((256, 512), name="A")
    B = te.placeholder((512, 384), name="B")
    k = te.reduce_axis(512, name="k")
    C = te.compute((256, 384), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return generate_space(C, spec)


def toy_space() -> Space:
    return Space([("a", SplitSpace(24, 3)), ("b", ChoiceSpace(range(7))),
                  ("c", ChoiceSpace([False, True]))], name="toy")


def toy_cost(point: tuple[int, ...]) -> float:
    """Smooth in ``b`` and ``c``, hashed in ``a``; every point with a == 5 fails."""
    if point[0] == 5:
        return math.inf
    return 1e-3 * (1.0 + abs(point[1] - 4) + 0.5 * point[2] + 0.05 * ((point[0] * 7) % 11))


def toy_table() -> CostTable:
    return CostTable.from_function("toy", toy_space(), toy_cost)


# cost tables -----------------------------------------------------------------------------------


def test_table_values_and_round_trip(tmp_path: Path) -> None:
    table = toy_table()
    space = table.space
    assert table.complete and len(table) == space.size == 30 * 7 * 2
    assert table.failures == 14  # a == 5, every b and c
    assert table.optimum == pytest.approx(1e-3) and toy_cost(table.best_point) == table.optimum
    assert table.fraction_of_optimum(2e-3) == pytest.approx(0.5)
    assert table.fraction_of_optimum(math.inf) == 0.0
    assert table.threshold(0.5) == pytest.approx(2e-3)
    assert table.rank(table.optimum) == 0
    path = table.save(tmp_path / "sub" / "toy.json")
    loaded = CostTable.load(path, toy_space())
    assert loaded.costs == table.costs and loaded.best_point == table.best_point
    assert loaded.machine == table.machine
    cost = loaded.cost_function()
    assert cost([(0, 4, 0), (5, 0, 0)]) == [toy_cost((0, 4, 0)), math.inf]
    stored = json.loads(path.read_text())
    assert stored["costs"].count(None) == 14  # failures are stored as null


def test_loader_refuses_another_machine(tmp_path: Path, monkeypatch) -> None:
    path = toy_table().save(tmp_path / "toy.json")
    here = cost_table_module.machine_fingerprint()
    monkeypatch.setattr(cost_table_module, "machine_fingerprint",
                        lambda: {**here, "cpu_model": "Other CPU", "key": "0123456789abcdef"})
    with pytest.raises(CostTableError, match="measured on another machine .*Other CPU.*"
                                             "any_machine=True"):
        CostTable.load(path, toy_space())
    assert len(CostTable.load(path, toy_space(), any_machine=True)) == 420


@pytest.mark.parametrize("content, message", [
    ("{not json", "not readable JSON"),
    ('{"format": "something-else"}', "is not a tilecraft-cost-table file"),
    ('{"format": "tilecraft-cost-table", "version": 99}', "format version 99"),
    ('{"format": "tilecraft-cost-table", "version": 1, "name": "x"}', "is corrupt"),
])
def test_loader_refuses_corrupt_files(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(CostTableError, match=message) as info:
        CostTable.load(path, toy_space())
    assert isinstance(info.value, TilecraftError) and str(path) in str(info.value)


def test_loader_refuses_truncated_and_mismatched_tables(tmp_path: Path) -> None:
    path = toy_table().save(tmp_path / "toy.json")
    data = json.loads(path.read_text())
    data["costs"] = data["costs"][:-1]
    path.write_text(json.dumps(data))
    with pytest.raises(CostTableError, match="corrupt .*420 points but 419 costs"):
        CostTable.load(path, toy_space())
    data = json.loads(toy_table().save(tmp_path / "toy.json").read_text())
    data["costs"][0] = -1.0
    path.write_text(json.dumps(data))
    with pytest.raises(CostTableError, match="corrupt.*costs are seconds >= 0"):
        CostTable.load(path, toy_space())
    with pytest.raises(CostTableError, match="does not exist; rebuild it"):
        CostTable.load(tmp_path / "missing.json", toy_space())


def test_loader_refuses_a_table_of_another_space(tmp_path: Path) -> None:
    path = toy_table().save(tmp_path / "toy.json")
    other = Space([("a", SplitSpace(24, 3)), ("b", ChoiceSpace(range(8))),
                   ("c", ChoiceSpace([False, True]))], name="toy")
    assert space_signature(other) != space_signature(toy_space())
    with pytest.raises(CostTableError, match="measured on another space"):
        CostTable.load(path, other)


def test_table_checks_its_costs_and_lookups() -> None:
    space = toy_space()
    with pytest.raises(CostTableError, match="has cost nan"):
        CostTable("bad", space, {(0, 0, 0): math.nan})
    with pytest.raises(CostTableError, match="no costs"):
        CostTable("empty", space, {})
    with pytest.raises(SearchError, match="has index 9 for sub-space b"):
        CostTable("bad", space, {(0, 9, 0): 1.0})
    partial = CostTable("partial", space, {(0, 0, 0): 1.0})
    with pytest.raises(CostTableError, match="no cost for point \\(1, 0, 0\\)"):
        partial.cost_function()([(1, 0, 0)])
    with pytest.raises(SearchError, match="covers 1 of 420 points"):
        replay(RandomSearch(), partial, 10, range(2))
    with pytest.raises(CostTableError, match="fraction=0"):
        partial.threshold(0)


# slices ---------------------------------------------------------------------------------------


def test_a_slice_keeps_neighbours_and_decodes_like_the_full_space() -> None:
    full = Space([("a", SplitSpace(12, 2)), ("b", ChoiceSpace(range(5))),
                  ("c", SplitSpace(8, 2)), ("d", ChoiceSpace("xy"))], name="full")
    anchor = (1, 3, 2, 1)
    part = slice_space(full, ["c", "a"], anchor)
    assert part.names == ("a", "c") and part.size == 6 * 4
    assert part.fixed == {"b": 3, "d": "y"}
    for point in part.points():
        whole = full_point(full, part, point, anchor)
        assert part.decode(point) == full.decode(whole)
        moves = {full_point(full, part, end, anchor) for _, end in part.neighbours(point)}
        expected = {end for d, end in full.neighbours(whole)
                    if full.directions[d].subspace in ("a", "c")}
        assert moves == expected
    with pytest.raises(SearchError, match="free sub-spaces \\['e'\\]"):
        slice_space(full, ["e"], anchor)
    with pytest.raises(SearchError, match="free sub-spaces \\[\\]"):
        slice_space(full, [], anchor)
    with pytest.raises(SearchError, match="is not a point"):
        slice_space(full, ["a"], (0, 0))


# the replay study -------------------------------------------------------------------------------


def test_replay_is_deterministic_and_summarized() -> None:
    table = toy_table()
    first = replay(QMethodSearch(), table, 60, range(4))
    second = replay(QMethodSearch(), table, 60, range(4))
    assert [r.history for r in first] == [r.history for r in second]
    summary = summarize("q", first, table, fractions=(1.0, 0.5), budgets=(10, 60))
    assert summary.seeds == 4 and summary.budget == 60
    expected = [r.trials_to_reach(table.optimum) for r in first]
    reached, median = summary.reached[1.0]
    assert reached == sum(e is not None for e in expected)
    if reached == 4:
        assert median == np.median(expected)
    for limit in (10, 60):
        fractions = [table.fraction_of_optimum(r.best_so_far()[limit - 1]) for r in first]
        assert summary.quality[limit] == pytest.approx(np.median(fractions))
    assert summary.quality[60] >= summary.quality[10]


def test_summary_counts_seeds_that_never_get_there() -> None:
    table = toy_table()
    runs = replay(RandomSearch(), table, 3, range(5))  # 3 of 420 points: rarely optimal
    summary = summarize("random", runs, table, fractions=(1.0,), budgets=(3,))
    reached, median = summary.reached[1.0]
    assert reached <= 2 and math.isinf(median)
    assert format_trials(reached, 5, median, 3) == f">3 ({reached}/5)"
    with pytest.raises(SearchError, match="no runs"):
        summarize("none", [], table)


def test_every_engine_exhausts_the_table_and_finds_the_optimum() -> None:
    table = toy_table()
    for engine in (QMethodSearch(), QMethodSearch(learned=False), QMethodSearch(q_input="point"),
                   PMethodSearch(), RandomSearch()):
        [run] = replay(engine, table, 10_000, [3])
        assert run.trials == len(table) and run.best_cost == table.optimum


# the Q-method's options ---------------------------------------------------------------------------


def test_the_ablation_chooses_at_random_and_the_network_is_asked() -> None:
    table = toy_table()
    choices: list[bool] = []

    def record(point, options, chosen, by_network) -> None:
        assert chosen in options and point not in {end for _, end in options}
        choices.append(by_network)

    replay(QMethodSearch(on_choice=record), table, 80, [0])
    assert any(choices) and not all(choices)  # epsilon-greedy: both kinds of choice
    choices.clear()
    replay(QMethodSearch(learned=False, on_choice=record), table, 80, [0])
    assert choices and not any(choices)
    with pytest.raises(SearchError, match="q_input='pairs'; use 'move'"):
        QMethodSearch(q_input="pairs")


@pytest.mark.parametrize("options", [{}, {"q_input": "point"}, {"q_input": "value"},
                                     {"hindsight": False},
                                     {"discount": 0.5}, {"discount": 0.5, "q_input": "point"}])
def test_q_variants_are_deterministic_and_find_the_optimum(options: dict) -> None:
    table = toy_table()
    runs = [replay(QMethodSearch(**options), table, 150, [s])[0] for s in (1, 1, 2)]
    assert runs[0].history == runs[1].history != runs[2].history
    assert all(table.fraction_of_optimum(r.best_cost) > 0.9 for r in runs)


def test_the_ablation_is_a_paired_comparison() -> None:
    """The walk draws from its own random stream: with every choice left to chance
    (epsilon 1) the learned engine makes exactly the ablation's moves, so the two differ only
    where the network chooses."""
    table = toy_table()
    always_random = QMethodSearch(epsilon=1.0, epsilon_min=1.0)
    for seed in (0, 5):
        [learned] = replay(always_random, table, 120, [seed])
        [ablation] = replay(QMethodSearch(learned=False), table, 120, [seed])
        assert learned.history == ablation.history
    [networked] = replay(QMethodSearch(), table, 120, [0])
    [ablation] = replay(QMethodSearch(learned=False), table, 120, [0])
    assert networked.history[:8] == ablation.history[:8]  # the same random initial points
    assert networked.history != ablation.history
