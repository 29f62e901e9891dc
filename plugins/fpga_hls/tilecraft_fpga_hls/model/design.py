"""The estimate of one kernel's HLS design on a device: latency (cycles and seconds at the
device's clock), the stages, resources against the device's, and feasibility.

A design that needs more DSP slices, BRAM18K or URAM blocks, LUTs or flip-flops than the device
has is infeasible, with a reason naming the resource; :meth:`DesignEstimate.check` raises it
as :class:`InfeasibleDesign` (the tuner records such a candidate as failed).

>>> from tilecraft.dtypes import DType
>>> from tilecraft_fpga_hls.device import VU9P, ZU7EV
>>> from tilecraft_fpga_hls.examples import gemm_kernel
>>> kernel = gemm_kernel(32, 32, 64, (2, 2), DType.FLOAT32)
>>> on_vu9p = estimate_design(kernel, VU9P)
>>> on_vu9p.feasible, round(on_vu9p.usage.dsp)
(True, 5120)
>>> print(estimate_design(kernel, ZU7EV).reason.split("; ")[0])
DSP slices: the design needs 5120, the ZU7EV has 1728
"""

from __future__ import annotations

from dataclasses import dataclass

from tilecraft.errors import TargetError
from tilecraft.kernel_ir.nodes import Kernel
from tilecraft_fpga_hls.device import DeviceSpec
from tilecraft_fpga_hls.model.cycles import StageCycles, Usage, walk_design

__all__ = ["DesignEstimate", "InfeasibleDesign", "estimate_design"]


class InfeasibleDesign(TargetError):
    """A kernel's design needs more of a resource than the device has."""


@dataclass(frozen=True)
class DesignEstimate:
    """The model's view of one kernel's design on ``device`` (module docstring)."""

    kernel: str
    device: DeviceSpec
    cycles: float
    stages: tuple[StageCycles, ...]
    usage: Usage
    #: loop variable -> (asked II, achieved II, why) where the loop could not reach its II
    initiation_intervals: dict[str, tuple[int, int, str]]
    #: whether the kernel's II was an explicit request (``attrs["required_ii"]``, e.g. a
    #: template config's ``ii``): then an II the loop cannot reach makes the design infeasible;
    #: otherwise the model relaxes it and ``initiation_intervals`` says why
    ii_required: bool = False

    @property
    def seconds(self) -> float:
        return self.cycles / self.device.clock_hz

    def capacity(self) -> dict[str, tuple[float, float]]:
        """resource -> (used, available) on the device."""
        device, usage = self.device, self.usage
        return {"DSP slices": (usage.dsp, device.dsp_slices),
                "BRAM18K blocks": (usage.bram18k, 2 * device.bram36_blocks),
                "URAM blocks": (usage.uram, device.uram_blocks),
                "LUTs": (usage.lut, device.luts),
                "flip-flops": (usage.ff, device.flip_flops or float("inf"))}

    @property
    def reason(self) -> str:
        """Why the design is infeasible (every resource it exceeds, every II asked for that a
        loop cannot reach), or ``""``."""
        reasons = [f"{name}: the design needs {used:.0f}, the {self.device.name} has "
                   f"{have:.0f}" for name, (used, have) in self.capacity().items() if used > have]
        if self.ii_required:
            reasons += [f"initiation interval of loop {var}: II={asked} was asked for, the "
                        f"loop reaches II={achieved} ({why})"
                        for var, (asked, achieved, why) in self.initiation_intervals.items()]
        return "; ".join(reasons)

    @property
    def feasible(self) -> bool:
        return not self.reason

    def check(self) -> DesignEstimate:
        """This estimate, or an :class:`InfeasibleDesign` naming the kernel and resources."""
        if not self.feasible:
            fix = ("ask for a larger II, or leave the II to the model (it relaxes it and says "
                   "why), or remove the dependence (another loop order, more BRAM banks)"
                   if self.ii_required and self.initiation_intervals else
                   "use a smaller PE array, fewer unrolled copies or smaller buffers")
            raise InfeasibleDesign(f"kernel {self.kernel} does not fit the {self.device.name} "
                                   f"({self.device.part}): {self.reason}; {fix}")
        return self

    def detail(self) -> dict[str, float]:
        """Flat figures for :class:`~tilecraft.target.base.Estimate`'s ``detail``."""
        figures = {"cycles": self.cycles, "dsp": self.usage.dsp,
                   "bram18k": self.usage.bram18k, "uram": self.usage.uram,
                   "lut": self.usage.lut, "ff": self.usage.ff}
        for stage in self.stages:
            figures[f"stage_{stage.name}_cycles"] = stage.cycles
            figures[f"stage_{stage.name}_ddr_bytes"] = stage.ddr_bytes
        for var, (_, achieved, _) in self.initiation_intervals.items():
            figures[f"ii_{var}"] = achieved
        return figures


def estimate_design(kernel: Kernel, device: DeviceSpec) -> DesignEstimate:
    """The model of ``kernel``'s design on ``device`` (:mod:`.cycles`)."""
    walked = walk_design(kernel, device.ddr_bytes_per_second / device.clock_hz,
                         device.axi_port_bytes)
    return DesignEstimate(kernel.name, device, walked.cycles, tuple(walked.stages),
                          walked.usage, walked.initiation_intervals,
                          ii_required=kernel.attrs.get("required_ii") is not None)
