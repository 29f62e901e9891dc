"""The fpga_hls target spec, built from a device and the shape of its MAC array.

FlexTensor's FPGA template (thesis §4.5, Fig. 4.4c) is a three-stage dataflow pipeline: a read
stage bursts tiles from DDR into on-chip buffers (BRAM), a compute stage runs a MAC array of
``rows`` x ``cols`` processing elements on them, a write stage drains the results back. The
array is the target's one intrinsic, ``mac_array``: per call it streams ``depth`` k-slices
through the array (``Dst[i1, i2] += Src1[i1, r1] * Src2[r1, i2]``, in the MAC's accumulator
type). :func:`fpga_spec` sizes it against the device: its DSP slices (cost per MAC by dtype,
:mod:`.resources`) must fit, and so must one BRAM bank per row and column stream.

Memory levels, outer to inner: ``DDR`` (the board's memory), ``URAM`` (where the device has
it), ``BRAM`` and ``register`` (the PE array's operand and accumulator registers).

>>> spec = fpga_spec(rows=32, cols=32, dtype="float32")
>>> spec.memory.names
('DDR', 'URAM', 'BRAM', 'register')
>>> spec.fixed_decisions["dsp_slices_used"], spec.compute.peak_flops("float32") / 1e9
(5120, 512.0)
>>> fpga_spec(device=ZU9EG, rows=8, cols=16, dtype="int8").memory.names
('DDR', 'BRAM', 'register')
>>> spec.spatial.unit("mac_array").pe_shape, spec.spatial.fabric.bram36_blocks
((32, 32), 2160)
"""

from __future__ import annotations

from typing import Any

from tilecraft.dtypes import DType
from tilecraft.errors import TargetError
from tilecraft.target.spec import TARGET_API_VERSION, TargetSpec, load_spec
from tilecraft_fpga_hls.device import BLOCK_PORT_BYTES, VU9P, ZU9EG, DeviceSpec
from tilecraft_fpga_hls.resources import accumulator_dtype, dsp_per_mac, dsp_slices

TARGET_NAME = "fpga_hls"
PLUGIN_VERSION = "0.1.0"
DEFAULT_SHAPE = (32, 32)

LOOP_KINDS = ("serial", "pipelined", "unrolled", "stage")
PRIMITIVES = ("split", "fuse", "reorder", "tile", "unroll", "inline", "compute_at", "cache",
              "buffer", "pipeline", "partition")

__all__ = ["DEFAULT_SHAPE", "TARGET_NAME", "VU9P", "ZU9EG", "fpga_spec", "mac_array"]


def _check_shape(rows: int, cols: int, depth: int) -> None:
    for what, value in (("rows", rows), ("cols", cols), ("depth", depth)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise TargetError(f"fpga_hls: the MAC array's {what} must be a positive int, got "
                              f"{value!r}")


def _check_resources(device: DeviceSpec, rows: int, cols: int, dtype: DType) -> int:
    needed = dsp_slices(rows, cols, dtype)
    if needed > device.dsp_slices:
        most = int(device.dsp_slices / dsp_per_mac(dtype))
        raise TargetError(
            f"fpga_hls: a {rows}x{cols} MAC array of {dtype.value} needs {needed} DSP slices "
            f"({dsp_per_mac(dtype):g} per MAC), more than the {device.name}'s "
            f"{device.dsp_slices}; use at most {most} PEs (rows x cols), or a cheaper dtype")
    banks = rows + cols
    if banks > device.bram36_blocks:
        raise TargetError(
            f"fpga_hls: a {rows}x{cols} MAC array reads {banks} operand streams per cycle, one "
            f"BRAM bank each, but the {device.name} has {device.bram36_blocks} BRAM36 blocks; "
            "make the array smaller")
    return needed


def mac_array(rows: int, cols: int, dtype: DType, depth: int = 1) -> dict[str, Any]:
    """The declaration of the ``rows`` x ``cols`` MAC array as data (validated by the spec)."""
    accumulator = accumulator_dtype(dtype)
    if accumulator is dtype:
        product = "Src1[i1, r1] * Src2[r1, i2]"
    else:
        product = (f"cast({accumulator.value}, Src1[i1, r1]) * "
                   f"cast({accumulator.value}, Src2[r1, i2])")
    return {
        "name": "mac_array",
        "description": (
            f"{rows}x{cols} array of {dtype.value} multiply-accumulate PEs (accumulating in "
            f"{accumulator.value}), {depth} k-slice(s) per call, one per cycle; latency counts "
            "the systolic fill and drain (an estimate)"),
        "latency_cycles": depth + rows + cols - 2,
        "throughput_per_cycle": 1.0 / depth,
        "compute": {
            "loops": [{"name": "i1", "extent": rows, "kind": "spatial"},
                      {"name": "i2", "extent": cols, "kind": "spatial"},
                      {"name": "r1", "extent": depth, "kind": "reduce"}],
            "operands": [
                {"name": "Src1", "role": "src", "dtype": dtype.value, "shape": [rows, depth],
                 "index": ["i1", "r1"]},
                {"name": "Src2", "role": "src", "dtype": dtype.value, "shape": [depth, cols],
                 "index": ["r1", "i2"]},
                {"name": "Dst", "role": "dst", "dtype": accumulator.value,
                 "shape": [rows, cols], "index": ["i1", "i2"]}],
            "semantics": f"Dst[i1, i2] += {product}",
        },
        "memory": {
            "moves": [
                # read stage: AXI bursts from DDR into the (partitioned) BRAM buffers
                {"operand": "Src1", "from_level": "DDR", "to_level": "BRAM",
                 "instruction": "m_axi_burst_read",
                 "address": {"base": "addr_a", "strides": ["lda", 1], "alignment_bytes": 64}},
                {"operand": "Src2", "from_level": "DDR", "to_level": "BRAM",
                 "instruction": "m_axi_burst_read",
                 "address": {"base": "addr_b", "strides": ["ldb", 1], "alignment_bytes": 64}},
                # compute stage: one BRAM bank per PE row (Src1) and column (Src2)
                {"operand": "Src1", "from_level": "BRAM", "to_level": "register",
                 "address": {"base": "a_buffer", "strides": ["lda_buffer", 1]}},
                {"operand": "Src2", "from_level": "BRAM", "to_level": "register",
                 "address": {"base": "b_buffer", "strides": ["ldb_buffer", 1]}},
                # drain into the output buffer, then the write stage's bursts
                {"operand": "Dst", "from_level": "register", "to_level": "BRAM",
                 "address": {"base": "c_buffer", "strides": [cols, 1]}},
                {"operand": "Dst", "from_level": "BRAM", "to_level": "DDR",
                 "instruction": "m_axi_burst_write",
                 "address": {"base": "addr_c", "strides": ["ldc", 1], "alignment_bytes": 64}},
            ],
            "fills": [{"operand": "Dst", "level": "register", "value": 0}],
        },
    }


def _memory_levels(device: DeviceSpec, rows: int, cols: int, dtype: DType,
                   depth: int) -> list[dict[str, Any]]:
    accumulator = accumulator_dtype(dtype)
    levels: list[dict[str, Any]] = [{
        "name": "DDR", "kind": "dram", "size_bytes": device.ddr_bytes,
        "bandwidth_bytes_per_cycle": round(device.ddr_bytes_per_second / device.clock_hz, 2),
        "latency_cycles": 100, "line_bytes": 64}]
    if device.uram_blocks:
        levels.append({
            "name": "URAM", "kind": "scratchpad", "size_bytes": device.uram_bytes,
            "bandwidth_bytes_per_cycle": device.uram_blocks * BLOCK_PORT_BYTES,
            "latency_cycles": 2})
    levels.append({
        "name": "BRAM", "kind": "scratchpad", "size_bytes": device.bram_bytes,
        "bandwidth_bytes_per_cycle": device.bram36_blocks * BLOCK_PORT_BYTES,
        "latency_cycles": 2})
    levels.append({
        "name": "register", "kind": "registers",
        "size_bytes": rows * cols * accumulator.bytes + (rows + cols) * depth * dtype.bytes,
        "bandwidth_bytes_per_cycle": (rows + cols) * dtype.bytes, "latency_cycles": 0})
    return levels


def fpga_spec(device: DeviceSpec = VU9P, rows: int = DEFAULT_SHAPE[0],
              cols: int = DEFAULT_SHAPE[1], dtype: DType | str = DType.FLOAT32,
              depth: int = 1) -> TargetSpec:
    """The spec of a ``rows`` x ``cols`` MAC array of ``dtype`` on ``device``: a
    :class:`TargetError` when the array does not fit the device, a
    :class:`~tilecraft.errors.PluginError` naming the field when a declaration is invalid."""
    _check_shape(rows, cols, depth)
    dt = DType.parse(dtype)
    dsp = _check_resources(device, rows, cols, dt)
    data = {
        "name": TARGET_NAME,
        "api_version": TARGET_API_VERSION,
        "version": PLUGIN_VERSION,
        "description": (
            f"Vitis-HLS-style accelerator on the {device.name} ({device.part}) at "
            f"{device.clock_hz / 1e6:g} MHz: a {rows}x{cols} {dt.value} MAC array ({dsp} of "
            f"{device.dsp_slices} DSP slices) fed from BRAM in a read / compute / write "
            "dataflow pipeline. Kernels become Vitis-HLS C++ (C-simulated with g++ here) and "
            "are estimated by a latency and resource model (Eq. 4.6)."),
        "memory": {"levels": _memory_levels(device, rows, cols, dt, depth)},
        "compute": {"cores": 1, "frequency_hz": float(device.clock_hz),
                    "vector_bits": dt.bits, "processing_elements": rows * cols},
        # the MAC array and the part's resources (DS890/DS891 counts, see .device); the
        # operand streams come from BRAM banks and the results accumulate in registers
        "spatial": {
            "units": [{"name": "mac_array", "kind": "matrix", "pe_shape": [rows, cols],
                       "dtypes": [dt.value],
                       "operand_levels": {"input": "BRAM", "weight": "BRAM",
                                          "output": "register"}}],
            "fabric": {"part": device.part, "dsp_slices": device.dsp_slices,
                       "bram36_blocks": device.bram36_blocks,
                       "uram_blocks": device.uram_blocks, "luts": device.luts,
                       "dsp_slices_used": dsp}},
        "primitives": list(PRIMITIVES),
        "fixed_decisions": {"device": device.name, "pe_rows": rows, "pe_cols": cols,
                            "mac_dtype": dt.value, "reduce_depth": depth,
                            "dsp_slices_used": dsp, "axi_port_bits": device.axi_port_bits},
        "loop_kinds": list(LOOP_KINDS),
        "intrinsics": [mac_array(rows, cols, dt, depth)],
        # synthesis takes hours (thesis §4.4): the target estimates instead of measuring
        "evaluation": "estimate",
        "capabilities": {"executes_natively": False, "emulates": True, "compiles": True,
                         "models_performance": True},
    }
    source = f"fpga_spec(device={device.name}, rows={rows}, cols={cols}, dtype={dt.value})"
    return load_spec(data, source=source, plugin=TARGET_NAME)
