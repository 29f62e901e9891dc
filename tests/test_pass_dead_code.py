"""Dead-code elimination: branches never taken drop the computes only they read."""

import numpy as np

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.passes import check_equivalent_interface
from tilecraft.passes.dead_code import eliminate_dead_code


def test_settled_selects_drop_what_only_their_dead_branch_reads():
    A = te.placeholder((5, 3), name="A")
    B = te.placeholder((4, 3), name="B")
    rA, rB = ops.relu(A, name="rA"), ops.relu(B, name="rB")
    eB = ops.relu(rB, name="eB")
    # rows 0..4 of concat([rA, eB]) in one compute: the eB branch is never taken
    head = te.compute((5, 3), lambda i, j: te.select(i < 5, rA[i, j], eB[(i + 3) % 4, j]),
                      name="head")
    # nested: the inner condition is settled by the outer one (i >= 2 there)
    nested = te.compute((7, 3), lambda i, j: te.select(
        i < 2, rA[i, j], te.select(i >= 2, rB[i % 4, j], eB[0, j])), name="nested")
    keep = te.compute((9, 3), lambda i, j: te.select(i < 5, rA[i % 5, j], rB[i % 4, j]),
                      name="keep")
    graph = tc.Graph.from_outputs([head, nested, keep])
    after = eliminate_dead_code(graph)
    check_equivalent_interface(graph, after, "eliminate_dead_code")
    assert "eB" in [t.name for t in graph.computes]
    assert sorted(t.name for t in after.computes) == ["head", "keep", "nested", "rA", "rB"]
    assert "select" not in after.tensor("head").statement()
    rng = np.random.default_rng(0)
    inputs = {"A": rng.standard_normal((5, 3)).astype(np.float32),
              "B": rng.standard_normal((4, 3)).astype(np.float32)}
    for got, want in zip(tc.reference.run(after, inputs=inputs),
                         tc.reference.run(graph, inputs=inputs)):
        np.testing.assert_array_equal(got, want)


def test_a_graph_without_dead_code_is_returned_unchanged():
    A = te.placeholder((3,), name="A")
    graph = tc.Graph.from_outputs([ops.relu(A, name="Y")])
    assert eliminate_dead_code(graph) is graph


def test_a_pruned_branch_holding_the_last_read_of_an_input_is_kept():
    # found by the random-program test: X is read only in a branch never taken (j - 2 < 0
    # for j < 2); pruning it would drop X from the graph's inputs, which callers still pass
    Y = te.placeholder((1, 2), "int32", name="Y")
    X = te.placeholder((1, 2), "int32", name="X")
    E = te.compute((1, 2), lambda i, j: Y[0, j] - te.select(j - 2 >= 0, X[i, (j - 2) % 2], 0),
                   name="E")
    graph = tc.Graph.from_outputs([E])
    after = eliminate_dead_code(graph)
    check_equivalent_interface(graph, after, "eliminate_dead_code")
    exe = tc.compile(graph, target="x86_avx512")
    y, x = np.array([[5, 7]], np.int32), np.array([[1, 2]], np.int32)
    np.testing.assert_array_equal(exe(Y=y, X=x), y)
