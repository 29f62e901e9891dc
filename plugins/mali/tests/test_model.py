"""mali's roofline estimate from the spec (Mali-G76 MP10): peaks per dtype (int8 4x through
arm_dot only), compulsory bytes over 34.1 GB/s, the bound named, and the figure in the
compile report."""

from __future__ import annotations

import pytest

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.graph import Graph
from tilecraft.target.registry import get_target


def _gemm(n: int, dtype: str = "float32", tensorize: dict | None = None):
    A, B = te.placeholder((n, n), dtype, name="A"), te.placeholder((n, n), dtype, name="B")
    out = "int32" if dtype == "int8" else None
    C = ops.matmul(A, B, out_dtype=out, name="C")
    return tc.compile(Graph.from_outputs([C]), target="mali", tensorize=tensorize)


def test_peaks_come_from_the_spec() -> None:
    spec = get_target("mali").spec
    assert spec.compute.peak_flops("float32") == pytest.approx(345.6e9)
    assert spec.compute.peak_flops("int8") == pytest.approx(4 * 345.6e9)
    assert spec.memory.levels[0].bandwidth_bytes_per_cycle * spec.compute.frequency_hz \
        == pytest.approx(34.1e9, rel=1e-3)
    assert get_target("mali").available().estimate


def test_a_large_float_gemm_is_compute_bound_at_the_fp32_peak() -> None:
    target = get_target("mali")
    executable = _gemm(512)
    [kernel] = executable.kernels
    estimate = target.estimate(kernel)
    assert estimate.detail["operations"] == pytest.approx(2 * 512 ** 3)
    assert estimate.detail["compute_bound"] == 1.0
    assert estimate.seconds == pytest.approx(2 * 512 ** 3 / 345.6e9)
    assert "model (Mali-G76 MP10 roofline)" in executable.report.kernels[0].build_summary


def test_int8_through_arm_dot_is_four_times_faster_and_memory_bound_ops_are_memory_bound(
        ) -> None:
    target = get_target("mali")
    float_time = target.estimate(_gemm(256).kernels[0]).seconds
    int8 = _gemm(256, "int8", {"C": "arm_dot_acc"}).kernels[-1]
    assert target.estimate(int8).seconds == pytest.approx(float_time / 4, rel=1e-3)
    relu = tc.compile(Graph.from_outputs([ops.relu(te.placeholder((1 << 16,), name="x"))]),
                      target="mali").kernels[0]
    estimate = target.estimate(relu)
    assert estimate.detail["compute_bound"] == 0.0
    assert estimate.seconds == pytest.approx(2 * 4 * (1 << 16) / 34.128e9, rel=1e-3)
