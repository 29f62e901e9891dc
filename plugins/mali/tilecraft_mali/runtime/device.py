"""The OpenCL device this process runs mali kernels on, found once and never raising.

A real Mali GPU is preferred (a device whose name says Mali); otherwise the first device of any
platform, which on a machine without a GPU is PoCL's CPU device (``pthread-<cpu>``, installed
with ``pip install pocl-binary-distribution``) — a stand-in that runs the same OpenCL C.
:func:`find_device` says which, with the extensions that matter to the code generator.

>>> found = find_device()
>>> found.usable == (found.context is not None)
True
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

__all__ = ["DeviceInfo", "find_device"]

#: the extensions the code generator could use, and what each gives
EXTENSIONS = {
    "cl_arm_integer_dot_product_int8": "arm_dot",
    "cl_arm_integer_dot_product_accumulate_int8": "arm_dot_acc",
    "cl_khr_fp16": "fp16 arithmetic",
    "cl_khr_subgroups": "subgroups",
}


@dataclass(frozen=True)
class DeviceInfo:
    """The device found (or why none), its context and queue, and its limits."""

    usable: bool
    reason: str
    name: str = ""
    platform: str = ""
    is_mali: bool = False
    extensions: frozenset[str] = frozenset()
    local_mem_bytes: int = 0
    max_work_group_size: int = 0
    context: Any = field(default=None, compare=False)
    queue: Any = field(default=None, compare=False)

    def describe(self) -> str:
        """One line: the device, whether it is a stand-in, and the extensions it has."""
        if not self.usable:
            return self.reason
        kind = "a Mali GPU" if self.is_mali else "a stand-in for a Mali GPU"
        offered = [f"{what} {'yes' if ext in self.extensions else 'no'}"
                   for ext, what in EXTENSIONS.items()]
        return (f"OpenCL device {self.name!r} on {self.platform!r} ({kind}); "
                f"{', '.join(offered)}; {self.local_mem_bytes} bytes of __local memory")


@functools.cache
def find_device() -> DeviceInfo:
    """The device of this process (module docstring), probed once."""
    try:
        import pyopencl as cl
    except Exception as err:  # noqa: BLE001 - no OpenCL must not break discovery
        return DeviceInfo(False, f"pyopencl does not import ({type(err).__name__}: {err}); pip "
                                 "install pyopencl pocl-binary-distribution")
    try:
        devices = [device for platform in cl.get_platforms() for device in platform.get_devices()]
    except Exception as err:  # noqa: BLE001 - no platform raises a pyopencl error
        return DeviceInfo(False, f"no OpenCL platform ({type(err).__name__}: {err}); pip "
                                 "install pocl-binary-distribution for a CPU device")
    if not devices:
        return DeviceInfo(False, "no OpenCL device on any platform; pip install "
                                 "pocl-binary-distribution for a CPU device")
    device = next((d for d in devices if "mali" in d.name.lower()), devices[0])
    try:
        context = cl.Context([device])
        queue = cl.CommandQueue(context)
    except Exception as err:  # noqa: BLE001
        return DeviceInfo(False, f"the OpenCL device {device.name!r} refuses a context "
                                 f"({type(err).__name__}: {err})")
    return DeviceInfo(True, "", name=device.name.strip(), platform=device.platform.name.strip(),
                      is_mali="mali" in device.name.lower(),
                      extensions=frozenset(device.extensions.split()),
                      local_mem_bytes=int(device.local_mem_size),
                      max_work_group_size=int(device.max_work_group_size),
                      context=context, queue=queue)
