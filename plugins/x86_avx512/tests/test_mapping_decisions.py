"""The AMOS mapping stage on x86 (``tilecraft.intrin.decision``): the templates estimate
themselves (:mod:`tilecraft_x86_avx512.template_estimate`), GEMM, convolution and fused-chain
computes stay on them, and the catalog compiles to the same Kernel IR as with tensorization
off — the mapped loop nests (serial, packing their operands element by element) are predicted
slower than the templates and than the core's parallel vector loop nests, as they measured."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from tilecraft_x86_avx512.blocking.depthwise import STRATEGY as DEPTHWISE
from tilecraft_x86_avx512.target import X86Avx512Target

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.cost.loop_nest import DEFAULT_LOOP_NEST
from tilecraft.kernel_ir.printer import kernel_to_str
from tilecraft.lower import LoweringOptions
from tilecraft.ops import catalog
from tilecraft.pipeline import ScheduleKind, default_stages, run_pipeline

TEMPLATE = "x86 micro-kernel template "
#: named CPUs, so that the intrinsics (VNNI, BF16) do not depend on this host
CPUS = [("znver4", 2), ("znver4", 1), ("skylake-avx512", 4)]


def up_to(graph: tc.Graph, target: X86Avx512Target, stage: str, tensorize: Any = None) -> Any:
    stages = default_stages()
    names = [s.name for s in stages]
    return run_pipeline(graph, target, tensorize=tensorize,
                        stages=stages[:names.index(stage) + 1])


def matmul(m: int, k: int, n: int, a: str = "float32", b: str = "float32",
           out: str | None = None) -> te.Tensor:
    return ops.matmul(te.placeholder((m, k), a, name="A"), te.placeholder((k, n), b, name="B"),
                      out_dtype=out, name="C")


def conv(c: int, k: int, h: int, r: int, dtype: str = "float32", stride: int = 1) -> te.Tensor:
    w_dtype, out = ("int8", "int32") if dtype == "uint8" else (dtype, None)
    x = te.placeholder((1, c, h, h), dtype, name="x")
    w = te.placeholder((k, c, r, r), w_dtype, name="w")
    return ops.conv2d(x, w, stride=stride, padding=r // 2, out_dtype=out, name="C")


def gemm_chain() -> te.Tensor:
    """Bench G10's shape: (512 x 64) (64 x 64) (64 x 256), fused by the x86 plugin."""
    A = te.placeholder((1, 512, 64), name="A")
    B = te.placeholder((1, 64, 64), name="B")
    D = te.placeholder((1, 64, 256), name="D")
    return ops.batch_matmul(ops.batch_matmul(A, B, name="T"), D, name="C")


#: bench workloads (bench/): name -> (program, what the computes with a mapping stay on)
WORKLOADS = {
    "fp32 GEMM 256^3": (lambda: matmul(256, 256, 256), "template"),
    "fp32 GEMM 512x768x3072": (lambda: matmul(512, 3072, 768), "template"),
    "int8 GEMM 512^3": (lambda: matmul(512, 512, 512, "uint8", "int8", "int32"), "template"),
    "bf16 GEMM 256x768x512": (lambda: matmul(256, 768, 512, "bfloat16", "bfloat16", "float32"),
                              "template"),
    "int8 ResNet-18 C5": (lambda: conv(128, 128, 28, 3, "uint8"), "template"),
    "YOLO 192->128 1x1 @56": (lambda: conv(192, 128, 56, 1), "template"),
    "YOLO 64->192 3x3 @56": (lambda: conv(64, 192, 56, 3), "template"),
    "GEMM chain G10": (gemm_chain, "fused"),
    "depthwise 128 @56": (lambda: ops.depthwise_conv2d(
        te.placeholder((1, 128, 56, 56), name="x"), te.placeholder((128, 1, 3, 3), name="w"),
        padding=1, name="C"), "fused"),  # with its pad: blocking/depthwise.py
}


@pytest.mark.parametrize(("cpu", "cores"), CPUS)
@pytest.mark.parametrize("workload", list(WORKLOADS))
def test_bench_workloads_stay_on_the_templates(cpu: str, cores: int, workload: str) -> None:
    program, stays = WORKLOADS[workload]
    target = X86Avx512Target(cpu=cpu, cores=cores)
    graph = tc.Graph.from_outputs([program()])
    state = up_to(graph, target, "schedule")
    assert not state.tensorized
    decisions = state.mapping_decisions
    mapped = {name for name in decisions if decisions[name].mapping is not None}
    dot_products = "int8" in workload or "bf16" in workload
    if cpu == "znver4" or not dot_products:  # skylake-avx512 has no VNNI / BF16 intrinsics
        assert mapped, f"{workload}: no compute has a mapping onto {target.spec.intrinsics}"
    for name in mapped:
        decision = decisions[name]
        assert not decision.tensorized, decision.describe()
        if stays == "fused":
            assert state.schedules[name].kind is ScheduleKind.FUSED
            assert "lowered with its fusion group" in decision.reason
        elif stays == "template":
            assert decision.alternative.startswith(TEMPLATE), decision.describe()
            assert decision.speedup is not None and decision.speedup < 1
            assert f"is slower than {TEMPLATE}" in decision.reason
        else:
            assert decision.alternative == DEFAULT_LOOP_NEST
            assert decision.speedup is not None and decision.speedup < 1


def test_the_template_estimate_is_given_exactly_where_the_template_lowers(
        target: X86Avx512Target) -> None:
    """``native_lowering`` and ``lower_compute`` agree on which computes the templates take."""
    options = LoweringOptions.from_spec(target.spec)
    graphs = [case.build(np.random.default_rng(0))[0]
              for case in catalog.cases(tags="compute-intensive")]
    graphs += [tc.Graph.from_outputs([program()]) for program, _ in WORKLOADS.values()]
    checked = 0
    for graph in graphs:
        for tensor in graph.computes:
            estimate = target.native_lowering(tensor, options)
            lowered = target.lower_compute(tensor, options)
            assert (estimate is None) == (lowered is None), tensor.statement()
            if estimate is not None:
                assert estimate.strategy.startswith((TEMPLATE, DEPTHWISE)), estimate.strategy
                assert estimate.seconds > 0
                checked += 1
    assert checked >= 5


def test_the_catalog_compiles_to_the_same_kernel_ir_as_with_tensorization_off(
        target: X86Avx512Target) -> None:
    """Every catalog case's decisions are 'not tensorized', and its Kernel IR, printed, is
    the one it gets with ``tensorize=False``."""
    decided = 0
    for case in catalog.cases():
        graph, _ = case.build(np.random.default_rng(11))
        auto = up_to(graph, target, "kernel_ir")
        off = up_to(graph, target, "kernel_ir", tensorize=False)
        assert not auto.tensorized, case.id
        for decision in auto.mapping_decisions.values():
            assert not decision.tensorized, f"{case.id}: {decision.describe()}"
            decided += 1
        assert [kernel_to_str(k) for k in auto.kernels] == \
            [kernel_to_str(k) for k in off.kernels], case.id
    assert decided >= 20


def test_a_forced_mapping_still_wins_and_reports_both_predictions(
        target: X86Avx512Target) -> None:
    graph = tc.Graph.from_outputs([matmul(64, 64, 64)])
    state = up_to(graph, target, "kernel_ir", tensorize={"C": "fma_f32x16_bcast"})
    decision = state.mapping_decisions["C"]
    assert decision.tensorized and decision.source.value == "forced"
    assert decision.reason.startswith("tensorize={'C': 'fma_f32x16_bcast'} asks for it: "
                                      "fma_f32x16_bcast: ")
    assert decision.alternative.startswith(TEMPLATE) and decision.speedup < 1
    assert state.lowered[0].kernels[0].attrs["intrinsic"] == "fma_f32x16_bcast"
