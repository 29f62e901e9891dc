"""The mali spec (Mali-G76 MP10 figures) and its two dot-product intrinsics: semantics
against numpy, the memory abstraction without companion load/store intrinsics."""

from __future__ import annotations

import numpy as np
import pytest
from tilecraft_mali.target import load_target_spec

from tilecraft.kernel_ir.nodes import LoopKind
from tilecraft.lower import LoweringOptions
from tilecraft.target.spec import EvaluationMode

SPEC = load_target_spec()
RNG = np.random.default_rng(76)


def test_levels_and_rates() -> None:
    assert SPEC.memory.names == ("global", "local", "private")
    assert SPEC.memory.level("local").size_bytes == 32 * 1024
    assert SPEC.memory.level("private").size_bytes == 64 * 4
    assert SPEC.memory.outermost.size_bytes is None
    assert SPEC.compute.peak_flops("float32") == pytest.approx(345.6e9)
    assert SPEC.compute.peak_flops("float16") == pytest.approx(2 * 345.6e9)
    assert SPEC.memory.outermost.bandwidth_bytes_per_cycle * SPEC.compute.frequency_hz == \
        pytest.approx(34.1e9, rel=0.01)
    assert LoopKind.BOUND in SPEC.loop_kinds and LoopKind.PARALLEL not in SPEC.loop_kinds
    assert SPEC.evaluation is EvaluationMode.MEASURE
    options = LoweringOptions.from_spec(SPEC)
    assert options.param_level == "global" and options.register_level == "private"


def test_dot_rate_is_four_int8_macs_per_lane() -> None:
    for intrinsic in SPEC.intrinsics:
        macs = intrinsic.compute.iterations * intrinsic.throughput_per_cycle
        assert macs == 4 * 3 * 8  # per core per cycle: 4 MACs on each of 24 lanes


@pytest.mark.parametrize("size", [1, 5, 97])
def test_arm_dot_is_a_four_element_int8_dot(size: int) -> None:
    dot, dot_acc = SPEC.intrinsic("arm_dot"), SPEC.intrinsic("arm_dot_acc")
    assert not dot.compute.accumulates and dot_acc.compute.accumulates
    for _ in range(size):
        a = RNG.integers(-128, 128, 4, dtype=np.int8)
        b = RNG.integers(-128, 128, 4, dtype=np.int8)
        exact = int(np.dot(a.astype(np.int64), b.astype(np.int64)))
        out = np.array([12345], np.int32)
        dot.reference(a, b, out)
        assert out.tolist() == [exact]  # arm_dot ignores the previous value
        dot_acc.reference(a, b, out)
        assert out.tolist() == [2 * exact]


def test_extremes_and_wrapping_accumulation() -> None:
    low = np.full(4, -128, np.int8)
    out = np.zeros(1, np.int32)
    SPEC.intrinsic("arm_dot").reference(low, low, out)
    assert out.tolist() == [4 * 128 * 128]
    acc = np.array([np.iinfo(np.int32).max], np.int32)
    one = np.array([1, 0, 0, 0], np.int8)
    SPEC.intrinsic("arm_dot_acc").reference(one, one, acc)
    assert acc.tolist() == [np.iinfo(np.int32).min]  # int32 addition wraps


def test_memory_abstraction_has_no_companion_intrinsic_for_the_result() -> None:
    for intrinsic in SPEC.intrinsics:
        memory = intrinsic.memory
        assert {m.instruction for m in memory.moves_of("Src1")} == {"vload4"}
        (store,) = memory.moves_of("Dst")
        assert (store.from_level, store.to_level, store.instruction) == (
            "private", "global", None)
    (fill,) = SPEC.intrinsic("arm_dot_acc").memory.fills
    assert (fill.level, fill.instruction, fill.value) == ("private", None, 0.0)
