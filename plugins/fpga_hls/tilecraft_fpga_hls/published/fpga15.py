"""The roofline model of Zhang et al., "Optimizing FPGA-based Accelerator Design for Deep
Convolutional Neural Networks" (FPGA'15), and its AlexNet design point on the VC707 — the
design the thesis compares FlexTensor with (§4.7.3: 1.5x on a VU9P).

The paper's model, for a conv layer of ``M`` output and ``N`` input channels, ``R x C``
outputs and ``K x K`` kernels, tiled ``<Tm, Tn>`` (output / input channels unrolled: Tm x Tn
multiply-adds per cycle) and ``Tr, Tc`` (rows / columns in a tile):

- execution cycles = ``ceil(M/Tm) * ceil(N/Tn) * R * C * K * K`` (with ``Tr | R`` and
  ``Tc | C``), and the computational roof = ``2*R*C*M*N*K*K / cycles`` operations per cycle;
- the CTC ratio (operations per byte moved) bounds what the memory supplies: attainable
  performance = ``min(computational roof, CTC x bandwidth)``.

Its design: one uniform ``<Tm, Tn> = <64, 7>`` for the five conv layers of AlexNet (two groups
each), 32-bit float, on a VC707 (Virtex-7 485T: 2800 DSP48E1) at 100 MHz; 448 MACs of 5 DSP
slices (2240); reported 61.62 GFLOPS over the five layers (the abstract, e.g. as indexed at
scite.ai/authors/guangyu-sun-ZG6wnM), i.e. 21.61 ms for their 1.33 GFLOP. The layer shapes below are
AlexNet's (Krizhevsky et al. 2012) per group, as the paper's Table 3 lists them.

>>> round(sum(layer.cycles(64, 7) for layer in ALEXNET))
2005892
>>> round(total_gflops(ALEXNET, 64, 7, 100e6), 2)  # the computational roof of the design
66.38
>>> round(REPORTED_GFLOPS / total_gflops(ALEXNET, 64, 7, 100e6), 3)  # reported / roof
0.928

The same design in the project's template (:func:`design_config`: ``Tm`` output channels by
``Tn`` input channels, whole-layer ``Tr x Tc`` tiles, each operand read in its own dataflow
stage, ``DESIGN_LANES`` = 4 float32 (128 bits of the 512-bit port) per beat in the read and
write stages), estimated by the project's model on the VC707 (:func:`project_estimate`),
takes 2.30 M cycles over the five layers: 6.4% over the paper's measured 21.61 ms (2.16 M
cycles) and 14.6% over its roof, because the model also counts the write-back of each output
tile (not overlapped) and each tile's pipeline fills; compute-bound on every layer. 16 lanes
(whole 512-bit beats) come within 0.3% of the measurement but need more BRAM banks for
conv1's 11-wide weight rows than the VC707 has in the model (which puts every bank in a
BRAM18K); 1 lane (one element per beat) is read-bound: 4.1 M cycles.

>>> cycles = sum(project_estimate(layer, VC707).cycles * layer.groups for layer in ALEXNET)
>>> round(cycles / 1e6, 2), round(cycles / (REPORTED_SECONDS * VC707.clock_hz) - 1, 3)
(2.3, 0.064)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tilecraft_fpga_hls.device import DeviceSpec

if TYPE_CHECKING:
    from tilecraft.te.tensor import Tensor
    from tilecraft_fpga_hls.model import DesignEstimate

__all__ = ["ALEXNET", "REPORTED_GFLOPS", "REPORTED_SECONDS", "VC707", "ConvLayer",
           "design_config", "layer_compute", "project_estimate", "total_gflops"]

#: the paper's reported performance of its design on AlexNet's conv layers
REPORTED_GFLOPS = 61.62
#: its unroll factors
DESIGN_TM, DESIGN_TN = 64, 7
#: float32 elements per AXI beat in the project's version of the design (module docstring)
DESIGN_LANES = 4

#: VC707 board: XC7VX485T-2 (DS180: 2800 DSP48E1, 1030 BRAM36, 303,600 LUTs, 607,200 FFs),
#: one DDR3-1600 64-bit SODIMM (12.8 GB/s; the 7-series MIG's AXI slave is 512 bits wide
#: at 4:1 clocking, UG586), run at the paper's 100 MHz
VC707 = DeviceSpec(name="VC707", part="xc7vx485t-ffg1761-2", dsp_slices=2800,
                   bram36_blocks=1030, uram_blocks=0, luts=303_600, ddr_bytes=1024 ** 3,
                   ddr_bytes_per_second=12.8e9, clock_hz=100e6, flip_flops=607_200)


@dataclass(frozen=True)
class ConvLayer:
    """One conv layer (one group) in the paper's notation; ``groups`` copies of it run."""

    name: str
    m: int
    n: int
    r: int
    c: int
    k: int
    s: int
    groups: int = 2

    @property
    def operations(self) -> int:
        return 2 * self.r * self.c * self.m * self.n * self.k * self.k * self.groups

    def cycles(self, tm: int, tn: int) -> int:
        """Execution cycles of the paper's model (all groups)."""
        return (math.ceil(self.m / tm) * math.ceil(self.n / tn) * self.r * self.c * self.k *
                self.k * self.groups)

    def computational_roof(self, tm: int, tn: int) -> float:
        """Operations per cycle."""
        return self.operations / self.cycles(tm, tn)


ALEXNET = (
    ConvLayer("conv1", m=48, n=3, r=55, c=55, k=11, s=4),
    ConvLayer("conv2", m=128, n=48, r=27, c=27, k=5, s=1),
    ConvLayer("conv3", m=192, n=256, r=13, c=13, k=3, s=1),
    ConvLayer("conv4", m=192, n=192, r=13, c=13, k=3, s=1),
    ConvLayer("conv5", m=128, n=192, r=13, c=13, k=3, s=1),
)


def total_gflops(layers: tuple[ConvLayer, ...], tm: int, tn: int, clock_hz: float) -> float:
    """GFLOP/s over ``layers`` run one after another at the computational roof."""
    operations = sum(layer.operations for layer in layers)
    seconds = sum(layer.cycles(tm, tn) for layer in layers) / clock_hz
    return operations / seconds / 1e9


#: the paper's measured time over the five layers: 1.33 GFLOP at 61.62 GFLOPS
REPORTED_SECONDS = sum(layer.operations for layer in ALEXNET) / (REPORTED_GFLOPS * 1e9)


def layer_compute(layer: ConvLayer, batch: int = 1) -> Tensor:
    """One group of ``layer`` as a te conv2d (NCHW input sized for its ``R x C`` outputs)."""
    from tilecraft import ops, te

    height = layer.s * (layer.r - 1) + layer.k
    x = te.placeholder((batch, layer.n, height, height), name="X")
    w = te.placeholder((layer.m, layer.n, layer.k, layer.k), name="W")
    return ops.conv2d(x, w, stride=layer.s)


def design_config(layer: ConvLayer, tm: int = DESIGN_TM, tn: int = DESIGN_TN,
                  lanes: int = DESIGN_LANES) -> dict[str, Any]:
    """The template config of the paper's design for ``layer``: ``tm`` output channels
    (PE rows), ``tn`` input channels (adder-tree inputs), whole ``R x C`` tiles."""
    return {"pe_out": "k", "tm": tm, "pe_in": "rc", "tn": tn,
            "tiles": {"h": layer.r, "w": layer.c}, "lanes": lanes}


def project_estimate(layer: ConvLayer, device: DeviceSpec,
                     config: dict[str, Any] | None = None) -> DesignEstimate:
    """The project's model of one group of ``layer`` under ``config`` (default: the paper's
    design, :func:`design_config`) on ``device``."""
    from tilecraft_fpga_hls.model import estimate_design
    from tilecraft_fpga_hls.template import as_contraction, lower_contraction

    view = as_contraction(layer_compute(layer))
    assert view is not None  # a conv2d is a contraction
    return estimate_design(lower_contraction(view, config or design_config(layer)), device)
