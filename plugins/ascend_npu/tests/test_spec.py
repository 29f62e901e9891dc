"""The ascend_npu spec: the buffer sizes of thesis §3.6.1, Ascend 910 rates, and intrinsics
whose cost figures agree with the Cube's 4096 MAC per cycle."""

from __future__ import annotations

import pytest
from tilecraft_ascend_npu.target import AscendNpuTarget, load_target_spec

from tilecraft.lower import LoweringOptions
from tilecraft.target.spec import EvaluationMode, TargetSpec

KB = 1024


@pytest.fixture(scope="module")
def spec() -> TargetSpec:
    return load_target_spec()


def test_buffer_sizes_are_those_of_the_thesis(spec: TargetSpec) -> None:
    assert spec.memory.names == ("GM", "L1", "L0A", "L0B", "L0C", "UB")
    sizes = {level.name: level.size_bytes for level in spec.memory.levels}
    assert sizes == {"GM": 32 * KB ** 3, "L1": KB * KB, "L0A": 64 * KB, "L0B": 64 * KB,
                     "L0C": 256 * KB, "UB": 256 * KB}
    assert spec.memory.instances("L1") == spec.compute.cores == 32
    assert spec.memory.outermost.bandwidth_bytes_per_cycle * spec.compute.frequency_hz == 1200e9


def test_compute_and_lowering_facts(spec: TargetSpec) -> None:
    assert spec.compute.lanes("float16") == 128 and spec.compute.lanes("float32") == 64
    assert spec.evaluation is EvaluationMode.ESTIMATE
    assert spec.capabilities.models_performance and not spec.capabilities.executes_natively
    assert spec.fixed_decisions["fractal_size"] == 16
    options = LoweringOptions.from_spec(spec)
    assert options.param_level == "GM" and options.register_level == "UB"
    assert options.lanes("float16") == 128


def test_cube_peak_is_about_256_tflops(spec: TargetSpec) -> None:
    mad = spec.intrinsic("mad_f16_f32")
    flops = (2 * mad.compute.iterations * mad.throughput_per_cycle * spec.compute.cores
             * spec.compute.frequency_hz)
    assert flops == pytest.approx(262e12, rel=0.01)
    int8 = spec.intrinsic("mad_s8_s32")
    assert int8.compute.iterations == 2 * mad.compute.iterations


def test_mad_copy_path(spec: TargetSpec) -> None:
    memory = spec.intrinsic("mad_f16_f32").memory
    path = {operand: [(m.from_level, m.to_level) for m in memory.moves_of(operand)]
            for operand in ("Src1", "Src2", "Dst")}
    assert path == {"Src1": [("GM", "L1"), ("L1", "L0A")],
                    "Src2": [("GM", "L1"), ("L1", "L0B")],
                    "Dst": [("L0C", "UB"), ("UB", "GM")]}
    assert memory.moves_of("Src1")[1].instruction == "load_cbuf_to_ca"
    assert memory.moves_of("Src1")[1].address.strides == (16, 1)  # a contiguous fractal
    (fill,) = memory.fills
    assert (fill.operand, fill.level, fill.value) == ("Dst", "L0C", 0.0)


def test_vector_intrinsics_fill_one_repeat(spec: TargetSpec) -> None:
    vector = [i for i in spec.intrinsics if i.name.startswith("v")]
    assert len(vector) == 25
    for intrinsic in vector:
        source = intrinsic.compute.operands[0]
        assert source.dtype.bytes * source.shape[0] * (
            source.shape[1] if len(source.shape) > 1 else 1) in (128, 256), intrinsic.name
        assert {m.from_level for m in intrinsic.memory.moves_of("Src1")} == {"GM"}
        assert {m.to_level for m in intrinsic.memory.moves_of("Dst")} == {"GM"}


def test_target_object() -> None:
    target = AscendNpuTarget()
    assert target.name == "ascend_npu" and target.spec is load_target_spec()
