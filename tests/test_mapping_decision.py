"""The AMOS mapping stage decides by comparing predictions (``tilecraft.intrin.decision``): on a
toy GPU that declares a WMMA intrinsic, a compute is tensorized where its best mapping is
predicted faster than the target's own lowering (or the core's default loop nest) by the
margin, kept off otherwise; ``tensorize=`` overrides both ways; the decision, with both
predictions and the reason, is in the stage's output and the compile report."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.cost.loop_nest import DEFAULT_LOOP_NEST, estimate_loop_nest
from tilecraft.errors import InputError
from tilecraft.intrin.decision import MAPPING_MARGIN, DecisionSource, decide_mappings
from tilecraft.intrin.examples import wmma
from tilecraft.intrin.lowering import serial_view
from tilecraft.intrin.perfmodel import gpu_spec_example, rank_mappings
from tilecraft.kernel_ir.nodes import IntrinsicCall, Kernel
from tilecraft.kernel_ir.printer import kernel_to_str
from tilecraft.kernel_ir.visitor import walk_stmts
from tilecraft.lower import LoweringOptions
from tilecraft.pipeline import Pipeline, ScheduleKind, default_stages, run_pipeline
from tilecraft.target.base import Availability, LoweringEstimate, Source
from tilecraft.target.declared import DeclaredTarget

INTRINSIC = "wmma_16x16x16"


class ToyGpu(DeclaredTarget):
    """Declares WMMA and lowers nothing itself: the core's default loop nest otherwise. Its
    'code' is the printed Kernel IR; kernels run on the interpreter."""

    availability = Availability(codegen=True, build=False, execute=False, emulate=True,
                                reasons={"execute": "a toy"})
    spec = gpu_spec_example().model_copy(update={"intrinsics": (wmma(16, 16, 16),)})
    name = "toy_gpu"

    def codegen(self, kernel: Kernel) -> Source:
        return Source(self.name, kernel.name, "kernel-ir", kernel_to_str(kernel), kernel.name)


class ToyGpuWithLibrary(ToyGpu):
    """Has a library kernel of its own for every compute, predicted to take ``seconds``."""

    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds

    def native_lowering(self, tensor: te.Tensor,
                        options: LoweringOptions) -> LoweringEstimate | None:
        return LoweringEstimate("the toy library", self.seconds, "a test's figure")


def half_gemm_relu() -> tc.Graph:
    A = te.placeholder((40, 48), "float16", name="A")
    B = te.placeholder((48, 56), "float16", name="B")
    C = ops.matmul(A, B, out_dtype="float32", name="C")
    return tc.Graph.from_outputs([ops.relu(C, name="R")])


def inputs_of(graph: tc.Graph) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(5)
    return {t.name: rng.standard_normal(t.shape).astype(t.dtype.numpy) for t in graph.inputs}


def intrinsic_calls(kernels: list[Kernel]) -> list[str]:
    return [stmt.intrinsic for kernel in kernels for stmt in walk_stmts(kernel.body)
            if isinstance(stmt, IntrinsicCall)]


def up_to_lowering(graph: tc.Graph, target: Any, tensorize: Any = None) -> Any:
    return run_pipeline(graph, target, tensorize=tensorize, stages=default_stages()[:5])


def mapped_prediction() -> float:
    """The toy GPU's predicted time of C's best mapping (nest and packing)."""
    state = up_to_lowering(half_gemm_relu(), ToyGpu())
    seconds = state.mapping_decisions["C"].mapping_seconds
    assert seconds is not None and seconds > 0
    return seconds


def test_a_target_without_a_strategy_of_its_own_gets_the_mapping() -> None:
    graph = half_gemm_relu()
    target = ToyGpu()
    state = up_to_lowering(graph, target)
    decision = state.mapping_decisions["C"]
    assert decision.tensorized and decision.source is DecisionSource.MODEL
    assert decision.alternative == DEFAULT_LOOP_NEST
    nest = estimate_loop_nest(graph.computes[0], target.spec, state.options)
    assert decision.alternative_seconds == pytest.approx(nest.seconds)
    assert decision.speedup is not None and decision.speedup >= MAPPING_MARGIN
    assert decision.mapping is not None and decision.mapping.startswith(INTRINSIC)
    assert "R" not in state.mapping_decisions  # relu has no mapping: nothing to decide
    assert state.schedules["C"].kind is ScheduleKind.TENSORIZED
    assert state.schedules["R"].kind is ScheduleKind.DEFAULT
    assert intrinsic_calls(state.lowered[0].kernels) == [INTRINSIC]
    exe = tc.compile(graph, target)  # emulated: the interpreter runs the intrinsic's semantics
    inputs = inputs_of(graph)
    np.testing.assert_allclose(exe(**inputs), tc.reference.run(graph, **inputs), rtol=1e-3,
                               atol=1e-3)


def test_a_native_strategy_predicted_faster_keeps_the_compute() -> None:
    graph = half_gemm_relu()
    state = up_to_lowering(graph, ToyGpuWithLibrary(mapped_prediction() / 10))
    decision = state.mapping_decisions["C"]
    assert not decision.tensorized and decision.source is DecisionSource.MODEL
    assert decision.alternative == "the toy library"
    assert "is slower than the toy library" in decision.reason
    assert not state.tensorized and state.schedules["C"].kind is ScheduleKind.DEFAULT
    assert intrinsic_calls(state.kernels) == []


@pytest.mark.parametrize(("speedup", "tensorized"), [(MAPPING_MARGIN * 0.8, False),
                                                     (MAPPING_MARGIN * 1.25, True)])
def test_the_mapping_must_beat_the_alternative_by_the_margin(speedup: float,
                                                             tensorized: bool) -> None:
    """A mapping predicted faster, but by less than the margin, is not taken."""
    state = up_to_lowering(half_gemm_relu(), ToyGpuWithLibrary(mapped_prediction() * speedup))
    decision = state.mapping_decisions["C"]
    assert decision.tensorized is tensorized
    assert decision.speedup == pytest.approx(speedup)
    if not tensorized:
        assert f"is only {speedup:.2g}x faster than the toy library" in decision.reason
        assert f"(margin {MAPPING_MARGIN:g}x)" in decision.reason


def test_a_native_strategy_that_already_uses_the_intrinsics_is_kept() -> None:
    state = up_to_lowering(half_gemm_relu(), ToyGpuWithLibrary(None))
    decision = state.mapping_decisions["C"]
    assert not decision.tensorized
    assert "the toy library already uses the target's intrinsics" in decision.reason
    assert decision.alternative_seconds is None and decision.speedup is None


@pytest.mark.parametrize("off", [False, "off", {"C": False}, {"C": "off"}])
def test_tensorize_off_keeps_a_compute_the_model_would_map(off: Any) -> None:
    state = up_to_lowering(half_gemm_relu(), ToyGpu(), tensorize=off)
    decision = state.mapping_decisions["C"]
    assert not decision.tensorized and decision.source is DecisionSource.OFF
    assert not state.tensorized and intrinsic_calls(state.kernels) == []
    expected = "tensorize=False" if not isinstance(off, dict) else "tensorize={'C': False}"
    assert decision.reason.startswith(f"{expected} (its best mapping would be {INTRINSIC}")


@pytest.mark.parametrize("force", [True, {"C": INTRINSIC}, {"C": "auto"}])
def test_tensorize_forces_a_compute_the_model_would_keep(force: Any) -> None:
    graph = half_gemm_relu()
    target = ToyGpuWithLibrary(mapped_prediction() / 10)
    state = up_to_lowering(graph, target, tensorize=force)
    decision = state.mapping_decisions["C"]
    assert decision.tensorized and decision.source is DecisionSource.FORCED
    assert decision.alternative == "the toy library" and decision.speedup is not None
    assert decision.speedup < 1  # forced although predicted slower
    assert intrinsic_calls(state.lowered[0].kernels) == [INTRINSIC]
    exe = tc.compile(graph, target, tensorize=force)
    inputs = inputs_of(graph)
    np.testing.assert_allclose(exe(**inputs), tc.reference.run(graph, **inputs), rtol=1e-3,
                               atol=1e-3)


def test_auto_is_the_default() -> None:
    graph = half_gemm_relu()
    default = up_to_lowering(graph, ToyGpu())
    auto = up_to_lowering(graph, ToyGpu(), tensorize="auto")
    assert auto.mapping_decisions == default.mapping_decisions
    assert [kernel_to_str(k) for k in auto.kernels] == [kernel_to_str(k) for k in default.kernels]


def test_a_request_of_another_shape_is_refused() -> None:
    with pytest.raises(InputError, match=r"tensorize='on': give None or 'auto'"):
        up_to_lowering(half_gemm_relu(), ToyGpu(), tensorize="on")


def test_the_stage_output_and_the_compile_report_carry_the_decision() -> None:
    graph = half_gemm_relu()
    target = ToyGpuWithLibrary(mapped_prediction() / 10)
    state = run_pipeline(graph, target)
    text = Pipeline(default_stages()).describe(state)
    mapping = text.split("== mapping ==")[1].split("== schedule ==")[0]
    line = next(line for line in mapping.splitlines() if line.startswith("C: "))
    assert line.startswith(f"C: not tensorized (model): the best mapping, {INTRINSIC}: ")
    assert ", predicted " in line and " (nest " in line and " + packing " in line
    assert "is slower than the toy library, predicted " in line
    assert "  the toy library: a test's figure" in mapping
    exe = tc.compile(graph, target)
    assert f"mapping {line}" in exe.report.notes
    assert f"mapping {line}" in str(exe.report)


def test_the_prediction_is_for_the_serial_kernel_lower_mapped_generates() -> None:
    """The mapped kernel's loops are serial: its nest is predicted on one unit of each level,
    which, for a product large enough to keep every unit busy, is slower than the model's
    prediction with the loops spread over the units."""
    A = te.placeholder((512, 256), "float16", name="A")
    B = te.placeholder((256, 512), "float16", name="B")
    graph = tc.Graph.from_outputs([ops.matmul(A, B, out_dtype="float32", name="C")])
    target = ToyGpu()
    options = LoweringOptions.from_spec(target.spec)
    plan = decide_mappings(graph, target, options, None)
    item = plan.tensorized["C"]
    spread = rank_mappings(item.compute, item.intrinsic, target.spec,
                           mappings=[item.ranked.mapping])[0]
    serial = rank_mappings(item.compute, item.intrinsic, serial_view(target.spec),
                           mappings=[item.ranked.mapping])[0]
    assert item.ranked.seconds == pytest.approx(serial.seconds)
    assert serial.seconds > spread.seconds


def test_the_decisions_read_the_report_s_matching(monkeypatch: pytest.MonkeyPatch) -> None:
    """Deciding costs no second matching: every compute is matched once per intrinsic (the
    mapping report's survey), and a compute the model tensorizes keeps its survey entry."""
    from tilecraft.intrin import matching

    calls: list[tuple[str, str]] = []
    match = matching.match

    def counted(compute: te.Tensor, intrinsic: Any) -> Any:
        calls.append((compute.name, intrinsic.name))
        return match(compute, intrinsic)

    monkeypatch.setattr(matching, "match", counted)
    graph = half_gemm_relu()
    state = run_pipeline(graph, ToyGpu())
    assert sorted(calls) == [("C", INTRINSIC), ("R", INTRINSIC)]
    (entry,) = [e for e in state.report.mappings if e.operator == "C"]
    assert entry.chosen == state.mapping_decisions["C"].mapping
    assert entry.notes == (f"compiled through this mapping: "
                           f"{state.mapping_decisions['C'].reason}",)
    assert entry.measured_seconds is None  # chosen by the model: not timed


def test_the_survey_is_bounded_by_the_mappings_it_ranks() -> None:
    """A compute with more mappings than are left to rank is counted, not ranked, and not
    tensorized — the same on a busy machine as on an idle one (no clock involved)."""
    graph = half_gemm_relu()
    target = ToyGpu()
    options = LoweringOptions.from_spec(target.spec)
    plan = decide_mappings(graph, target, options, None, max_mappings=0)
    assert plan.decisions == {} and plan.tensorized == {}
    (entry,) = plan.entries
    assert entry.operator == "C" and entry.mappings > 0 and entry.chosen is None
    assert entry.notes == (f"{entry.mappings} mappings, more than the 0 left to rank; "
                           "`tilecraft report` ranks them all",)
