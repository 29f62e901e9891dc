"""The fpga_hls target object: honest availability, and emulation of a GEMM in the
read / compute / write structure whose compute stage calls the MAC array once per k."""

from __future__ import annotations

import numpy as np
import pytest
from tilecraft_fpga_hls.spec import TARGET_NAME
from tilecraft_fpga_hls.target import FpgaHlsTarget

from tilecraft.dtypes import DType
from tilecraft.errors import CodegenError, TargetError
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
from tilecraft.target import Capability, get_target
from tilecraft.te import Var, const


def test_discovered_and_honest_about_what_it_cannot_do() -> None:
    target = get_target(TARGET_NAME)
    assert isinstance(target, FpgaHlsTarget) and target.shape == (32, 32)
    availability = target.available()
    assert availability.capability is Capability.EMULATE
    assert "Eq. 4.6" in availability.reasons["estimate"]
    kernel = Kernel("k", (), (), Seq(()))
    with pytest.raises(TargetError, match="cannot generate code for kernel k: not implemented"):
        target.codegen(kernel)
    with pytest.raises(TargetError, match="cannot estimate kernel k: not implemented yet"):
        target.estimate(kernel)


def gemm_kernel(rows: int, cols: int, k: int, tiles: tuple[int, int], dtype: DType,
                k_loop: LoopKind = LoopKind.PIPELINED) -> Kernel:
    """C = A @ B on (tiles) output tiles of the array's shape: read A and B tiles into BRAM,
    one mac_array call per k (II = 1), drain through BRAM to DDR."""
    acc_dtype = DType.INT32 if dtype in (DType.INT8, DType.UINT8) else dtype
    m, n = tiles[0] * rows, tiles[1] * cols
    a = Buffer("A", (m, k), dtype, level="DDR")
    b = Buffer("B", (k, n), dtype, level="DDR")
    c = Buffer("C", (m, n), acc_dtype, level="DDR")
    a_buf = Buffer("a_buf", (rows, k), dtype, level="BRAM")
    b_buf = Buffer("b_buf", (k, cols), dtype, level="BRAM")
    c_buf = Buffer("c_buf", (rows, cols), acc_dtype, level="BRAM")
    acc = Buffer("acc", (rows, cols), acc_dtype, level="register")
    tm, tn, kk, i, j = Var("tm"), Var("tn"), Var("kk"), Var("i"), Var("j")
    zero = (const(0), const(0))
    read = Seq((Copy(Region(a_buf, zero, (rows, k)), Region(a, (tm * rows, const(0)), (rows, k))),
                Copy(Region(b_buf, zero, (k, cols)), Region(b, (const(0), tn * cols), (k, cols)))))
    reset = For(i, const(rows), LoopKind.UNROLLED, For(j, const(cols), LoopKind.UNROLLED,
                                                       Store(acc, (i, j), const(0, acc_dtype))))
    compute = For(kk, const(k), k_loop, IntrinsicCall("mac_array", (
        Region(a_buf, (const(0), kk), (rows, 1)), Region(b_buf, (kk, const(0)), (1, cols)),
        Region(acc, zero, (rows, cols)))), initiation_interval=1)
    write = Seq((Copy(Region(c_buf, zero, (rows, cols)), Region(acc, zero, (rows, cols))),
                 Copy(Region(c, (tm * rows, tn * cols), (rows, cols)),
                      Region(c_buf, zero, (rows, cols)))))
    tile_loops = For(tm, const(tiles[0]), LoopKind.SERIAL,
                     For(tn, const(tiles[1]), LoopKind.SERIAL,
                         Seq((read, reset, compute, write))))
    body = Allocate(a_buf, Allocate(b_buf, Allocate(c_buf, Allocate(acc, tile_loops))))
    return Kernel("gemm", (a, b, c), ("C",), body)


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
