"""Fused chains' block sizes from Chimera's tile solver (:mod:`tilecraft_x86_avx512.
chain_planning`): the translation keeps the kernels' rules, and kernels blocked by it are
correct, and the blocks spread evenly over the cores."""

import math

import numpy as np
import pytest
from tilecraft_x86_avx512 import fusion
from tilecraft_x86_avx512.chain_planning import (
    _best_tile,
    _rates,
    chain_loops,
    planned_chain_tiles,
    planned_column_tiles,
)

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.fusion import LoopConstraint, ParallelExecution, chain_from_computes, solve_chain
from tilecraft.reference import run


def _chain(batch, m, k, l, n, middle=None):
    A = te.placeholder((batch, m, k), name="A")
    B = te.placeholder((batch, k, l), name="B")
    D = te.placeholder((batch, l, n), name="D")
    T = ops.batch_matmul(A, B, name="T")
    Z = ops.softmax(T, name="S") if middle == "softmax" else T
    return ops.batch_matmul(Z, D, name="E")


@pytest.mark.parametrize("shape", [(12, 256, 64, 256, 64), (1, 1024, 64, 512, 64),
                                   (16, 208, 80, 208, 80)])
@pytest.mark.parametrize("rows", [False, True])
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_planned_tiles_are_the_solvers_l2_tile_within_the_kernels_rules(target, shape, rows,
                                                                         threads):
    E = _chain(*shape)
    graph = tc.Graph.from_outputs([E])
    chain = fusion.as_chain(E, {t: list(graph.consumers(t)) for t in graph.computes})
    tiles = fusion._tiles()
    l2 = target.spec.memory.level("L2").size_bytes
    planned, reason = planned_chain_tiles(chain, tiles, target.spec, threads, rows=rows)
    assert planned is not None, reason
    mi1, nr1, mi2, nr2, mc = (planned[key] for key in ("mi1", "nr1", "mi2", "nr2", "mc"))
    assert (mi1, nr1) in {(t[0], t[1]) for t in tiles} and (mi2, nr2) in {
        (t[0], t[1]) for t in tiles}
    step = math.lcm(mi1 if rows else nr1, mi2)
    side = nr1 if rows else mi1
    batch, m_total, _, l_total, _ = shape
    assert mc % step == 0
    assert mc >= m_total or 4 * math.ceil(l_total / side) * side * mc <= l2 // 2
    # the solver's own answer, asked directly with the kernels' constraints
    m_loop, l_loop = chain_loops(chain.first.tensor, chain.second.tensor)
    core = chain_from_computes([chain.first.tensor, chain.second.tensor])
    batch_loops = [lp for index in core.ops[-1].output.indices[:-2] for lp in index.loops]
    rows_cap = max(step, l2 // 2 // (4 * math.ceil(l_total / side) * side) // step * step)
    # each product's flops per cycle: the core's peak scaled by its register tile's intensity
    # (the blocks' balance depends on them, and the peak is this machine's)
    rates = _rates(target.spec, tiles, {
        core.ops[0].name: (_best_tile(tiles, l_total, 1 if rows else 0), l_total,
                           1 if rows else 0),
        core.ops[-1].name: (_best_tile(tiles, shape[4], 1), shape[4], 1)})
    solution = solve_chain(core, spec=target.spec, levels=["L2"], constraints={
        m_loop: LoopConstraint(multiple_of=step, maximum=rows_cap),
        l_loop: LoopConstraint(minimum=l_total),
        **{lp: LoopConstraint(maximum=1) for lp in batch_loops}},
        parallel=ParallelExecution((*batch_loops, m_loop), threads, rates))
    assert solution.tiles[l_loop] == l_total
    tile = solution.tiles[m_loop]
    assert mc == (math.ceil(m_total / step) * step if tile >= m_total else tile)


def test_the_blocks_are_balanced_over_the_cores(target):
    """One 1024-row chain (thesis G12): the fewest bytes come from the largest block that
    fits (five blocks of 252 rows, or four); on two cores the planner picks an even count."""
    E = _chain(1, 1024, 64, 512, 64)
    graph = tc.Graph.from_outputs([E])
    chain = fusion.as_chain(E, {t: list(graph.consumers(t)) for t in graph.computes})
    blocks = {}
    for threads in (1, 2, 3):
        planned, reason = planned_chain_tiles(chain, fusion._tiles(), target.spec, threads,
                                              rows=True)
        assert planned is not None, reason
        blocks[threads] = math.ceil(1024 / planned["mc"])
    assert blocks[2] % 2 == 0 and blocks[3] % 3 == 0, blocks


def test_a_chain_whose_weights_outweigh_its_intermediate_is_left_unfused(target):
    """A Transformer FFN (512 x 768 -> 3072 -> 768): fused, every block of rows would read
    both 9 MB weights again from beyond L2, more than the unfused intermediate costs; a chain
    of the same rows with narrow weights (attention-like, K = N = 64) stays fused."""
    tiles = fusion._tiles()
    for (k, l, n), fused in (((768, 3072, 768), False), ((64, 512, 64), True)):
        A = te.placeholder((512, k), name="A")
        B = te.placeholder((k, l), name="B")
        D = te.placeholder((l, n), name="D")
        E = ops.matmul(ops.relu(ops.matmul(A, B, name="T"), name="R"), D, name="E")
        graph = tc.Graph.from_outputs([E])
        chain = fusion.as_chain(E, {t: list(graph.consumers(t)) for t in graph.computes})
        planned, reason = planned_chain_tiles(chain, tiles, target.spec, 1, rows=True)
        assert (planned is not None) == fused, reason
        if not fused:
            assert "again for each of its" in reason and "MB unfused" in reason, reason


@pytest.mark.parametrize("shape", [(2, 67, 64, 97, 64), (1, 130, 33, 70, 19), (3, 50, 80, 64, 80)])
@pytest.mark.parametrize("middle", [None, "softmax"])
def test_chains_blocked_by_the_planner_are_correct(native, shape, middle):
    E = _chain(*shape, middle)
    graph = tc.Graph.from_outputs([E])
    exe = tc.compile(graph, target=native)
    assert exe.kernels[-1].attrs["fused"][0] == "T", exe.report.notes
    chain = fusion.as_chain(E, {t: list(graph.consumers(t)) for t in graph.computes})
    planned = [planned_chain_tiles(chain, fusion._tiles(), native.spec, native.threads,
                                   rows=flag)[0]["mc"] for flag in (False, True)]
    assert any(f"M/{mc})" in exe.kernels[-1].attrs["schedule"] for mc in planned), \
        (planned, exe.kernels[-1].attrs["schedule"])
    rng = np.random.default_rng(sum(shape))
    inputs = {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in graph.inputs}
    np.testing.assert_allclose(exe(**inputs), run(graph, inputs), rtol=1e-4, atol=1e-3)


def _conv_chain(channels, size, oc1, oc2):
    x = te.placeholder((1, channels, size, size), name="x")
    w1 = te.placeholder((oc1, channels, 3, 3), name="w1")
    w2 = te.placeholder((oc2, oc1, 1, 1), name="w2")
    act = ops.relu(ops.conv2d(x, w1, padding=1, name="conv1"), name="act")
    return ops.conv2d(act, w2, name="conv2")


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_column_chain_tiles_follow_the_kernels_rules_and_balance_the_cores(target, threads):
    out = _conv_chain(64, 56, 128, 64)
    graph = tc.Graph.from_outputs([out])
    chain = fusion.as_column_chain(out, {t: list(graph.consumers(t)) for t in graph.computes})
    assert chain is not None
    planned, reason = planned_column_tiles(chain, fusion._tiles(), target.spec, threads)
    assert planned is not None, reason
    _, l_total, n_total, _ = chain.first.extents()
    nc, kc = planned["nc"], planned["kc"]
    assert nc % planned["nr1"] == 0 and nc % planned["nr2"] == 0
    l_padded = math.ceil(l_total / planned["mi1"]) * planned["mi1"]
    assert 4 * (l_padded + kc) * nc <= target.spec.memory.level("L2").size_bytes // 2
    assert 4 * kc * planned["nr1"] <= target.spec.memory.level("L1").size_bytes // 2
    assert math.ceil(n_total / nc) % threads == 0


def test_column_chains_blocked_by_the_planner_are_correct(native):
    out = _conv_chain(7, 29, 37, 19)
    graph = tc.Graph.from_outputs([out])
    exe = tc.compile(graph, target=native)
    assert any(k.attrs.get("fused") for k in exe.kernels), exe.report.notes
    rng = np.random.default_rng(5)
    inputs = {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in graph.inputs}
    np.testing.assert_allclose(exe(**inputs), run(graph, inputs), rtol=1e-4, atol=1e-3)
