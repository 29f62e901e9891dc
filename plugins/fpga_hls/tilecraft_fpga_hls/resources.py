"""What one multiply-accumulate costs on UltraScale+ fabric, by input dtype: the data table
the MAC array is sized with (thesis §4.5: the compute stage is bounded by DSP slices, the
buffers by BRAM).

=========  ============  ===========  =========================================================
input      accumulator   DSP48E2/MAC  source
=========  ============  ===========  =========================================================
float32    float32       5            Vitis HLS / Floating-Point Operator (PG060) with full DSP
                                      usage: fmul 3 + fadd 2 DSP48E2 slices
float16    float16       2            half-precision hmul 1 + hadd 1 DSP48E2 (PG060, HLS
                                      ``half``)
int8       int32         0.5          two int8 MACs sharing one operand packed into one
uint8      int32         0.5          DSP48E2 (27x18 multiplier, 48-bit accumulator): AMD
                                      WP486 "Deep Learning with INT8 Optimization on Xilinx
                                      Devices"
=========  ============  ===========  =========================================================

Other dtypes (bfloat16, int32) have no entry: HLS has no native bfloat16 arithmetic, and a
32-bit integer MAC is not what MAC arrays are built from.

>>> dsp_slices(32, 32, "float32"), dsp_slices(64, 64, "int8")
(5120, 2048)
>>> accumulator_dtype("uint8").value
'int32'
"""

from __future__ import annotations

import math

from tilecraft.dtypes import DType
from tilecraft.errors import TargetError

#: DSP48E2 slices per multiply-accumulate, by input dtype (see the module's table)
DSP_PER_MAC: dict[DType, float] = {
    DType.FLOAT32: 5.0,
    DType.FLOAT16: 2.0,
    DType.INT8: 0.5,
    DType.UINT8: 0.5,
}

#: the type a MAC of each input dtype accumulates in
ACCUMULATOR: dict[DType, DType] = {
    DType.FLOAT32: DType.FLOAT32,
    DType.FLOAT16: DType.FLOAT16,
    DType.INT8: DType.INT32,
    DType.UINT8: DType.INT32,
}


def _supported(dtype: DType | str) -> DType:
    dt = DType.parse(dtype)
    if dt not in DSP_PER_MAC:
        known = ", ".join(d.value for d in DSP_PER_MAC)
        raise TargetError(f"fpga_hls: no MAC cost for dtype {dt.value}; the MAC array is built "
                          f"for {known}")
    return dt


def dsp_per_mac(dtype: DType | str) -> float:
    """DSP48E2 slices one MAC of ``dtype`` inputs uses."""
    return DSP_PER_MAC[_supported(dtype)]


def accumulator_dtype(dtype: DType | str) -> DType:
    """The dtype a MAC of ``dtype`` inputs accumulates in."""
    return ACCUMULATOR[_supported(dtype)]


def dsp_slices(rows: int, cols: int, dtype: DType | str) -> int:
    """DSP48E2 slices of a ``rows`` x ``cols`` array of ``dtype`` MACs."""
    return math.ceil(rows * cols * dsp_per_mac(dtype))
