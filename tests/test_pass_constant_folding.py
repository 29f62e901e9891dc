"""Constant folding: constant subgraphs become constants, values stay the reference's."""

import numpy as np

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.passes import check_equivalent_interface
from tilecraft.passes.constant_folding import FoldConstants, fold_constants


def test_constant_subgraph_collapses_into_one_constant():
    rng = np.random.default_rng(0)
    X = te.placeholder((3, 7), name="X")
    W = te.constant(rng.standard_normal((5, 7)), "float32", name="W")
    s = te.constant(rng.standard_normal((5,)), "float32", name="s")
    Wt = ops.transpose(W, name="Wt")                                  # (7, 5)
    Ws = te.compute((7, 5), lambda i, j: Wt[i, j] * s[j] + 1.0, name="Ws")
    Y = ops.relu(ops.matmul(X, Ws, name="XW"), name="Y")
    graph = tc.Graph.from_outputs([Y])
    after = fold_constants(graph)
    check_equivalent_interface(graph, after, "fold_constants")
    assert [t.name for t in after.computes] == ["XW", "Y"]
    assert [t.name for t in after.constants] == ["Ws"]
    np.testing.assert_allclose(after.tensor("Ws").constant_value,
                               W.constant_value.T * s.constant_value + 1.0, rtol=1e-6)
    x = rng.standard_normal((3, 7)).astype(np.float32)
    np.testing.assert_array_equal(tc.reference.run(after, X=x), tc.reference.run(graph, X=x))


def test_an_output_computed_from_constants_only_is_a_constant_output():
    C = te.constant(np.arange(6, dtype=np.int32).reshape(2, 3), name="C")
    Y = ops.reshape(C, (3, 2), name="Y")
    X = te.placeholder((1,), "int32", name="X")
    Z = te.compute((1,), lambda i: X[i] + Y[2, 1], name="Z")
    graph = tc.Graph.from_outputs([Y, Z])
    after = fold_constants(graph)
    check_equivalent_interface(graph, after, "fold_constants")
    assert [t.name for t in after.computes] == ["Z"] and after.tensor("Y").is_constant
    x = np.array([10], np.int32)
    for got, want in zip(tc.reference.run(after, X=x), tc.reference.run(graph, X=x)):
        np.testing.assert_array_equal(got, want)


def test_inputs_and_large_results_are_not_folded():
    X = te.placeholder((4,), name="X")
    big = te.constant(np.ones(3, np.float32), name="one")
    B = te.compute((64, 3), lambda i, j: big[j] * 2.0, name="B")
    Y = te.compute((4,), lambda i: X[i] + B[i, 0], name="Y")
    graph = tc.Graph.from_outputs([Y])
    assert [t.name for t in FoldConstants(max_elements=100)(graph).computes] == ["B", "Y"]
    assert [t.name for t in fold_constants(graph).computes] == ["Y"]
    assert fold_constants(tc.Graph.from_outputs([ops.relu(X)])).computes[0].inputs == [X]
