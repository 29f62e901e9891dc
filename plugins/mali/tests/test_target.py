"""The mali target object: honest availability, and emulation of an int8 matrix-vector product
whose inner loop is arm_dot_acc on work-item registers."""

from __future__ import annotations

import numpy as np
import pytest
from tilecraft_mali.runtime.device import find_device
from tilecraft_mali.target import TARGET_NAME, MaliTarget

from tilecraft.dtypes import DType
from tilecraft.errors import CodegenError
from tilecraft.kernel_ir import (
    Allocate,
    Buffer,
    Copy,
    For,
    IntrinsicCall,
    Kernel,
    LoopKind,
    Region,
    Seq,
    Store,
)
from tilecraft.target import get_target
from tilecraft.te import Var, const


@pytest.fixture(scope="module")
def target() -> MaliTarget:
    return MaliTarget()


def test_discovered_and_honest_about_what_it_cannot_do(target: MaliTarget) -> None:
    assert isinstance(get_target(TARGET_NAME), MaliTarget)
    availability = target.available()
    device = find_device()
    assert availability.codegen and availability.emulate
    assert availability.build is device.usable
    assert availability.execute is device.is_mali
    if not availability.execute:
        # says which device stands in (or why none), and which extensions it has
        assert availability.reasons["execute"]
        if device.usable:
            assert device.name in availability.reasons["execute"]
            assert "arm_dot" in availability.reasons["execute"]
    with pytest.raises(CodegenError, match="kernel k: .*parallel loop"):
        i = Var("i")
        out = Buffer("out", (4,), DType.FLOAT32)
        target.codegen(Kernel("k", (out,), ("out",), For(i, const(4), LoopKind.PARALLEL,
                                                          Store(out, (i,), const(1.0)))))


def gemv_kernel(n: int, k: int, loop_kind: LoopKind = LoopKind.BOUND) -> Kernel:
    """y[i] = sum_k W[i, k] * x[k]: one work-item per row, arm_dot_acc over groups of 4."""
    w = Buffer("W", (n * k,), DType.INT8, level="global")
    x = Buffer("x", (k,), DType.INT8, level="global")
    y = Buffer("y", (n,), DType.INT32, level="global")
    acc = Buffer("acc", (1,), DType.INT32, level="private")
    i, g = Var("i"), Var("g")
    body = For(i, const(n), loop_kind, Allocate(acc, Seq((
        Store(acc, (const(0),), const(0)),
        For(g, const(k // 4), LoopKind.SERIAL, IntrinsicCall("arm_dot_acc", (
            Region(w, (i * k + g * 4,), (4,)), Region(x, (g * 4,), (4,)),
            Region(acc, (const(0),), (1,))))),
        Copy(Region(y, (i,), (1,)), Region(acc, (const(0),), (1,)))))),
        axis="get_global_id(0)" if loop_kind is LoopKind.BOUND else None)
    return Kernel("gemv_i8", (w, x, y), ("y",), body)


@pytest.mark.parametrize(("n", "k"), [(7, 4 * 13), (1, 4), (16, 64)])
def test_emulated_int8_gemv_matches_numpy(target: MaliTarget, n: int, k: int) -> None:
    rng = np.random.default_rng(n * k)
    w = rng.integers(-128, 128, (n, k), dtype=np.int8)
    x = rng.integers(-128, 128, k, dtype=np.int8)
    arrays = {"W": w.reshape(-1), "x": x, "y": np.zeros(n, np.int32)}
    target.emulate(gemv_kernel(n, k), arrays)
    np.testing.assert_array_equal(arrays["y"], w.astype(np.int32) @ x.astype(np.int32))


def test_emulation_rejects_loop_kinds_mali_cannot_express(target: MaliTarget) -> None:
    arrays = {"W": np.zeros(4, np.int8), "x": np.zeros(4, np.int8), "y": np.zeros(1, np.int32)}
    with pytest.raises(CodegenError, match="loop i is parallel, which this target cannot "
                                           "express"):
        target.emulate(gemv_kernel(1, 4, LoopKind.PARALLEL), arrays)
