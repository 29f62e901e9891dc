"""Algebraic simplification: graph shape changes as intended, values stay the reference's."""

import numpy as np
import pytest

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.passes import check_equivalent_interface
from tilecraft.passes.simplify import simplify


def _same_values(before: tc.Graph, after: tc.Graph, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    inputs = {t.name: rng.standard_normal(t.shape).astype(t.dtype.numpy) for t in before.inputs}
    check_equivalent_interface(before, after, "simplify")
    np.testing.assert_array_equal(tc.reference.run(after, inputs=inputs),
                                  tc.reference.run(before, inputs=inputs))


def test_transposes_that_cancel_are_removed():
    A = te.placeholder((2, 7, 3), name="A")
    T = ops.transpose(ops.transpose(A, (2, 0, 1), name="T1"), (1, 2, 0), name="T2")
    graph = tc.Graph.from_outputs([ops.relu(T, name="Y")])
    after = simplify(graph)
    assert [t.name for t in after.computes] == ["Y"]
    assert after.tensor("Y").inputs == [A]
    _same_values(graph, after)


def test_transposes_compose_into_one():
    A = te.placeholder((2, 5, 3), name="A")
    T = ops.transpose(ops.transpose(A, (1, 0, 2), name="T1"), (2, 1, 0), name="T2")
    graph = tc.Graph.from_outputs([ops.relu(T, name="Y")])
    after = simplify(graph)
    assert [t.name for t in after.computes] == ["T2", "Y"]
    assert after.tensor("T2").inputs == [A]
    _same_values(graph, after)


@pytest.mark.parametrize(("source", "chain"), [((2, 3, 35), [(6, 35), (3, 70), (210,)]),
                                               ((1, 13), [(13, 1), (13,)]),
                                               ((4, 6), [(24,), (2, 12)])])
def test_reshape_of_reshape_is_one_clean_reshape(source, chain):
    A = te.placeholder(source, name="A")
    r = A
    for position, shape in enumerate(chain):
        r = ops.reshape(r, shape, name=f"R{position}")
    graph = tc.Graph.from_outputs([ops.relu(r, name="Y")])
    after = simplify(graph)
    reshapes = [t for t in after.computes if t.name != "Y"]
    assert len(reshapes) == 1 and reshapes[0].inputs == [A]
    clean = ops.reshape(A, reshapes[0].shape, name="clean")
    assert reshapes[0].statement().split("=")[1] == clean.statement().split("=")[1]
    _same_values(graph, after)


def test_reshape_to_the_same_shape_and_back_is_removed():
    A = te.placeholder((3, 4), name="A")
    back = ops.reshape(ops.reshape(A, (12,), name="flat"), (3, 4), name="back")
    same = ops.reshape(back, (3, 4), name="same")
    graph = tc.Graph.from_outputs([ops.relu(same, name="Y")])
    after = simplify(graph)
    assert [t.name for t in after.computes] == ["Y"]
    _same_values(graph, after)


def test_identity_casts_and_exact_constants():
    A = te.placeholder((5, 3), "float16", name="A")
    I = te.placeholder((5, 3), "int8", name="I")
    Y = te.compute((5, 3), lambda i, j: (A[i, j].astype("float32").astype("float16") * 1.0
                                         / 1.0 - 0.0 + (-0.0)), name="Y")
    Z = te.compute((5, 3), lambda i, j: I[i, j].astype("int32").astype("int8") + 0, name="Z")
    K = te.compute((5, 3), lambda i, j: A[i, j].astype("float32") + 0.0, name="K")
    C = ops.cast(A, "float16", name="C")
    W = ops.relu(C, name="W")
    graph = tc.Graph.from_outputs([Y, Z, K, W])
    after = simplify(graph)
    assert after.tensor("Y").body == te.Load(A, after.tensor("Y").axes)
    assert after.tensor("Z").body == te.Load(I, after.tensor("Z").axes)
    assert "+ 0.0" in after.tensor("K").statement()  # -0.0 + 0.0 is +0.0: kept
    assert "C" not in [t.name for t in after.computes] and after.tensor("W").inputs == [A]
    rng = np.random.default_rng(3)
    inputs = {"A": rng.standard_normal((5, 3)).astype(np.float16),
              "I": rng.integers(-128, 127, (5, 3)).astype(np.int8)}
    inputs["A"][0, 0] = -0.0
    for got, want in zip(tc.reference.run(after, inputs=inputs),
                         tc.reference.run(graph, inputs=inputs)):
        np.testing.assert_array_equal(got, want)
        assert np.array_equal(np.signbit(got), np.signbit(want))


def test_an_identity_output_keeps_its_name():
    A = te.placeholder((4, 2), name="A")
    T = ops.transpose(ops.transpose(A, name="T1"), name="T2")
    graph = tc.Graph.from_outputs([T])
    after = simplify(graph)
    assert [t.name for t in after.computes] == ["T2"] and after.tensor("T2").inputs == [A]
    _same_values(graph, after)


def test_a_non_identity_reshape_chain_through_a_transpose_is_kept_correct():
    A = te.placeholder((3, 4, 5), name="A")
    R = ops.reshape(ops.transpose(A, (2, 0, 1), name="T"), (5, 12), name="R")
    graph = tc.Graph.from_outputs([ops.relu(R, name="Y")])
    after = simplify(graph)
    assert after.tensor("R").inputs == [A]  # composed: reads A directly
    _same_values(graph, after)
