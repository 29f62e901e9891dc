"""Which chain links the fusion planner plans when a compute-intensive operator has several
compute-intensive producers: the one with the strictly largest result (attention's scores,
not the value projection feeding the same GEMM), none on a tie."""

from __future__ import annotations

import numpy as np

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.fusion.benefit import PeakFigures
from tilecraft.fusion.planner import plan_fusion
from tilecraft.graph import Graph

PEAKS = PeakFigures(bandwidth_bytes_per_s=40e9, flops_per_s=500e9)


def _attention(seq: int = 64, hidden: int = 32):
    x = te.placeholder((seq, hidden), name="x")
    wq, wk, wv = (te.placeholder((hidden, hidden), name=n) for n in ("wq", "wk", "wv"))
    q = ops.matmul(x, wq, name="q")
    k = ops.matmul(x, wk, name="k")
    v = ops.matmul(x, wv, name="v")
    scores = ops.matmul(q, ops.transpose(k, (1, 0), name="kt"), name="scores")
    probs = ops.softmax(scores, name="probs")
    return ops.matmul(probs, v, name="context")


def _group_of(plan, name):
    return next(group.computes for group in plan.groups if name in group.computes)


def test_scores_chain_into_context_past_the_value_projection():
    plan = plan_fusion(Graph.from_outputs([_attention()]), capacity_bytes=1 << 20, peaks=PEAKS)
    group = _group_of(plan, "scores")
    assert "context" in group and "v" not in group
    assert plan.decision("scores -> context").action.value == "fused chain"


def test_tied_producers_link_neither():
    """``q`` and ``k`` both feed ``scores`` with results of one size: no chain from either."""
    plan = plan_fusion(Graph.from_outputs([_attention()]), capacity_bytes=1 << 20, peaks=PEAKS)
    assert "scores" not in _group_of(plan, "q") and "scores" not in _group_of(plan, "k")


def test_fused_attention_with_projections_matches_numpy():
    """The same graph compiled for x86 (scores, softmax and context in one kernel there)
    against numpy, on awkward sizes."""
    out = _attention(seq=37, hidden=24)
    graph = Graph.from_outputs([out])
    rng = np.random.default_rng(0)
    arrays = {t.name: rng.standard_normal(t.shape).astype(np.float32) * 0.3
              for t in graph.inputs}
    exe = tc.compile(out, target="x86_avx512")
    x, wq, wk, wv = (arrays[n] for n in ("x", "wq", "wk", "wv"))
    s = (x @ wq) @ (x @ wk).T
    p = np.exp(s - s.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(exe(**arrays), p @ (x @ wv), rtol=1e-4, atol=1e-5)
