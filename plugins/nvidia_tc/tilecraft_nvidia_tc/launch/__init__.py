"""Running a built kernel on a GPU: cuda-python's driver API by default (:mod:`.driver`),
pycuda when the driver API cannot be used and pycuda is installed, or when
``TILECRAFT_CUDA_LAUNCHER=pycuda`` asks for it (:mod:`.pycuda_launch`); arguments are
checked and packed by :mod:`.arguments`.

>>> LAUNCHER_ENV
'TILECRAFT_CUDA_LAUNCHER'
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from tilecraft.errors import TargetError
from tilecraft_nvidia_tc.launch.arguments import KernelParameter, parameters_from_meta
from tilecraft_nvidia_tc.launch.driver import DriverLauncher, driver_status
from tilecraft_nvidia_tc.launch.pycuda_launch import PyCudaLauncher, pycuda_status
from tilecraft_nvidia_tc.toolchain.compiler import CudaBuild

LAUNCHER_ENV = "TILECRAFT_CUDA_LAUNCHER"
Launcher = Callable[[Mapping[str, np.ndarray]], None]


def launch_status() -> tuple[bool, str]:
    """(a GPU can run kernels here, which way or why not). Never raises."""
    choice = os.environ.get(LAUNCHER_ENV, "").strip().lower()
    usable, why = driver_status()
    if choice != "pycuda" and usable:
        return True, f"cuda-python driver API on {why}"
    pycuda_usable, pycuda_why = pycuda_status()
    if pycuda_usable:
        return True, pycuda_why
    return False, f"{why}; {pycuda_why}"


def make_launcher(build: CudaBuild, parameters: Sequence[KernelParameter],
                  scalars: Mapping[str, Any] | None = None) -> Launcher:
    """The launcher :func:`launch_status` chose (a TargetError saying why none works)."""
    usable, why = launch_status()
    if not usable:
        raise TargetError(f"kernel {build.kernel_name} cannot be launched here: {why}")
    if why.startswith("cuda-python"):
        return DriverLauncher(build, parameters, scalars=scalars)
    return PyCudaLauncher(build, parameters, scalars=scalars)


__all__ = ["LAUNCHER_ENV", "KernelParameter", "Launcher", "launch_status", "make_launcher",
           "parameters_from_meta"]
