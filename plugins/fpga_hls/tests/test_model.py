"""The latency and resource model: Eq. 4.6 per stage on hand-computed cases, II raised by
recurrences and port limits (and lowered again by partitioning), the dataflow overlap, and
designs that do not fit the smaller device."""

from __future__ import annotations

import pytest
from tilecraft_fpga_hls.device import VU9P, ZU7EV
from tilecraft_fpga_hls.examples import gemm_kernel
from tilecraft_fpga_hls.model import InfeasibleDesign, estimate_design
from tilecraft_fpga_hls.model.cycles import AXI_LATENCY, LOOP_CONTROL
from tilecraft_fpga_hls.model.operators import operator_cost
from tilecraft_fpga_hls.target import FpgaHlsTarget

import tilecraft as tc
from tilecraft import te
from tilecraft.dtypes import DType
from tilecraft.kernel_ir import Allocate, Buffer, BufferLoad, For, Kernel, LoopKind, Seq, Store
from tilecraft.kernel_ir.nodes import ArrayPartition, PartitionKind
from tilecraft.te import Var, const


def test_a_pipelined_loop_takes_trips_minus_one_times_ii_plus_its_depth() -> None:
    x = Buffer("x", (101,), DType.FLOAT32, level="DDR")
    y = Buffer("y", (101,), DType.FLOAT32, level="DDR")
    i = Var("i")
    body = For(i, const(101), LoopKind.PIPELINED,
               Store(y, (i,), BufferLoad(x, (i,)) * 3.0), initiation_interval=1)
    design = estimate_design(Kernel("scale", (x, y), ("y",), body), VU9P)
    # one iteration: the AXI read, the multiplier, the store's cycle and its AXI write
    depth = AXI_LATENCY + operator_cost("mul", DType.FLOAT32).latency + 1 + 1
    assert design.cycles == 100 * 1 + depth + LOOP_CONTROL.latency
    assert design.seconds == pytest.approx(design.cycles / 250e6)
    assert design.usage.dsp == operator_cost("mul", DType.FLOAT32).dsp
    assert design.initiation_intervals == {}


def _reads(partitions: tuple[ArrayPartition, ...]) -> Kernel:
    """y[i] = sum of the 8 elements of row i of an on-chip buffer, unrolled."""
    x = Buffer("x", (16, 8), DType.INT32, level="DDR")
    y = Buffer("y", (16,), DType.INT32, level="DDR")
    tile = Buffer("tile", (16, 8), DType.INT32, level="BRAM", partitions=partitions)
    i, j = Var("i"), Var("j")
    total = BufferLoad(tile, (i, const(0)))
    for column in range(1, 8):
        total = total + BufferLoad(tile, (i, const(column)))
    fill = For(i, const(16), LoopKind.SERIAL, For(j, const(8), LoopKind.PIPELINED, Store(
        tile, (i, j), BufferLoad(x, (i, j))), initiation_interval=1))
    reduce = For(i, const(16), LoopKind.PIPELINED, Store(y, (i,), total), initiation_interval=1)
    return Kernel("rows", (x, y), ("y",), Allocate(tile, Seq((fill, reduce))))


def test_ports_of_an_on_chip_buffer_bound_the_ii_and_partitioning_lifts_it() -> None:
    plain = estimate_design(_reads(()), VU9P)
    assert plain.initiation_intervals["i"][1] == 4  # 8 reads through 2 ports
    assert "8 accesses per iteration to tile through 2 port(s)" in \
        plain.initiation_intervals["i"][2]
    split = estimate_design(_reads((ArrayPartition(1, PartitionKind.CYCLIC, 4),)), VU9P)
    assert "i" not in split.initiation_intervals  # 8 reads through 4 banks x 2 ports
    assert split.cycles < plain.cycles
    assert split.usage.bram18k > plain.usage.bram18k  # one BRAM per bank


@pytest.fixture(scope="module")
def matmul_kernel() -> Kernel:
    A = te.placeholder((13, 17), name="A")
    B = te.placeholder((17, 19), name="B")
    k = te.reduce_axis(17, name="k")
    C = te.compute((13, 19), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    # the core's dataflow lowering (untuned contractions otherwise take the model's design)
    exe = tc.compile(tc.Graph.of(C), target=FpgaHlsTarget(model_default=False))
    (kernel,) = exe.kernels
    return kernel


def test_dataflow_overlaps_its_stages_and_an_accumulation_limits_the_compute_ii(
        matmul_kernel: Kernel) -> None:
    design = estimate_design(matmul_kernel, VU9P)
    stages = {stage.name: stage for stage in design.stages}
    assert list(stages) == ["read", "compute", "write"]
    add = operator_cost("add", DType.FLOAT32).latency
    assert design.initiation_intervals["k"] == (1, add, "an accumulation into one element "
                                                f"waits {add} cycles for the previous one")
    slowest = max(stage.cycles for stage in design.stages)
    assert stages["compute"].cycles == slowest
    # the slowest stage plus the others' pipeline fill, far less than running them in turn
    assert slowest < design.cycles < sum(stage.cycles for stage in design.stages)
    assert stages["read"].ddr_bytes == 13 * 19 * 17 * 2 * 4  # A and B re-read per output
    assert stages["write"].ddr_bytes == 13 * 19 * 4


def test_a_design_that_does_not_fit_names_the_resource() -> None:
    kernel = gemm_kernel(32, 32, 64, (2, 2), DType.FLOAT32)
    assert FpgaHlsTarget().estimate(kernel).detail["dsp"] == 32 * 32 * 5
    small = FpgaHlsTarget(device=ZU7EV, rows=8, cols=8)
    with pytest.raises(InfeasibleDesign, match=r"kernel gemm does not fit the ZU7EV "
                                               r"\(xczu7ev-ffvc1156-2-e\): DSP slices: the "
                                               r"design needs 5120, the ZU7EV has 1728"):
        small.estimate(kernel)
    fits = small.estimate(gemm_kernel(8, 8, 64, (8, 8), DType.FLOAT32))
    assert fits.detail["dsp"] == 8 * 8 * 5 and fits.seconds > 0
