"""Fused GEMM chains on x86: correct on odd shapes, reported, unfused when they cannot fit."""

import numpy as np
import pytest
from tilecraft_x86_avx512.fusion import chain_blocking

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.microkernel.chain import as_chain
from tilecraft.reference import run


def _chain(batch, m, k, l, n, middle):
    A = te.placeholder((batch, m, k), name="A")
    B = te.placeholder((batch, k, l), name="B")
    D = te.placeholder((batch, l, n), name="D")
    T = ops.batch_matmul(A, B, name="T")
    Z = {"softmax": lambda: ops.softmax(T, name="S"), "relu": lambda: ops.relu(T, name="R"),
         None: lambda: T}[middle]()
    return ops.batch_matmul(Z, D, name="E")


@pytest.mark.parametrize("shape", [(2, 67, 64, 97, 64), (1, 130, 33, 70, 19), (3, 50, 80, 64, 80)])
@pytest.mark.parametrize("middle", [None, "relu", "softmax"])
def test_fused_chain_native(shape, middle):
    E = _chain(*shape, middle)
    graph = tc.Graph.from_outputs([E])
    exe = tc.compile(graph, target="x86_avx512")
    assert any(note.startswith("fused T") for note in exe.report.notes), exe.report.notes
    assert exe.kernels[-1].attrs["fused"][0] == "T"
    rng = np.random.default_rng(sum(shape))
    inputs = {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in graph.inputs}
    np.testing.assert_allclose(exe(**inputs), run(graph, inputs), rtol=1e-4, atol=1e-3)


def test_chain_that_does_not_fit_is_left_unfused():
    chain = as_chain(_chain(1, 64, 64, 4096, 64, None))
    blocking, reason = chain_blocking(chain, l2_bytes=256 * 1024, threads=2)
    assert blocking is None and "more than half of L2" in reason
    blocking, reason = chain_blocking(chain, l2_bytes=8 << 20, threads=2)
    assert blocking is not None and blocking.mc % blocking.nr1 == 0


def test_intermediate_used_elsewhere_is_not_fused():
    E = _chain(1, 96, 64, 96, 64, "relu")
    T = as_chain(E).first.tensor
    graph = tc.Graph.from_outputs([E, T])
    exe = tc.compile(graph, target="x86_avx512")
    assert not any(k.attrs.get("fused") for k in exe.kernels)
    rng = np.random.default_rng(0)
    inputs = {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in graph.inputs}
    for got, want in zip(exe(**inputs), run(graph, inputs)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)
