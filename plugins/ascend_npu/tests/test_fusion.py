"""Chimera on the NPU: float16 GEMM chains E = (A @ B) @ D fused into one Cube kernel with the
intermediate kept on the AI core, tiles from the solver within the L0 capacities, emulated
against the reference on awkward shapes, and the model's fused-vs-unfused direction."""

from __future__ import annotations

import numpy as np
import pytest
from tilecraft_ascend_npu.fusion import as_gemm_chain, plan_chain_tiles
from tilecraft_ascend_npu.target import AscendNpuTarget

import tilecraft as tc
from tilecraft import te
from tilecraft.ops import matmul


@pytest.fixture(scope="module")
def target() -> AscendNpuTarget:
    return AscendNpuTarget()


def _chain(m: int, k: int, l_: int, n: int, dtype: str = "float16") -> tc.Graph:
    a = te.placeholder((m, k), name="A", dtype=dtype)
    b = te.placeholder((k, l_), name="B", dtype=dtype)
    d = te.placeholder((l_, n), name="D", dtype=dtype)
    return tc.Graph([matmul(matmul(a, b, name="C"), d, name="E")])


@pytest.mark.parametrize(("m", "k", "l_", "n"), [(37, 20, 45, 29), (1, 1, 1, 1), (17, 16, 33, 16)])
def test_fused_chain_matches_the_reference(target: AscendNpuTarget, m: int, k: int, l_: int,
                                           n: int) -> None:
    graph = _chain(m, k, l_, n)
    exe = tc.compile(graph, target=target)
    (kernel,) = exe.kernels
    assert kernel.name == "C_E_fused" and [p.name for p in kernel.params] == ["A", "B", "D", "E"]
    (source,) = exe.sources.values()
    # the intermediate: Fixpipe to UB, DataCopy UB -> L1, LoadData into L0A, never GM
    assert {"Mmad", "Fixpipe", "DataCopy", "LoadData"} <= set(source.meta["calls"])
    assert source.text.count("Mmad(") == 2
    rng = np.random.default_rng(m + 7 * l_)
    inputs = {name: (rng.standard_normal(shape) * 0.5).astype(np.float16)
              for name, shape in (("A", (m, k)), ("B", (k, l_)), ("D", (l_, n)))}
    got = exe(**inputs)
    expected = tc.reference.run(graph, **inputs)
    assert got.dtype == np.float16 and got.shape == (m, n)
    np.testing.assert_allclose(got.astype(np.float32), expected.astype(np.float32),
                               rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize(("m", "k", "l_", "n"), [(512, 64, 256, 64), (1024, 64, 512, 64),
                                                 (208, 80, 208, 80), (37, 20, 45, 29)])
def test_tiles_fit_the_double_buffered_l0_levels(target: AscendNpuTarget, m: int, k: int,
                                                 l_: int, n: int) -> None:
    graph = _chain(m, k, l_, n)
    chain = as_gemm_chain(*graph.computes)
    tiles, reason = plan_chain_tiles(chain, target.spec)
    assert tiles is not None, reason
    kp, np_ = -(-k // 16) * 16, -(-n // 16) * 16
    assert tiles.tm % 16 == 0 and tiles.tl % 16 == 0
    assert 4 * tiles.tm * (kp + tiles.tl) <= 65536           # L0A: A and C tiles, twice
    assert 4 * tiles.tl * (kp + np_) <= 65536                # L0B: B and D tiles, twice
    assert 8 * tiles.tm * (np_ + tiles.tl) <= 262144         # L0C: E and C accumulators
    assert "intermediates kept in L1" in reason


def test_chains_it_cannot_express_stay_apart_with_a_reason(target: AscendNpuTarget) -> None:
    graph = _chain(20, 16, 24, 8, dtype="float32")
    exe = tc.compile(graph, target=target)
    assert len(exe.kernels) == 2
    assert any("not fused: the NPU fuses float16 chains" in note for note in exe.report.notes)


def test_model_prefers_the_fused_chain(target: AscendNpuTarget) -> None:
    """G12 at batch 1 (thesis Table 3.5): the fused kernel moves C through L1 instead of GM."""
    graph = _chain(1024, 64, 512, 64)
    (fused,) = tc.compile(graph, target=target).kernels
    # the TBE-style baseline: two GEMM kernels, C written to GM and read back
    c = te.placeholder((1024, 512), name="C", dtype="float16")
    d = te.placeholder((512, 64), name="D", dtype="float16")
    (first,) = tc.compile(tc.Graph([graph.computes[0]]), target=target).kernels
    (second,) = tc.compile(tc.Graph([matmul(c, d, name="E")]), target=target).kernels
    unfused = [first, second]
    fused_s = target.estimate(fused).seconds
    unfused_s = sum(target.estimate(kernel).seconds for kernel in unfused)
    assert len(unfused) == 2 and fused_s < unfused_s
