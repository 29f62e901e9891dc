"""A built OpenCL kernel called with numpy arrays by parameter name.

Every parameter is copied to a device buffer (an element of a parameter the kernel only
writes may be left unwritten by it, so outputs are copied in as well), the kernel runs on the
global and local sizes of the source's ``meta``, and the outputs are copied back into the
caller's arrays.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from tilecraft.dtypes import DType
from tilecraft.errors import InputError
from tilecraft_mali.runtime.program import BuiltProgram

__all__ = ["OpenCLKernel"]


class OpenCLKernel:
    """``kernel(arrays)`` runs the entry ``meta["entry"]`` of ``built`` (module docstring)."""

    def __init__(self, built: BuiltProgram, meta: Mapping[str, Any]) -> None:
        self.built = built
        self.entry = str(meta["entry"])
        import pyopencl as cl

        self.kernel = cl.Kernel(built.program, self.entry)
        self.global_size = tuple(int(n) for n in meta["global_size"])
        self.local_size = tuple(int(n) for n in meta["local_size"])
        self.params = list(meta["params"])

    def __call__(self, arrays: Mapping[str, np.ndarray]) -> None:
        import pyopencl as cl

        device = self.built.device
        context, queue = device.context, device.queue
        buffers, hosts = [], []
        for param in self.params:
            name = param["name"]
            if name not in arrays:
                raise InputError(f"kernel {self.entry}: no array for parameter {name}")
            array = arrays[name]
            dtype = DType(param["dtype"]).numpy
            size = int(np.prod(param["shape"], dtype=np.int64))
            if array.size != size:
                raise InputError(f"kernel {self.entry}: parameter {name} has {size} elements, "
                                 f"the array {array.size}")
            host = np.ascontiguousarray(array, dtype=dtype).reshape(-1)
            if host.nbytes:
                buffer = cl.Buffer(context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR,
                                   hostbuf=host)
            else:
                buffer = cl.Buffer(context, cl.mem_flags.READ_WRITE, 4)
            buffers.append(buffer)
            hosts.append((param, array, host))
        self.kernel(queue, self.global_size, self.local_size, *buffers)
        for (param, array, host), buffer in zip(hosts, buffers):
            if param["output"] and host.nbytes:
                result = np.empty_like(host)
                cl.enqueue_copy(queue, result, buffer)
                array[...] = result.reshape(array.shape)
        queue.finish()
