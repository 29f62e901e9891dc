"""The optional launch path through pycuda (``pip install tilecraft-nvidia-tc[pycuda]``; it
only installs where a CUDA driver exists): the same steps as :mod:`.driver`, with pycuda's
objects."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tilecraft.errors import TargetError
from tilecraft_nvidia_tc.launch.arguments import KernelParameter, check_arrays
from tilecraft_nvidia_tc.launch.driver import DEFAULT_DYNAMIC_SHARED_BYTES, choose_image
from tilecraft_nvidia_tc.toolchain.compiler import CudaBuild


def pycuda_status() -> tuple[bool, str]:
    """(usable, why not): pycuda importable and its autoinit context created. Never raises."""
    try:
        import pycuda.autoinit  # noqa: F401
        import pycuda.driver
    except Exception as err:  # noqa: BLE001 - pycuda raises ImportError or its driver's error
        return False, f"pycuda is not usable ({type(err).__name__}: {err})"
    return True, f"pycuda {pycuda.VERSION_TEXT}"


class PyCudaLauncher:
    """A built kernel loaded through pycuda; call it with arrays by parameter name."""

    def __init__(self, build: CudaBuild, parameters: Sequence[KernelParameter],
                 scalars: Mapping[str, Any] | None = None) -> None:
        usable, why = pycuda_status()
        if not usable:
            raise TargetError(why)
        import pycuda.driver as cuda

        self.cuda = cuda
        self.build = build
        self.parameters = tuple(parameters)
        self.scalars = dict(scalars or {})
        major, minor = cuda.Context.get_device().compute_capability()
        _kind, image = choose_image(build, f"sm_{major}{minor}")
        self.module = cuda.module_from_buffer(image)
        self.function = self.module.get_function(build.entry)
        dynamic = build.launch.dynamic_shared_bytes
        if dynamic > DEFAULT_DYNAMIC_SHARED_BYTES:
            self.function.set_attribute(
                cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, dynamic)

    def __call__(self, arrays: Mapping[str, np.ndarray]) -> None:
        cuda = self.cuda
        checked = check_arrays(self.build.kernel_name, self.parameters, arrays)
        arguments = []
        for parameter in self.parameters:
            if parameter.is_scalar:
                arguments.append(np.asarray(self.scalars[parameter.name],
                                            parameter.dtype.numpy))
            elif parameter.output:
                arguments.append(cuda.InOut(checked[parameter.name]))
            else:
                arguments.append(cuda.In(checked[parameter.name]))
        launch = self.build.launch
        self.function(*arguments, grid=launch.grid, block=launch.block,
                      shared=launch.dynamic_shared_bytes)


__all__ = ["PyCudaLauncher", "pycuda_status"]
