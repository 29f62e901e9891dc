"""The fusion planner solves each chain structure once: a network's repeated layers reuse the
solution, renamed to their own tensors, and the plan is the one solving every chain gives."""

from __future__ import annotations

import itertools

import pytest

import tilecraft.fusion.planner as planner_module
from tilecraft import ops, te
from tilecraft.fusion.benefit import PeakFigures
from tilecraft.fusion.derive import chain_from_computes
from tilecraft.fusion.planner import plan_fusion, structure_key
from tilecraft.fusion.solver import solve_chain
from tilecraft.graph import Graph

PEAKS = PeakFigures(bandwidth_bytes_per_s=40e9, flops_per_s=500e9)


def _blocks(count: int = 3) -> Graph:
    """``count`` identical GEMM -> ReLU -> GEMM blocks in a row, each with its own names."""
    x = te.placeholder((96, 64), name="x")
    for i in range(count):
        w1 = te.placeholder((64, 80), name=f"w1_{i}")
        w2 = te.placeholder((80, 64), name=f"w2_{i}")
        hidden = ops.relu(ops.matmul(x, w1, name=f"up_{i}"), name=f"act_{i}")
        x = ops.matmul(hidden, w2, name=f"down_{i}")
    return Graph.from_outputs([x])


def _summary(plan):
    return ([(d.subject, d.action, d.reason) for d in plan.decisions],
            [(g.computes, g.kind, g.solution.tiles if g.solution is not None
              and g.solution.fused else None) for g in plan.groups])


def test_plan_with_reuse_equals_the_plan_solving_every_chain(monkeypatch):
    graph = _blocks()
    calls = []

    def counted(*args, **kwargs):
        calls.append(args[0].names)
        return solve_chain(*args, **kwargs)

    monkeypatch.setattr(planner_module, "solve_chain", counted)
    reused = plan_fusion(graph, capacity_bytes=48 * 1024, peaks=PEAKS)
    solved_with_reuse = len(calls)
    unique = itertools.count()
    monkeypatch.setattr(planner_module, "structure_key", lambda chain: next(unique))
    solved_each = plan_fusion(graph, capacity_bytes=48 * 1024, peaks=PEAKS)
    assert _summary(reused) == _summary(solved_each)
    assert solved_with_reuse < len(calls) - solved_with_reuse  # the repeats were not solved


def test_structure_key_ignores_names_only():
    def chain(prefix: str, n: int = 48):
        a = te.placeholder((64, 32), name=prefix + "a")
        b = te.placeholder((32, n), name=prefix + "b")
        return chain_from_computes([ops.matmul(a, b, name=prefix + "c")])

    assert structure_key(chain("p")) == structure_key(chain("q"))
    assert structure_key(chain("p")) != structure_key(chain("p", n=64))


@pytest.mark.parametrize("count", [2, 4])
def test_reused_solution_names_its_own_tensors(count):
    graph = _blocks(count)
    plan = plan_fusion(graph, capacity_bytes=48 * 1024, peaks=PEAKS)
    for group in plan.groups:
        if group.solution is None or not group.solution.fused:
            continue
        chain = group.solution.chain
        own = {a.tensor for op in chain.ops for a in op.accesses}
        for level in group.solution.levels:
            assert {e.tensor for e in level.movement.entries} <= own
            fresh = solve_chain(chain, 48 * 1024).level
            if level.level == fresh.level:
                assert dict(level.tiles) == dict(fresh.tiles)
