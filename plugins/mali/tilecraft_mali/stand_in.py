"""The variant ``mali:stand_in``: the mali target executed — and so measured and tuned — on
whatever OpenCL device this machine has when it has no Mali GPU (PoCL's CPU device from
``pip install pocl-binary-distribution`` here).

Everything but the device is the mali target's: the same spec, lowering, OpenCL C and build.
The difference is what it claims: ``available().execute`` is true where an OpenCL device
answers, so the core's tuner (measure mode) runs the real OpenCL kernels in its isolated
workers; its name, which the tuning database records as the target of every record, and the
reason it gives for ``execute`` say the timings are the stand-in device's, not a Mali's.

>>> from tilecraft.target import get_target
>>> target = get_target("mali:stand_in")
>>> target.name, target.spec.name
('mali:stand_in', 'mali')
>>> target.available().execute == target.available().build
True
"""

from __future__ import annotations

from tilecraft.target.base import Availability
from tilecraft_mali.target import TARGET_NAME, MaliTarget

__all__ = ["STAND_IN", "STAND_IN_DESCRIPTION", "MaliOnStandIn"]

STAND_IN = "stand_in"
STAND_IN_DESCRIPTION = ("the generated OpenCL C executed, measured and tuned on this machine's "
                        "OpenCL device (PoCL's CPU device where there is no Mali GPU): timings "
                        "are the stand-in's, not a Mali's")


class MaliOnStandIn(MaliTarget):
    """The mali target executing on this machine's OpenCL device (see the module)."""

    def available(self) -> Availability:
        """The mali target's stages, with ``execute`` wherever an OpenCL device answers; the
        ``execute`` reason names the device whose timings these are."""
        from tilecraft_mali.runtime.device import find_device

        base = super().available()
        if not base.build or base.execute:
            return base
        reasons = dict(base.reasons)
        reasons["execute"] = (f"on {find_device().describe()}: timings are this device's, "
                              "not a Mali GPU's")
        return Availability(codegen=base.codegen, build=base.build, execute=True,
                            emulate=base.emulate, estimate=base.estimate, reasons=reasons)

    @property
    def name(self) -> str:
        return f"{TARGET_NAME}:{STAND_IN}"
