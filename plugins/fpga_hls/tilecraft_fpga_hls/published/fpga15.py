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
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tilecraft_fpga_hls.device import DeviceSpec

__all__ = ["ALEXNET", "REPORTED_GFLOPS", "VC707", "ConvLayer", "total_gflops"]

#: the paper's reported performance of its design on AlexNet's conv layers
REPORTED_GFLOPS = 61.62
#: its unroll factors
DESIGN_TM, DESIGN_TN = 64, 7

#: VC707 board: XC7VX485T-2 (DS180: 2800 DSP48E1, 1030 BRAM36, 303,600 LUTs, 607,200 FFs),
#: one DDR3-1600 64-bit SODIMM (12.8 GB/s), run at the paper's 100 MHz
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
