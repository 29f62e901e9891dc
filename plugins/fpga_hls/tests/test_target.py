"""The fpga_hls target object: honest availability, and emulation (on the Kernel IR
interpreter) of a GEMM in the read / compute / write structure whose compute stage calls the
MAC array once per k."""

from __future__ import annotations

import numpy as np
import pytest
from tilecraft_fpga_hls.examples import gemm_kernel
from tilecraft_fpga_hls.spec import TARGET_NAME
from tilecraft_fpga_hls.target import FpgaHlsTarget

from tilecraft.dtypes import DType
from tilecraft.errors import CodegenError
from tilecraft.kernel_ir import (
    LoopKind,
)
from tilecraft.target import Capability, get_target


def test_discovered_and_honest_about_what_it_cannot_do() -> None:
    target = get_target(TARGET_NAME)
    assert isinstance(target, FpgaHlsTarget) and target.shape == (32, 32)
    availability = target.available()
    assert availability.capability is Capability.EMULATE
    assert availability.codegen and availability.estimate
    assert not availability.build and not availability.execute
    assert "Vitis HLS" in availability.reasons["build"]
    assert "no FPGA board" in availability.reasons["execute"]


@pytest.mark.parametrize(("rows", "cols", "k", "tiles", "dtype"), [
    (4, 8, 13, (2, 3), "int8"), (1, 1, 1, (1, 1), "int8"), (3, 5, 7, (1, 2), "float32"),
])
def test_emulated_gemm_matches_numpy(rows: int, cols: int, k: int, tiles: tuple[int, int],
                                     dtype: str) -> None:
    target = FpgaHlsTarget(rows=rows, cols=cols, dtype=dtype)
    dt = DType.parse(dtype)
    m, n = tiles[0] * rows, tiles[1] * cols
    rng = np.random.default_rng(k)
    if dt is DType.INT8:
        a = rng.integers(-128, 128, (m, k), dtype=np.int8)
        b = rng.integers(-128, 128, (k, n), dtype=np.int8)
        arrays = {"A": a, "B": b, "C": np.zeros((m, n), np.int32)}
        target.emulate(gemm_kernel(rows, cols, k, tiles, dt), arrays)
        np.testing.assert_array_equal(arrays["C"], a.astype(np.int32) @ b.astype(np.int32))
    else:
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        arrays = {"A": a, "B": b, "C": np.zeros((m, n), np.float32)}
        target.emulate(gemm_kernel(rows, cols, k, tiles, dt), arrays)
        np.testing.assert_allclose(arrays["C"], a @ b, rtol=1e-5, atol=1e-5)


def test_emulation_rejects_what_the_target_does_not_declare() -> None:
    target = FpgaHlsTarget(rows=2, cols=2, dtype="int8")
    arrays = {"A": np.zeros((2, 3), np.int8), "B": np.zeros((3, 2), np.int8),
              "C": np.zeros((2, 2), np.int32)}
    with pytest.raises(CodegenError, match="loop kk is vector, which this target cannot "
                                           "express"):
        target.emulate(gemm_kernel(2, 2, 3, (1, 1), DType.INT8, LoopKind.VECTOR), arrays)
    other = FpgaHlsTarget(rows=2, cols=4, dtype="int8")
    with pytest.raises(CodegenError, match=r"operand 1 \(Src2\) is a region of b_buf with "
                                           r"extents \(1, 2\); the intrinsic declares shape "
                                           r"\(1, 4\)"):
        other.emulate(gemm_kernel(2, 2, 3, (1, 1), DType.INT8), arrays)
