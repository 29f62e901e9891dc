"""Fused contraction chains (GEMM -> memory-bound ops -> GEMM) match the reference (interpreted)."""

import numpy as np
import pytest
from tilecraft_x86_avx512.blocking.chain_rows import lower_chain_rows
from tilecraft_x86_avx512.blocking.contraction_chain import ChainBlocking, as_chain, lower_chain

from tilecraft import ops, te
from tilecraft.errors import LoweringError
from tilecraft.graph import Graph
from tilecraft.kernel_ir.interpreter import run_kernels
from tilecraft.lower.options import LoweringOptions
from tilecraft.reference import run


def _outer(A, B, C, MV, NC, **params):
    C.reshape(C.shape[-2:])[...] += (A.reshape(A.shape[-2:]).T @ B.reshape(B.shape[-2:]))[
        :MV, :NC]


def _rows(A, B, C, MV, NC, **params):
    C.reshape(C.shape[-2:])[...] += (A.reshape(A.shape[-2:]) @ B.reshape(B.shape[-2:]))[
        :MV, :NC]


def _chain(batch, m, k, l, n, middle):
    A = te.placeholder((batch, m, k), name="A")
    B = te.placeholder((batch, k, l), name="B")
    D = te.placeholder((batch, l, n), name="D")
    T = ops.batch_matmul(A, B, name="T")
    if middle == "softmax":
        Z = ops.softmax(T, name="S")
    elif middle == "relu":
        Z = ops.relu(T, name="R")
    elif middle == "scale_relu":
        Z = ops.relu(ops.scale(T, 0.125, name="Sc"), name="R")
    else:
        Z = T
    return ops.batch_matmul(Z, D, name="E")


@pytest.mark.parametrize("shape", [(2, 13, 5, 11, 7), (1, 9, 3, 8, 4), (3, 4, 2, 5, 3),
                                   (1, 1, 1, 1, 1), (1, 17, 6, 9, 10)])
@pytest.mark.parametrize("middle", [None, "relu", "softmax", "scale_relu"])
def test_fused_chain_matches_reference(shape, middle):
    E = _chain(*shape, middle)
    chain = as_chain(E)
    if shape[1] == 1:  # M = 1: the second product is no matrix product; nothing to fuse
        assert chain is None
        return
    assert chain is not None
    kernels = lower_chain(chain, "mk", ChainBlocking(mi1=2, nr1=4, mi2=2, nr2=4, mc=8),
                          LoweringOptions(vector_lanes=4))
    rng = np.random.default_rng(sum(shape))
    graph = Graph.from_outputs([E])
    inputs = {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in graph.inputs}
    arrays = dict(inputs, E=np.zeros(kernels[-1].params[-1].shape, np.float32))
    out = run_kernels(kernels, arrays, semantics={"mk": _outer})
    np.testing.assert_allclose(out["E"].reshape(E.shape), run(E, inputs), rtol=1e-5, atol=1e-5)
    # the row layout, A read in place by a rows micro-kernel
    kernels = lower_chain_rows(chain, "rows", ChainBlocking(mi1=3, nr1=4, mi2=2, nr2=4, mc=12,
                                                            rows=True),
                               LoweringOptions(vector_lanes=4))
    arrays = dict(inputs, E=np.zeros(kernels[-1].params[-1].shape, np.float32))
    out = run_kernels(kernels, arrays, semantics={"rows": _rows})
    np.testing.assert_allclose(out["E"].reshape(E.shape), run(E, inputs), rtol=1e-5, atol=1e-5)


def test_chain_recognition():
    E = _chain(2, 8, 4, 6, 5, "softmax")
    chain = as_chain(E)
    assert [t.name for t in chain.between] == ["S_max", "S_sub", "S_exp", "S_sum", "S"]
    graph = Graph.from_outputs([E])
    consumers = {t: list(graph.consumers(t)) for t in graph.computes}
    assert as_chain(E, consumers) is not None
    # an intermediate read outside the chain blocks fusion
    T = chain.first.tensor
    extra = ops.relu(T, name="elsewhere")
    graph = Graph.from_outputs([E, extra])
    consumers = {t: list(graph.consumers(t)) for t in graph.computes}
    assert as_chain(E, consumers) is None
    # a single contraction or an elementwise output is no chain
    A = te.placeholder((4, 6), name="A")
    B = te.placeholder((6, 5), name="B")
    assert as_chain(ops.matmul(A, B)) is None
    assert as_chain(ops.relu(A)) is None


def test_chain_blocking_errors():
    with pytest.raises(LoweringError, match="mc = 6 must be a multiple of nr1 = 4"):
        ChainBlocking(mi1=2, nr1=4, mi2=2, nr2=4, mc=6)
