"""Calling a C-simulated HLS kernel on numpy buffers: every parameter of the source's
``meta["params"]`` is checked (dtype, element count), copied C-contiguous, passed by pointer
(the plugin's ``ap_int<8>``, ``ap_int<32>`` and ``half`` are laid out as numpy's int8, int32
and float16), and the outputs are written back into the caller's arrays. A C-simulation
failure (a stream read while empty, values left in a stream) is a :class:`CSimError`.
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping

import numpy as np

from tilecraft.dtypes import DType
from tilecraft.errors import InputError, TilecraftError
from tilecraft.target.base import Source
from tilecraft_fpga_hls.csim.compiler import CSimLibrary, compile_csim

__all__ = ["CSimError", "CSimKernel"]


class CSimError(TilecraftError):
    """A C-simulated kernel failed: a dataflow stage read an empty stream, or a region left
    values in one."""


class CSimKernel:
    """A generated HLS kernel run by C-simulation: call it with every parameter by name."""

    def __init__(self, source: Source, library: CSimLibrary | None = None) -> None:
        if "params" not in source.meta or "entry" not in source.meta:
            raise CSimError(f"kernel {source.kernel_name}: its source's meta lacks entry or "
                            "params; it was not made by the fpga_hls code generator")
        self.source = source
        self.params = tuple(source.meta["params"])
        self.library = library or compile_csim(source)

    @property
    def name(self) -> str:
        return self.source.kernel_name

    def __call__(self, arrays: Mapping[str, np.ndarray]) -> None:
        buffers = [_argument(self.name, param, arrays) for param in self.params]
        pointers = (ctypes.c_void_p * max(1, len(buffers)))(
            *[buffer.ctypes.data for buffer in buffers])
        if self.library.run(pointers) != 0:
            raise CSimError(f"kernel {self.name}: {self.library.error()}")
        for param, buffer in zip(self.params, buffers):
            if param["output"]:
                target = arrays[param["name"]]
                target[...] = buffer.reshape(np.shape(target))


def _argument(kernel: str, param: Mapping[str, object], arrays: Mapping[str, np.ndarray]
              ) -> np.ndarray:
    """A C-contiguous copy of the array for ``param``: its dtype, and its element count."""
    name = str(param["name"])
    given = arrays.get(name)
    dtype = DType(str(param["dtype"])).numpy
    count = int(np.prod(param["shape"], dtype=np.int64))  # type: ignore[arg-type]
    if given is None or np.asarray(given).dtype != dtype or np.size(given) != count:
        got = "nothing" if given is None else f"{np.asarray(given).dtype}{list(np.shape(given))}"
        raise InputError(f"kernel {kernel}: parameter {name!r} takes {param['dtype']}"
                         f"{list(param['shape'])}, got {got}")  # type: ignore[call-overload]
    return np.array(given, dtype=dtype, order="C", copy=True)
