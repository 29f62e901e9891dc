"""What this machine can do with the nvidia_tc target, stage by stage, and why not.

- **codegen**: the CUDA C code generator (``tilecraft_nvidia_tc.codegen``) imports;
- **build**: NVRTC loads (or ``nvcc`` is chosen and on PATH) and the CUDA headers are there
  (``cuobjdump`` for the resource report is noted; without it ptxas' report is used);
- **emulate**: a host C++ compiler (``c++``, ``g++`` or ``clang++``) compiles the generated
  ``.cu`` against the plugin's emulation header;
- **execute**: a CUDA driver and a device answer (cuda-python's driver API, or pycuda).

:func:`machine_availability` probes each once per process and never raises.

>>> availability = machine_availability()
>>> sorted(availability.reasons) == sorted(
...     stage for stage in ("codegen", "build", "emulate", "execute", "estimate")
...     if not getattr(availability, stage))
True
"""

from __future__ import annotations

import functools
import importlib
import shutil

from tilecraft.target.base import Availability
from tilecraft_nvidia_tc.launch import launch_status
from tilecraft_nvidia_tc.toolchain.compiler import default_compiler
from tilecraft_nvidia_tc.toolchain.tools import (
    ToolMissing,
    cuda_include_dir,
    cuobjdump_path,
    nvcc_path,
    nvrtc_version,
    plugin_include_dir,
)

HOST_COMPILERS = ("c++", "g++", "clang++")


def codegen_status() -> tuple[bool, str]:
    try:
        importlib.import_module("tilecraft_nvidia_tc.codegen")
    except Exception as err:  # noqa: BLE001 - a broken module must not break discovery
        return False, f"the CUDA C code generator does not import ({type(err).__name__}: {err})"
    return True, "CUDA C code generator"


def build_status() -> tuple[bool, str]:
    compiler = default_compiler()
    if compiler == "nvcc":
        if nvcc_path() is None:
            return False, "TILECRAFT_CUDA_COMPILER=nvcc but nvcc is not on PATH"
        tool = f"nvcc at {nvcc_path()}"
    else:
        try:
            tool = nvrtc_version()
        except ToolMissing as err:
            return False, str(err)
    if cuda_include_dir() is None:
        return False, ("the CUDA headers (cuda_fp16.h, mma.h) are missing; pip install "
                       "nvidia-cuda-runtime nvidia-cuda-crt")
    report = ("resource usage by cuobjdump" if cuobjdump_path() is not None else
              "resource usage from ptxas' report (no cuobjdump: pip install "
              "nvidia-cuda-cuobjdump)")
    return True, f"{tool}, {report}"


def emulate_status() -> tuple[bool, str]:
    compiler = next((found for name in HOST_COMPILERS if (found := shutil.which(name))), None)
    if compiler is None:
        return False, f"no host C++ compiler ({', '.join(HOST_COMPILERS)}) on PATH"
    if not (plugin_include_dir() / "tilecraft_cuda.h").is_file():
        return False, f"the emulation headers are missing from {plugin_include_dir()}"
    return True, f"host C++ compiler {compiler}"


@functools.cache
def machine_availability(codegen: tuple[bool, str] | None = None) -> Availability:
    """Each stage's status on this machine (module docstring), probed once per process;
    ``codegen`` replaces the code generator's probe (the target knows whether it has one)."""
    found = {"codegen": codegen or codegen_status(), "build": build_status(),
             "emulate": emulate_status(), "execute": launch_status()}
    reasons = {stage: why for stage, (usable, why) in found.items() if not usable}
    # the performance model (tilecraft_nvidia_tc.model) needs nothing from the machine
    return Availability(codegen=found["codegen"][0], build=found["build"][0],
                        execute=found["execute"][0], emulate=found["emulate"][0],
                        estimate=True, reasons=reasons)


def describe_machine() -> dict[str, str]:
    """Every stage's status as one line each, for ``tilecraft targets``-style listings."""
    found = {"codegen": codegen_status(), "build": build_status(),
             "emulate": emulate_status(), "execute": launch_status()}
    return {stage: ("yes: " if usable else "no: ") + why
            for stage, (usable, why) in found.items()}


__all__ = ["build_status", "codegen_status", "describe_machine", "emulate_status",
           "machine_availability"]
