"""Constant tensors (``te.constant``): placeholders with a bound value that the graph carries
and the runtime passes to kernels; the caller never passes them."""

import numpy as np
import pytest

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.errors import ShapeError


def _graph(rng: np.random.Generator) -> tuple[tc.Graph, te.Tensor]:
    X = te.placeholder((3, 5), name="X")
    W = te.constant(rng.standard_normal((5, 7)), dtype="float32", name="W")
    return tc.Graph.from_outputs([ops.relu(ops.matmul(X, W, name="Y"), name="Z")]), W


def test_constant_is_carried_by_the_graph_not_an_input():
    graph, W = _graph(np.random.default_rng(0))
    assert [t.name for t in graph.inputs] == ["X"]
    assert [t.name for t in graph.constants] == ["W"]
    assert W.is_placeholder and W.is_constant and W.dtype.value == "float32"
    assert not W.constant_value.flags.writeable
    assert "W: constant[5, 7] float32" in str(graph)


def test_reference_uses_the_bound_value():
    rng = np.random.default_rng(1)
    graph, W = _graph(rng)
    x = rng.standard_normal((3, 5)).astype(np.float32)
    got = tc.reference.run(graph, X=x)
    np.testing.assert_allclose(got, np.maximum(x @ W.constant_value, 0), rtol=1e-5, atol=1e-5)
    with pytest.raises(tc.errors.InputError, match="unexpected input"):
        tc.reference.run(graph, X=x, W=W.constant_value)


def test_constant_value_is_a_copy():
    value = np.arange(4, dtype=np.int32)
    C = te.constant(value, name="C")
    value[0] = 99
    assert C.constant_value[0] == 0


def test_compiled_executable_passes_constants_to_kernels():
    pytest.importorskip("tilecraft_x86_avx512")
    rng = np.random.default_rng(2)
    graph, W = _graph(rng)
    x = rng.standard_normal((3, 5)).astype(np.float32)
    exe = tc.compile(graph, target="x86_avx512")
    assert exe.input_names == ["X"]
    np.testing.assert_allclose(exe(x), tc.reference.run(graph, X=x), rtol=1e-5, atol=1e-5)


def test_bad_constants_are_refused_by_name():
    with pytest.raises(ShapeError, match="constant K: a 0-d value"):
        te.constant(np.float32(1.0), name="K")
    with pytest.raises(ShapeError, match="constant B: tensors cannot be bool"):
        te.constant(np.ones(3, bool), name="B")
