"""fpga_spec: the MAC array sized against the device — DSP cost per MAC by dtype, BRAM banks —
and the memory levels and compute units that follow from it."""

from __future__ import annotations

import dataclasses

import pytest
from tilecraft_fpga_hls.device import VU9P, ZU9EG
from tilecraft_fpga_hls.resources import ACCUMULATOR, DSP_PER_MAC, dsp_slices
from tilecraft_fpga_hls.spec import fpga_spec

from tilecraft.dtypes import DType
from tilecraft.errors import TargetError
from tilecraft.kernel_ir.nodes import LoopKind
from tilecraft.target.spec import EvaluationMode, SchedulePrimitive


def test_default_is_a_32x32_float32_array_on_a_vu9p() -> None:
    spec = fpga_spec()
    assert spec.name == "fpga_hls"
    assert spec.memory.names == ("DDR", "URAM", "BRAM", "register")
    assert spec.memory.level("BRAM").size_bytes == 2160 * 4608  # 75.9 Mib
    assert spec.memory.level("URAM").size_bytes == 960 * 36864
    assert spec.memory.level("DDR").bandwidth_bytes_per_cycle == pytest.approx(76.8e9 / 250e6)
    assert spec.memory.level("register").size_bytes == 32 * 32 * 4 + 64 * 4
    assert spec.fixed_decisions == {"device": "VU9P", "pe_rows": 32, "pe_cols": 32,
                                    "mac_dtype": "float32", "reduce_depth": 1,
                                    "dsp_slices_used": 5120, "axi_port_bits": 512}
    assert spec.compute.processing_elements == 1024
    assert spec.compute.peak_flops("float32") == 2 * 1024 * 250e6
    assert spec.evaluation is EvaluationMode.ESTIMATE
    assert set(spec.loop_kinds) == {LoopKind.SERIAL, LoopKind.PIPELINED, LoopKind.UNROLLED,
                                    LoopKind.STAGE}
    assert spec.offers(SchedulePrimitive.PARTITION) and spec.offers(SchedulePrimitive.PIPELINE)


def test_dsp_table() -> None:
    assert DSP_PER_MAC == {DType.FLOAT32: 5.0, DType.FLOAT16: 2.0, DType.INT8: 0.5,
                           DType.UINT8: 0.5}
    assert ACCUMULATOR[DType.INT8] is DType.INT32
    assert dsp_slices(3, 5, "int8") == 8  # 7.5 rounded up


@pytest.mark.parametrize(("rows", "cols", "dtype", "fits_vu9p"), [
    (36, 38, "float32", True),      # 1368 PEs x 5 = 6840: exactly the device
    (37, 38, "float32", False),
    (58, 58, "float16", True),      # 3364 x 2 = 6728
    (64, 64, "float16", False),
    (100, 136, "int8", True),       # 13600 x 0.5 = 6800
    (1, 1, "uint8", True),
])
def test_dsp_budget(rows: int, cols: int, dtype: str, fits_vu9p: bool) -> None:
    if fits_vu9p:
        spec = fpga_spec(VU9P, rows, cols, dtype)
        assert spec.fixed_decisions["dsp_slices_used"] <= VU9P.dsp_slices
    else:
        with pytest.raises(TargetError, match=rf"a {rows}x{cols} MAC array of {dtype} needs "
                                              r"\d+ DSP slices .* more than the VU9P's 6840; "
                                              r"use at most \d+ PEs"):
            fpga_spec(VU9P, rows, cols, dtype)


def test_smaller_device_without_uram() -> None:
    spec = fpga_spec(ZU9EG, 16, 16, "float16")
    assert spec.memory.names == ("DDR", "BRAM", "register")
    assert spec.compute.frequency_hz == 200e6
    with pytest.raises(TargetError, match="more than the ZU9EG's 2520"):
        fpga_spec(ZU9EG, 32, 32, "float32")


def test_every_row_and_column_needs_a_bram_bank() -> None:
    tiny = dataclasses.replace(VU9P, name="tiny", bram36_blocks=10, uram_blocks=0)
    assert fpga_spec(tiny, 5, 5, "int8").memory.level("BRAM").size_bytes == 10 * 4608
    with pytest.raises(TargetError, match="reads 11 operand streams per cycle, one BRAM bank "
                                          "each, but the tiny has 10 BRAM36 blocks"):
        fpga_spec(tiny, 5, 6, "int8")


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"dtype": "bfloat16"}, "no MAC cost for dtype bfloat16; the MAC array is built for "
                            "float32, float16, int8, uint8"),
    ({"rows": 0}, "the MAC array's rows must be a positive int, got 0"),
    ({"cols": 2.5}, "the MAC array's cols must be a positive int, got 2.5"),
    ({"depth": True}, "the MAC array's depth must be a positive int, got True"),
])
def test_bad_parameters(kwargs: dict, message: str) -> None:
    with pytest.raises(TargetError, match=message):
        fpga_spec(**kwargs)
