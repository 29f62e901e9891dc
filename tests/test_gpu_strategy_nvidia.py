"""The GPU strategy's block reductions and vector accesses through the nvidia_tc target: the
generated CUDA builds with NVRTC for sm_80 and sm_90 (the compile report's resources), has the
``__syncthreads`` + ``__shfl_xor_sync`` block reductions and ``float4`` accesses, and run by the
emulator (the .cu compiled for the host) matches the reference on awkward shapes."""

from __future__ import annotations

import numpy as np
import pytest

import tilecraft as tc
from tilecraft import te
from tilecraft.lower import LoweringOptions

nvidia = pytest.importorskip("tilecraft_nvidia_tc.target")


@pytest.fixture(scope="module")
def target():
    found = nvidia.NvidiaTcTarget()
    available = found.available()
    for stage in ("build", "emulate"):
        if not getattr(available, stage):
            pytest.skip(f"nvidia_tc cannot {stage} here: {available.reasons.get(stage)}")
    return found


def _row_sum(rows: int, n: int) -> te.Tensor:
    x = te.placeholder((rows, n), name="x")
    return tc.ops.reduce_sum(x, axes=1, name="y")


def _row_max(rows: int, n: int) -> te.Tensor:
    x = te.placeholder((rows, n), name="x")
    return tc.ops.reduce_max(x, axes=1, name="y")


def _softmax(rows: int, n: int) -> te.Tensor:
    return tc.ops.softmax(te.placeholder((rows, n), name="x"), name="y")


def _layer_norm(rows: int, n: int) -> te.Tensor:
    x, gamma = te.placeholder((rows, n), name="x"), te.placeholder((n,), name="gamma")
    return tc.ops.layer_norm(x, gamma, name="y")


def _add(rows: int, n: int) -> te.Tensor:
    a, b = te.placeholder((rows, n), name="a"), te.placeholder((n,), name="b")
    return te.compute((rows, n), lambda i, j: a[i, j] + b[j], name="y")


def _compile_and_check(target, output: te.Tensor, seed: int = 0) -> tc.Executable:
    graph = tc.Graph.of(output)
    exe = tc.compile(graph, target=target)
    rng = np.random.default_rng(seed)
    arrays = {p.name: rng.standard_normal(p.shape).astype(np.float32) for p in graph.inputs}
    np.testing.assert_allclose(exe(**arrays), tc.reference.run(graph, **arrays),
                               rtol=1e-5, atol=1e-5)
    for kernel in exe.report.kernels:
        assert kernel.mode == "emulated"
        for arch in ("sm_80", "sm_90"):
            assert any(arch in line and "registers" in line
                       for line in kernel.build_summary.splitlines()), kernel.build_summary
    return exe


def _sources(exe: tc.Executable) -> list[str]:
    return [source.text for source in exe.sources.values()]


def test_long_row_sum_is_a_block_reduction_in_cuda(target) -> None:
    (text,) = _sources(_compile_and_check(target, _row_sum(3, 5000)))
    # 16 warps of 32 reduce a row: 5 shuffles in each warp, the 16 warp totals through shared
    # memory behind one __syncthreads, then 4 more shuffles
    assert "// launch: grid (3, 1, 1), block (512, 1, 1)" in text
    assert "alignas(16) __shared__ float y_subgroups[16];" in text
    assert (text.count("__syncthreads();"), text.count("__shfl_xor_sync")) == (1, 9)


def test_elementwise_rows_of_whole_vectors_use_float4(target) -> None:
    (text,) = _sources(_compile_and_check(target, _add(7, 4096)))
    assert "const float4" in text and "*reinterpret_cast<float4*>(&y[" in text
    (text,) = _sources(_compile_and_check(target, _add(13, 17)))  # ragged: scalar threads
    assert "float4" not in text


def test_a_block_reducing_several_rows_runs_in_two_interleavings(target) -> None:
    """Rows in a serial loop around the lanes (a hand schedule): a second barrier ends each
    reduction; the emulator runs the block's threads in two orders."""
    from tilecraft_nvidia_tc.codegen import generate_cuda
    from tilecraft_nvidia_tc.emulation import EmulatedKernel

    from tilecraft.schedule import create_schedule

    S = _row_sum(4, 300)
    s = create_schedule(S, target.spec)
    (i,), (k,) = s[S].axes, s[S].reduce_axes
    ko, ki = s[S].split(k, factor=128)
    s[S].reorder(i, ki, ko)
    s[S].bind(ki, "threadIdx.x")
    (kernel,) = s.lower(LoweringOptions.from_spec(target.spec))
    source = generate_cuda(kernel, target.spec)
    assert source.text.count("__syncthreads();") == 2
    x = np.random.default_rng(3).standard_normal((4, 300)).astype(np.float32)
    arrays = {"x": x, "y": np.zeros(4, np.float32)}
    EmulatedKernel(source, interleavings=2)(arrays)
    np.testing.assert_allclose(arrays["y"], x.sum(axis=1), rtol=1e-5, atol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize(("make", "rows", "n"), [
    (_softmax, 2, 4097), (_softmax, 1, 1), (_softmax, 3, 1009), (_layer_norm, 3, 4096),
    (_layer_norm, 1, 13), (_row_max, 1, 4097), (_row_sum, 5, 2), (_add, 1, 1), (_add, 3, 4100),
])
def test_generated_cuda_matches_the_reference_on_awkward_shapes(target, make, rows, n) -> None:
    exe = _compile_and_check(target, make(rows, n), seed=rows * n)
    texts = _sources(exe)
    if make in (_softmax, _layer_norm, _row_max) and n > 1000:
        assert any(t.count("__syncthreads();") == 1 for t in texts)  # a block reduction
    if make in (_layer_norm, _add) and n % 4 == 0:
        assert any("float4" in t for t in texts)
