"""The integer expression simplifier: rules on examples, and a property check that simplified
expressions evaluate to the same values (with int32 wrap-around and floor division)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tilecraft import te
from tilecraft.dtypes import DType
from tilecraft.kernel_ir.interpreter_expr import ExprCompiler
from tilecraft.kernel_ir.nodes import Buffer, BufferLoad
from tilecraft.kernel_ir.simplify import simplify, wrap_int
from tilecraft.te import Var, const

i, j = Var("i"), Var("j")


def test_identities_and_folding() -> None:
    assert simplify(i + 0) == i and simplify(0 + i) == i and simplify(i - 0) == i
    assert simplify(i * 1) == i and simplify(1 * i) == i
    assert simplify(i * 0) == const(0) and simplify(i // 1) == i and simplify(i % 1) == const(0)
    assert simplify(const(7) * 6 - 2) == const(40)
    assert simplify(te.max(const(3), const(-2))) == const(3)
    assert simplify(const(2_000_000_000) * 2) == const(wrap_int(4_000_000_000, DType.INT32))
    assert str(simplify((i + 3) + 4)) == "(i + 7)"
    assert str(simplify((i - 3) + 1)) == "(i - 2)"
    assert str(simplify(2 + i)) == "(i + 2)"
    by_zero = te.Binary(te.BinaryOp.FLOORDIV, const(5), i - i)
    assert simplify(by_zero) == by_zero  # i - i is not folded, and nor is a division by it
    assert simplify(te.Binary(te.BinaryOp.MOD, const(5), const(0))) == te.Binary(
        te.BinaryOp.MOD, const(5), const(0))  # never folds a division by zero


def test_conditions_and_casts_fold() -> None:
    assert simplify(const(3) < 4) == const(True)
    assert simplify(te.select(const(2) > 3, i, j)) == j
    assert simplify((const(1) < 2) & (i < j)) == (i < j)
    assert simplify((const(1) > 2) | (i < j)) == (i < j)
    assert simplify(~(const(1) > 2)) == const(True)
    assert simplify(const(300).astype("int8")) == const(44, "int8")
    assert simplify(const(3).astype("float32")) == const(3.0)


def test_floats_are_left_alone_and_buffer_loads_are_simplified_inside() -> None:
    x = const(1.5) * 2.0
    assert simplify(x) is x
    A = Buffer("A", (8,), DType.FLOAT32)
    load = BufferLoad(A, (i * 1 + 0,))
    assert simplify(load * 1.0) == BufferLoad(A, (i,)) * 1.0


INT_OPS = [lambda a, b: a + b, lambda a, b: a - b, lambda a, b: a * b,
           lambda a, b: a // b, lambda a, b: a % b, te.max, te.min]


@st.composite
def int_exprs(draw, depth: int = 3):
    if depth == 0 or draw(st.booleans()):
        return draw(st.sampled_from([i, j, const(draw(st.integers(-9, 9)))]))
    op = draw(st.sampled_from(INT_OPS))
    a, b = draw(int_exprs(depth - 1)), draw(int_exprs(depth - 1))
    if op in (INT_OPS[3], INT_OPS[4]):  # keep divisors nonzero constants
        b = const(draw(st.sampled_from([-3, -1, 1, 2, 7])))
    return op(a, b)


@settings(max_examples=150, deadline=None)
@given(int_exprs(), st.integers(-20, 20), st.integers(-20, 20))
def test_simplified_expressions_evaluate_the_same(expr, vi, vj) -> None:
    compiler = ExprCompiler("prop")
    env = [None] * 2
    env[compiler.bind_var(i)], env[compiler.bind_var(j)] = vi, vj
    original = int(compiler.compile(expr)(env))
    simplified = int(compiler.compile(simplify(expr))(env))
    assert wrap_int(original, DType.INT32) == wrap_int(simplified, DType.INT32)
