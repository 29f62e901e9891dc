"""TileFlow's analysis: movement against Algorithm 1 and a brute-force walk, footprint against
Chimera's memory usage, latency overlap per primitive, energy, infeasible trees."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from dataflow_helpers import brute_force_loads, toy_spec  # noqa: E402

from tilecraft.dataflow import (  # noqa: E402
    DataflowError,
    DataflowTree,
    Loop,
    LoopKind,
    OpNode,
    ScopeKind,
    ScopeNode,
    TileNode,
    analyze_movement,
    analyze_tree,
    from_tile_tree,
)
from tilecraft.fusion import (  # noqa: E402
    TileTree,
    analyze,
    attention_chain,
    conv_chain,
    dataflow_classes,
    gemm_chain,
    legal_orders,
    solve_chain,
)

CHAINS = [gemm_chain(64, 32, 48, 16), gemm_chain(37, 13, 29, 11), gemm_chain(2, 7, 5, 3),
          gemm_chain(1, 6, 1, 5), conv_chain(1, 8, 9, 7), attention_chain(3, 20, 8)]


def _canonical(chain, order, tiles):
    """The order Chimera's tree runs: inside the loops both operators use (those that run
    once wherever they sit), the producer's loops before the consumer's."""
    used_first = chain.op_loops(0)
    both = used_first & chain.op_loops(1)
    split = max((i + 1 for i, lp in enumerate(order)
                 if lp in both and tiles.get(lp, chain.extents[lp]) < chain.extents[lp]),
                default=0)
    suffix = [lp for lp in order[split:] if lp not in both]
    return (tuple(order[:split]) + tuple(lp for lp in order[split:] if lp in both)
            + tuple(lp for lp in suffix if lp in used_first)
            + tuple(lp for lp in suffix if lp not in used_first))


def _check_producer_finishes_first(tile_tree):
    """No loop private to the producer runs more than once around the consumer."""
    chain = tile_tree.chain
    private = set(chain.private_loops(0))
    around = [lp for block in tile_tree.blocks() if block.op is None
              and tile_tree.leaf(chain.ops[-1].name) in block.walk() for lp in block.loops]
    assert not [lp for lp in around if lp.name in private and lp.trips > 1], tile_tree


def _orders(chain):
    if len(chain.loops) <= 4:
        return legal_orders(chain)
    return [c.order for c in dataflow_classes(chain)]


@pytest.mark.parametrize("chain", CHAINS, ids=lambda c: f"{c.names}:{c.extents}")
def test_movement_and_footprint_equal_algorithm_1(chain):
    rng = random.Random(len(chain.loops) * 7919 + sum(chain.extents.values()))
    spec = toy_spec(l1_bytes=None)
    checked = 0
    for order in _orders(chain):
        for _ in range(4):
            # a third of the loops run once (tile = extent): they index nothing (Eq. 3.9)
            tiles = {v: rng.choice([e, rng.randint(1, e), rng.randint(1, e)])
                     for v, e in chain.extents.items() if v not in chain.fixed_loops()}
            expected = analyze(chain, _canonical(chain, order, tiles)).evaluate(tiles)
            tile_tree = TileTree.build(chain, [("L1", order, tiles)])
            _check_producer_finishes_first(tile_tree)
            tree = from_tile_tree(tile_tree)
            cost = analyze_tree(tree, spec)
            moved = cost.movement.per_tensor("L1")
            assert {t: moved.get(t, 0) for t in expected.per_tensor} == \
                {t: int(v) for t, v in expected.per_tensor.items()}
            assert cost.footprint_bytes["L1"] == expected.usage_bytes
            checked += 1
    assert checked >= 8


def test_trees_of_orders_with_the_whole_row_inside_the_reduction_are_legal():
    # attention's l runs once (softmax keeps whole rows): orders placing it inside the
    # producer's reduction k are legal, and the tree must still finish S before O reads it
    chain = attention_chain(2, 12, 4)
    orders = [o for o in legal_orders(chain) if o.index("l") > o.index("k")]
    assert orders
    spec = toy_spec(l1_bytes=None)
    for order in orders[::7]:
        tiles = {"b": 1, "m": 5, "k": 2, "n": 3}
        tile_tree = TileTree.build(chain, [("L1", order, tiles)])
        _check_producer_finishes_first(tile_tree)
        expected = analyze(chain, _canonical(chain, order, tiles)).evaluate(tiles)
        moved = analyze_tree(from_tile_tree(tile_tree), spec).movement.per_tensor("L1")
        assert {t: moved.get(t, 0) for t in expected.per_tensor} == \
            {t: int(v) for t, v in expected.per_tensor.items()}


def test_chimera_solution_tree_agrees_in_its_own_order():
    chain = gemm_chain(512, 256, 384, 128)
    solution = solve_chain(chain, capacity_bytes=64 * 1024)
    expected = analyze(chain, solution.order).evaluate(solution.tiles)
    tree = from_tile_tree(solution.tile_tree())
    cost = analyze_tree(tree, toy_spec(l1_bytes=64 * 1024).model_copy(update={"memory": (
        toy_spec().memory.model_copy(update={"levels": (
            toy_spec().memory.levels[0],
            toy_spec().memory.levels[1].model_copy(update={"name": "on_chip",
                                                           "size_bytes": 64 * 1024}))}))}))
    moved = cost.movement.per_tensor("on_chip")
    assert {t: moved.get(t, 0) for t in expected.per_tensor} == \
        {t: int(v) for t, v in expected.per_tensor.items()}
    assert cost.footprint_bytes["on_chip"] == expected.usage_bytes
    assert cost.feasible


def test_algorithm_1_counts_a_consumer_loop_the_tree_places_beside_the_producer():
    # order m l n k: Algorithm 1 lets n (E's loop) reload A; the tree runs k and n as siblings
    chain = gemm_chain(64, 32, 48, 16)
    tiles = {"m": 16, "n": 8, "k": 12, "l": 16}
    tree = from_tile_tree(TileTree.build(chain, [("L1", "mlnk", tiles)]))
    moved = analyze_movement(tree, ("DRAM", "L1")).per_tensor("L1")
    literal = analyze(chain, "mlnk").evaluate(tiles).per_tensor
    assert literal["A"] == moved["A"] * 4  # ceil(32 / 8) trips of n


@pytest.mark.parametrize("extents,tiles2,tiles1", [
    ((24, 10, 18, 12), {"m": 12, "n": 10, "k": 18, "l": 6}, {"m": 4, "n": 5, "k": 3, "l": 6}),
    ((13, 7, 11, 5), {"m": 7, "n": 3, "k": 11, "l": 5}, {"m": 2, "n": 3, "k": 2, "l": 1}),
    ((1, 5, 3, 2), {"m": 1, "n": 4, "k": 3, "l": 2}, {"m": 1, "n": 3, "k": 1, "l": 1}),
])
@pytest.mark.parametrize("orders", [("mlkn", "lmkn"), ("nmlk", "mlkn")])
def test_two_level_movement_equals_brute_force(extents, tiles2, tiles1, orders):
    chain = gemm_chain(*extents)
    tree = from_tile_tree(TileTree.build(chain, [("L2", orders[0], tiles2),
                                                 ("L1", orders[1], tiles1)]))
    levels = ("DRAM", "L2", "L1")
    movement = analyze_movement(tree, levels)
    exact = 0
    for record in movement.records:
        walked = brute_force_loads(tree, record.op, record.tensor, record.level, levels)
        indexing = set(tree.workload.op(record.op).access(record.tensor).loops)
        seen = [lp for lp in tree.path_loops(record.op)
                if levels.index(lp.level) <= levels.index(record.level)]
        # a loop that runs once indexes nothing (Eq. 3.9): the reloads start further out
        last = max((i for i, lp in enumerate(seen) if lp.var in indexing and lp.trips > 1),
                   default=None)
        if last is None or all(lp.extent % lp.step == 0 for lp in seen[:last]
                               if lp.var == seen[last].var):
            assert record.elements == walked
            exact += 1
        else:  # partial outer tiles: the loop may run once in some of them
            assert record.elements >= walked
    assert exact >= 6
    assert {r.level for r in movement.records} == {"L2", "L1"}


def _pipe_tree(kind: ScopeKind, chain=None):
    chain = chain or gemm_chain(64, 64, 64, 64)
    leaf_c = TileNode("L1", (Loop("k", 16), Loop("m", 4, LoopKind.SPATIAL)), OpNode("C"))
    leaf_e = TileNode("L1", (Loop("n", 16), Loop("m", 4, LoopKind.SPATIAL)), OpNode("E"))
    return DataflowTree(chain, TileNode("L1", (Loop("m", 16), Loop("l", 16)),
                                        ScopeNode(kind, (leaf_c, leaf_e))))


def test_scopes_overlap_as_eq_3_22_says():
    spec = toy_spec(l1_bytes=None, pes=8)
    costs = {kind: analyze_tree(_pipe_tree(kind), spec) for kind in ScopeKind}
    compute = {op: 64 ** 3 / 4 for op in "CE"}  # MACs over 4 PEs each
    seq = costs[ScopeKind.SEQ]
    assert seq.pes_used == 4 and costs[ScopeKind.PIPE].pes_used == 8
    body_seq = compute["C"] + compute["E"]
    loads = sum(r.bytes for r in seq.movement.records if r.direction == "load") / 8
    assert seq.cycles == pytest.approx(max(body_seq, loads))
    assert costs[ScopeKind.PARA].cycles <= costs[ScopeKind.PIPE].cycles \
        <= costs[ScopeKind.SHAR].cycles == seq.cycles
    # energy: bytes x (DRAM + L1 pJ/B) + MACs x pJ/MAC
    moved = sum(r.bytes for r in seq.movement.records)
    assert seq.energy_pj == pytest.approx(moved * 101.0 + 2 * 64 ** 3 * 0.5)
    # Seq keeps the larger child's tiles, Shar both children's
    assert costs[ScopeKind.SEQ].footprint_bytes["L1"] < costs[ScopeKind.SHAR].footprint_bytes["L1"]


def test_layerwise_moves_the_intermediate_through_dram():
    chain = gemm_chain(32, 16, 24, 8)
    tree = DataflowTree(chain, ScopeNode(ScopeKind.SEQ, (
        TileNode("L1", (Loop("m", 8), Loop("l", 8), Loop("k", 8)), OpNode("C")),
        TileNode("L1", (Loop("m", 8), Loop("n", 16), Loop("l", 8)), OpNode("E")))))
    movement = analyze_movement(tree, ("DRAM", "L1"))
    assert movement.homes["C"] == "DRAM"
    stored = [r for r in movement.records if r.tensor == "C" and r.direction == "store"]
    loaded = [r for r in movement.records if r.tensor == "C" and r.direction == "load"]
    assert [r.elements for r in stored] == [32 * 8]
    assert [r.elements for r in loaded] == [32 * 8]
    fused = from_tile_tree(TileTree.build(chain, [("L1", "mlkn", {"m": 8, "l": 8, "k": 8,
                                                                  "n": 16})]))
    assert analyze_movement(fused, ("DRAM", "L1")).per_tensor("L1").get("C", 0) == 0


def test_shar_loads_a_shared_input_once_seq_twice():
    # two GEMMs reading the same A (C = A B, E = A D) under one tile of m
    from tilecraft.fusion import Chain, ChainLoop, ChainOp, TensorAccess, TensorRole
    a = TensorAccess.of("A", (("m",), ("k",)), TensorRole.INPUT)
    chain = Chain((
        ChainOp("C", ("m", "l", "k"), ("k",), (a, TensorAccess.of("B", (("k",), ("l",)),
                                                                  TensorRole.INPUT),
                                              TensorAccess.of("C", (("m",), ("l",)),
                                                              TensorRole.OUTPUT))),
        ChainOp("E", ("m", "n", "k"), ("k",), (a, TensorAccess.of("D", (("k",), ("n",)),
                                                                  TensorRole.INPUT),
                                              TensorAccess.of("E", (("m",), ("n",)),
                                                              TensorRole.OUTPUT)))),
        tuple(ChainLoop(v, 16) for v in "mlnk"))
    def tree(kind):
        return DataflowTree(chain, TileNode("L1", (Loop("m", 4), Loop("k", 16)), ScopeNode(
            kind, (TileNode("L1", (Loop("l", 16),), OpNode("C")),
                   TileNode("L1", (Loop("n", 16),), OpNode("E"))))))
    seq = analyze_movement(tree(ScopeKind.SEQ), ("DRAM", "L1")).per_tensor()["A"]
    shar = analyze_movement(tree(ScopeKind.SHAR), ("DRAM", "L1")).per_tensor()["A"]
    assert (seq, shar) == (2 * 16 * 16, 16 * 16)


def test_footprint_over_a_level_names_it():
    chain = gemm_chain(64, 64, 64, 64)
    tree = from_tile_tree(TileTree.build(chain, [("L1", "mlkn", {"m": 64, "l": 64, "k": 64,
                                                                 "n": 64})]))
    cost = analyze_tree(tree, toy_spec(l1_bytes=4096))
    assert not cost.feasible
    with pytest.raises(DataflowError, match=r"level L1: tile node L1 holds \d+ bytes"):
        cost.check()


def test_too_many_spatial_iterations_name_the_pe_level():
    cost = analyze_tree(_pipe_tree(ScopeKind.PARA), toy_spec(l1_bytes=None, pes=6))
    with pytest.raises(DataflowError, match="level PE: the tree spans 8"):
        cost.check()


def test_unknown_level_names_node_and_field():
    tree = _pipe_tree(ScopeKind.SEQ)
    with pytest.raises(DataflowError, match="field level.*not a memory level"):
        analyze_movement(tree, ("DRAM", "L2"))


def test_conv_macs_count_the_halo_each_tile_recomputes():
    chain = conv_chain(1, 4, 9, 7)  # 3x3 windows, padding 1: conv1 computes 11 x 9 rows/cols
    whole = {v: e for v, e in chain.extents.items()}
    conv1 = 16 * 11 * 9 * (4 * 3 * 3)  # outputs with the halo x (rc1 rh1 rw1)
    conv2 = 16 * 9 * 7 * (16 * 3 * 3)
    spec = toy_spec(l1_bytes=None)
    order = dataflow_classes(chain)[0].order
    once = analyze_tree(from_tile_tree(TileTree.build(chain, [("L1", order, whole)])), spec)
    assert once.macs == conv1 + conv2
    rows = {**whole, "h": 3}  # three row tiles: conv1 recomputes 2 halo rows twice more
    tiled = analyze_tree(from_tile_tree(TileTree.build(chain, [("L1", order, rows)])), spec)
    assert tiled.macs == conv2 + 16 * (9 + 3 * 2) * 9 * (4 * 3 * 3)


def test_single_gemm_layer_reads_out_per_level_accesses():
    # what a single-layer mapper (ZigZag, Timeloop) reports per mapping: fills, updates, reads
    from tilecraft.fusion import Chain, ChainLoop, ChainOp, TensorAccess, TensorRole
    chain = Chain((ChainOp("C", ("m", "n", "k"), ("k",), (
        TensorAccess.of("A", (("m",), ("k",)), TensorRole.INPUT),
        TensorAccess.of("B", (("k",), ("n",)), TensorRole.INPUT),
        TensorAccess.of("C", (("m",), ("n",)), TensorRole.OUTPUT))),),
        (ChainLoop("m", 24), ChainLoop("n", 13), ChainLoop("k", 9)))
    tree = DataflowTree(chain, TileNode("L2", (Loop("m", 8), Loop("n", 6)), TileNode(
        "L1", (Loop("k", 4), Loop("m", 4)), OpNode("C"))))
    levels = ("DRAM", "L2", "L1")
    movement = analyze_movement(tree, levels)
    for record in movement.records:
        assert record.elements == brute_force_loads(tree, "C", record.tensor, record.level,
                                                    levels)
    table = movement.accesses()
    loads = {lv: sum(r.bytes for r in movement.records if r.level == lv and
                     r.direction == "load") for lv in levels[1:]}
    assert table["L2"]["fill"] == loads["L2"] and table["L1"]["fill"] == loads["L1"]
    assert table["DRAM"]["read"] == loads["L2"]
    assert table["DRAM"]["update"] == 24 * 13 * 4  # C written once: k runs inside L2's tile
    assert table["L2"]["read"] == loads["L1"] + table["DRAM"]["update"]
    cost = analyze_tree(tree, toy_spec(l2_bytes=1 << 20))
    assert cost.macs == 24 * 13 * 9
