"""Calling an emulated AscendC kernel on numpy buffers: every parameter of the source's
``meta["params"]`` is copied into a 64-byte aligned buffer (GM), the kernel runs once per AI
core (block index 0 .. block_dim - 1, one after another), and the outputs are copied back into
the caller's arrays. A fault the emulation finds (a level overflow, a queue misuse, an access
out of bounds, a Cube operand not in fractal layout) is an :class:`AscendEmulationError`
naming the kernel and the AI core.

>>> _aligned(np.arange(3, dtype=np.float32)).ctypes.data % 64
0
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping
from typing import Any

import numpy as np

from tilecraft.dtypes import DType
from tilecraft.errors import InputError, TilecraftError
from tilecraft.target.base import Source
from tilecraft_ascend_npu.emulation.compiler import AscendLibrary, build_library

__all__ = ["AscendEmulationError", "EmulatedAscendKernel"]


class AscendEmulationError(TilecraftError):
    """An emulated AscendC kernel broke a rule of the programming model."""


def _aligned(array: np.ndarray, alignment: int = 64) -> np.ndarray:
    raw = np.empty(array.nbytes + alignment, dtype=np.uint8)
    start = (-raw.ctypes.data) % alignment
    view = raw[start:start + array.nbytes].view(array.dtype).reshape(array.shape)
    view[...] = array
    return view


class EmulatedAscendKernel:
    """A generated AscendC kernel run on the host: call it with every parameter by name."""

    def __init__(self, source: Source, library: AscendLibrary | None = None) -> None:
        self.source = source
        self.params: tuple[Mapping[str, Any], ...] = tuple(source.meta["params"])
        self.block_dim = int(source.meta.get("block_dim", 1))
        self.library = library or build_library(source)

    def __call__(self, arrays: Mapping[str, np.ndarray]) -> None:
        name = self.source.kernel_name
        buffers = []
        for param in self.params:
            if param["name"] not in arrays:
                raise InputError(f"kernel {name}: no array for parameter {param['name']!r}")
            array = np.asarray(arrays[param["name"]])
            dtype = DType(param["dtype"]).numpy
            size = int(np.prod(param["shape"], dtype=np.int64))
            if array.dtype != dtype or array.size != size:
                raise InputError(f"kernel {name}: parameter {param['name']!r} is "
                                 f"{param['dtype']}{list(param['shape'])}, got "
                                 f"{array.dtype}{list(array.shape)}")
            buffers.append(_aligned(np.ascontiguousarray(array)))
        pointers = (ctypes.c_void_p * max(1, len(buffers)))(*[b.ctypes.data for b in buffers])
        if self.library.run(pointers, self.block_dim):
            raise AscendEmulationError(f"kernel {name} (emulated AscendC, block_dim "
                                       f"{self.block_dim}): {self.library.error()}")
        for param, buffer in zip(self.params, buffers):
            if param.get("output"):
                target = arrays[param["name"]]
                np.copyto(target, buffer.reshape(np.shape(target)))
