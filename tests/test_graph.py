"""The DAG of computes."""

from __future__ import annotations

import pytest

import tilecraft as tc
from tilecraft import te
from tilecraft.errors import GraphError


def _attention():
    Q = te.placeholder((2, 8, 4), name="Q")
    K = te.placeholder((2, 4, 8), name="K")
    V = te.placeholder((2, 8, 4), name="V")
    k = te.reduce_axis(4, name="k")
    S = te.compute((2, 8, 8), lambda b, i, j: te.sum(Q[b, i, k] * K[b, k, j], axis=k), name="S")
    lmax = te.reduce_axis(8, name="l")
    M = te.compute((2, 8), lambda b, i: te.max(S[b, i, lmax], axis=lmax), name="Max")
    E = te.compute((2, 8, 8), lambda b, i, j: te.exp(S[b, i, j] - M[b, i]), name="Exp")
    lsum = te.reduce_axis(8, name="l")
    Z = te.compute((2, 8), lambda b, i: te.sum(E[b, i, lsum], axis=lsum), name="Sum")
    P = te.compute((2, 8, 8), lambda b, i, j: E[b, i, j] / Z[b, i], name="Div")
    l2 = te.reduce_axis(8, name="l")
    O = te.compute((2, 8, 4), lambda b, i, j: te.sum(P[b, i, l2] * V[b, l2, j], axis=l2),  # noqa: E741
                   name="A")
    return O


def test_topological_order_and_inputs() -> None:
    g = tc.Graph.from_outputs([_attention()])
    names = [t.name for t in g.computes]
    assert names == ["S", "Max", "Exp", "Sum", "Div", "A"]
    assert [t.name for t in g.inputs] == ["Q", "K", "V"]
    exp = g.tensor("Exp")
    assert sorted(t.name for t in g.consumers(exp)) == ["Div", "Sum"]
    assert sorted(t.name for t in g.producers(exp)) == ["Max", "S"]
    assert len(g) == 6


def test_ssa_printing() -> None:
    text = str(tc.Graph.from_outputs([_attention()]))
    assert text.splitlines()[0] == "graph(Q: float32[2, 8, 4], K: float32[2, 4, 8], " \
                                   "V: float32[2, 8, 4]) -> (A):"
    assert "  Max[b, i] = max(S[b, i, l], axis=[l])" in text
    assert "  Exp[b, i, j] = exp((S[b, i, j] - Max[b, i]))" in text


def test_duplicate_names_are_rejected() -> None:
    A1 = te.placeholder((4,), name="A")
    A2 = te.placeholder((4,), name="A")
    B = te.compute((4,), lambda i: A1[i] + A2[i], name="B")
    with pytest.raises(GraphError, match="both named 'A'"):
        tc.Graph.from_outputs([B])


def test_unknown_tensor_lookup_lists_names() -> None:
    g = tc.Graph.from_outputs([_attention()])
    with pytest.raises(GraphError, match="Div"):
        g.tensor("nope")


def test_empty_graph_is_an_error() -> None:
    with pytest.raises(GraphError):
        tc.Graph.from_outputs([])
