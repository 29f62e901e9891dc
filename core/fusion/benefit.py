"""The fusion benefit function of thesis §4.6.2, Eq. 4.10:

    R = dT / P_d + dC / P_c + dK * L_start

``dT`` is the data transfer fusion saves (bytes), ``dC`` the computation it saves (negative
when the fused code recomputes), ``dK`` the kernels it saves; ``P_d`` is the peak bandwidth
between off-chip and on-chip memory, ``P_c`` the peak arithmetic rate, ``L_start`` the launch
overhead of one kernel. R is an optimistic estimate in seconds: a fusion whose R is not
positive even so is not worth doing.

>>> peaks = PeakFigures(bandwidth_bytes_per_s=40e9, flops_per_s=500e9, launch_overhead_s=2e-6)
>>> gain = fusion_benefit(saved_bytes=8e6, saved_flops=0, saved_kernels=1, peaks=peaks)
>>> round(gain.seconds * 1e6, 1)
202.0
>>> print(gain)
R = +202.0 us (saves 8,000,000 bytes, 0 flops, 1 kernel)
>>> fusion_benefit(8e3, -4e9, 1, peaks).worthwhile
False
"""

from __future__ import annotations

from dataclasses import dataclass

from tilecraft.dtypes import DType
from tilecraft.fusion.chain import FusionError
from tilecraft.target.spec import TargetSpec

#: kernel launch overhead assumed when a caller gives none (a thread-pool dispatch on a CPU)
DEFAULT_LAUNCH_OVERHEAD_S = 2e-6


@dataclass(frozen=True)
class PeakFigures:
    """``P_d``, ``P_c`` and ``L_start`` of Eq. 4.10."""

    bandwidth_bytes_per_s: float
    flops_per_s: float
    launch_overhead_s: float = DEFAULT_LAUNCH_OVERHEAD_S

    def __post_init__(self) -> None:
        if not (self.bandwidth_bytes_per_s > 0 and self.flops_per_s > 0
                and self.launch_overhead_s >= 0):
            raise FusionError(f"peak figures must be positive (bandwidth "
                              f"{self.bandwidth_bytes_per_s}, flops {self.flops_per_s}, launch "
                              f"overhead {self.launch_overhead_s} >= 0)")

    @staticmethod
    def from_spec(spec: TargetSpec, dtype: DType | str = "float32",
                  launch_overhead_s: float = DEFAULT_LAUNCH_OVERHEAD_S) -> PeakFigures:
        """The target's figures: the bandwidth out of its outermost memory level and its peak
        arithmetic rate in ``dtype``."""
        outer = spec.memory.outermost
        bandwidth = outer.bandwidth_bytes_per_cycle * spec.compute.frequency_hz
        return PeakFigures(bandwidth, spec.compute.peak_flops(dtype), launch_overhead_s)


@dataclass(frozen=True)
class FusionBenefit:
    """The terms and the value of Eq. 4.10 for one fusion decision."""

    saved_bytes: float
    saved_flops: float
    saved_kernels: int
    seconds: float

    @property
    def worthwhile(self) -> bool:
        return self.seconds > 0

    def __str__(self) -> str:
        kernels = "kernel" if abs(self.saved_kernels) == 1 else "kernels"
        return (f"R = {self.seconds * 1e6:+.1f} us (saves {self.saved_bytes:,.0f} bytes, "
                f"{self.saved_flops:,.0f} flops, {self.saved_kernels} {kernels})")


def fusion_benefit(saved_bytes: float, saved_flops: float, saved_kernels: int,
                   peaks: PeakFigures) -> FusionBenefit:
    """Eq. 4.10."""
    seconds = (saved_bytes / peaks.bandwidth_bytes_per_s + saved_flops / peaks.flops_per_s
               + saved_kernels * peaks.launch_overhead_s)
    return FusionBenefit(saved_bytes, saved_flops, saved_kernels, seconds)
