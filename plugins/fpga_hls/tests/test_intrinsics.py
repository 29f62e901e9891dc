"""The MAC array's semantics against numpy, for every supported dtype and awkward shapes."""

from __future__ import annotations

import numpy as np
import pytest
from tilecraft_fpga_hls.spec import fpga_spec


@pytest.mark.parametrize(("rows", "cols", "depth", "dtype"), [
    (32, 32, 1, "float32"), (3, 7, 5, "float32"), (1, 1, 1, "float16"), (8, 13, 4, "float16"),
    (16, 16, 3, "int8"), (5, 2, 7, "uint8"),
])
def test_mac_array_accumulates_a_matrix_product(rows: int, cols: int, depth: int,
                                                dtype: str) -> None:
    mac = fpga_spec(rows=rows, cols=cols, dtype=dtype, depth=depth).intrinsic("mac_array")
    src1, src2, dst = mac.compute.operands
    assert (src1.shape, src2.shape, dst.shape) == ((rows, depth), (depth, cols), (rows, cols))
    assert mac.throughput_per_cycle == 1 / depth
    rng = np.random.default_rng(rows * cols + depth)
    if dtype in ("int8", "uint8"):
        info = np.iinfo(dtype)
        a = rng.integers(info.min, info.max, (rows, depth), dtype=dtype, endpoint=True)
        b = rng.integers(info.min, info.max, (depth, cols), dtype=dtype, endpoint=True)
        c = rng.integers(-1000, 1000, (rows, cols), dtype=np.int32)
        expected = c + a.astype(np.int32) @ b.astype(np.int32)
        mac.reference(a, b, c)
        np.testing.assert_array_equal(c, expected)
    else:
        a = rng.standard_normal((rows, depth)).astype(dtype)
        b = rng.standard_normal((depth, cols)).astype(dtype)
        c = rng.standard_normal((rows, cols)).astype(dtype)
        expected = c.astype(np.float64) + a.astype(np.float64) @ b.astype(np.float64)
        mac.reference(a, b, c)
        tolerance = 1e-2 if dtype == "float16" else 1e-5
        np.testing.assert_allclose(c, expected, rtol=tolerance, atol=tolerance)


def test_memory_abstraction_is_the_three_stage_pipeline() -> None:
    memory = fpga_spec().intrinsic("mac_array").memory
    assert [(m.operand, m.from_level, m.to_level) for m in memory.moves] == [
        ("Src1", "DDR", "BRAM"), ("Src2", "DDR", "BRAM"),            # read stage
        ("Src1", "BRAM", "register"), ("Src2", "BRAM", "register"),  # compute stage
        ("Dst", "register", "BRAM"), ("Dst", "BRAM", "DDR")]         # write stage
    assert memory.moves[0].instruction == "m_axi_burst_read"
    assert memory.moves[-1].instruction == "m_axi_burst_write"
    (fill,) = memory.fills
    assert (fill.operand, fill.level, fill.value) == ("Dst", "register", 0.0)
