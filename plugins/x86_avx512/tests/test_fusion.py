"""Fused GEMM chains on x86: correct on odd shapes, reported, unfused when they cannot fit."""


import numpy as np
import pytest
from tilecraft_x86_avx512.blocking.contraction_chain import as_chain
from tilecraft_x86_avx512.fusion import BlockingMachine, chain_blocking

import tilecraft as tc
from tilecraft import ops, te
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


def _spec_with_l2(l2_bytes):
    from tilecraft_x86_avx512.host import CacheLevel, HostInfo
    from tilecraft_x86_avx512.spec import build_spec

    host = HostInfo("test CPU", 2, 3.0e9, "test", (CacheLevel("L1", 32768, False),
                    CacheLevel("L2", l2_bytes, False), CacheLevel("L3", 32 << 20, True)),
                    frozenset({"avx512f"}), fma_flops_per_core=100e9, l3_bytes_per_second=50e9)
    return build_spec(host)


def test_chain_that_does_not_fit_is_left_unfused():
    chain = as_chain(_chain(1, 64, 64, 4096, 64, None))
    small, large = _spec_with_l2(256 * 1024), _spec_with_l2(8 << 20)
    machine = BlockingMachine.from_spec(small, threads=2)
    blocking, reason = chain_blocking(chain, machine, small)
    assert blocking is None and "more than half of L2" in reason
    blocking, reason = chain_blocking(chain, BlockingMachine.from_spec(large, 2), large)
    assert blocking is not None and blocking.mc % blocking.mi2 == 0, reason


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


#: thesis Table 3.6: (IC, H, W, OC1, OC2, stride1, stride2, k1, k2)
CONV_CHAINS = {
    "C1": (64, 112, 112, 192, 128, 2, 1, 3, 1), "C2": (32, 147, 147, 64, 80, 2, 1, 3, 1),
    "C3": (64, 56, 56, 128, 64, 1, 1, 3, 1), "C4": (128, 28, 28, 256, 128, 1, 1, 3, 1),
    "C5": (16, 227, 227, 64, 16, 4, 1, 3, 1), "C6": (64, 56, 56, 64, 64, 1, 1, 1, 3),
    "C7": (64, 56, 56, 64, 64, 1, 1, 1, 1), "C8": (256, 56, 56, 256, 64, 1, 1, 1, 1),
}


def _conv_chain(ic, h, w, oc1, oc2, s1, s2, k1, k2):
    x = te.placeholder((1, ic, h, w), name="x")
    act = ops.relu(ops.conv2d(x, te.placeholder((oc1, ic, k1, k1), name="w1"), stride=s1,
                              padding=k1 // 2, name="conv1"), name="act")
    return ops.conv2d(act, te.placeholder((oc2, oc1, k2, k2), name="w2"), stride=s2,
                      padding=k2 // 2, name="conv2")


def _check_conv_chain(shape, seed=0):
    graph = tc.Graph.from_outputs([_conv_chain(*shape)])
    exe = tc.compile(graph, target="x86_avx512")
    rng = np.random.default_rng(seed)
    inputs = {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in graph.inputs}
    want = run(graph, inputs)
    np.testing.assert_allclose(exe(**inputs), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    return exe


def _scaled(shape, factor):
    ic, h, w, oc1, oc2, s1, s2, k1, k2 = shape
    return (max(1, ic // factor), h // factor + 3, w // factor + 1, oc1 // factor + 1,
            oc2 // factor + 3, s1, s2, k1, k2)


@pytest.mark.parametrize("name", sorted(CONV_CHAINS))
def test_conv_chain_native_scaled(name):
    """Each Table 3.6 chain with channels and images shrunk (to odd sizes): fused except C6."""
    exe = _check_conv_chain(_scaled(CONV_CHAINS[name], 2))
    fused = [k for k in exe.kernels if k.attrs.get("fused")]
    if name == "C6":
        assert not fused
        assert any(note.startswith("chain conv1 -> ") and "(planned by Chimera) not fused"
                   in note and "C6" in note
                   for note in exe.report.notes), exe.report.notes
    else:
        assert len(fused) == 1 and fused[0].attrs["fused"][-3:] == ["conv1", "act", "conv2"]


@pytest.mark.parametrize("shape", [(3, 37, 23, 37, 5, 1, 1, 3, 1),
                                   (5, 19, 31, 70, 19, 2, 1, 3, 1),
                                   (13, 257, 1, 33, 47, 1, 1, 1, 1),
                                   (7, 11, 13, 130, 3, 3, 1, 5, 1)])
def test_conv_chain_native_odd_shapes(shape):
    exe = _check_conv_chain(shape, seed=sum(shape))
    assert any(k.attrs.get("fused") for k in exe.kernels)


@pytest.mark.parametrize("name", sorted(CONV_CHAINS))
def test_conv_chain_native_full(name):
    """The Table 3.6 shapes themselves (about 0.5 s each)."""
    _check_conv_chain(CONV_CHAINS[name])
