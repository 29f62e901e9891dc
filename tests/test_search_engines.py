"""Search engines (thesis §4.4.1): Q-method, P-method, random — on synthetic costs with a
known optimum; budgets, determinism, failed candidates, no repeated evaluation."""

from __future__ import annotations

import math
import time
import zlib
from collections.abc import Callable

import numpy as np
import pytest

from tilecraft import te
from tilecraft.search import (
    DEFAULT_SEARCH_ENGINES,
    ENGINES,
    ChoiceSpace,
    PMethodSearch,
    QMethodSearch,
    RandomSearch,
    SearchError,
    Space,
    SplitSpace,
    generate_space,
    get_engine,
)
from tilecraft.search.engines import (
    AdaDelta,
    QNetwork,
    TrialLog,
    performance,
    probability,
    reward,
    select_starts,
)
from tilecraft.search.space import Point
from tilecraft.target.spec import load_spec

ENGINE_NAMES = ["q", "p", "random"]


def toy_spec():
    return load_spec({
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


def matmul_space() -> Space:
    """A generated schedule space of about 10^7 points."""
    A = te.placeholder((256, 512), name="A")
    B = te.placeholder((512, 384), name="B")
    k = te.reduce_axis(512, name="k")
    C = te.compute((256, 384), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return generate_space(C, toy_spec())


SPACE = matmul_space()
TARGET = {"i": [4, 4, 2, 8], "j": [2, 3, 4, 16], "k": [8, 16, 4]}


def separable_cost(point: Point) -> float:
    """A separable quadratic over the decoded split factors (in log2) plus penalties on the
    other decisions; its least value, 1 ms, is at TARGET, reorder i before j, 2 fused loops,
    unroll 16 and a register cache write."""
    config = SPACE.decode(point)
    value = 1.0
    for axis, want in TARGET.items():
        value += sum((math.log2(g) - math.log2(w)) ** 2
                     for g, w in zip(config["split"][axis], want))
    value += 0.5 * (config["reorder"].index("i.1") > config["reorder"].index("j.1"))
    value += 0.3 * abs(config["fuse_parallel"] - 2) + 0.25 * (config["unroll"] != 16)
    value += 0.5 * (config["cache_write"] is None)
    return value * 1e-3


OPTIMUM = 1e-3


def batch(fn: Callable[[Point], float]) -> Callable[[list[Point]], list[float]]:
    return lambda points: [fn(p) for p in points]


def test_the_synthetic_optimum_is_in_the_space() -> None:
    best = SPACE.encode({"split.i": (4, 4, 2, 8), "split.j": (2, 3, 4), "split.k": (8, 16, 4),
                         "reorder.spatial": ("i", "j"), "fuse_parallel": 2, "unroll": 16,
                         "cache_write": "register"})
    assert separable_cost(best) == pytest.approx(OPTIMUM)
    assert SPACE.size > 10**7


@pytest.mark.parametrize("name", ["q", "p"])
def test_q_and_p_find_the_optimum_of_a_large_space(name: str) -> None:
    for seed in range(3):
        result = get_engine(name).search(SPACE, batch(separable_cost), budget_trials=500,
                                         seed=seed)
        assert result.best_cost == pytest.approx(OPTIMUM), (name, seed)
        assert SPACE.decode(result.best_point)["split"] == TARGET


def test_the_q_method_needs_fewer_trials_than_the_p_method_and_random_lags() -> None:
    budget, seeds = 400, range(4)
    reach = {}
    final = {}
    for name in ENGINE_NAMES:
        results = [get_engine(name).search(SPACE, batch(separable_cost), budget, seed)
                   for seed in seeds]
        reach[name] = [r.trials_to_reach(OPTIMUM * 1.0001) or 10 * budget for r in results]
        final[name] = np.mean([r.best_cost for r in results])
    assert np.median(reach["q"]) < np.median(reach["p"]) < np.median(reach["random"])
    assert final["random"] > 2 * max(final["q"], final["p"])


def cost_table(seed: int = 7) -> tuple[Space, dict[Point, float]]:
    """A small space with a random cost per point, about a third of them failing."""
    space = Space([("a", SplitSpace(24, 3)), ("b", ChoiceSpace(range(6))),
                   ("c", ChoiceSpace([False, True]))])
    rng = np.random.default_rng(seed)
    table = {}
    for point in space.points():
        smooth = 1.0 + abs(point[1] - 4) + 0.5 * point[2] + 0.1 * point[0]
        table[point] = math.inf if rng.random() < 0.3 else smooth * rng.uniform(1.0, 1.2)
    return space, table


@pytest.mark.parametrize("name", ENGINE_NAMES)
def test_exhausting_a_small_space_finds_the_exact_optimum(name: str) -> None:
    space, table = cost_table()
    calls: list[list[Point]] = []

    def cost(points: list[Point]) -> list[float]:
        calls.append(points)
        return [table[p] for p in points]

    result = get_engine(name).search(space, cost, budget_trials=10_000, seed=0)
    assert result.trials == space.size and result.stopped_by == "exhausted"
    assert result.best_cost == min(table.values())
    evaluated = [p for points in calls for p in points]
    assert len(evaluated) == len(set(evaluated)) == space.size  # never twice


@pytest.mark.parametrize("name", ENGINE_NAMES)
def test_budget_respected_and_no_point_evaluated_twice(name: str) -> None:
    seen: set[Point] = set()

    def cost(points: list[Point]) -> list[float]:
        for point in points:
            assert point not in seen, f"{point} evaluated twice"
            seen.add(point)
        return [separable_cost(p) for p in points]

    trials = []
    result = get_engine(name).search(SPACE, cost, budget_trials=97, seed=5,
                                     on_result=trials.append)
    assert result.trials == 97 == len(seen) and result.stopped_by == "trials"
    assert [t.index for t in trials] == list(range(97))
    assert tuple(trials) == result.history
    assert result.engine == name
    assert result.best_cost == min(t.cost for t in trials)
    assert result.best_so_far()[-1] == result.best_cost


@pytest.mark.parametrize("name", ENGINE_NAMES)
def test_deterministic_given_the_seed(name: str) -> None:
    first = get_engine(name).search(SPACE, batch(separable_cost), 120, seed=11)
    second = get_engine(name).search(SPACE, batch(separable_cost), 120, seed=11)
    other = get_engine(name).search(SPACE, batch(separable_cost), 120, seed=12)
    assert first.history == second.history
    assert first.best_point == second.best_point
    assert [t.point for t in other.history] != [t.point for t in first.history]


def rugged_cost(point: Point) -> float:
    """The separable cost with hash noise; candidates with too large a register tile fail."""
    config = SPACE.decode(point)
    if config["split"]["i"][-1] * config["split"]["j"][-2] > 32:
        return math.inf
    noise = zlib.crc32(repr(point).encode()) % 1000 / 1000
    return separable_cost(point) * (1 + 0.2 * noise)


@pytest.mark.parametrize("name", ["q", "p"])
def test_failed_candidates_are_survived(name: str) -> None:
    result = get_engine(name).search(SPACE, batch(rugged_cost), budget_trials=400, seed=0)
    failures = sum(t.failed for t in result.history)
    assert failures > 0
    assert math.isfinite(result.best_cost) and result.best_cost < 1.3 * OPTIMUM
    assert rugged_cost(result.best_point) == result.best_cost


@pytest.mark.parametrize("name", ENGINE_NAMES)
def test_all_candidates_failing(name: str) -> None:
    result = get_engine(name).search(SPACE, lambda ps: [math.inf] * len(ps), 40, seed=0)
    assert result.best_point is None and result.best_cost == math.inf
    assert result.trials == 40 and all(t.failed for t in result.history)
    assert result.trials_to_reach(1.0) is None


@pytest.mark.parametrize("name", ENGINE_NAMES)
def test_nan_costs_count_as_failures(name: str) -> None:
    result = get_engine(name).search(
        SPACE, lambda ps: [math.nan if p[0] % 2 else separable_cost(p) for p in ps], 30, seed=0)
    assert all(t.cost == math.inf for t in result.history if t.point[0] % 2)
    assert math.isfinite(result.best_cost)


@pytest.mark.parametrize("name", ENGINE_NAMES)
def test_budget_seconds_stops_between_batches(name: str) -> None:
    def slow(points: list[Point]) -> list[float]:
        time.sleep(0.02)
        return [separable_cost(p) for p in points]

    start = time.perf_counter()
    result = get_engine(name).search(SPACE, slow, budget_trials=10_000, seed=0,
                                     budget_seconds=0.15)
    assert result.stopped_by == "seconds" and 0 < result.trials < 10_000
    assert time.perf_counter() - start < 2.0


@pytest.mark.parametrize("name", ENGINE_NAMES)
def test_a_one_point_space(name: str) -> None:
    space = Space([("only", ChoiceSpace(["x"]))])
    result = get_engine(name).search(space, lambda ps: [2.0] * len(ps), 10, seed=0)
    assert result.best_point == (0,) and result.trials == 1 and result.stopped_by == "exhausted"
    empty = get_engine(name).search(space, lambda ps: [2.0] * len(ps), 0, seed=0)
    assert empty.trials == 0 and empty.best_point is None


def test_bad_cost_functions_are_reported() -> None:
    engine = RandomSearch()
    with pytest.raises(SearchError, match="returned 1 costs for a batch of 8 points"):
        engine.search(SPACE, lambda ps: [1.0], 10, seed=0)
    with pytest.raises(SearchError, match="costs are seconds >= 0"):
        engine.search(SPACE, lambda ps: [-1.0] * len(ps), 10, seed=0)
    with pytest.raises(SearchError, match="is 'fast', not a number"):
        engine.search(SPACE, lambda ps: ["fast"] * len(ps), 10, seed=0)
    with pytest.raises(SearchError, match="cost must be callable"):
        engine.search(SPACE, 3.0, 10, seed=0)  # type: ignore[arg-type]


def test_bad_arguments_are_reported() -> None:
    cost = batch(separable_cost)
    with pytest.raises(SearchError, match="budget_trials=-1 must be an int >= 0"):
        QMethodSearch().search(SPACE, cost, -1, seed=0)
    with pytest.raises(SearchError, match="seed=None must be an int"):
        QMethodSearch().search(SPACE, cost, 5, seed=None)  # type: ignore[arg-type]
    with pytest.raises(SearchError, match="needs a tilecraft.search.Space, got list"):
        PMethodSearch().search([1, 2], cost, 5, seed=0)  # type: ignore[arg-type]
    with pytest.raises(SearchError, match="budget_seconds=0 must be > 0"):
        RandomSearch().search(SPACE, cost, 5, seed=0, budget_seconds=0)
    with pytest.raises(SearchError, match="unknown search engine 'sa'; the engines are genetic, "
                                          "mcts, p, q, random"):
        get_engine("sa")
    with pytest.raises(SearchError, match="search engine 'q': .*unexpected keyword"):
        get_engine("q", temperature=3)
    with pytest.raises(SearchError, match="starts=0 must be an int >= 1"):
        QMethodSearch(starts=0)
    with pytest.raises(SearchError, match="epsilon=2 must lie in \\[0, 1\\]"):
        QMethodSearch(epsilon=2)
    with pytest.raises(SearchError, match="gamma=-1 must be >= 0"):
        PMethodSearch(gamma=-1)
    with pytest.raises(SearchError, match="batch_size=0"):
        RandomSearch(batch_size=0)


def test_registry_and_plugin_hook() -> None:
    assert set(ENGINES) == {"q", "p", "random", "genetic", "mcts"}
    assert isinstance(get_engine("p", starts=2), PMethodSearch)
    from tilecraft.target.plugins import collect, make_plugin_manager

    manager = make_plugin_manager(entry_points=False)
    engines = collect("search_engines", manager)
    assert {"q", "p", "random"} <= set(engines) and manager.broken == []
    assert [e.name for e in DEFAULT_SEARCH_ENGINES] == ["q", "p", "random", "genetic", "mcts"]


# the pieces -------------------------------------------------------------------------------------


def test_performance_reward_and_start_probability() -> None:
    assert performance(0.25) == 4.0 and performance(math.inf) == 0.0
    assert performance(0.0) > 1e100
    assert reward(2.0, 3.0) == 0.5 and reward(2.0, 1.0) == -0.5
    assert reward(1.0, 0.0) == -1.0 and reward(1.0, 9.0) == 1.0  # clipped
    assert reward(0.0, 0.0) == 0.0 and reward(0.0, 1.0) == 1.0
    assert probability(4.0, 4.0, gamma=3.0) == 1.0
    assert probability(2.0, 4.0, gamma=3.0) == pytest.approx(math.exp(-1.5))
    assert probability(0.0, 0.0, gamma=3.0) == 1.0


def test_select_starts_prefers_good_points() -> None:
    space = Space([("x", ChoiceSpace(range(100)))])
    log = TrialLog(space, lambda ps: [1.0 + p[0] for p in ps], budget_trials=100)
    log.evaluate([(k,) for k in range(100)])
    rng = np.random.default_rng(0)
    # a very sharp schedule keeps only the best; a flat one spreads out
    assert select_starts(log, rng, 5, gamma=1000.0, pool_size=200) == [(0,)]
    flat = select_starts(log, rng, 5, gamma=0.0, pool_size=200)
    assert len(flat) == 5 and flat == sorted(flat)
    picks = [p for _ in range(200) for p in select_starts(log, rng, 1, gamma=5.0, pool_size=20)]
    assert np.mean([p[0] for p in picks]) < 15  # biased towards the best (cost 1 + x)
    assert select_starts(log, rng, 3, 5.0, 20, exclude={(k,) for k in range(100)}) == []
    with pytest.raises(SearchError, match="count=0"):
        select_starts(log, rng, 0, 5.0, 20)


def test_q_network_learns_and_copies() -> None:
    rng = np.random.default_rng(0)
    net = QNetwork(inputs=4, outputs=3, hidden=32, rng=rng)
    assert len(net.weights) == QNetwork.LAYERS == 4
    x = rng.random((64, 4))
    actions = rng.integers(0, 3, size=64)
    targets = x[np.arange(64), actions] - 0.5  # a learnable function of input and action
    losses = [net.train(x, actions, targets) for _ in range(400)]
    assert losses[-1] < 0.2 * losses[0]
    twin = net.clone()
    np.testing.assert_array_equal(twin.predict(x), net.predict(x))
    net.train(x, actions, targets)
    assert not np.array_equal(twin.predict(x), net.predict(x))
    twin.copy_from(net)
    np.testing.assert_array_equal(twin.predict(x), net.predict(x))
    assert net.predict(x[:1]).shape == (1, 3)
    with pytest.raises(SearchError, match="got 2 features, expected 4"):
        net.predict(np.zeros((1, 2)))
    featureless = QNetwork(inputs=0, outputs=2, rng=rng)
    assert featureless.predict(np.zeros((3, 0))).shape == (3, 2)


def test_adadelta_descends_a_quadratic() -> None:
    param = np.array([3.0, -2.0])
    optimizer = AdaDelta([param.shape], rho=0.9, eps=1e-2)
    for _ in range(500):
        optimizer.step([param], [2 * param])
    assert np.all(np.abs(param) < 0.2)
    with pytest.raises(SearchError, match="rho=1.5"):
        AdaDelta([(1,)], rho=1.5)
