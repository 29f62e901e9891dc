"""Scalar semantics of te values as numpy arrays: constants, casts and ``erf``.

Every value is held in the *compute* dtype of its te dtype (``DType.compute_numpy``): float16
and bfloat16 values are float32 arrays whose elements are exactly representable in the half
type. These helpers are the single place where te's numeric conventions are written down:

- a constant of a half type is rounded to that type (it *is* a value of that type);
- ``Cast`` to a half type rounds to nearest-even and keeps the value in float32 — even a cast
  from the same half type, since half-typed arithmetic is carried out unrounded in float32;
- ``Cast`` from a float to an integer truncates toward zero and saturates at the target's range,
  NaN becoming 0 (LLVM's ``fptosi.sat``, CUDA's ``cvt.rzi.sat``);
- ``Cast`` between integers wraps (two's complement), int to float rounds to nearest-even.

>>> half = cast_values(np.array([1.0004, 300.7], np.float32), DType.FLOAT32, DType.FLOAT16)
>>> half.dtype, half.tolist()
(dtype('float32'), [1.0, 300.75])
>>> cast_values(np.array([1e10, -2.7, np.nan], np.float32), DType.FLOAT32, DType.INT8)
array([127,  -2,   0], dtype=int8)
>>> round(float(erf(np.array(0.5))), 12)
0.520499877813
"""

from __future__ import annotations

import math

import numpy as np

from tilecraft.dtypes import DType
from tilecraft.te.expr import int_range

_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
_SQRT_PI = math.sqrt(math.pi)
# Below this |x| the Maclaurin-type series is used, above it the continued fraction of erfc.
_SERIES_LIMIT = 2.5
_SERIES_TERMS = 42
_FRACTION_TERMS = 32
# erf(6) is 1 - 2e-17: 1.0 in float64
_SATURATION = 6.0


def const_array(value: int | float | bool, dtype: DType) -> np.ndarray:
    """A 0-d array holding ``value`` as a value of ``dtype``, in its compute dtype."""
    if dtype is DType.BOOL:
        return np.array(bool(value))
    if dtype.is_int:
        return np.array(int(value), dtype=np.int64).astype(dtype.numpy)
    if dtype in (DType.FLOAT16, DType.BFLOAT16):
        return np.array(float(value), dtype=np.float64).astype(dtype.numpy).astype(np.float32)
    return np.array(float(value), dtype=dtype.numpy)


def cast_values(values: np.ndarray, source: DType, target: DType) -> np.ndarray:
    """Convert an array held in ``source``'s compute dtype to ``target`` (see module doc)."""
    values = np.asarray(values)
    if source == target and target not in (DType.FLOAT16, DType.BFLOAT16):
        return values
    with np.errstate(all="ignore"):
        if target is DType.BOOL:
            return values != 0
        if target.is_float:
            if source.is_int or source is DType.BOOL:
                values = values.astype(np.float64)
            if target is DType.FLOAT32:
                return values.astype(np.float32)
            return values.astype(target.numpy).astype(np.float32)
        # integer target
        if source.is_float:
            lo, hi = int_range(target)
            truncated = np.trunc(values.astype(np.float64))
            truncated = np.where(np.isnan(truncated), 0.0, np.clip(truncated, lo, hi))
            return truncated.astype(target.numpy)
        return values.astype(target.numpy)


def erf(x: np.ndarray) -> np.ndarray:
    """The error function, elementwise, in float64 (relative error about 1e-15).

    |x| < 2.5 uses ``erf(x) = 2/sqrt(pi) * exp(-x^2) * sum_n 2^n x^(2n+1) / (2n+1)!!`` (all terms
    positive, so no cancellation); larger |x| uses Laplace's continued fraction for erfc.

    >>> [round(float(v), 12) for v in erf(np.array([-1.0, 0.0, 3.0]))]
    [-0.84270079295, 0.0, 0.999977909503]
    """
    x = np.asarray(x, dtype=np.float64)
    magnitude = np.abs(x)
    result = np.empty_like(magnitude)
    small = magnitude < _SERIES_LIMIT
    with np.errstate(all="ignore"):
        xs = magnitude[small]
        squared = xs * xs
        term = xs.copy()
        total = xs.copy()
        for n in range(1, _SERIES_TERMS):
            term *= (2.0 * squared) / (2 * n + 1)
            total += term
        result[small] = _TWO_OVER_SQRT_PI * np.exp(-squared) * total

        large = ~small
        xl = np.minimum(magnitude[large], _SATURATION)
        fraction = xl.copy()
        for n in range(_FRACTION_TERMS, 0, -1):
            fraction = xl + (n / 2.0) / fraction
        result[large] = 1.0 - np.exp(-xl * xl) / (_SQRT_PI * fraction)
    result[np.isnan(x)] = np.nan
    return np.copysign(result, x)
