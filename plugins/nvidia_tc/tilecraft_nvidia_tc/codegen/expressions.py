"""Kernel IR expressions as CUDA C expressions.

Every sub-expression is parenthesised (no precedence to get wrong). Semantics follow the
Kernel IR interpreter (:mod:`tilecraft.kernel_ir.interpreter_expr`): integer ``//`` and ``%``
floor (Python's), a zero divisor giving 0 — plain C ``/`` and ``%`` only where the dividend is
provably non-negative and the divisor a positive constant; float ``max`` / ``min`` propagate
NaN (numpy's ``maximum``; CUDA's ``fmaxf`` would drop it); selects and logical operators
short-circuit, so a guarded load stays guarded.

>>> from tilecraft.te import Var, const
>>> i = Var("i")
>>> names = Names()
>>> printer = ExprPrinter("k", names, {i: (0, 95)})
>>> printer.expr((i // 13) * 2 + i % 13)
'(((i / 13) * 2) + (i % 13))'
>>> printer.expr((i - 50) // 13)
'tc_floordiv((i - 50), 13)'
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Callable, Mapping

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
    Select,
    Unary,
    UnaryOp,
    Var,
)
from tilecraft_nvidia_tc.codegen.dtypes import (
    SUPPORTED,
    cast_value,
    literal,
    load_value,
    wrap_integer,
)

__all__ = ["ExprPrinter", "Names", "int_range_of"]

#: names the generated code must not shadow (C++ keywords, CUDA built-ins, our helpers)
_RESERVED = frozenset({
    "auto", "bool", "break", "case", "char", "class", "const", "continue", "default", "delete",
    "do", "double", "else", "enum", "extern", "float", "for", "goto", "if", "inline", "int",
    "long", "new", "operator", "private", "public", "register", "return", "short", "signed",
    "sizeof", "static", "struct", "switch", "template", "this", "typedef", "union", "unsigned",
    "void", "volatile", "while", "half", "threadIdx", "blockIdx", "blockDim", "gridDim",
    "warpSize", "min", "max", "abs", "exp", "log", "sqrt", "tanh", "erf", "nvcuda", "std",
}) | frozenset(keyword.kwlist)

_MATH = {UnaryOp.EXP: "expf", UnaryOp.LOG: "logf", UnaryOp.SQRT: "sqrtf",
         UnaryOp.TANH: "tanhf", UnaryOp.ERF: "erff"}


class Names:
    """One C identifier per variable and buffer of a kernel: the IR name, made an identifier
    and suffixed where two different objects share it.

    >>> names = Names()
    >>> a, b = Var("i"), Var("i")
    >>> names.var(a), names.var(b), names.var(a), names.fresh("int")
    ('i', 'i_1', 'i', 'int_1')
    """

    def __init__(self) -> None:
        self._by_key: dict[object, str] = {}
        self._taken: set[str] = set()

    def fresh(self, hint: str) -> str:
        """A new identifier based on ``hint`` (only the generator's own names start with
        ``tc_``)."""
        base = re.sub(r"\W", "_", hint) or "v"
        if base[0].isdigit():
            base = f"v_{base}"
        name, count = base, 0
        while name in self._taken or name in _RESERVED:
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
    when unknown (a load, an unbounded variable, a division by something not constant)."""
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


class ExprPrinter:
    """Prints expressions of kernel ``kernel_name``; ``ranges`` bound the loop variables in
    scope, ``access(load)`` prints a buffer element (set by the statement emitter) and
    ``overrides`` replace whole sub-expressions (a vector lane's value)."""

    def __init__(self, kernel_name: str, names: Names,
                 ranges: Mapping[Var, tuple[int, int]] | None = None,
                 access: Callable[[Buffer, tuple[Expr, ...]], str] | None = None) -> None:
        self.kernel_name = kernel_name
        self.names = names
        self.ranges: Mapping[Var, tuple[int, int]] = ranges if ranges is not None else {}
        self.access = access or (lambda buffer, indices: (
            f"{names.buffer(buffer)}[{', '.join(self.expr(i) for i in indices)}]"))
        self.overrides: dict[Expr, str] = {}

    def fail(self, what: str, fix: str) -> CodegenError:
        return CodegenError(f"kernel {self.kernel_name}: the CUDA code generator cannot "
                            f"express {what}; {fix}")

    def expr(self, expr: Expr) -> str:
        """The C text of ``expr`` (its value in the compute type of its dtype)."""
        if expr in self.overrides:
            return self.overrides[expr]
        if expr.dtype not in SUPPORTED:
            raise self.fail(f"the dtype {expr.dtype} (in {expr})", "use float32, float16, "
                            "bfloat16, int8, uint8, int32 or bool")
        if isinstance(expr, Const):
            return literal(expr.value, expr.dtype)
        if isinstance(expr, Var):
            return self.names.var(expr)
        if isinstance(expr, BufferLoad):
            return load_value(self.access(expr.buffer, expr.indices), expr.buffer.dtype)
        if isinstance(expr, Binary):
            return self._binary(expr)
        if isinstance(expr, Unary):
            return self._unary(expr)
        if isinstance(expr, Compare):
            return f"({self.expr(expr.a)} {expr.op.value} {self.expr(expr.b)})"
        if isinstance(expr, Logical):
            return f"({self.expr(expr.a)} {expr.op.value} {self.expr(expr.b)})"
        if isinstance(expr, Not):
            return f"(!{self.expr(expr.x)})"
        if isinstance(expr, Select):
            return (f"({self.expr(expr.cond)} ? {self.expr(expr.true_value)} : "
                    f"{self.expr(expr.false_value)})")
        if isinstance(expr, Cast):
            return cast_value(self.expr(expr.x), expr.x.dtype, expr.to)
        if isinstance(expr, LaneReduce):
            raise self.fail(f"the lane reduction {expr} outside a vector loop",
                            "reduce the lanes of a vector loop's value inside that loop")
        raise self.fail(f"the expression {expr} ({type(expr).__name__})",
                        "lower the compute to Kernel IR first (tilecraft.lower.lower_compute)")

    def _binary(self, expr: Binary) -> str:
        a, b, dtype, op = self.expr(expr.a), self.expr(expr.b), expr.dtype, expr.op
        if op in (BinaryOp.MAX, BinaryOp.MIN):
            return f"tc_{op.value}({a}, {b})"
        if op in (BinaryOp.FLOORDIV, BinaryOp.MOD):
            text = self._floor_division(expr, a, b)
        elif op is BinaryOp.DIV and dtype.is_int:
            raise self.fail(f"'/' on integers ({expr})", "use // (floor division)")
        else:
            text = f"({a} {op.value} {b})"
        return wrap_integer(text, dtype) if dtype.is_int else text

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
        if op is UnaryOp.NEG:
            return wrap_integer(f"(-{x})", dtype) if dtype.is_int else f"(-{x})"
        if op is UnaryOp.ABS:
            return wrap_integer(f"tc_abs({x})", dtype) if dtype.is_int else f"fabsf({x})"
        if not dtype.is_float:
            raise self.fail(f"{op.value} of the {dtype} value {expr.x}", "cast it to float32")
        if op is UnaryOp.SIGMOID:
            return f"(1.0f / (1.0f + expf(-{x})))"
        return f"{_MATH[op]}({x})"
