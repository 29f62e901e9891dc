"""Typed sub-spaces, the product space, and schedule-space generation (thesis §4.3.2)."""

from __future__ import annotations

import itertools
import math
import pickle
from typing import Any

import numpy as np
import pytest

from tilecraft import te
from tilecraft.ops import catalog
from tilecraft.search import (
    ChoiceSpace,
    Direction,
    FuseSpace,
    InlineSpace,
    ReorderSpace,
    SearchError,
    Space,
    SplitSpace,
    UnrollSpace,
    analyze,
    band_template,
    catalog_space_reports,
    format_reports,
    generate_space,
    space_report,
)
from tilecraft.target.spec import TargetSpec, load_spec

ALL_PRIMITIVES = ["split", "fuse", "reorder", "unroll", "vectorize", "inline", "parallel",
                  "cache", "compute_at"]
ALL_KINDS = ["serial", "parallel", "vector", "unrolled"]


def make_spec(primitives: list[str] | None = None, loop_kinds: list[str] | None = None,
              fixed: dict[str, Any] | None = None, name: str = "toy") -> TargetSpec:
    return load_spec({
        "name": name, "api_version": 1, "version": "0",
        "memory": {"levels": [
            {"name": "DRAM", "size_bytes": None, "bandwidth_bytes_per_cycle": 8, "kind": "dram"},
            {"name": "L1", "size_bytes": 32768, "bandwidth_bytes_per_cycle": 64,
             "kind": "cache"},
            {"name": "local", "size_bytes": 8192, "bandwidth_bytes_per_cycle": 64},
            {"name": "register", "size_bytes": 2048, "bandwidth_bytes_per_cycle": 192,
             "kind": "registers"}]},
        "compute": {"cores": 2, "frequency_hz": 1e9, "vector_bits": 512},
        "primitives": ALL_PRIMITIVES if primitives is None else primitives,
        "fixed_decisions": fixed or {},
        "loop_kinds": ALL_KINDS if loop_kinds is None else loop_kinds,
        "evaluation": "estimate", "capabilities": {"models_performance": True}})


def matmul(m: int = 64, k: int = 32, n: int = 48, dtype: str = "float32") -> te.Tensor:
    A = te.placeholder((m, k), dtype, name="A")
    B = te.placeholder((k, n), dtype, name="B")
    r = te.reduce_axis(k, name="k")
    return te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")


def ordered_factorizations(n: int, parts: int) -> int:
    """Count by brute force: ordered tuples of ``parts`` positive ints multiplying to n."""
    divisors = [d for d in range(1, n + 1) if n % d == 0]
    return sum(1 for t in itertools.product(divisors, repeat=parts) if math.prod(t) == n)


# split ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("extent", "parts"), [(1, 4), (13, 4), (12, 3), (64, 4), (360, 3),
                                               (97, 1), (30, 2)])
def test_divisible_split_sizes_and_products(extent: int, parts: int) -> None:
    space = SplitSpace(extent, parts)
    assert space.size == ordered_factorizations(extent, parts)
    assert all(math.prod(choice) == extent and len(choice) == parts for choice in space.choices)
    assert len(set(space.choices)) == space.size
    assert len(space.moves) == parts * (parts - 1)  # the thesis's N(N-1)/2 dimensions, 2 ways


def test_power_of_two_split_count() -> None:
    assert SplitSpace(512, 4).size == math.comb(9 + 3, 3)


@pytest.mark.parametrize(("extent", "parts"), [(13, 3), (100, 3), (7, 2), (1, 3)])
def test_ceil_splits_cover_the_extent_and_include_divisible_ones(extent: int,
                                                                 parts: int) -> None:
    ceil = SplitSpace(extent, parts, divisible_only=False)
    divisible = SplitSpace(extent, parts)
    assert set(divisible.choices) <= set(ceil.choices)
    for choice in ceil.choices:
        inner = math.prod(choice[1:])
        assert math.prod(choice) >= extent and inner <= extent
        assert choice[0] == -(-extent // inner)  # the outer loop covers the rest, no more


def test_max_inner_prunes_the_innermost_factor() -> None:
    space = SplitSpace(64, 3, max_inner=8)
    assert space.size < SplitSpace(64, 3).size
    assert all(choice[-1] <= 8 for choice in space.choices)


@pytest.mark.parametrize("divisible_only", [True, False])
def test_split_neighbours_follow_the_thesis_definition(divisible_only: bool) -> None:
    space = SplitSpace(72, 3, divisible_only=divisible_only)
    for index, choice in enumerate(space.choices):
        for grow, shrink in space.moves:
            moved = space.neighbour(index, (grow, shrink))
            candidates = [c for c in space.choices
                          if c[grow] > choice[grow] and c[shrink] < choice[shrink]
                          and all(c[p] == choice[p] for p in range(3) if p not in (grow, shrink))]
            if moved is None:
                assert candidates == []
                continue
            other = space.value(moved)
            assert other in candidates
            # the nearest such neighbour: no candidate grows part `grow` less
            assert other[grow] == min(c[grow] for c in candidates)
            if divisible_only:
                assert math.prod(other) == 72


def test_split_neighbours_step_through_the_divisors() -> None:
    space = SplitSpace(2 * 3 * 5 * 7, 2)
    walk, index = [], space.index_of((1, 210))
    while index is not None:
        walk.append(space.value(index)[0])
        index = space.neighbour(index, (0, 1))
    assert walk == [1, 2, 3, 5, 6, 7, 10, 14, 15, 21, 30, 35, 42, 70, 105, 210]
    three = SplitSpace(12, 3)
    start = three.index_of((2, 3, 2))
    assert three.value(three.neighbour(start, (0, 1))) == (3, 2, 2)
    assert three.value(three.neighbour(start, (2, 0))) == (1, 3, 4)
    assert three.neighbour(three.index_of((1, 3, 4)), (1, 0)) is None


def test_split_errors() -> None:
    with pytest.raises(SearchError, match="extent=0 must be an int >= 1"):
        SplitSpace(0, 2)
    with pytest.raises(SearchError, match="parts=0"):
        SplitSpace(8, 0)
    with pytest.raises(SearchError, match="max_inner=0"):
        SplitSpace(8, 2, max_inner=0)
    space = SplitSpace(8, 2)
    with pytest.raises(SearchError, match="has no choice \\(3, 3\\); its factors must multiply"):
        space.index_of((3, 3))
    with pytest.raises(SearchError, match="choice index 4 is out of range; it has 4 choices"):
        space.value(4)
    with pytest.raises(SearchError, match="unknown move \\(0, 0\\)"):
        space.neighbour(0, (0, 0))


# the other sub-spaces ---------------------------------------------------------------------------


def test_reorder_space_swaps_adjacent_loops() -> None:
    space = ReorderSpace(["a", "b", "c", "d"])
    assert space.size == 24 and len(space.moves) == 3
    for index, order in enumerate(space.choices):
        for _, k in space.moves:
            moved = space.value(space.neighbour(index, ("swap", k)))
            differs = [p for p in range(4) if moved[p] != order[p]]
            assert differs == [k, k + 1] and moved[k] == order[k + 1]
    features = space.features(space.index_of(("d", "c", "b", "a")))
    assert features == (1.0, 2 / 3, 1 / 3, 0.0)
    assert ReorderSpace([]).size == 1 and ReorderSpace(["x"]).moves == ()


def test_reorder_space_errors() -> None:
    with pytest.raises(SearchError, match="repeat"):
        ReorderSpace(["i", "i"])
    with pytest.raises(SearchError, match="is not a permutation of the loops"):
        ReorderSpace(["i", "j"], permutations=[("i", "k")])
    with pytest.raises(SearchError, match="no permutation allowed"):
        ReorderSpace(["i", "j"], permutations=[])
    with pytest.raises(SearchError, match="9 loops have 362880 orders"):
        ReorderSpace([f"l{n}" for n in range(9)])
    many = ReorderSpace([f"l{n}" for n in range(9)],
                        permutations=[tuple(f"l{n}" for n in range(9))])
    assert many.size == 1


def test_inline_space_flips_one_node() -> None:
    space = InlineSpace(["a", "b", "c"])
    assert space.size == 8 and len(space.moves) == 3
    for index in range(8):
        assert space.index_of(space.value(index)) == index
        for move in space.moves:
            flipped = space.value(space.neighbour(index, move))
            changed = [n for n in "abc" if flipped[n] != space.value(index)[n]]
            assert changed == [move[1]]
    with pytest.raises(SearchError, match="must map every node"):
        space.index_of({"a": True})
    with pytest.raises(SearchError, match="2\\*\\*17 combinations"):
        InlineSpace([f"n{k}" for k in range(17)])


def test_enumerations_step_without_wrapping() -> None:
    fuse = FuseSpace(3)
    assert fuse.values == (0, 1, 2, 3) and fuse.neighbour(0, -1) is None
    assert fuse.neighbour(3, 1) is None and fuse.value(fuse.neighbour(1, 1)) == 2
    assert FuseSpace(0).values == (0,)
    with pytest.raises(SearchError, match="need 0 <= minimum <= loops"):
        FuseSpace(1, minimum=2)
    assert UnrollSpace((64, 0, 16)).values == (0, 16, 64)
    with pytest.raises(SearchError, match="must be ints >= 0"):
        UnrollSpace((-1,))
    choice = ChoiceSpace([False, True])
    assert choice.index_of(True) == 1 and choice.features(1) == (1.0,)
    with pytest.raises(SearchError, match="has no value 1"):
        choice.index_of(1)  # an int is not a bool choice
    with pytest.raises(SearchError, match="needs at least one value"):
        ChoiceSpace([])
    with pytest.raises(SearchError, match="repeat"):
        ChoiceSpace(["L1", "L1"])


# the product space -------------------------------------------------------------------------------


def small_space() -> Space:
    return Space([("a", SplitSpace(12, 2)), ("order", ReorderSpace(["i", "j"])),
                  ("vec", ChoiceSpace([False, True]))])


def test_space_size_directions_neighbours() -> None:
    space = small_space()
    assert space.sizes == {"a": 6, "order": 2, "vec": 2} and space.size == 24
    assert len(list(space.points())) == 24
    assert [str(d) for d in space.directions] == [
        "a:(0, 1)", "a:(1, 0)", "order:('swap', 0)", "vec:-1", "vec:1"]
    for point in space.points():
        for position, moved in space.neighbours(point):
            changed = [n for n, x, y in zip(space.names, point, moved) if x != y]
            assert changed == [space.directions[position].subspace]
            assert space.neighbour(point, space.directions[position]) == moved


def test_space_points_decode_encode_features() -> None:
    space = small_space()
    rng = np.random.default_rng(3)
    points = [space.random_point(rng) for _ in range(50)]
    again = [space.random_point(np.random.default_rng(3)) for _ in range(1)]
    assert again[0] == points[0]
    for point in points:
        assert isinstance(point, tuple) and all(isinstance(i, int) for i in point)
        hash(point)
        assert space.encode(space.values(point)) == point
        features = space.features(point)
        assert features.shape == (space.feature_size,) == (5,)
        assert np.all((features >= 0) & (features <= 1))
    assert space.decode((0, 1, 1)) == {"a": (1, 12), "order": ("j", "i"), "vec": True}


def test_space_errors_name_the_culprit() -> None:
    space = small_space()
    with pytest.raises(SearchError, match="is not a point; a point is a tuple of 3"):
        space.decode((0, 0))
    with pytest.raises(SearchError, match="has index 9 for sub-space a, which has 6 choices"):
        space.decode((9, 0, 0))
    with pytest.raises(SearchError, match="direction 99 is not one of its 5 directions"):
        space.neighbour((0, 0, 0), 99)
    with pytest.raises(SearchError, match="names no sub-space"):
        space.neighbour((0, 0, 0), Direction("zzz", 1))
    with pytest.raises(SearchError, match="two sub-spaces are named 'a'"):
        Space([("a", ChoiceSpace([1])), ("a", ChoiceSpace([2]))])
    with pytest.raises(SearchError, match="is not a \\(name, SubSpace\\) pair"):
        Space([("a", [1, 2])])  # type: ignore[list-item]
    with pytest.raises(SearchError, match="missing order, vec"):
        space.encode({"a": (1, 12)})


def test_empty_space_has_one_point() -> None:
    space = Space([])
    assert space.size == 1 and list(space.points()) == [()] and space.directions == ()
    assert space.decode(()) == {}


# generation --------------------------------------------------------------------------------------


def loops_of(config: dict[str, Any]) -> list[str]:
    return [f"{axis}.{level}" for axis, factors in config["split"].items()
            for level in range(len(factors))]


def check_config(config: dict[str, Any], tensor_graph: Any, spec: TargetSpec) -> None:
    """Every rule of the documented config format."""
    info = analyze(tensor_graph)
    node = info.node()
    assert set(config) == {"split", "reorder", "fuse_parallel", "unroll", "vectorize",
                           "inline", "cache_write"}
    assert list(config["split"]) == list(node.order)
    for loop in node.loops:
        factors = config["split"][loop.name]
        assert all(isinstance(f, int) and f >= 1 for f in factors)
        assert loop.extent <= math.prod(factors) < 2 * (loop.extent + factors[-1])
    assert sorted(config["reorder"]) == sorted(loops_of(config))
    fused = config["reorder"][:config["fuse_parallel"]]
    assert all(not node.loop(name.split(".")[0]).is_reduce for name in fused)
    assert isinstance(config["unroll"], int) and config["unroll"] >= 0
    assert isinstance(config["vectorize"], bool)
    assert set(config["inline"]) == {n.name for n in info.nodes if n.name != node.name}
    for name, flag in config["inline"].items():
        assert not flag or info.node(name).inlineable
    assert config["cache_write"] is None or config["cache_write"] in spec.memory.names
    if config["vectorize"]:
        assert config["reorder"][-1].split(".")[0] == node.contiguous_axis


@pytest.mark.parametrize("case", catalog.standard_set(), ids=lambda c: c.id)
def test_generated_points_decode_to_valid_configs(case: catalog.OpCase) -> None:
    graph, _ = case.build()
    spec = make_spec(fixed={"vector_lanes": 16})
    space = generate_space(graph, spec)
    rng = np.random.default_rng(0)
    for point in [space.random_point(rng) for _ in range(5)]:
        check_config(space.decode(point), graph, spec)
        for _, moved in space.neighbours(point)[:10]:
            check_config(space.decode(moved), graph, spec)


def test_matmul_space_on_a_full_target() -> None:
    spec = make_spec()
    space = generate_space(matmul(), spec)
    assert space.names == ("split.i", "split.j", "split.k", "reorder.spatial", "fuse_parallel",
                           "unroll", "vectorize", "cache_write")  # the thesis's order
    assert space.sizes["split.i"] == SplitSpace(64, 4).size
    assert space.sizes["split.k"] == SplitSpace(32, 3).size
    assert space.subspaces["cache_write"].values == (None, "local", "register")
    assert space.size == math.prod(space.sizes.values())
    config = space.decode(tuple(0 for _ in space.names))
    # the band template S0 R0 S1 R1 S2 R2 S3 with the vector axis j pinned innermost
    assert config["reorder"] == ["i.0", "j.0", "k.0", "i.1", "j.1", "k.1", "i.2", "j.2", "k.2",
                                 "i.3", "j.3"]
    assert space.subspaces["fuse_parallel"].values == (0, 1, 2)


def test_band_template() -> None:
    names = [f"{k.value[0]}{level}" for k, level in band_template(4, 3)]
    assert names == ["s0", "r0", "s1", "r1", "s2", "r2", "s3"]
    assert [f"{k.value[0]}{level}" for k, level in band_template(1, 1)] == ["s0", "r0"]
    assert [f"{k.value[0]}{level}" for k, level in band_template(3, 1)] == \
        ["s0", "s1", "r0", "s2"]


def test_fixed_vector_lanes_fix_the_innermost_factor_and_the_flag() -> None:
    spec = make_spec(fixed={"vector_lanes": 16})
    space = generate_space(matmul(64, 32, 48), spec)
    assert "vectorize" not in space.sizes and space.fixed["vectorize"] is True
    assert space.sizes["split.j"] == SplitSpace(3, 3).size  # 48 / 16 left to split
    rng = np.random.default_rng(1)
    for _ in range(20):
        config = space.decode(space.random_point(rng))
        assert config["split"]["j"][-1] == 16 and config["reorder"][-1] == "j.3"
        assert config["vectorize"] is True
    # 8-bit elements hold four times the lanes; a short axis is taken whole
    assert generate_space(matmul(8, 8, 128, "int8"), spec).fixed["vector_lanes(j)"] == 64
    assert generate_space(matmul(8, 8, 10), spec).fixed["vector_lanes(j)"] == 10
    # a non-multiple extent is covered by a ceil split of the outer part
    odd = generate_space(matmul(8, 8, 19), spec)
    config = odd.decode(odd.random_point(rng))
    assert config["split"]["j"][-1] == 16 and math.prod(config["split"]["j"]) == 32


def test_other_fixed_decisions_remove_their_dimension() -> None:
    graph, _ = catalog.get("conv2d[stride2-pad1-c3]").build()
    free = generate_space(graph, make_spec())
    assert {"fuse_parallel", "unroll", "vectorize", "inline", "cache_write"} <= set(free.names)
    fixed = generate_space(graph, make_spec(fixed={
        "fuse_parallel": 1, "unroll": 16, "vectorize": False, "inline": True,
        "cache_write": "register", "layout": "row_major"}))
    assert not {"fuse_parallel", "unroll", "vectorize", "inline", "cache_write"} & \
        set(fixed.names)
    config = fixed.decode(fixed.random_point(np.random.default_rng(0)))
    assert config["fuse_parallel"] == 1 and config["unroll"] == 16
    assert config["vectorize"] is False and config["inline"] == {"out_pad": True}
    assert config["cache_write"] == "register"
    assert fixed.notes == ("fixed decision layout='row_major' does not shape the schedule "
                           "space",)
    assert fixed.size < free.size
    none = generate_space(graph, make_spec(fixed={"cache_write": "none"}))
    assert none.fixed["cache_write"] is None


def test_split_depth_from_levels_or_the_spec() -> None:
    two = generate_space(matmul(), make_spec(), levels=2)
    config = two.decode(two.random_point(np.random.default_rng(0)))
    assert all(len(f) == 2 for f in config["split"].values())
    from_spec = generate_space(matmul(), make_spec(fixed={"spatial_split_parts": 3,
                                                          "reduce_split_parts": 2}))
    config = from_spec.decode(from_spec.random_point(np.random.default_rng(0)))
    assert [len(f) for f in config["split"].values()] == [3, 3, 2]
    with pytest.raises(SearchError, match="levels=\\(1, 2, 3\\)"):
        generate_space(matmul(), make_spec(), levels=(1, 2, 3))
    with pytest.raises(SearchError, match="spatial=0 must be an int >= 1"):
        generate_space(matmul(), make_spec(), levels=(0, 2))


def test_divisible_pruning_shrinks_the_space() -> None:
    spec = make_spec()
    divisible = generate_space(matmul(60, 36, 44), spec)
    ceil = generate_space(matmul(60, 36, 44), spec, divisible_only=False)
    assert ceil.size > divisible.size
    config = ceil.decode(ceil.random_point(np.random.default_rng(5)))
    check_config(config, matmul(60, 36, 44), spec)


def test_primitives_and_loop_kinds_prune_the_space() -> None:
    graph, _ = catalog.get("conv2d[stride2-pad1-c3]").build()
    bare = make_spec(primitives=["split", "reorder"], loop_kinds=["serial"])
    space = generate_space(graph, bare)
    assert all(name.startswith(("split.", "reorder.")) for name in space.names)
    config = space.decode(space.random_point(np.random.default_rng(0)))
    assert config["fuse_parallel"] == 0 and config["unroll"] == 0
    assert config["vectorize"] is False and config["cache_write"] is None
    assert config["inline"] == {"out_pad": False}
    # offering a primitive without the loop kind it needs is not enough
    no_kinds = generate_space(graph, make_spec(loop_kinds=["serial"]))
    assert not {"fuse_parallel", "unroll", "vectorize"} & set(no_kinds.names)
    # a cache write is computed inside the consumer's loops: it needs compute_at as well
    assert "cache_write" not in generate_space(
        graph, make_spec(primitives=["split", "reorder", "cache"])).names
    # parallel without fuse: parallelise the outermost loop or not
    no_fuse = generate_space(graph, make_spec(primitives=["split", "reorder", "parallel"]))
    assert no_fuse.subspaces["fuse_parallel"].values == (0, 1)
    # without reorder the split loops stay nested axis by axis
    no_reorder = generate_space(matmul(), make_spec(primitives=["split"]))
    config = no_reorder.decode(no_reorder.random_point(np.random.default_rng(0)))
    assert config["reorder"] == ["i.0", "i.1", "i.2", "i.3", "j.0", "j.1", "j.2", "j.3", "k.0",
                                 "k.1", "k.2"]
    # ... and the loop that may be vectorised is the innermost: the last axis's last level
    vector_last = generate_space(matmul(), make_spec(primitives=["split", "vectorize"],
                                                     fixed={"vector_lanes": 16}))
    config = vector_last.decode(vector_last.random_point(np.random.default_rng(0)))
    assert config["reorder"][-1] == "k.2" and config["split"]["k"][-1] == 16
    assert config["vectorize"] is True
    impossible = generate_space(matmul(), make_spec(primitives=["split"],
                                                    fixed={"vectorize": True}))
    assert impossible.fixed["vectorize"] is False
    assert "vectorize=True ignored" in impossible.notes[0]
    # without split every axis is one loop
    no_split = generate_space(matmul(), make_spec(primitives=["reorder"]))
    assert no_split.decode(no_split.random_point(np.random.default_rng(0)))["split"] == \
        {"i": [64], "j": [48], "k": [32]}
    assert "offers no split" in no_split.notes[-1]


def test_size_one_axes_are_not_split_or_reordered() -> None:
    graph, _ = catalog.get("conv2d[stride2-pad1-c3]").build()
    space = generate_space(graph, make_spec())
    config = space.decode(space.random_point(np.random.default_rng(0)))
    assert config["split"]["n"] == [1]
    assert "n" not in space.subspaces["reorder.spatial"].loops
    assert config["reorder"].count("n.0") == 1


def test_generation_errors() -> None:
    with pytest.raises(SearchError, match="needs a TargetSpec"):
        generate_space(matmul(), {"name": "toy"})  # type: ignore[arg-type]
    with pytest.raises(SearchError, match="no compute node 'X'"):
        generate_space(matmul(), make_spec(), node="X")
    x = te.placeholder((4, 4), name="x")
    r = te.reduce_axis(4, name="i")
    clash = te.compute((4,), lambda i: te.sum(x[i, r], axis=r), name="clash")
    with pytest.raises(SearchError, match="axis names \\['i', 'i'\\] repeat"):
        generate_space(clash, make_spec())
    with pytest.raises(SearchError, match="fixed_decisions.vector_lanes = 0 must be an int"):
        generate_space(matmul(), make_spec(fixed={"vector_lanes": 0}))
    with pytest.raises(SearchError, match="fixed_decisions.vectorize = 'yes' must be true"):
        generate_space(matmul(), make_spec(fixed={"vectorize": "yes"}))
    with pytest.raises(SearchError, match="cache_write = 'L9' is not a memory level"):
        generate_space(matmul(), make_spec(fixed={"cache_write": "L9"}))


def test_generated_space_pickles_and_decodes_the_same() -> None:
    space = generate_space(matmul(), make_spec(fixed={"vector_lanes": 16}))
    twin = pickle.loads(pickle.dumps(space))
    point = space.random_point(np.random.default_rng(2))
    assert twin.decode(point) == space.decode(point)


def test_x86_target_space() -> None:
    from tilecraft.target.registry import get_target

    spec = get_target("x86_avx512").spec
    big = matmul(1024, 1024, 1024)
    report = space_report(big, spec)
    assert report.total > 10**7
    assert report.fixed["vectorize"] is True and report.fixed["vector_lanes(j)"] == 16
    assert "fixed decision layout='row_major'" in report.notes[0]


def test_space_reports_per_operator() -> None:
    spec = make_spec(fixed={"vector_lanes": 16})
    cases = [catalog.cases(ops=name)[0] for name in ("matmul", "conv2d", "softmax", "relu")]
    reports = catalog_space_reports(spec, cases)
    assert [name for name, _ in reports] == [c.id for c in cases]
    for _, report in reports:
        assert report.total == math.prod(report.sizes.values()) >= 1
        assert str(report).startswith(f"{report.operator} on toy: {report.total} points")
    table = format_reports(reports)
    assert len(table.splitlines()) == len(cases)
    conv = dict(reports)[next(c.id for c in cases if c.name == "conv2d")]
    assert conv.total > dict(reports)[next(c.id for c in cases if c.name == "relu")].total


INTEGRATION_CASES = ["matmul[m13-k17-n19]", "conv2d[stride2-pad1-c3]", "softmax[7x13]",
                     "gemv[m13-k17]", "batch_matmul[b3-m13-k11-n17]", "relu[13x17]"]


@pytest.mark.parametrize("case_id", INTEGRATION_CASES)
def test_decoded_configs_schedule_correct_kernels(case_id: str) -> None:
    """The config format is what tilecraft.schedule.apply_config consumes: random points of
    the space, applied and lowered, compute what the reference computes."""
    schedule = pytest.importorskip("tilecraft.schedule")
    from tilecraft.kernel_ir.interpreter import run_kernels
    from tilecraft.reference import run as reference

    case = catalog.get(case_id)
    graph, arrays = case.build(np.random.default_rng(0))
    expected = reference(graph, **arrays)
    spec = make_spec(fixed={"vector_lanes": 16})
    space = generate_space(graph, spec)
    rng = np.random.default_rng(4)
    for _ in range(3):
        config = space.decode(space.random_point(rng))
        s = schedule.create_schedule(graph)
        output = graph.outputs[0]
        schedule.apply_config(s, output, config)
        got = run_kernels(s.lower(spec), arrays)[output.name]
        np.testing.assert_allclose(got, expected, rtol=case.rtol * 10, atol=case.atol * 10,
                                   err_msg=f"{case_id} with {config}")
