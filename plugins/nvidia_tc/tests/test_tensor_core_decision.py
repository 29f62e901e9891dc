"""The AMOS mapping stage on nvidia_tc (issue 12, item 1): fp16 / bf16 / int8 GEMMs large enough
go onto the Tensor Cores by default (the mapping predicted on the whole GPU, as the warp-tiled
WMMA kernel runs, against the CUDA-core template's roofline), fp32 and tiny GEMMs stay on the
template, ``tensorize=True`` picks a mapping the target lowers itself (WMMA, or mma.sync as
inline PTX), and the report says why."""

from __future__ import annotations

import numpy as np
import pytest
from tilecraft_nvidia_tc.native_estimate import TEMPLATE_STRATEGY, template_estimate
from tilecraft_nvidia_tc.target import NvidiaTcTarget

import tilecraft as tc
from tilecraft import Graph, ops, te
from tilecraft.intrin.decision import MAPPING_MARGIN, DecisionSource, decide_mappings
from tilecraft.lower import LoweringOptions
from tilecraft.reference import evaluate


def gemm(m: int, k: int, n: int, dtype: str, out_dtype: str) -> Graph:
    A = te.placeholder((m, k), dtype, name="A")
    B = te.placeholder((k, n), dtype, name="B")
    return Graph.from_outputs([ops.matmul(A, B, out_dtype=out_dtype, name="C")])


def decide(graph: Graph, request: object = None):
    target = NvidiaTcTarget()
    return decide_mappings(graph, target, LoweringOptions.from_spec(target.spec), request)


@pytest.mark.parametrize(("dtype", "out_dtype", "intrinsic"), [
    ("float16", "float32", "wmma_m16n16k16_f16_f32"),
    ("bfloat16", "float32", "wmma_m16n16k16_bf16_f32"),
    ("int8", "int32", "wmma_m16n16k16_i8_i32"),
])
def test_large_half_and_int8_gemms_go_onto_the_tensor_cores(dtype: str, out_dtype: str,
                                                            intrinsic: str) -> None:
    plan = decide(gemm(256, 256, 256, dtype, out_dtype))
    decision = plan.decisions["C"]
    assert decision.tensorized and decision.source is DecisionSource.MODEL
    assert plan.tensorized["C"].intrinsic.name == intrinsic
    assert decision.speedup is not None and decision.speedup >= MAPPING_MARGIN
    assert "the target's own kernels" in decision.reason
    if dtype != "int8":  # int8 has no CUDA-core template: the core's GPU strategy instead
        assert decision.alternative == TEMPLATE_STRATEGY
        assert "float32 CUDA-core rate of 108 SMs" in decision.alternative_basis


def test_fp32_and_tiny_gemms_stay_on_the_template() -> None:
    assert decide(gemm(256, 256, 256, "float32", "float32")).decisions == {}  # no mapping
    tiny = decide(gemm(2, 5, 3, "float16", "float32")).decisions["C"]
    assert not tiny.tensorized and "is slower than" in tiny.reason
    assert tiny.alternative == TEMPLATE_STRATEGY


def test_the_template_roofline_grows_with_the_work_at_the_fp32_rate() -> None:
    spec = NvidiaTcTarget().spec
    options = LoweringOptions.from_spec(spec)
    small = template_estimate(gemm(512, 512, 512, "float16", "float32").outputs[0], options)
    large = template_estimate(gemm(1024, 1024, 1024, "float16", "float32").outputs[0], options)
    assert small is not None and large is not None
    assert large.seconds == pytest.approx(2 * 1024**3 / spec.compute.peak_flops("float32"))
    assert large.seconds / small.seconds == pytest.approx(8.0)
    assert "compute-bound" in large.basis


def test_tensorize_true_picks_a_mapping_the_target_lowers() -> None:
    """AMOS's serial ranking puts mma_m16n8k16 first for this shape; nvidia_tc lowers it itself
    (inline-PTX mma.sync, the same warp-tiled kernel as WMMA), so tensorize=True takes it and
    the target's kernel, not the core's serial nest, runs it."""
    plan = decide(gemm(67, 33, 45, "float16", "float16"), True)
    chosen = plan.tensorized["C"]
    assert chosen.intrinsic.name == "mma_m16n8k16_f16_f32"
    assert plan.decisions["C"].source is DecisionSource.FORCED
    target = NvidiaTcTarget()
    [kernel] = target.lower_mapped(chosen.compute, chosen.ranked.physical,
                                   LoweringOptions.from_spec(target.spec))
    assert kernel.attrs["strategy"] == "nvidia_mma_sync"


def _run(exe: tc.Executable, graph: Graph, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The executable's output and the reference's on small integer inputs (exact in every
    dtype here, so fp16 / int8 results can be compared exactly)."""
    rng = np.random.default_rng(seed)
    arrays = [rng.integers(-4, 5, t.shape).astype(t.dtype.numpy) for t in graph.inputs]
    result = exe(*arrays)
    result = result[0] if isinstance(result, (list, tuple)) else result
    (output,) = graph.outputs
    expected = evaluate(output, dict(zip(graph.inputs, arrays, strict=True)))
    return np.asarray(result, np.float64), np.asarray(expected, np.float64)


@pytest.mark.slow
@pytest.mark.parametrize(("dtype", "out_dtype", "request_"), [
    ("float16", "float32", None),    # the model's choice
    ("int8", "int32", None),
    ("float16", "float16", True),    # tensorize=True: the target's mma.sync kernel
])
def test_compile_takes_wmma_and_matches_the_reference(dtype: str, out_dtype: str,
                                                      request_: object) -> None:
    m, k, n = (256, 250, 262) if request_ is None else (67, 33, 45)
    graph = gemm(m, k, n, dtype, out_dtype)
    exe = tc.compile(graph, target="nvidia_tc", tensorize=request_)
    (kernel,) = exe.report.kernels
    prefix, strategy = ("C_wmma_", "nvidia_wmma") if request_ is None \
        else ("C_mma_", "nvidia_mma_sync")
    assert kernel.name.startswith(prefix) and kernel.language == "cuda"
    assert any(note.startswith("mapping C: tensorized") for note in exe.report.notes)
    assert strategy in [kernel.attrs.get("strategy") for kernel in exe.kernels]
    np.testing.assert_array_equal(*_run(exe, graph, seed=0))


def test_compile_keeps_fp32_gemms_on_the_template() -> None:
    graph = gemm(37, 29, 41, "float32", "float32")
    exe = tc.compile(graph, target="nvidia_tc")
    (kernel,) = exe.report.kernels
    assert "wmma" not in kernel.name and kernel.language == "cuda"
    assert "nvidia_wmma" not in [kernel.attrs.get("strategy") for kernel in exe.kernels]
    np.testing.assert_allclose(*_run(exe, graph, seed=1), rtol=1e-6)
