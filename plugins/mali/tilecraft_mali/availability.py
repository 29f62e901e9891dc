"""What this machine can do with the mali target, stage by stage, and why not.

- **codegen**: always (the OpenCL C code generator is pure Python);
- **build**: an OpenCL device answers through pyopencl (:mod:`.runtime.device`);
- **execute**: that device is a Mali GPU;
- **emulate**: any other OpenCL device (PoCL's CPU device here) runs the generated OpenCL C as
  a stand-in; without one, kernels run on the core's Kernel IR interpreter.

>>> availability = machine_availability()
>>> availability.codegen and availability.emulate
True
"""

from __future__ import annotations

import functools

from tilecraft.target.base import Availability
from tilecraft_mali.runtime.device import find_device

__all__ = ["describe_machine", "machine_availability"]



@functools.cache
def machine_availability() -> Availability:
    """Each stage's status on this machine (module docstring), probed once per process."""
    device = find_device()
    reasons: dict[str, str] = {}
    if not device.usable:
        reasons["build"] = device.reason
        reasons["execute"] = device.reason
        reasons["emulate"] = (f"{device.reason}; kernels run on the Kernel IR interpreter "
                              "instead of as OpenCL C")
    elif not device.is_mali:
        reasons["execute"] = (f"no Mali GPU here; the generated OpenCL C runs on "
                              f"{device.describe()}")
    return Availability(codegen=True, build=device.usable, execute=device.is_mali,
                        emulate=True, estimate=True, reasons=reasons)


def describe_machine() -> dict[str, str]:
    """The device line and each stage's status, for listings."""
    availability = machine_availability()
    lines = {"device": find_device().describe()}
    for stage in ("codegen", "build", "execute", "emulate"):
        usable = getattr(availability, stage)
        lines[stage] = "yes" if usable else f"no: {availability.reasons.get(stage, '')}"
    return lines
