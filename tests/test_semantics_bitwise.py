"""Intrinsic semantics with integer bit operations (target/semantics.py): an int4 unpacking
and a masked xor written in the notation build te programs whose results are numpy's; the
logical ``& | ~`` keep their meaning; a bitwise function on floats is refused."""

from __future__ import annotations

import numpy as np
import pytest

import tilecraft as tc
from tilecraft.dtypes import DType
from tilecraft.target.semantics import Loop, Operand, SemanticsError, build_program
from tilecraft.te import AxisKind


def _run(text: str, operands: list[Operand], loops: list[Loop], **arrays) -> np.ndarray:
    program = build_program(text, loops, operands)
    return tc.reference.run(program.output, **arrays)


def test_int4_unpacking_matches_numpy():
    """Two signed 4-bit values per byte: low nibble sign-extended by shifting up then down."""
    packed = np.array([0x00, 0x7F, 0x80, 0xF1, 0x19, 0xFF, 0x08], np.uint8).view(np.int8)
    loops = [Loop("i", 7, AxisKind.SPATIAL), Loop("h", 2, AxisKind.SPATIAL)]
    operands = [Operand("P", "src", DType.INT8, (7,)), Operand("U", "dst", DType.INT32, (7, 2))]
    text = ("U[i, h] = select(h == 0, (cast(int32, P[i]) << 28) >> 28, "
            "cast(int32, P[i]) >> 4)")
    got = _run(text, operands, loops, P=packed)
    wide = packed.astype(np.int32)
    want = np.stack([(wide << 28) >> 28, wide >> 4], axis=1)
    np.testing.assert_array_equal(got, want)


def test_masks_xor_and_not():
    a = np.array([0, 1, 255, 37, 128, 64], np.uint8)
    loops = [Loop("i", 6, AxisKind.SPATIAL)]
    operands = [Operand("A", "src", DType.UINT8, (6,)), Operand("B", "dst", DType.UINT8, (6,))]
    got = _run("B[i] = bitwise_or(bitwise_and(A[i], 15), bitwise_not(A[i]) ^ 3)", operands,
               loops, A=a)
    np.testing.assert_array_equal(got, (a & 15) | (~a ^ 3))


def test_logical_operators_are_unchanged_and_floats_are_refused():
    x = np.arange(5, dtype=np.float32)
    loops = [Loop("i", 5, AxisKind.SPATIAL)]
    operands = [Operand("X", "src", DType.FLOAT32, (5,)),
                Operand("Y", "dst", DType.FLOAT32, (5,))]
    got = _run("Y[i] = select((i > 0) & ~(i > 3), X[i], 0.0)", operands, loops, X=x)
    np.testing.assert_array_equal(got, np.where((x > 0) & ~(x > 3), x, 0))
    with pytest.raises(SemanticsError, match="needs integer operands"):
        build_program("Y[i] = X[i] << 1", loops, operands)
    with pytest.raises(SemanticsError, match="bitwise_and takes 2 argument"):
        build_program("Y[i] = bitwise_and(X[i])", loops, operands)
