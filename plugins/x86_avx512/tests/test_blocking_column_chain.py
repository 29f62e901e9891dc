"""Fused column chains (conv -> elementwise -> 1x1 conv, GEMM -> GEMM on B) match the reference."""

import dataclasses

import numpy as np
import pytest
from tilecraft_x86_avx512.blocking.column_chain import (
    ColumnBlocking,
    as_column_chain,
    lower_column_chain,
)

from tilecraft import ops, te
from tilecraft.errors import LoweringError
from tilecraft.graph import Graph
from tilecraft.kernel_ir.interpreter import run_kernels
from tilecraft.lower.compute import lower_compute
from tilecraft.lower.options import LoweringOptions
from tilecraft.reference import run


def _outer(A, B, C, MV, NC, **params):
    C.reshape(C.shape[-2:])[...] += (A.reshape(A.shape[-2:]).T @ B.reshape(B.shape[-2:]))[
        :MV, :NC]


def _rows(A, B, C, MV, NC, **params):
    C.reshape(C.shape[-2:])[...] += (A.reshape(A.shape[-2:]) @ B.reshape(B.shape[-2:]))[
        :MV, :NC]


def _conv_chain(channels, size, mid, out, kernel, stride, padding, middle):
    x = te.placeholder((1, channels, size, size), name="x")
    w1 = te.placeholder((mid, channels, kernel, kernel), name="w1")
    w2 = te.placeholder((out, mid, 1, 1), name="w2")
    t = ops.conv2d(x, w1, stride=stride, padding=padding, name="conv1")
    z = {"relu": lambda: ops.relu(t, name="act"), None: lambda: t,
         "scale_relu": lambda: ops.relu(ops.scale(t, 0.5, name="sc"), name="act"),
         "bias_relu": lambda: ops.relu(ops.bias_add(t, te.placeholder((mid,), name="b1"),
                                                    name="biased"), name="act")}[middle]()
    return ops.conv2d(z, w2, name="conv2")


def _lowered(E, blocking, rows=None, fold=True):
    graph = Graph.from_outputs([E])
    consumers = {t: list(graph.consumers(t)) for t in graph.computes}
    chain = as_column_chain(E, consumers)
    assert chain is not None
    if not fold:
        chain = dataclasses.replace(chain, padded=None)
    options = LoweringOptions(vector_lanes=4)
    # the pad in front of the first convolution runs as its own kernel
    before = [lower_compute(t, options) for t in graph.computes if t not in chain.computes]
    return graph, chain, before + lower_column_chain(chain, "mk", blocking, options,
                                                     rows_micro_kernel=rows)


def _check(E, graph, kernels, seed):
    rng = np.random.default_rng(seed)
    inputs = {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in graph.inputs}
    arrays = dict(inputs, **{E.name: np.zeros(kernels[-1].params[-1].shape, np.float32)})
    out = run_kernels(kernels, arrays, semantics={"mk": _outer, "rows": _rows})
    np.testing.assert_allclose(out[E.name].reshape(E.shape), run(E, inputs), rtol=1e-4,
                               atol=1e-4)


@pytest.mark.parametrize("shape", [(3, 7, 5, 3, 3, 1, 1), (2, 9, 6, 7, 3, 2, 1),
                                   (4, 5, 8, 2, 1, 1, 0), (1, 6, 4, 3, 3, 1, 1),
                                   (1, 2, 1, 2, 1, 1, 0), (3, 11, 5, 4, 3, 2, 0)])
@pytest.mark.parametrize("middle", [None, "relu", "scale_relu", "bias_relu"])
@pytest.mark.parametrize("blocking", [ColumnBlocking(mi1=2, nr1=4, mi2=3, nr2=8, nc=8),
                                      ColumnBlocking(mi1=3, nr1=8, mi2=2, nr2=4, nc=16, kc=5)])
@pytest.mark.parametrize("rows", [None, "rows"])
@pytest.mark.parametrize("fold", [True, False])
def test_conv_chain_matches_reference(shape, middle, blocking, rows, fold):
    E = _conv_chain(*shape, middle)
    if shape[2] == 1:  # one channel between: the second product reduces over nothing
        assert as_column_chain(E) is None
        return
    graph, chain, kernels = _lowered(E, blocking, rows, fold)
    # weights read in place: no pack kernels, the rows micro-kernel
    assert any("apacked" in k.name for k in kernels) == (rows is None)
    assert (chain.padded.name if chain.padded else None) == \
        ("conv1_pad" if shape[-1] and fold else None)
    _check(E, graph, kernels, sum(shape))


@pytest.mark.parametrize("shape", [(5, 3, 7, 4), (2, 1, 5, 3), (13, 6, 17, 9), (2, 8, 3, 16)])
@pytest.mark.parametrize("rows", [None, "rows"])
def test_gemm_column_chain_matches_reference(shape, rows):
    """``E = A2 @ relu(A1 @ B1)``: the intermediate is the second product's B operand."""
    l, k, n, m = shape  # noqa: E741
    A1 = te.placeholder((l, k), name="A1")
    B1 = te.placeholder((k, n), name="B1")
    A2 = te.placeholder((m, l), name="A2")
    E = ops.matmul(A2, ops.relu(ops.matmul(A1, B1, name="T"), name="R"), name="E")
    graph, chain, kernels = _lowered(E, ColumnBlocking(mi1=3, nr1=4, mi2=2, nr2=4, nc=4, kc=4),
                                     rows)
    assert [t.name for t in chain.computes] == ["T", "R", "E"]
    _check(E, graph, kernels, sum(shape))


def test_recognition():
    E = _conv_chain(4, 6, 5, 3, 3, 1, 1, "relu")
    graph = Graph.from_outputs([E])
    consumers = {t: list(graph.consumers(t)) for t in graph.computes}
    chain = as_column_chain(E, consumers)
    assert [t.name for t in chain.computes] == ["conv1_pad", "conv1", "act", "conv2"]
    # without the graph's consumers the pad is not folded
    assert as_column_chain(E).padded is None
    # the intermediate read elsewhere: no chain
    graph = Graph.from_outputs([E, ops.relu(chain.first.tensor, name="elsewhere")])
    consumers = {t: list(graph.consumers(t)) for t in graph.computes}
    assert as_column_chain(E, consumers) is None
    # a 3x3 second convolution reads a window of the intermediate: not a column chain
    x = te.placeholder((1, 4, 6, 6), name="x")
    t = ops.conv2d(x, te.placeholder((5, 4, 1, 1), name="w1"), name="conv1")
    second = ops.conv2d(ops.relu(t), te.placeholder((3, 5, 3, 3), name="w2"), padding=1)
    assert as_column_chain(second) is None
    # a single contraction is no chain
    assert as_column_chain(t) is None


def test_blocking_errors():
    with pytest.raises(LoweringError, match="nc = 12 must be a positive multiple of nr1 = 8"):
        ColumnBlocking(mi1=2, nr1=8, mi2=2, nr2=4, nc=12)
