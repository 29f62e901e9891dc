"""tilecraft.fusion.row_groups: which computes form a row group (target-neutral)."""

from __future__ import annotations

from tilecraft import ops, te
from tilecraft.fusion.row_groups import row_groups
from tilecraft.graph import Graph


def _groups(*outputs):
    return [g.computes for g in row_groups(Graph.from_outputs(list(outputs)))]


def test_softmax_log_softmax_layer_norm_are_one_group_each():
    x = te.placeholder((2, 3, 7), name="x")
    g = te.placeholder((7,), name="g")
    b = te.placeholder((7,), name="b")
    assert _groups(ops.softmax(x, name="s")) == [("s_max", "s_sub", "s_exp", "s_sum", "s")]
    (log,) = _groups(ops.log_softmax(x, name="l"))
    assert log[-1] == "l" and {"l_max", "l_sum"} <= set(log)
    (norm,) = _groups(ops.layer_norm(x, g, b, name="n"))
    assert norm[-1] == "n" and {"n_sum", "n_mean", "n_squares"} <= set(norm)


def test_an_intermediate_read_outside_or_a_graph_output_stays_out():
    x = te.placeholder((4, 9), name="x")
    y = ops.softmax(x, name="y")
    graph = Graph.from_outputs([y])
    exp = next(t for t in graph.computes if t.name == "y_exp")
    # y_exp also a graph output: y's group stops there, y_exp ends a group of its own
    groups = [g.computes for g in row_groups(Graph.from_outputs([y, exp]))]
    assert sorted(groups) == [("y_max", "y_sub", "y_exp"), ("y_sum", "y")]
    # computes a target has taken (a fused chain) are left out
    assert [g.computes for g in row_groups(graph, taken={"y"})] == [("y_max", "y_sub", "y_exp")]


def test_a_matmul_and_a_column_reduction_are_not_row_members():
    a = te.placeholder((8, 16), name="a")
    w = te.placeholder((16, 16), name="w")
    h = ops.matmul(a, w, name="h")
    (group,) = _groups(ops.softmax(h, name="s"))
    assert "h" not in group
    x = te.placeholder((6, 5), name="x")
    k = te.reduce_axis(6, name="k")
    col = te.compute((5,), lambda j: te.sum(x[k, j], axis=k), name="col")
    y = te.compute((6, 5), lambda i, j: x[i, j] / col[j], name="y")
    assert _groups(y) == []   # col reduces over rows, not along them
