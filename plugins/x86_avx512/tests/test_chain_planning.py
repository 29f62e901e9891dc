"""Fused chains' block sizes from Chimera's tile solver (:mod:`tilecraft_x86_avx512.
chain_planning`): the translation keeps the kernels' rules, and kernels blocked by it are
correct (``TILECRAFT_X86_CHAIN_BLOCKING=planner``)."""

import math

import numpy as np
import pytest
from tilecraft_x86_avx512 import fusion
from tilecraft_x86_avx512.chain_planning import chain_loops, planned_chain_tiles

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.fusion import LoopConstraint, chain_from_computes, solve_chain
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
def test_planned_tiles_are_the_solvers_l2_tile_within_the_kernels_rules(target, shape, rows):
    E = _chain(*shape)
    graph = tc.Graph.from_outputs([E])
    chain = fusion.as_chain(E, {t: list(graph.consumers(t)) for t in graph.computes})
    tiles = fusion._tiles()
    l2 = target.spec.memory.level("L2").size_bytes
    planned, reason = planned_chain_tiles(chain, tiles, l2, target.spec, rows=rows)
    assert planned is not None, reason
    mi1, nr1, mi2, nr2, mc = (planned[key] for key in ("mi1", "nr1", "mi2", "nr2", "mc"))
    assert (mi1, nr1) in {(t[0], t[1]) for t in tiles} and (mi2, nr2) in {
        (t[0], t[1]) for t in tiles}
    step = math.lcm(mi1 if rows else nr1, mi2)
    side = nr1 if rows else mi1
    l_total = shape[3]
    assert mc % step == 0 and 4 * math.ceil(l_total / side) * side * mc <= l2 // 2
    # the solver's own answer, asked directly: M's tile at half of L2, rounded to the step
    m_loop, l_loop = chain_loops(chain.first.tensor, chain.second.tensor)
    solution = solve_chain(chain_from_computes([chain.first.tensor, chain.second.tensor]),
                           spec=target.spec, levels=["L2"], capacity_fraction=0.5,
                           constraints={m_loop: LoopConstraint(multiple_of=step),
                                        l_loop: LoopConstraint(minimum=l_total)})
    assert solution.tiles[l_loop] == l_total
    assert mc == max(step, solution.tiles[m_loop] // step * step)


@pytest.mark.parametrize("shape", [(2, 67, 64, 97, 64), (1, 130, 33, 70, 19), (3, 50, 80, 64, 80)])
@pytest.mark.parametrize("middle", [None, "softmax"])
def test_chains_blocked_by_the_planner_are_correct(native, monkeypatch, shape, middle):
    monkeypatch.setenv("TILECRAFT_X86_CHAIN_BLOCKING", "planner")
    E = _chain(*shape, middle)
    graph = tc.Graph.from_outputs([E])
    exe = tc.compile(graph, target=native)
    assert exe.kernels[-1].attrs["fused"][0] == "T", exe.report.notes
    chain = fusion.as_chain(E, {t: list(graph.consumers(t)) for t in graph.computes})
    planned = [planned_chain_tiles(chain, fusion._tiles(), native.spec.memory.level(
        "L2").size_bytes, native.spec, rows=flag)[0]["mc"] for flag in (False, True)]
    assert any(f"M/{mc})" in exe.kernels[-1].attrs["schedule"] for mc in planned), \
        (planned, exe.kernels[-1].attrs["schedule"])
    rng = np.random.default_rng(sum(shape))
    inputs = {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in graph.inputs}
    np.testing.assert_allclose(exe(**inputs), run(graph, inputs), rtol=1e-4, atol=1e-3)


def test_an_unknown_blocking_choice_is_named(target, monkeypatch):
    from tilecraft.errors import TargetError

    monkeypatch.setenv("TILECRAFT_X86_CHAIN_BLOCKING", "fastest")
    with pytest.raises(TargetError, match="TILECRAFT_X86_CHAIN_BLOCKING='fastest': use one of "
                                          "model, planner"):
        tc.compile(_chain(1, 64, 64, 64, 64), target=target)
