"""Chimera's tile solver (thesis §3.4.3, Eq. 3.14-3.21) and the tile tree (Eq. 3.1)."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

from tilecraft import ops, te
from tilecraft.errors import TargetError
from tilecraft.fusion import (
    FusionError,
    LoopConstraint,
    ParallelExecution,
    TileTree,
    all_orders,
    analyze,
    attention_chain,
    chain_from_computes,
    conv_chain,
    dataflow_classes,
    gemm_chain,
    is_legal,
    legal_orders,
    micro_kernel_constraints,
    solve_chain,
    solve_order,
)
from tilecraft.fusion.orders import dominates, signature
from tilecraft.fusion.relaxed import Monomials, minimize
from tilecraft.target.microkernel import MicroKernelDecl
from tilecraft.target.registry import get_target
from tilecraft.target.spec import load_spec


def toy_spec(l1_bytes: int = 16 * 1024, l2_bytes: int = 256 * 1024):
    return load_spec({
        "name": "toy", "api_version": 1, "version": "0.1",
        "memory": {"levels": [
            {"name": "DRAM", "size_bytes": None, "bandwidth_bytes_per_cycle": 8, "kind": "dram"},
            {"name": "L2", "size_bytes": l2_bytes, "bandwidth_bytes_per_cycle": 32,
             "kind": "cache"},
            {"name": "L1", "size_bytes": l1_bytes, "bandwidth_bytes_per_cycle": 64,
             "kind": "scratchpad"},
            {"name": "regs", "size_bytes": 512, "bandwidth_bytes_per_cycle": 256,
             "kind": "registers"}]},
        "compute": {"cores": 1, "frequency_hz": 1e9, "vector_bits": 256},
        "primitives": ["split"], "loop_kinds": ["serial"], "evaluation": "estimate",
        "capabilities": {"models_performance": True}})


# -- Eq. 3.18: the closed form of the GEMM chain --------------------------------------------

@pytest.mark.parametrize("alpha, capacity_elements", [(16, 100_000), (1, 65_536), (64, 400_000)])
def test_eq_3_18_closed_form(alpha, capacity_elements):
    size = 4096
    chain = gemm_chain(size, size, size, size)
    bound = LoopConstraint(minimum=alpha)
    solution = solve_order(chain, "mlkn", capacity_elements * 4, {"n": bound, "k": bound})
    optimum = -alpha + math.sqrt(alpha ** 2 + capacity_elements)
    real = solution.relaxed_tiles
    assert real["m"] == pytest.approx(optimum, rel=1e-4)
    assert real["l"] == pytest.approx(optimum, rel=1e-4)
    assert real["n"] == pytest.approx(alpha, rel=1e-6)
    assert real["k"] == pytest.approx(alpha, rel=1e-6)
    dv_star = 2 * size * size * (size + size) / optimum
    assert solution.relaxed_volume_bytes == pytest.approx(4 * dv_star, rel=1e-4)
    # Eq. 3.19: the integer solution is within the thesis's bound of the real optimum
    ratio = solution.volume_bytes / solution.relaxed_volume_bytes
    bound_3_19 = max(1 + optimum / size + 1 / solution.tiles[x] for x in "ml")
    assert 1 <= ratio <= bound_3_19


def test_relaxed_minimizer_on_a_small_geometric_program():
    objective = Monomials(np.array([1.0, 1.0]), np.array([[-1.0, 0.0], [0.0, -1.0]]))
    usage = Monomials(np.ones(3), np.array([[1.0, 1.0], [1.0, 0.0], [0.0, 1.0]]))
    result = minimize(objective, [usage], 15.0, np.array([1.0, 1.0]), np.array([100.0, 2.0]))
    # y is capped at 2: then 3x + 2 <= 15 gives x = 13/3
    assert result.tiles == pytest.approx([13 / 3, 2.0], rel=1e-6)
    infeasible = minimize(objective, [usage], 2.0, np.array([1.0, 1.0]), np.array([9.0, 9.0]))
    assert not infeasible.feasible


# -- the order space ----------------------------------------------------------------------------

def test_gemm_chain_has_24_orders_not_720():
    chain = gemm_chain(256, 256, 256, 256)
    orders = list(all_orders(chain))
    assert len(orders) == len(set(orders)) == 24 == chain.design_space_size()
    assert math.factorial(3 + 3) == 720  # the naive count over both GEMMs' own loops
    assert len(legal_orders(chain)) == 8  # k, GEMM1's private reduction, inside m and l
    assert is_legal(chain, "mlkn") and not is_legal(chain, "kmln")


@pytest.mark.parametrize("chain", [gemm_chain(96, 80, 64, 112),
                                   attention_chain(batch=4, seq=48, head_dim=16)],
                         ids=["gemm", "attention"])
def test_classes_cover_every_legal_order(chain):
    classes = dataflow_classes(chain)
    for cls in classes:
        assert signature(chain, cls.order) == cls.signature
        assert is_legal(chain, cls.order)
    for order in legal_orders(chain):
        assert any(dominates(c.signature, signature(chain, order)) for c in classes), order


def test_solver_is_as_good_as_solving_every_legal_order():
    chain = gemm_chain(300, 200, 150, 250)
    capacity = 48 * 1024
    best = solve_chain(chain, capacity_bytes=capacity).level
    brute = min(solve_order(chain, order, capacity).volume_bytes
                for order in legal_orders(chain))
    assert best.volume_bytes == brute


# -- integer tiles ------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(1024, 512, 768, 512), (97, 61, 13, 1), (1, 7, 5, 3),
                                   (211, 127, 89, 53)])
@pytest.mark.parametrize("capacity", [4 * 1024, 64 * 1024, 1 << 20])
def test_tiles_are_integers_that_fit(shape, capacity):
    chain = gemm_chain(*shape)
    solution = solve_chain(chain, capacity_bytes=capacity)
    assert solution.fused
    level = solution.level
    extents = chain.extents
    for loop, tile in level.tiles.items():
        assert isinstance(tile, int) and 1 <= tile <= extents[loop]
    values = analyze(chain, level.order).evaluate(level.tiles)
    assert values.volume_bytes == level.volume_bytes
    assert values.usage_bytes == level.usage_bytes <= capacity
    assert level.relaxed_volume_bytes <= level.volume_bytes * (1 + 1e-9)
    # at least as good as the thesis's rounding: flooring the real optimum
    floored = {lp: max(1, math.floor(v)) for lp, v in level.relaxed_tiles.items()}
    floor_values = analyze(chain, level.order).evaluate(floored)
    if floor_values.usage_bytes <= capacity:
        assert level.volume_bytes <= floor_values.volume_bytes


def test_micro_kernel_bounds_the_tiles():
    kernel = MicroKernelDecl(
        name="gemm_tile", semantics="C[m, n] += A[m, k] * B[k, n]", template="t.jinja",
        loops=[{"name": "m", "extent": "MI", "kind": "spatial"},
               {"name": "n", "extent": "NV", "kind": "spatial"},
               {"name": "k", "extent": 1, "kind": "reduce"}],
        operands=[{"name": "A", "role": "src", "dtype": "float32", "shape": ["MI", 1],
                   "index": ["m", "k"]},
                  {"name": "B", "role": "src", "dtype": "float32", "shape": [1, "NV"],
                   "index": ["k", "n"]},
                  {"name": "C", "role": "dst", "dtype": "float32", "shape": ["MI", "NV"],
                   "index": ["m", "n"]}],
        parameters={"MI": {"default": 6}, "NV": {"default": 16}})
    # both GEMMs run the micro-kernel: GEMM1 over (m, l), GEMM2 over (m, n); NI = 4 vectors
    bounds = micro_kernel_constraints(kernel, {"m": "m", "n": ["l", "n"]}, MI=6, NV=64)
    for shape in [(1024, 512, 768, 512), (499, 197, 101, 331)]:
        chain = gemm_chain(*shape)
        solution = solve_chain(chain, capacity_bytes=512 * 1024, constraints=bounds)
        extents = chain.extents
        for loop, multiple in (("m", 6), ("l", 64), ("n", 64)):
            tile = solution.tiles[loop]
            assert tile == extents[loop] or (tile % multiple == 0 and tile >= multiple), loop
        assert solution.level.usage_bytes <= 512 * 1024


def test_a_loop_shorter_than_its_bound_takes_its_whole_extent():
    chain = gemm_chain(50, 7, 30, 40)
    solution = solve_chain(chain, capacity_bytes=64 * 1024,
                           constraints={"n": LoopConstraint(minimum=16, multiple_of=16)})
    assert solution.tiles["n"] == 7


# -- infeasible: fall back to unfused code ------------------------------------------------------

def test_infeasible_chain_falls_back_with_a_reason():
    chain = gemm_chain(512, 512, 512, 512)
    big = LoopConstraint(minimum=128)
    solution = solve_chain(chain, capacity_bytes=32 * 1024,
                           constraints={"m": big, "n": big, "k": big, "l": big})
    assert not solution.fused and not solution.levels
    assert "does not fit on_chip" in solution.reason
    assert "m=128 n=128 l=128 k=128" in solution.reason
    assert "196,608 bytes" in solution.reason and "32,768 bytes" in solution.reason
    assert solution.reason.endswith("falling back to unfused code")
    with pytest.raises(FusionError, match="not fused"):
        solution.tile_tree()
    with pytest.raises(FusionError, match="does not fit"):
        solve_order(chain, "mlkn", 1024, {"m": big})


def test_softmax_row_that_does_not_fit_falls_back():
    chain = attention_chain(batch=1, seq=4096, head_dim=64)  # one score row: 16 KiB
    solution = solve_chain(chain, capacity_bytes=8 * 1024)
    assert not solution.fused
    assert "l=4096" in solution.reason


# -- multi-level (Eq. 3.20-3.21) ----------------------------------------------------------------

def test_levels_nest_and_the_bottleneck_is_the_slowest():
    spec = toy_spec()
    chain = gemm_chain(512, 384, 256, 320)
    solution = solve_chain(chain, spec=spec)
    assert solution.fused
    assert [s.level for s in solution.levels] == ["L2", "L1"]
    outer, inner = solution.levels
    assert outer.bandwidth_bytes_per_cycle == 8 and inner.bandwidth_bytes_per_cycle == 32
    for level in solution.levels:
        assert level.usage_bytes <= spec.memory.level(level.level).size_bytes
        assert level.cost_cycles == pytest.approx(level.volume_bytes /
                                                  level.bandwidth_bytes_per_cycle)
    extents = chain.extents
    for loop in chain.loop_names:
        assert outer.tiles[loop] == extents[loop] or outer.tiles[loop] % inner.tiles[loop] == 0
    assert outer.tiles["k"] == 256  # GEMM1's private reduction stays whole outside L1
    assert solution.bottleneck.cost_cycles == max(s.cost_cycles for s in solution.levels)
    assert solution.cost_cycles == solution.bottleneck.cost_cycles
    tree = solution.tile_tree()
    assert tree.placement == {"C": "L1"}
    l1 = tree.level_block("L1")
    assert {loop.name: loop.extent for loop in l1.loops} == \
        {lp: outer.tiles[lp] for lp in l1.tiles}


def test_a_level_too_small_is_skipped():
    spec = toy_spec(l1_bytes=1024)
    chain = gemm_chain(256, 256, 256, 256)
    bound = LoopConstraint(minimum=16)
    solution = solve_chain(chain, spec=spec, constraints={x: bound for x in "mnkl"})
    assert solution.fused
    assert [s.level for s in solution.levels] == ["L2"]
    assert solution.skipped[0][0] == "L1" and "does not fit L1" in solution.skipped[0][1]
    assert solution.tile_tree().placement == {"C": "L2"}


def test_x86_hierarchy_and_timing():
    spec = get_target("x86_avx512").spec
    for chain in (gemm_chain(1024, 1024, 1024, 1024), attention_chain(), conv_chain()):
        best = math.inf
        for _ in range(2):  # the machine is shared: take the better of two runs
            started = time.perf_counter()
            solution = solve_chain(chain, spec=spec)
            best = min(best, time.perf_counter() - started)
        assert best < 1.0, (chain.names, best)
        assert solution.fused
        assert [s.level for s in solution.levels] == ["L3", "L2", "L1"]
        for level in solution.levels:
            assert level.usage_bytes <= spec.memory.level(level.level).size_bytes


# -- the tile tree ----------------------------------------------------------------------------

def test_tile_tree_reads_off_order_tiles_and_levels():
    chain = gemm_chain(1024, 512, 768, 512)
    solution = solve_chain(chain, capacity_bytes=256 * 1024)
    tree = solution.tile_tree()
    root = tree.root
    assert root.level == "on_chip" and root.op is None
    assert [loop.name for loop in root.loops] == ["m", "l"]
    assert [child.op for child in root.children] == ["C", "E"]
    gemm1, gemm2 = root.children
    assert [lp.name for lp in gemm1.loops] == ["k"] and gemm1.kept == ("C",)
    assert gemm1.reads == ("A", "B") and gemm2.reads == ("C", "D") and gemm2.writes == ("E",)
    for block in tree.blocks():
        for loop in block.loops:
            assert loop.tile == solution.tiles[loop.name]
            assert loop.trips == math.ceil(loop.extent / loop.tile)
    text = str(tree)
    assert "on_chip: for m in 1024 step" in text and "C: for k in 768 step" in text
    assert tree.equation() == "T_on_chip = {m, l}(T_C = {k}(C), T_E = {n}(E))"
    with pytest.raises(FusionError, match="no leaf block runs 'X'"):
        tree.leaf("X")


def test_tile_tree_for_hand_chosen_orders_and_tiles():
    chain = gemm_chain(100, 60, 70, 80)
    tree = TileTree.build(chain, [("L2", "mlkn", {"m": 50, "l": 40}),
                                  ("L1", "mlkn", {"m": 10, "l": 8, "k": 16, "n": 12})])
    assert tree.equation() == "T_L2 = {m, l}(T_L1 = {m, l}(T_C = {k}(C), T_E = {n}(E)))"
    outer = tree.level_block("L2")
    assert [(lp.name, lp.extent, lp.tile, lp.trips) for lp in outer.loops] == \
        [("m", 100, 50, 2), ("l", 80, 40, 2), ("k", 70, 70, 1), ("n", 60, 60, 1)]
    inner = tree.level_block("L1")
    assert [(lp.name, lp.extent, lp.tile, lp.trips) for lp in inner.loops] == \
        [("m", 50, 10, 5), ("l", 40, 8, 5)]
    assert [(lp.name, lp.extent, lp.tile) for lp in tree.leaf("C").loops] == [("k", 70, 16)]
    with pytest.raises(FusionError, match="tile sizes of loops m in level L1 must be at least"):
        TileTree.build(chain, [("L1", "mlkn", {"m": 0})])
    with pytest.raises(FusionError, match="tiles given for loops q"):
        TileTree.build(chain, [("L1", "mlkn", {"q": 4})])
    with pytest.raises(FusionError, match="not a permutation"):
        TileTree.build(chain, [("L1", "mlk", {})])


def test_three_operator_chain_finishes_each_reduction_before_its_consumer():
    a = te.placeholder((96, 64), name="A")
    b = te.placeholder((64, 80), name="B")
    d = te.placeholder((80, 48), name="D")
    f = te.placeholder((48, 40), name="F")
    c = ops.matmul(a, b, name="C")
    e = ops.matmul(ops.relu(c, name="r1"), d, name="E")
    g = ops.matmul(ops.relu(e, name="r2"), f, name="G")
    chain = chain_from_computes([c, e, g])
    assert chain.private_loops(0) == ("k1",) and chain.private_loops(1) == ("k2",)
    tree = TileTree.build(chain, [("L1", ("i", "k", "k2", "k1", "j"),
                                   {"i": 16, "k": 24, "k2": 20, "k1": 32, "j": 8})])
    # G runs after the k2 loop (E's reduction) is done; C and E share that loop
    assert tree.equation() == "T_L1 = {i, k}(T_C+E = {k2}(T_C = {k1}(C), T_E = {}(E)), " \
        "T_G = {j}(G))"
    solution = solve_chain(chain, capacity_bytes=32 * 1024)
    assert solution.fused and is_legal(chain, solution.order)
    assert set(solution.tile_tree().placement) == {"C", "r1", "E", "r2"}


def test_conv_chain_tile_tree_keeps_the_intermediates():
    chain = conv_chain(channels=32, height=28, width=28, mid_channels=32, out_channels=32)
    solution = solve_chain(chain, capacity_bytes=48 * 1024)
    assert solution.fused and solution.level.usage_bytes <= 48 * 1024
    tree = solution.tile_tree()
    assert set(tree.placement) == {"conv1", "act", "conv2_pad"}
    assert tree.leaf("conv1").writes == () and tree.leaf("conv2").writes == ("conv2",)


# -- bad input ----------------------------------------------------------------------------------

def test_bad_requests_are_rejected():
    chain = gemm_chain(64, 64, 64, 64)
    spec = toy_spec()
    with pytest.raises(FusionError, match="exactly one of capacity_bytes"):
        solve_chain(chain)
    with pytest.raises(FusionError, match="exactly one of capacity_bytes"):
        solve_chain(chain, 1024, spec=spec)
    with pytest.raises(FusionError, match="capacity_bytes = 0 must be positive"):
        solve_chain(chain, capacity_bytes=0)
    with pytest.raises(FusionError, match="capacity_fraction = 1.5"):
        solve_chain(chain, capacity_bytes=1024, capacity_fraction=1.5)
    with pytest.raises(FusionError, match="name loops q that chain C -> E does not have"):
        solve_chain(chain, capacity_bytes=1024, constraints={"q": LoopConstraint()})
    with pytest.raises(FusionError, match=r"LoopConstraint.minimum = 0 must be a positive"):
        LoopConstraint(minimum=0)
    with pytest.raises(FusionError, match="must be a LoopConstraint"):
        solve_chain(chain, capacity_bytes=1024, constraints={"m": 8})
    with pytest.raises(FusionError, match="level DRAM of target toy is unbounded"):
        solve_chain(chain, spec=spec, levels=["DRAM"])
    with pytest.raises(TargetError, match="unknown memory level 'L9'"):
        solve_chain(chain, spec=spec, levels=["L9"])


@pytest.mark.parametrize("units", [1, 2, 3, 4, 5])
def test_parallel_blocks_spread_evenly_over_the_units(units):
    """Chimera alone keeps all 1024 rows in one block (the fewest bytes); with the blocks
    spread over ``units`` units the most loaded unit's time decides, and the rows split into a
    multiple of ``units`` blocks."""
    chain = gemm_chain(1024, 64, 512, 64)
    rows = {"m": LoopConstraint(multiple_of=6)}
    alone = solve_chain(chain, capacity_bytes=512 * 1024, constraints=rows)
    assert alone.tiles["m"] == 1024 and alone.level.blocks is None
    run = ParallelExecution(("m",), units, 16.0)
    spread = solve_chain(chain, capacity_bytes=512 * 1024, constraints=rows, parallel=run)
    level = spread.level
    assert level.blocks == math.ceil(1024 / level.tiles["m"])
    assert level.blocks % units == 0
    assert level.tiles["m"] == 1024 or level.tiles["m"] % 6 == 0
    assert level.makespan_cycles == pytest.approx(run.compute_cycles(chain) / units)
    assert f"{level.blocks} blocks, the most loaded unit" in level.describe()


def test_parallel_time_weighs_the_bytes_moved_with_a_spec():
    """With a spec the movement term counts: of the balanced splits, the one moving fewest
    bytes wins, and the makespan is (arithmetic + DV / bw) * ceil(B / P) / B."""
    spec = toy_spec(l2_bytes=1 << 20)
    chain = gemm_chain(1024, 64, 64, 512)
    run = ParallelExecution(("m",), 2, 32.0)
    solution = solve_chain(chain, spec=spec, levels=["L2"], parallel=run,
                           constraints={"l": LoopConstraint(minimum=512)})
    level = solution.level
    blocks = level.blocks
    assert blocks % 2 == 0
    expected = (run.compute_cycles(chain) + level.volume_bytes / level.bandwidth_bytes_per_cycle
                ) * math.ceil(blocks / 2) / blocks
    assert level.makespan_cycles == pytest.approx(expected)


def test_a_maximum_bounds_the_tile():
    chain = gemm_chain(1024, 64, 512, 64)
    solution = solve_chain(chain, capacity_bytes=512 * 1024,
                           constraints={"m": LoopConstraint(multiple_of=6, maximum=200)})
    assert solution.tiles["m"] <= 200 and solution.tiles["m"] % 6 == 0
    with pytest.raises(FusionError, match="maximum 4 is below the smallest tile 6"):
        LoopConstraint(multiple_of=6, maximum=4)


@pytest.mark.parametrize("kwargs, message", [
    (dict(loops=("q",), units=2), "parallel loops q are not loops of chain"),
    (dict(loops=("m",), units=0), "units = 0 must be a positive int"),
    (dict(loops=("m",), units=2, flops_per_cycle=0.0), "must be positive"),
    (dict(loops=("m",), units=2, flops_per_cycle={"C": 8.0}), "no rate for operators E"),
])
def test_parallel_execution_rejects_what_the_chain_does_not_have(kwargs, message):
    with pytest.raises(FusionError, match=message):
        run = ParallelExecution(**kwargs)
        solve_chain(gemm_chain(64, 64, 64, 64), capacity_bytes=1 << 20, parallel=run)
