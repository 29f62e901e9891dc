"""Element types of tensors.

float16 and bfloat16 are storage types: arithmetic on them happens in float32 and the result
is rounded when stored, in the reference interpreter and in every code generator alike.

>>> DType.parse("float32").bits
32
>>> DType.parse("int8").is_signed
True
"""

from __future__ import annotations

import enum

import ml_dtypes
import numpy as np

from tilecraft.errors import DTypeError


class DType(str, enum.Enum):
    """A tensor element type; ``BOOL`` only appears as the type of conditions."""

    FLOAT32 = "float32"
    FLOAT16 = "float16"
    BFLOAT16 = "bfloat16"
    INT8 = "int8"
    UINT8 = "uint8"
    INT32 = "int32"
    BOOL = "bool"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, value: DType | str | np.dtype) -> DType:
        """Accept a DType, its name, or a numpy dtype."""
        if isinstance(value, DType):
            return value
        name = str(np.dtype(value)) if not isinstance(value, str) else value
        try:
            return cls(name)
        except ValueError:
            known = ", ".join(d.value for d in cls if d is not cls.BOOL)
            raise DTypeError(f"unknown dtype {value!r}; use one of: {known}") from None

    @property
    def bits(self) -> int:
        return {"float32": 32, "float16": 16, "bfloat16": 16, "int8": 8, "uint8": 8,
                "int32": 32, "bool": 1}[self.value]

    @property
    def bytes(self) -> int:
        return max(1, self.bits // 8)

    @property
    def is_float(self) -> bool:
        return self in (DType.FLOAT32, DType.FLOAT16, DType.BFLOAT16)

    @property
    def is_int(self) -> bool:
        return self in (DType.INT8, DType.UINT8, DType.INT32)

    @property
    def is_signed(self) -> bool:
        return self in (DType.INT8, DType.INT32) or self.is_float

    @property
    def numpy(self) -> np.dtype:
        """The numpy dtype arrays of this type have (bfloat16 through ml_dtypes); computed once
        per type (runtimes look it up on every call)."""
        return _NUMPY_DTYPES[self]

    @property
    def compute_numpy(self) -> np.dtype:
        """The numpy dtype arithmetic on this type is carried out in."""
        if self in (DType.FLOAT16, DType.BFLOAT16):
            return np.dtype(np.float32)
        return self.numpy


def _numpy_dtype(dtype: DType) -> np.dtype:
    if dtype is DType.BFLOAT16:
        return np.dtype(ml_dtypes.bfloat16)
    if dtype is DType.BOOL:
        return np.dtype(np.bool_)
    return np.dtype(dtype.value)


_NUMPY_DTYPES: dict[DType, np.dtype] = {dtype: _numpy_dtype(dtype) for dtype in DType}


def as_dtype(value: DType | str | np.dtype) -> DType:
    """Shorthand for :meth:`DType.parse`."""
    return DType.parse(value)
