"""Calling an emulated CUDA kernel on numpy buffers.

Every parameter of the source's ``meta["params"]`` is copied into a 256-byte aligned buffer
(as ``cudaMalloc`` gives), the grid is run once per interleaving — seed 0 runs the threads in
ascending order, the others in seeded random orders of threads and blocks — each from the same
starting buffers, and the outputs of every run must agree (integers exactly, floats up to a
few units in the last place: float atomics may add in another order): a mismatch is a data race
or a missing barrier, reported as :class:`EmulationError`. The outputs of the first run
are written back into the caller's arrays.

>>> first, second = np.float32([1.0, 2.0, 3.0]), np.float32([1.0, 2.000001, 3.5])
>>> _count_differences(second, first)  # 2.000001 is reordering, 3.5 is not
1
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tilecraft.dtypes import DType
from tilecraft.errors import InputError, TilecraftError
from tilecraft.target.base import Source
from tilecraft_nvidia_tc.emulation.compiler import EmulationLibrary, compile_emulation

#: runs of every call, each in another interleaving of the threads (the first in thread order)
DEFAULT_INTERLEAVINGS = 2
ALIGNMENT = 256


class EmulationError(TilecraftError):
    """An emulated CUDA kernel misbehaved: a divergent barrier or warp collective, a misaligned
    WMMA or cp.async address, or results that depend on the interleaving of its threads."""


def _aligned_copy(array: np.ndarray) -> np.ndarray:
    """A C-contiguous copy of ``array`` starting at an ``ALIGNMENT``-byte boundary."""
    raw = np.empty(array.nbytes + ALIGNMENT, dtype=np.uint8)
    offset = (-raw.ctypes.data) % ALIGNMENT
    copy = raw[offset:offset + array.nbytes].view(array.dtype).reshape(array.shape)
    copy[...] = array
    return copy


#: relative tolerance between interleavings per floating dtype (a few units in the last place)
_ORDER_TOLERANCE = {"float32": 1e-5, "float16": 4e-3, "bfloat16": 3e-2}


def _count_differences(got: np.ndarray, expected: np.ndarray) -> int:
    """How many elements of two runs' outputs differ by more than reordering explains."""
    tolerance = _ORDER_TOLERANCE.get(str(expected.dtype))
    if tolerance is None:
        return int(np.count_nonzero(got != expected))
    a, b = got.astype(np.float64), expected.astype(np.float64)
    scale = float(np.nanmax(np.abs(b), initial=0.0, where=np.isfinite(b))) if b.size else 0.0
    close = np.isclose(a, b, rtol=tolerance, atol=tolerance * scale, equal_nan=True)
    return int(np.count_nonzero(~close))


class EmulatedKernel:
    """A generated CUDA kernel run on the CPU: call it with every parameter by name."""

    def __init__(self, source: Source, interleavings: int = DEFAULT_INTERLEAVINGS,
                 library: EmulationLibrary | None = None):
        if interleavings < 1:
            raise ValueError(f"interleavings must be at least 1, not {interleavings}")
        meta = source.meta
        missing = [key for key in ("entry", "grid", "block", "params") if key not in meta]
        if missing:
            raise EmulationError(f"kernel {source.kernel_name}: its source's meta lacks "
                                 f"{', '.join(missing)}; the CUDA code generator must give "
                                 "entry, grid, block, dynamic_shared_bytes and params")
        self.source = source
        self.interleavings = interleavings
        self.grid = tuple(int(v) for v in meta["grid"])
        self.block = tuple(int(v) for v in meta["block"])
        self.dynamic_shared = int(meta.get("dynamic_shared_bytes", 0))
        self.params: Sequence[Mapping[str, Any]] = tuple(meta["params"])
        self.library = library or compile_emulation(source)

    @property
    def name(self) -> str:
        return self.source.kernel_name

    def _check(self, arrays: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        values = []
        for param in self.params:
            name = param["name"]
            if name not in arrays:
                raise InputError(f"kernel {self.name}: no array for parameter {name!r}")
            array = np.asarray(arrays[name])
            dtype = DType(param["dtype"]).numpy
            shape = tuple(int(v) for v in param["shape"])
            if array.dtype != dtype or array.size != int(np.prod(shape, dtype=np.int64)):
                raise InputError(f"kernel {self.name}: parameter {name!r} is {param['dtype']}"
                                 f"{list(shape)}, got {array.dtype}{list(array.shape)}")
            values.append(array)
        return values

    def run_once(self, buffers: Sequence[np.ndarray], seed: int) -> None:
        """One launch on ``buffers`` (aligned, in parameter order) with the interleaving
        ``seed``; an :class:`EmulationError` with the emulator's message on a fault."""
        pointers = (ctypes.c_void_p * max(len(buffers), 1))(
            *[buffer.ctypes.data for buffer in buffers])
        status = self.library.launch(pointers, *self.grid, *self.block, self.dynamic_shared,
                                     seed)
        if status != 0:
            raise EmulationError(f"kernel {self.name} (emulated, grid {list(self.grid)}, block "
                                 f"{list(self.block)}): {self.library.error()}")

    def __call__(self, arrays: Mapping[str, np.ndarray]) -> None:
        """Run the kernel on ``arrays`` (every parameter by name), writing its outputs in
        place; every interleaving must give the same outputs (module docstring)."""
        values = self._check(arrays)
        outputs = [index for index, param in enumerate(self.params) if param.get("output")]
        first: list[np.ndarray] | None = None
        for seed in range(self.interleavings):
            buffers = [_aligned_copy(value) for value in values]
            self.run_once(buffers, seed)
            if first is None:
                first = [buffers[index] for index in outputs]
                continue
            for index, expected in zip(outputs, first):
                got = buffers[index]
                differ = _count_differences(got, expected)
                if differ:
                    raise EmulationError(
                        f"kernel {self.name}: output {self.params[index]['name']!r} differs "
                        f"between two interleavings of its threads (seeds 0 and {seed}, "
                        f"{differ} elements): the kernel has a data race or a missing barrier "
                        "(__syncthreads / __syncwarp / tc_cp_async_wait)")
        assert first is not None
        for index, result in zip(outputs, first):
            target = arrays[self.params[index]["name"]]
            np.copyto(target, result.reshape(np.shape(target)))


def emulate_source(source: Source, arrays: Mapping[str, np.ndarray],
                   interleavings: int = DEFAULT_INTERLEAVINGS) -> None:
    """Compile (once) and run ``source`` on ``arrays``, writing the outputs in place."""
    EmulatedKernel(source, interleavings)(arrays)


__all__ = ["DEFAULT_INTERLEAVINGS", "EmulatedKernel", "EmulationError", "emulate_source"]
