"""The public compile API, end to end on the host CPU target."""

from __future__ import annotations

import numpy as np
import pytest

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.errors import InputError, TargetError


@pytest.fixture(scope="module")
def gemm_softmax_relu():
    A = te.placeholder((64, 128), "float32", name="A")
    B = te.placeholder((128, 32), "float32", name="B")
    k = te.reduce_axis(128, name="k")
    C = te.compute((64, 32), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    D = ops.relu(ops.softmax(C, axis=1))
    graph = tc.Graph.from_outputs([D])
    return graph, tc.compile(graph, target="x86_avx512")


def test_issue_example_matches_reference(gemm_softmax_relu) -> None:
    graph, exe = gemm_softmax_relu
    rng = np.random.default_rng(1)
    a = rng.random((64, 128), dtype=np.float32)
    b = rng.random((128, 32), dtype=np.float32)
    out = exe(A=a, B=b)
    np.testing.assert_allclose(out, tc.reference.run(graph, A=a, B=b), rtol=1e-4, atol=1e-5)
    # positional arguments follow graph.inputs
    np.testing.assert_allclose(exe(a, b), out)


def test_report_lists_every_kernel(gemm_softmax_relu) -> None:
    graph, exe = gemm_softmax_relu
    exe(A=np.ones((64, 128), np.float32), B=np.ones((128, 32), np.float32))
    text = str(exe.report)
    # every compute the graph passes left is a kernel of the report; softmax's subtract (read
    # once, by its exp) and its divide (read once, by the relu) were folded into their readers
    # by inline_elementwise (on by default)
    for tensor in exe.graph.computes:
        assert tensor.name in text
    assert {t.name for t in graph.computes} - {t.name for t in exe.graph.computes} \
        == {"softmax_0_sub", "softmax_0"}
    assert "schedule" in text and "x86_avx512" in text
    assert all(k.median_seconds is not None and k.median_seconds > 0
               for k in exe.report.kernels)
    assert all(src.language == "llvm-ir" and "define" in src.text
               for src in exe.sources.values())


@pytest.mark.parametrize("kwargs, message", [
    ({"A": np.ones((64, 128), np.float32)}, "missing input"),
    ({"A": np.ones((64, 128), np.float32), "B": np.ones((128, 32), np.float32),
      "Z": np.ones(3)}, "unknown input"),
    ({"A": np.ones((64, 127), np.float32), "B": np.ones((128, 32), np.float32)}, "shape"),
    ({"A": np.ones((64, 128), np.float64), "B": np.ones((128, 32), np.float32)},
     "astype"),
    ({"A": [[1.0]], "B": np.ones((128, 32), np.float32)}, "numpy array"),
])
def test_bad_inputs_raise_input_error(gemm_softmax_relu, kwargs, message) -> None:
    _, exe = gemm_softmax_relu
    with pytest.raises(InputError, match=message):
        exe(**kwargs)


def test_non_contiguous_inputs_are_accepted(gemm_softmax_relu) -> None:
    graph, exe = gemm_softmax_relu
    a = np.asfortranarray(np.random.default_rng(2).random((64, 128), dtype=np.float32))
    b = np.random.default_rng(3).random((128, 32), dtype=np.float32)
    np.testing.assert_allclose(exe(A=a, B=b), tc.reference.run(graph, A=a, B=b),
                               rtol=1e-4, atol=1e-5)


def test_unknown_target_lists_installed_ones() -> None:
    A = te.placeholder((4,), name="A")
    B = te.compute((4,), lambda i: A[i] + 1.0, name="B")
    with pytest.raises(TargetError, match="x86_avx512"):
        tc.compile(B, target="no_such_chip")


def test_several_outputs_return_a_tuple() -> None:
    A = te.placeholder((3, 17), name="A")
    S = ops.relu(A)
    T = te.compute((3, 17), lambda i, j: A[i, j] * 2.0, name="T")
    exe = tc.compile([S, T], target="x86_avx512")
    a = np.random.default_rng(0).standard_normal((3, 17)).astype(np.float32)
    s, t = exe(A=a)
    np.testing.assert_allclose(s, np.maximum(a, 0))
    np.testing.assert_allclose(t, a * 2)


def test_list_targets_reports_x86() -> None:
    infos = {info.name: info for info in tc.list_targets()}
    assert "x86_avx512" in infos
