"""Kernel IR expressions as C expressions, for every C-family code generator (CUDA C, OpenCL C):
identifiers, value ranges of index expressions, the printer, flat row-major offsets and the
combining step of an accumulation. What differs between the languages is its
:class:`~tilecraft.codegen.c_dialect.CDialect`.

Every sub-expression is parenthesised (no precedence to get wrong). Semantics follow the
Kernel IR interpreter (:mod:`tilecraft.kernel_ir.interpreter_expr`): integer ``//`` and ``%``
floor (Python's), a zero divisor giving 0 — plain C ``/`` and ``%`` only where the dividend is
provably non-negative and the divisor a positive constant; the bitwise ``& | ^ ~`` are C's and
the shifts are total (the dialect's ``shift_left`` / ``shift_right``: no undefined shift);
float ``max`` / ``min`` propagate NaN (numpy's ``maximum``; C's ``fmaxf`` would drop it);
selects and logical operators short-circuit, so a guarded load stays guarded.

>>> from tilecraft.te import Var
>>> i = Var("i")
>>> printer = CExprPrinter("k", Names(), CDialect(), {i: (0, 95)})
>>> printer.expr((i // 13) * 2 + i % 13)
'(((i / 13) * 2) + (i % 13))'
>>> printer.expr((i - 50) // 13)
'tc_floordiv((i - 50), 13)'
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from tilecraft.codegen.c_dialect import C_KEYWORDS, CDialect
from tilecraft.dtypes import DType
from tilecraft.errors import CodegenError
from tilecraft.kernel_ir.concurrency import LaneReduce
from tilecraft.kernel_ir.nodes import Buffer, BufferLoad
from tilecraft.te.expr import (
    Binary,
    BinaryOp,
    Cast,
    Compare,
    Const,
    Expr,
    Logical,
    Not,
    ReduceOp,
    Select,
    Unary,
    UnaryOp,
    Var,
    const,
)

__all__ = ["CExprPrinter", "Names", "combine", "flat_index", "int_range_of"]


class Names:
    """One C identifier per variable and buffer of a kernel: the IR name, made an identifier
    and suffixed where two different objects share it or it is ``reserved``.

    >>> names = Names()
    >>> a, b = Var("i"), Var("i")
    >>> names.var(a), names.var(b), names.var(a), names.fresh("int")
    ('i', 'i_1', 'i', 'int_1')
    """

    def __init__(self, reserved: frozenset[str] = C_KEYWORDS) -> None:
        self._reserved = reserved
        self._by_key: dict[object, str] = {}
        self._taken: set[str] = set()

    def fresh(self, hint: str) -> str:
        """A new identifier based on ``hint`` (only the generator's own names start with
        ``tc_``)."""
        base = re.sub(r"\W", "_", hint) or "v"
        if base[0].isdigit():
            base = f"v_{base}"
        name, count = base, 0
        while name in self._taken or name in self._reserved:
            count += 1
            name = f"{base}_{count}"
        self._taken.add(name)
        return name

    def var(self, var: Var) -> str:
        key = ("var", var)
        if key not in self._by_key:
            self._by_key[key] = self.fresh(_user(var.name))
        return self._by_key[key]

    def buffer(self, buffer: Buffer) -> str:
        key = ("buffer", id(buffer))
        if key not in self._by_key:
            self._by_key[key] = self.fresh(_user(buffer.name))
        return self._by_key[key]


def _user(name: str) -> str:
    """An IR name kept out of the generator's ``tc_`` namespace."""
    return f"v_{name}" if name.startswith("tc_") else name


def int_range_of(expr: Expr, ranges: Mapping[Var, tuple[int, int]]) -> tuple[int, int] | None:
    """Inclusive bounds of an integer expression over ``ranges`` of its variables, or None
    when unknown (a load, an unbounded variable, a division by something not constant).

    >>> i = Var("i")
    >>> int_range_of(i * 4 + 3, {i: (0, 7)}), int_range_of(i % 5, {i: (-3, 2)})
    ((3, 31), (0, 4))
    """
    if isinstance(expr, Const) and expr.dtype.is_int:
        return int(expr.value), int(expr.value)
    if isinstance(expr, Var):
        return ranges.get(expr)
    if not isinstance(expr, Binary) or not expr.dtype.is_int:
        return None
    a, b = int_range_of(expr.a, ranges), int_range_of(expr.b, ranges)
    if a is None or b is None:
        return None
    if expr.op is BinaryOp.ADD:
        return a[0] + b[0], a[1] + b[1]
    if expr.op is BinaryOp.SUB:
        return a[0] - b[1], a[1] - b[0]
    if expr.op is BinaryOp.MUL:
        products = [x * y for x in a for y in b]
        return min(products), max(products)
    if expr.op in (BinaryOp.MAX, BinaryOp.MIN):
        pick = max if expr.op is BinaryOp.MAX else min
        return pick(a[0], b[0]), pick(a[1], b[1])
    if b[0] == b[1] and b[0] > 0:
        if expr.op is BinaryOp.FLOORDIV:
            return a[0] // b[0], a[1] // b[0]
        if expr.op is BinaryOp.MOD:
            return (a[0], a[1]) if 0 <= a[0] and a[1] < b[0] else (0, b[0] - 1)
    return None


def flat_index(buffer: Buffer, indices: tuple[Expr, ...]) -> Expr:
    """The row-major element offset of ``buffer[indices]`` as an expression.

    >>> from tilecraft.dtypes import DType
    >>> str(flat_index(Buffer("A", (3, 5), DType.FLOAT32), (Var("i"), Var("j"))))
    '((i * 5) + j)'
    """
    total: Expr | None = None
    for index, stride in zip(indices, buffer.strides()):
        term = index if stride == 1 else index * const(stride)
        total = term if total is None else total + term
    return const(0) if total is None else total


def combine(op: ReduceOp, old: str, value: str, dialect: CDialect | None = None,
            dtype: DType = DType.FLOAT32) -> str:
    """``old op= value`` as an expression (float max / min propagate NaN: ``tc_max``).

    >>> combine(ReduceOp.SUM, "acc", "x"), combine(ReduceOp.MAX, "acc", "x")
    ('(acc + x)', 'tc_max(acc, x)')
    >>> combine(ReduceOp.PROD, "acc", "x")
    '(acc * x)'
    """
    if op is ReduceOp.SUM:
        return f"({old} + {value})"
    if op is ReduceOp.PROD:
        return f"({old} * {value})"
    return f"{(dialect or CDialect()).helper(op.value, dtype)}({old}, {value})"


class CExprPrinter:
    """Prints expressions of kernel ``kernel_name`` in ``dialect``; ``ranges`` bound the loop
    variables in scope, ``access(buffer, indices)`` prints a buffer element (set by the
    statement emitter) and ``overrides`` replace whole sub-expressions (a vector lane's
    value)."""

    def __init__(self, kernel_name: str, names: Names, dialect: CDialect,
                 ranges: Mapping[Var, tuple[int, int]] | None = None,
                 access: Callable[[Buffer, tuple[Expr, ...]], str] | None = None) -> None:
        self.kernel_name = kernel_name
        self.names = names
        self.dialect = dialect
        self.ranges: Mapping[Var, tuple[int, int]] = ranges if ranges is not None else {}
        self.access = access or (lambda buffer, indices: (
            f"{names.buffer(buffer)}[{', '.join(self.expr(i) for i in indices)}]"))
        self.overrides: dict[Expr, str] = {}

    def fail(self, what: str, fix: str) -> CodegenError:
        return CodegenError(f"kernel {self.kernel_name}: the {self.dialect.language} code "
                            f"generator cannot express {what}; {fix}")

    def expr(self, expr: Expr) -> str:
        """The C text of ``expr`` (its value in the compute type of its dtype)."""
        if expr in self.overrides:
            return self.overrides[expr]
        dialect = self.dialect
        if expr.dtype not in dialect.supported:
            known = ", ".join(sorted(dtype.value for dtype in dialect.supported))
            raise self.fail(f"the dtype {expr.dtype} (in {expr})", f"use one of {known}")
        if isinstance(expr, Const):
            return dialect.literal(expr.value, expr.dtype)
        if isinstance(expr, Var):
            return self.names.var(expr)
        if isinstance(expr, BufferLoad):
            return dialect.load_value(self.access(expr.buffer, expr.indices), expr.buffer.dtype)
        if isinstance(expr, Binary):
            return self._binary(expr)
        if isinstance(expr, Unary):
            return self._unary(expr)
        if isinstance(expr, (Compare, Logical)):
            return f"({self.expr(expr.a)} {expr.op.value} {self.expr(expr.b)})"
        if isinstance(expr, Not):
            return f"(!{self.expr(expr.x)})"
        if isinstance(expr, Select):
            return (f"({self.expr(expr.cond)} ? {self.expr(expr.true_value)} : "
                    f"{self.expr(expr.false_value)})")
        if isinstance(expr, Cast):
            return dialect.cast_value(self.expr(expr.x), expr.x.dtype, expr.to)
        if isinstance(expr, LaneReduce):
            raise self.fail(f"the lane reduction {expr} outside a vector loop",
                            "reduce the lanes of a vector loop's value inside that loop")
        raise self.fail(f"the expression {expr} ({type(expr).__name__})",
                        "lower the compute to Kernel IR first (tilecraft.lower.lower_compute)")

    def _binary(self, expr: Binary) -> str:
        a, b, dtype, op = self.expr(expr.a), self.expr(expr.b), expr.dtype, expr.op
        if op in (BinaryOp.MAX, BinaryOp.MIN):
            return f"{self.dialect.helper(op.value, dtype)}({a}, {b})"
        if op in (BinaryOp.FLOORDIV, BinaryOp.MOD):
            text = self._floor_division(expr, a, b)
        elif op is BinaryOp.DIV and dtype.is_int:
            raise self.fail(f"'/' on integers ({expr})", "use // (floor division)")
        elif op is BinaryOp.SHIFT_LEFT:
            text = self.dialect.shift_left(a, b, dtype)
        elif op is BinaryOp.SHIFT_RIGHT:
            text = self.dialect.shift_right(a, b, dtype)
        else:
            text = f"({a} {op.value} {b})"
        return self.dialect.wrap_integer(text, dtype) if dtype.is_int else text

    def _floor_division(self, expr: Binary, a: str, b: str) -> str:
        divisor = expr.b
        dividend = int_range_of(expr.a, self.ranges)
        if isinstance(divisor, Const) and int(divisor.value) > 0 and dividend is not None \
                and dividend[0] >= 0:
            return f"({a} {'/' if expr.op is BinaryOp.FLOORDIV else '%'} {b})"
        helper = "tc_floordiv" if expr.op is BinaryOp.FLOORDIV else "tc_floormod"
        return f"{helper}({a}, {b})"

    def _unary(self, expr: Unary) -> str:
        x, op, dtype = self.expr(expr.x), expr.op, expr.dtype
        wrap = self.dialect.wrap_integer
        if op is UnaryOp.NEG:
            return wrap(f"(-{x})", dtype) if dtype.is_int else f"(-{x})"
        if op is UnaryOp.ABS and dtype.is_int:
            return wrap(f"tc_abs({x})", dtype)
        if op is UnaryOp.BITWISE_NOT:   # ~ of the sign- or zero-extended int, wrapped back
            return wrap(f"(~{x})", dtype)
        if not dtype.is_float:
            raise self.fail(f"{op.value} of the {dtype} value {expr.x}", "cast it to float32")
        if op is UnaryOp.SIGMOID:
            return f"(1.0f / (1.0f + {self.dialect.math[UnaryOp.EXP]}(-{x})))"
        return f"{self.dialect.math[op]}({x})"
