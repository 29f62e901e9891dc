"""The kernel's parameters as a launch passes them: checked arrays in, an array of pointers to
the argument values out (``cuLaunchKernel``'s ``kernelParams``).

A Source's ``meta["params"]`` lists the kernel's parameters in order: buffers (``"kind":
"buffer"``, the default: passed as a device pointer, even a 0-d one such as a full reduction's
output) then scalars (``"kind": "scalar"``, shape ``[]``, passed by value in their C type).

>>> params = parameters_from_meta({"params": [
...     {"name": "A", "dtype": "float32", "shape": [4], "output": False},
...     {"name": "n", "dtype": "int32", "shape": [], "output": False, "kind": "scalar"}]})
>>> packed = pack_arguments("k", params, {"A": 0x7f0000001000}, {"n": 4})
>>> packed.values
(139637976731648, 4)
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tilecraft.dtypes import DType
from tilecraft.errors import InputError

#: the C type a scalar parameter of each dtype is passed as
_SCALAR_CTYPES: dict[DType, type[ctypes._SimpleCData]] = {
    DType.FLOAT32: ctypes.c_float, DType.INT32: ctypes.c_int32, DType.INT8: ctypes.c_int8,
    DType.UINT8: ctypes.c_uint8, DType.FLOAT16: ctypes.c_uint16,
    DType.BFLOAT16: ctypes.c_uint16, DType.BOOL: ctypes.c_bool,
}


@dataclass(frozen=True)
class KernelParameter:
    """One parameter of a generated kernel, as ``meta["params"]`` lists it."""

    name: str
    dtype: DType
    shape: tuple[int, ...]
    output: bool = False
    #: ``buffer`` (a device pointer) or ``scalar`` (by value)
    kind: str = "buffer"

    @property
    def is_scalar(self) -> bool:
        return self.kind == "scalar"

    @property
    def nbytes(self) -> int:
        count = 1
        for extent in self.shape:
            count *= extent
        return count * self.dtype.numpy.itemsize


def parameters_from_meta(meta: Mapping[str, Any]) -> tuple[KernelParameter, ...]:
    """The parameters of a Source's ``meta`` (an InputError when they are malformed)."""
    try:
        parameters = tuple(KernelParameter(str(p["name"]), DType.parse(p["dtype"]),
                                           tuple(int(extent) for extent in p.get("shape", ())),
                                           bool(p.get("output", False)),
                                           str(p.get("kind", "buffer")))
                           for p in meta.get("params", ()))
    except (KeyError, TypeError, ValueError) as err:
        raise InputError(f"the source's meta['params'] is malformed ({err}); each parameter "
                         "needs name, dtype, shape and output") from err
    for parameter in parameters:
        if parameter.kind not in ("buffer", "scalar"):
            raise InputError(f"the source's meta['params']: parameter {parameter.name} has kind "
                             f"{parameter.kind!r}; a parameter is a 'buffer' or a 'scalar'")
        if parameter.is_scalar and parameter.shape:
            raise InputError(f"the source's meta['params']: scalar parameter {parameter.name} "
                             f"has shape {list(parameter.shape)}; a scalar has shape []")
    return parameters


def check_arrays(kernel: str, parameters: Sequence[KernelParameter],
                 arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The buffer parameters' arrays, C-contiguous, each of its declared shape and dtype (an
    :class:`InputError` naming the kernel and the parameter otherwise)."""
    checked = {}
    for parameter in parameters:
        if parameter.is_scalar:
            continue
        if parameter.name not in arrays:
            raise InputError(f"kernel {kernel}: no array for parameter {parameter.name}; "
                             f"pass every buffer parameter by name")
        array = np.asarray(arrays[parameter.name])
        if array.shape != parameter.shape or array.dtype != parameter.dtype.numpy:
            raise InputError(f"kernel {kernel}: parameter {parameter.name} is "
                             f"{parameter.dtype} {list(parameter.shape)}, the array is "
                             f"{array.dtype} {list(array.shape)}")
        if not array.flags.c_contiguous:
            raise InputError(f"kernel {kernel}: the array of {parameter.name} is not "
                             "C-contiguous; pass np.ascontiguousarray(...)")
        checked[parameter.name] = array
    return checked


class PackedArguments:
    """The argument values in ctypes storage and the array of their addresses; keep it alive
    until the launch has been issued."""

    def __init__(self, storage: Sequence[ctypes._SimpleCData]) -> None:
        self._storage = tuple(storage)
        self._pointers = (ctypes.c_void_p * max(len(storage), 1))(
            *(ctypes.addressof(value) for value in storage))

    @property
    def address(self) -> int:
        """The address of the ``void*`` array (``kernelParams``)."""
        return ctypes.addressof(self._pointers)

    @property
    def values(self) -> tuple[Any, ...]:
        """The values as the kernel receives them, read back through the pointers."""
        return tuple(type(value).from_address(self._pointers[index]).value
                     for index, value in enumerate(self._storage))

    def __len__(self) -> int:
        return len(self._storage)


def pack_arguments(kernel: str, parameters: Sequence[KernelParameter],
                   device_pointers: Mapping[str, int],
                   scalars: Mapping[str, Any] | None = None) -> PackedArguments:
    """Pack ``parameters`` in order: buffers as 64-bit device pointers, scalars by value."""
    scalars = scalars or {}
    storage: list[ctypes._SimpleCData] = []
    for parameter in parameters:
        if parameter.is_scalar:
            if parameter.name not in scalars:
                raise InputError(f"kernel {kernel}: no value for scalar parameter "
                                 f"{parameter.name}")
            value = scalars[parameter.name]
            if parameter.dtype in (DType.FLOAT16, DType.BFLOAT16):
                value = int(np.asarray(value, parameter.dtype.numpy).view(np.uint16))
            storage.append(_SCALAR_CTYPES[parameter.dtype](value))
        else:
            if parameter.name not in device_pointers:
                raise InputError(f"kernel {kernel}: no device buffer for {parameter.name}")
            storage.append(ctypes.c_uint64(int(device_pointers[parameter.name])))
    return PackedArguments(storage)


__all__ = ["KernelParameter", "PackedArguments", "check_arrays", "pack_arguments",
           "parameters_from_meta"]
