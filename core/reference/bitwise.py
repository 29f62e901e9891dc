"""The bitwise operators of te on numpy values and on Python ints: the definition the reference
interpreter, the Kernel IR interpreter and the constant folder share.

``&``, ``|``, ``^`` and ``~`` act on the two's-complement bits of the operand's own width
(numpy's ``bitwise_and`` ... ``invert``). The shifts are total, as ONNX's BitShift (its
reference, ``onnx/reference/ops/op_bitshift.py``): with ``bits`` the width of the dtype,

- a shift amount ``s`` in ``[0, bits)`` shifts: left drops the bits shifted out (a signed
  value wraps, ``int8(64) << 1 == -128``), right is arithmetic for a signed type (the sign bit
  fills: ``int8(-16) >> 2 == -4``) and logical for an unsigned one;
- an amount outside ``[0, bits)`` (``s >= bits`` or ``s < 0``) gives 0 for a left shift, and
  the sign for a right shift: -1 for a negative signed value, else 0 (what shifting one bit at a
  time would reach).

>>> import numpy as np
>>> shift_left(np.array([64, 1, 3], np.int8), np.array([1, 8, -1], np.int8)).tolist()
[-128, 0, 0]
>>> shift_right(np.array([-16, -16, 16], np.int8), np.array([2, 9, -3], np.int8)).tolist()
[-4, -1, 0]
>>> fold_shift_left(200, 1, DType.UINT8), fold_shift_right(-5, 40, DType.INT32)
(144, -1)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tilecraft.dtypes import DType

__all__ = ["bitwise_not", "fold_bitwise", "fold_shift_left", "fold_shift_right", "shift_left",
           "shift_right"]


def _operands(a: Any, b: Any, dtype: DType | None) -> tuple[np.ndarray, np.ndarray, int]:
    target = dtype.numpy if dtype is not None else np.asarray(a).dtype
    left, right = np.asarray(a, dtype=target), np.asarray(b, dtype=target)
    return left, right, left.dtype.itemsize * 8


def shift_left(a: Any, b: Any, dtype: DType | None = None) -> Any:
    """``a << b`` elementwise (module doc), in ``a``'s numpy dtype (or ``dtype``'s); a 0-d
    result is a numpy scalar."""
    left, right, bits = _operands(a, b, dtype)
    in_range = (right >= 0) & (right < bits)
    unsigned = np.dtype(f"u{left.dtype.itemsize}")   # shifted unsigned: the bits out drop
    amount = np.where(in_range, right, 0).astype(unsigned)
    shifted = np.left_shift(left.astype(unsigned), amount).astype(left.dtype)
    return np.where(in_range, shifted, left.dtype.type(0)).astype(left.dtype)[()]


def shift_right(a: Any, b: Any, dtype: DType | None = None) -> Any:
    """``a >> b`` elementwise (module doc): an amount outside ``[0, bits)`` shifts by
    ``bits - 1`` (the sign fills; 0 for unsigned values, which then shift by ``bits``)."""
    left, right, bits = _operands(a, b, dtype)
    in_range = (right >= 0) & (right < bits)
    amount = np.where(in_range, right, bits - 1).astype(left.dtype)
    shifted = np.right_shift(left, amount)
    if left.dtype.kind == "u":
        shifted = np.where(in_range, shifted, left.dtype.type(0))
    return np.asarray(shifted, dtype=left.dtype)[()]


def bitwise_not(x: Any, dtype: DType | None = None) -> Any:
    """``~x`` in ``x``'s numpy dtype (or ``dtype``'s): every bit of that width flipped."""
    value = np.asarray(x, dtype=dtype.numpy if dtype is not None else None)
    return np.invert(value)[()]


def fold_shift_left(a: int, b: int, dtype: DType) -> int:
    """``a << b`` of two ``dtype`` values as a Python int (the constant folder's form)."""
    return int(shift_left(a, b, dtype))


def fold_shift_right(a: int, b: int, dtype: DType) -> int:
    """``a >> b`` of two ``dtype`` values as a Python int."""
    return int(shift_right(a, b, dtype))


def fold_bitwise(op: str, a: int, b: int, dtype: DType) -> int:
    """``a op b`` for ``op`` one of ``& | ^`` on two ``dtype`` values, as a Python int."""
    functions = {"&": np.bitwise_and, "|": np.bitwise_or, "^": np.bitwise_xor}
    left, right, _ = _operands(a, b, dtype)
    return int(functions[op](left, right))
