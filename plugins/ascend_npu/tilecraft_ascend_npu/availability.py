"""What this machine can do with the ascend_npu target, stage by stage, and why not.

- **codegen**: always (the AscendC-style C++ generator is pure Python);
- **emulate**: where a host C++ compiler exists — the generated source is compiled against the
  plugin's emulation header (``include/tilecraft_ascendc.h``) and run on the CPU;
- **build** / **execute**: never here — CANN's AscendC toolchain (ccec, the kernel launcher)
  and runtime are on no package registry reachable from this machine, and there is no Ascend
  device;
- **estimate**: always (the performance model of :mod:`.model` is pure Python).

>>> availability = machine_availability()
>>> availability.codegen, availability.build, availability.execute
(True, False, False)
"""

from __future__ import annotations

import functools

from tilecraft.target.base import Availability
from tilecraft_ascend_npu.emulation.compiler import host_compiler

__all__ = ["machine_availability"]

NO_CANN = ("no CANN / AscendC toolchain (ccec) is installable here: it is on no package "
           "registry reachable from this machine (the PyPI names are placeholders); the "
           "generated source is compiled with g++ against the plugin's emulation header instead")
NO_DEVICE = "no Ascend device and no CANN runtime on this machine"


@functools.cache
def machine_availability() -> Availability:
    """Each stage's status on this machine (module docstring), probed once per process."""
    reasons = {"build": NO_CANN, "execute": NO_DEVICE}
    compiler = host_compiler()
    if compiler is None:
        reasons["emulate"] = ("no host C++ compiler (g++, clang++ or $TILECRAFT_HOST_CXX) to "
                              "compile the generated AscendC source against the emulation "
                              "header; install g++")
    return Availability(codegen=True, build=False, execute=False, emulate=compiler is not None,
                        estimate=True, reasons=reasons)
