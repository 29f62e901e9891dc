"""Checking the arrays a caller passes for a program's placeholders.

>>> import numpy as np
>>> from tilecraft import te
>>> A = te.placeholder((2, 3), "float32", name="A")
>>> bound = bind_inputs([A], (), {"A": np.zeros((2, 3), np.float32)})
>>> bound["A"].shape
(2, 3)
>>> binder = InputBinder([A])
>>> binder((np.ones((2, 3), np.float32),), {})["A"].sum()
np.float32(6.0)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tilecraft.errors import InputError
from tilecraft.runtime.allocation import check_allocation
from tilecraft.te.tensor import Tensor


def bind_inputs(placeholders: Sequence[Tensor], args: Sequence[Any],
                kwargs: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Match positional and keyword arrays to ``placeholders`` and check each one.

    Raises :class:`InputError` for missing, extra, duplicate, wrong-shape or wrong-dtype arrays;
    returns C-contiguous arrays keyed by placeholder name.
    """
    names = [t.name for t in placeholders]
    if len(args) > len(names):
        raise InputError(f"got {len(args)} positional arrays but the program has {len(names)} "
                         f"inputs ({', '.join(names)})")
    given: dict[str, Any] = dict(zip(names, args))
    for name, value in kwargs.items():
        if name in given:
            raise InputError(f"input {name!r} was given both by position and by name")
        given[name] = value
    extra = sorted(set(given) - set(names))
    if extra:
        raise InputError(f"unknown input(s) {', '.join(map(repr, extra))}; the program's inputs "
                         f"are: {', '.join(names)}")
    missing = [name for name in names if name not in given]
    if missing:
        wanted = ", ".join(f"{t.name}: {t.dtype.value}{list(t.shape)}" for t in placeholders
                           if t.name in missing)
        raise InputError(f"missing input(s): {wanted}")
    bound = {}
    for tensor in placeholders:
        bound[tensor.name] = check_array(tensor, given[tensor.name])
    return bound


def check_array(tensor: Tensor, value: Any) -> np.ndarray:
    """``value`` as a C-contiguous array of ``tensor``'s shape and dtype, or an InputError."""
    if not isinstance(value, np.ndarray):
        if np.isscalar(value) or isinstance(value, (list, tuple)):
            raise InputError(f"input {tensor.name!r} must be a numpy array of shape "
                             f"{tensor.shape} and dtype {tensor.dtype.value}, got "
                             f"{type(value).__name__}; wrap it with np.asarray(..., "
                             f"dtype='{tensor.dtype.value}')")
        raise InputError(f"input {tensor.name!r} must be a numpy array, got "
                         f"{type(value).__name__}")
    if isinstance(value, np.ma.MaskedArray):
        raise InputError(masked_message(tensor.name))
    if value.shape != tensor.shape:
        raise InputError(f"input {tensor.name!r} has shape {value.shape}, expected "
                         f"{tensor.shape}")
    expected = tensor.dtype.numpy
    if value.dtype != expected:
        raise InputError(f"input {tensor.name!r} has dtype {value.dtype}, expected "
                         f"{tensor.dtype.value}; convert it with .astype('{tensor.dtype.value}')"
                         if tensor.dtype.value != "bfloat16" else
                         f"input {tensor.name!r} has dtype {value.dtype}, expected bfloat16; "
                         "convert it with .astype(ml_dtypes.bfloat16)")
    if not value.flags.c_contiguous:  # a copy: refused before it is made when it cannot be
        check_allocation([(tensor.name, value.shape, value.dtype)],
                         f"copying input {tensor.name!r} into C order")
    return np.ascontiguousarray(value)


def masked_message(name: str) -> str:
    """Why a masked array is refused (its mask would be silently ignored)."""
    return (f"input {name!r} is a masked array; kernels read every element and would ignore "
            "its mask — pass array.filled(value) with the value masked elements should have")


class InputBinder:
    """:func:`bind_inputs` for one fixed list of placeholders, cheap on repeated calls.

    The names, shapes and numpy dtypes are computed once. A call passing exactly one exact
    ``np.ndarray`` per placeholder (all by position, or all by name) that already has the
    placeholder's shape, dtype and C-contiguous layout is bound without further work; any other
    call goes through :func:`bind_inputs`, which accepts and rejects exactly what it always did.
    """

    def __init__(self, placeholders: Sequence[Tensor]):
        self.placeholders = tuple(placeholders)
        self._expected = tuple((t.name, tuple(int(n) for n in t.shape), t.dtype.numpy)
                               for t in self.placeholders)

    def __call__(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        expected = self._expected
        if kwargs:
            values = [kwargs.get(name) for name, _, _ in expected] \
                if not args and len(kwargs) == len(expected) else None
        else:
            values = args if len(args) == len(expected) else None
        if values is not None:
            bound = {}
            for (name, shape, dtype), value in zip(expected, values):
                if type(value) is not np.ndarray or value.dtype is not dtype \
                        or value.shape != shape or not value.flags.c_contiguous:
                    break
                bound[name] = value
            else:
                return bound
        return bind_inputs(self.placeholders, args, kwargs)
