"""What this machine can do with the fpga_hls target, stage by stage, and why not.

- **codegen**: always (the HLS C++ code generator is pure Python);
- **emulate**: C-simulation where a host C++ compiler exists (else the Kernel IR interpreter
  still runs kernels, and the reason says so);
- **build** / **execute**: never here — synthesis needs AMD Vitis HLS / Vivado (hours per
  design, thesis §4.4) and running needs an FPGA board; neither is on this machine;
- **estimate**: always (the latency and resource model, :mod:`tilecraft_fpga_hls.model`).

>>> availability = machine_availability()
>>> availability.codegen, availability.build, availability.execute, availability.estimate
(True, False, False, True)
"""

from __future__ import annotations

import functools

from tilecraft.codegen.host_build import HOST_COMPILERS, find_host_compiler
from tilecraft.target.base import Availability

__all__ = ["csim_status", "machine_availability"]

NO_SYNTHESIS = ("no AMD Vitis HLS / Vivado on this machine (synthesis takes hours per design, "
                "thesis §4.4): the generated C++ is C-simulated with g++ and the design is "
                "estimated by the model instead")
NO_BOARD = "no FPGA board on this machine; kernels run by C-simulation"


def csim_status() -> tuple[bool, str]:
    """Whether C-simulation works here, and with what (or why not)."""
    compiler = find_host_compiler()
    if compiler is None:
        return False, (f"no host C++ compiler ({', '.join(HOST_COMPILERS)}) for C-simulation; "
                       "kernels run on the Kernel IR interpreter instead")
    return True, f"C-simulation with {compiler}"


@functools.cache
def machine_availability() -> Availability:
    """Each stage's status on this machine (module docstring), probed once per process."""
    csim, why = csim_status()
    reasons = {"build": NO_SYNTHESIS, "execute": NO_BOARD}
    if not csim:
        reasons["emulate"] = why
    # without g++ the interpreter still emulates: the capability stays 'emulate'
    return Availability(codegen=True, build=False, execute=False, emulate=True, estimate=True,
                        reasons=reasons)
