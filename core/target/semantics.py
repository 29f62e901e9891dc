"""Intrinsic semantics in Einstein-like notation, parsed safely (Python's ``ast``, never
``eval``) into a te program (thesis Def. 3, Eq. 5.1).

The notation is one Python-syntax statement over the intrinsic's operands and loops:

- ``Dst[i1, i2] = expr`` writes ``expr`` at every point of the spatial loops;
- ``Dst[i1, i2] += expr`` accumulates: ``Dst_out = Dst_in + sum(expr over the reduce loops)``;
- ``Dst[i] = sum(expr)`` / ``prod(expr)`` / ``max(expr)`` / ``min(expr)`` reduces over the
  reduce loops without reading ``Dst``;
- ``expr`` uses ``+ - * / // %``, the integer shifts and xor ``<< >> ^`` (te's total shifts),
  comparisons (``0 <= i < 4`` chains), ``& | ~`` on conditions, and the functions
  ``cast(dtype, x)``, ``exp log sqrt tanh erf sigmoid abs``, ``max(a, b)``, ``min(a, b)``,
  ``select(cond, a, b)``, ``bitwise_and bitwise_or bitwise_not`` on integers (the packed
  operands of int4 intrinsics, say) — one way to write each thing, as in te.

>>> from tilecraft.te import AxisKind
>>> from tilecraft.dtypes import DType
>>> loops = [Loop("i", 4, AxisKind.SPATIAL), Loop("r", 8, AxisKind.REDUCE)]
>>> operands = [Operand("A", "src", DType.INT8, (4, 8)), Operand("C", "dst", DType.INT32, (4,))]
>>> program = build_program("C[i] += cast(int32, A[i, r])", loops, operands)
>>> [t.name for t in program.inputs], program.output.name
(['A', 'C_in'], 'C')
>>> print(program.compute.statement())
C_acc[i] = sum(int32(A[i, r]), axis=[r])
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tilecraft.dtypes import DType
from tilecraft.errors import IndexBoundsError, TilecraftError
from tilecraft.te import functions as tef
from tilecraft.te.bounds import interval
from tilecraft.te.expr import (
    INVERSE_HYPERBOLIC_UNARY,
    TRIGONOMETRIC_UNARY,
    AxisKind,
    BinaryOp,
    CompareOp,
    Expr,
    IterVar,
    LogicalOp,
    Not,
    UnaryOp,
    as_expr,
    binary,
    cast,
    compare,
    logical,
    select,
    unary,
)
from tilecraft.te.tensor import Tensor, compute, placeholder, reduce_axis

_UNARY_FUNCTIONS = {"exp": UnaryOp.EXP, "log": UnaryOp.LOG, "sqrt": UnaryOp.SQRT,
                    "tanh": UnaryOp.TANH, "erf": UnaryOp.ERF, "sigmoid": UnaryOp.SIGMOID,
                    "abs": UnaryOp.ABS, "floor": UnaryOp.FLOOR, "ceil": UnaryOp.CEIL,
                    "round": UnaryOp.ROUND,
                    **{op.value: op for op in TRIGONOMETRIC_UNARY | INVERSE_HYPERBOLIC_UNARY}}
_REDUCTIONS: dict[str, Callable[..., Expr]] = {"sum": tef.sum, "max": tef.max, "min": tef.min,
                                               "prod": tef.prod}
_BINARY_OPS = {ast.Add: BinaryOp.ADD, ast.Sub: BinaryOp.SUB, ast.Mult: BinaryOp.MUL,
               ast.Div: BinaryOp.DIV, ast.FloorDiv: BinaryOp.FLOORDIV, ast.Mod: BinaryOp.MOD,
               ast.LShift: BinaryOp.SHIFT_LEFT, ast.RShift: BinaryOp.SHIFT_RIGHT,
               ast.BitXor: BinaryOp.BITWISE_XOR}
#: integer bit operations written as functions (``&`` ``|`` ``~`` are logical on conditions)
_BITWISE_FUNCTIONS = {"bitwise_and": BinaryOp.BITWISE_AND, "bitwise_or": BinaryOp.BITWISE_OR}
_COMPARE_OPS = {ast.Lt: CompareOp.LT, ast.LtE: CompareOp.LE, ast.Gt: CompareOp.GT,
                ast.GtE: CompareOp.GE, ast.Eq: CompareOp.EQ, ast.NotEq: CompareOp.NE}
_DTYPE_NAMES = {dtype.value for dtype in DType if dtype is not DType.BOOL}
#: names an operand or loop may not take: they mean something else in the notation
RESERVED_NAMES = frozenset({*_UNARY_FUNCTIONS, *_REDUCTIONS, "cast", "select", *_DTYPE_NAMES,
                            *_BITWISE_FUNCTIONS, "bitwise_not", "True", "False", "None"})


@dataclass(frozen=True)
class Loop:
    """An intrinsic loop as the parser needs it."""

    name: str
    extent: int
    kind: AxisKind


@dataclass(frozen=True)
class Operand:
    """An intrinsic operand as the parser needs it; ``index`` (one string per dimension) is
    checked against the semantics when given."""

    name: str
    role: str
    dtype: DType
    shape: tuple[int, ...]
    index: tuple[str, ...] = ()


@dataclass(frozen=True)
class IntrinsicProgram:
    """The te program of an intrinsic's semantics.

    ``sources`` are placeholders of the source operands (declaration order); ``accumulator``
    is the destination's incoming value (``<Dst>_in``) when the semantics accumulates;
    ``compute`` is the tensor whose spatial axes and reduce axes are the intrinsic's loops
    (``loops`` maps each loop name to its :class:`~tilecraft.te.IterVar`); ``output`` is the
    destination's value after the intrinsic (named like the destination operand).
    """

    sources: tuple[Tensor, ...]
    accumulator: Tensor | None
    compute: Tensor
    output: Tensor
    loops: Mapping[str, IterVar] = field(default_factory=dict)

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        """Every placeholder: the sources, then the accumulator (if any)."""
        return self.sources + ((self.accumulator,) if self.accumulator is not None else ())

    def graph(self) -> Any:
        """The program as a :class:`~tilecraft.graph.Graph`."""
        from tilecraft.graph import Graph

        return Graph.from_outputs([self.output])


class SemanticsError(ValueError):
    """The semantics text is invalid; pydantic reports it under the ``semantics`` field."""


def _normalise(index: str) -> str:
    try:
        return ast.unparse(ast.parse(index.strip(), mode="eval").body)
    except SyntaxError as err:
        raise SemanticsError(f"index expression {index!r} is not valid: {err.msg}") from None


@dataclass
class _Statement:
    dst: str
    lhs: tuple[str, ...]
    accumulate: bool
    reduction: str | None
    rhs: ast.expr


def _parse_statement(text: str) -> _Statement:
    try:
        module = ast.parse(text.strip(), mode="exec")
    except SyntaxError as err:
        raise SemanticsError(f"{text!r} does not parse: {err.msg} at column {err.offset}; "
                             "write one statement like 'Dst[i] += Src[i, r]'") from None
    if len(module.body) != 1:
        raise SemanticsError(f"{text!r} must be exactly one statement, got {len(module.body)}")
    stmt = module.body[0]
    if isinstance(stmt, ast.AugAssign):
        if not isinstance(stmt.op, ast.Add):
            raise SemanticsError(f"{text!r}: only '+=' (accumulate a sum) is an update "
                                 f"operator, not '{ast.unparse(stmt)}'")
        target, accumulate, rhs = stmt.target, True, stmt.value
    elif isinstance(stmt, ast.Assign):
        if len(stmt.targets) != 1:
            raise SemanticsError(f"{text!r}: assign one destination only")
        target, accumulate, rhs = stmt.targets[0], False, stmt.value
    else:
        raise SemanticsError(f"{text!r} must be 'Dst[...] = expr' or 'Dst[...] += expr'")
    if not (isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name)):
        raise SemanticsError(f"{text!r}: the left-hand side must index the destination "
                             "operand, like Dst[i1, i2]")
    indices = target.slice.elts if isinstance(target.slice, ast.Tuple) else [target.slice]
    lhs = []
    for index in indices:
        if not isinstance(index, ast.Name):
            raise SemanticsError(f"{text!r}: destination index {ast.unparse(index)!r} must be "
                                 "a plain spatial loop name")
        lhs.append(index.id)
    reduction = None
    if isinstance(rhs, ast.Call) and isinstance(rhs.func, ast.Name) \
            and rhs.func.id in _REDUCTIONS and len(rhs.args) == 1 and not rhs.keywords:
        if accumulate:
            raise SemanticsError(f"{text!r}: '+=' already sums over the reduce loops; drop "
                                 f"the {rhs.func.id}(...) around the right-hand side")
        reduction, rhs = rhs.func.id, rhs.args[0]
    return _Statement(target.value.id, tuple(lhs), accumulate, reduction, rhs)


class _Converter:
    """ast expression -> te expression, over the loops and source tensors in scope."""

    def __init__(self, text: str, variables: Mapping[str, IterVar],
                 tensors: Mapping[str, Tensor], indices: Mapping[str, tuple[str, ...]]):
        self.text = text
        self.variables = variables
        self.tensors = tensors
        self.indices = indices
        self.used_operands: set[str] = set()
        self.used_loops: set[str] = set()
        self.load_indices: dict[str, tuple[Expr, ...]] = {}

    def fail(self, node: ast.AST, message: str) -> SemanticsError:
        return SemanticsError(f"{self.text!r}, at {ast.unparse(node)!r}: {message}")

    def convert(self, node: ast.expr) -> Any:
        try:
            return self._convert(node)
        except TilecraftError as err:
            raise self.fail(node, str(err)) from None

    def _convert(self, node: ast.expr) -> Any:
        if isinstance(node, ast.Constant):
            if isinstance(node.value, (bool, int, float)):
                return node.value
            raise self.fail(node, "only numbers and True/False are constants")
        if isinstance(node, ast.Name):
            return self._name(node)
        if isinstance(node, ast.Subscript):
            return self._load(node)
        if isinstance(node, ast.BinOp):
            left, right = self.convert(node.left), self.convert(node.right)
            if isinstance(node.op, ast.BitAnd):
                return logical(LogicalOp.AND, left, right)
            if isinstance(node.op, ast.BitOr):
                return logical(LogicalOp.OR, left, right)
            op = _BINARY_OPS.get(type(node.op))
            if op is None:
                raise self.fail(node, f"operator {type(node.op).__name__} is not supported; "
                                      "use + - * / // % << >> ^ or a function")
            return binary(op, left, right)
        if isinstance(node, ast.UnaryOp):
            operand = self.convert(node.operand)
            if isinstance(node.op, ast.USub):
                return -operand if not isinstance(operand, Expr) else unary(UnaryOp.NEG, operand)
            if isinstance(node.op, ast.UAdd):
                return operand
            if isinstance(node.op, ast.Not):
                raise self.fail(node, "write ~cond, not 'not cond'")
            return Not(as_expr(operand))  # ~
        if isinstance(node, ast.BoolOp):
            word = "&" if isinstance(node.op, ast.And) else "|"
            raise self.fail(node, f"write conditions with & | ~ as in te, not and/or/not "
                                  f"(here: {word})")
        if isinstance(node, ast.Compare):
            result, left = None, self.convert(node.left)
            for op_node, right_node in zip(node.ops, node.comparators):
                op = _COMPARE_OPS.get(type(op_node))
                if op is None:
                    raise self.fail(node, f"comparison {type(op_node).__name__} is not "
                                          "supported")
                right = self.convert(right_node)
                term = compare(op, left, right)
                result = term if result is None else logical(LogicalOp.AND, result, term)
                left = right
            return result
        if isinstance(node, ast.IfExp):
            raise self.fail(node, "write select(cond, a, b), not 'a if cond else b'")
        if isinstance(node, ast.Call):
            return self._call(node)
        raise self.fail(node, f"{type(node).__name__} is not part of the notation")

    def _name(self, node: ast.Name) -> Expr:
        if node.id in self.variables:
            self.used_loops.add(node.id)
            return self.variables[node.id]
        if node.id in self.tensors:
            raise self.fail(node, f"operand {node.id} must be indexed, like {node.id}[...]")
        if node.id in _DTYPE_NAMES:
            raise self.fail(node, f"the dtype {node.id} is only allowed as cast's first argument")
        declared = ", ".join([*self.variables, *self.tensors])
        raise self.fail(node, f"{node.id} is neither a declared loop nor an operand "
                              f"(declared: {declared})")

    def _load(self, node: ast.Subscript) -> Expr:
        if not isinstance(node.value, ast.Name) or node.value.id not in self.tensors:
            raise self.fail(node, f"only source operands can be indexed (sources: "
                                  f"{', '.join(self.tensors) or 'none'})")
        name = node.value.id
        parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        declared = self.indices.get(name, ())
        written = tuple(ast.unparse(part) for part in parts)
        if declared and written != tuple(_normalise(index) for index in declared):
            raise self.fail(node, f"operand {name} is declared with index "
                                  f"[{', '.join(declared)}] but read as [{', '.join(written)}]; "
                                  "make them the same")
        self.used_operands.add(name)
        load = self.tensors[name][tuple(self.convert(part) for part in parts)]
        self.load_indices.setdefault(name, load.indices)
        return load

    def _call(self, node: ast.Call) -> Expr:
        if not isinstance(node.func, ast.Name):
            raise self.fail(node, "only plain function names can be called")
        name, args = node.func.id, node.args
        if node.keywords:
            raise self.fail(node, "functions take positional arguments only")

        def arity(count: int) -> None:
            if len(args) != count:
                raise self.fail(node, f"{name} takes {count} argument(s), got {len(args)}")

        if name == "cast":
            arity(2)
            dtype = args[0]
            dtype_name = dtype.id if isinstance(dtype, ast.Name) else (
                dtype.value if isinstance(dtype, ast.Constant) else None)
            if dtype_name not in _DTYPE_NAMES:
                raise self.fail(node, f"cast's first argument must be a dtype "
                                      f"({', '.join(sorted(_DTYPE_NAMES))})")
            return cast(DType(dtype_name), self.convert(args[1]))
        if name in _UNARY_FUNCTIONS:
            arity(1)
            return unary(_UNARY_FUNCTIONS[name], self.convert(args[0]))
        if name in _BITWISE_FUNCTIONS:
            arity(2)
            return binary(_BITWISE_FUNCTIONS[name], self.convert(args[0]),
                          self.convert(args[1]))
        if name == "bitwise_not":
            arity(1)
            return unary(UnaryOp.BITWISE_NOT, self.convert(args[0]))
        if name in ("max", "min") and len(args) == 2:
            op = BinaryOp.MAX if name == "max" else BinaryOp.MIN
            return binary(op, self.convert(args[0]), self.convert(args[1]))
        if name in _REDUCTIONS:
            raise self.fail(node, f"a reduction {name}(x) must be the whole right-hand side of "
                                  "'Dst[...] = ...'")
        if name == "select":
            arity(3)
            return select(*(self.convert(arg) for arg in args))
        raise self.fail(node, f"unknown function {name}; allowed: cast, select, max, min, "
                              f"{', '.join(_UNARY_FUNCTIONS)}, {', '.join(_BITWISE_FUNCTIONS)}, "
                              "bitwise_not")


def _named_function(names: Sequence[str], body: Callable[..., Any]) -> Callable[..., Any]:
    """``body`` taking ``len(names)`` positional arguments, with parameter names ``names`` (so
    te.compute names its axes after the intrinsic's loops)."""

    def function(*args: Any) -> Any:
        return body(*args)

    function.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(name, inspect.Parameter.POSITIONAL_ONLY) for name in names])
    return function


def _check_covering_shapes(text: str, operands: Mapping[str, Operand],
                           load_indices: Mapping[str, tuple[Expr, ...]]) -> None:
    """Each source dimension must be exactly as large as its index reaches (in bounds is
    checked by te): an intrinsic reads whole operands."""
    for name, indices in load_indices.items():
        shape = operands[name].shape
        for position, index in enumerate(indices):
            reach = interval(index)
            if reach is not None and reach[1] + 1 < shape[position]:
                fitting = list(shape)
                fitting[position] = reach[1] + 1
                raise SemanticsError(
                    f"{text!r}: dimension {position} of operand {name} has extent "
                    f"{shape[position]}, but its index {index} only reaches {reach[1]}; "
                    f"declare the shape {fitting}")


def build_program(text: str, loops: Sequence[Loop],
                  operands: Sequence[Operand]) -> IntrinsicProgram:
    """Parse ``text`` over ``loops`` and ``operands`` into an :class:`IntrinsicProgram`;
    a :class:`SemanticsError` names what is wrong."""
    statement = _parse_statement(text)
    by_name = {operand.name: operand for operand in operands}
    destinations = [operand for operand in operands if operand.role == "dst"]
    if len(destinations) != 1:
        raise SemanticsError(f"an intrinsic has exactly one operand of role dst, got "
                             f"{len(destinations)}")
    dst = destinations[0]
    if statement.dst != dst.name:
        raise SemanticsError(f"{text!r} writes {statement.dst}, but the dst operand is "
                             f"{dst.name}")
    generated = {f"{dst.name}_in", f"{dst.name}_acc"} & set(by_name)
    if generated:
        raise SemanticsError(f"operand name {sorted(generated)[0]} is reserved for the "
                             f"destination's incoming value or partial sum; rename it")
    loop_by_name = {loop.name: loop for loop in loops}
    spatial = [loop.name for loop in loops if loop.kind is AxisKind.SPATIAL]
    reduce_loops = [loop for loop in loops if loop.kind is AxisKind.REDUCE]
    for name in statement.lhs:
        if name not in loop_by_name or loop_by_name[name].kind is not AxisKind.SPATIAL:
            raise SemanticsError(f"{text!r}: destination index {name} is not a spatial loop "
                                 f"(spatial loops: {', '.join(spatial) or 'none'})")
    if len(set(statement.lhs)) != len(statement.lhs) or set(statement.lhs) != set(spatial):
        raise SemanticsError(f"{text!r}: the destination must be indexed by every spatial "
                             f"loop exactly once ({', '.join(spatial)})")
    if dst.index and tuple(statement.lhs) != tuple(_normalise(i) for i in dst.index):
        raise SemanticsError(f"operand {dst.name} is declared with index "
                             f"[{', '.join(dst.index)}] but written as "
                             f"[{', '.join(statement.lhs)}]; make them the same")
    extents = tuple(loop_by_name[name].extent for name in statement.lhs)
    if extents != tuple(dst.shape):
        raise SemanticsError(f"destination {dst.name} has shape {tuple(dst.shape)} but its "
                             f"loops {', '.join(statement.lhs)} have extents {extents}")
    if reduce_loops and not statement.accumulate and statement.reduction is None:
        raise SemanticsError(f"{text!r} declares reduce loops "
                             f"({', '.join(loop.name for loop in reduce_loops)}) but does not "
                             "reduce; write 'Dst[...] += ...' (a sum onto Dst) or "
                             "'Dst[...] = sum(...)' / prod(...) / max(...) / min(...)")
    if statement.reduction is not None and not reduce_loops:
        raise SemanticsError(f"{text!r} reduces with {statement.reduction}(...) but no loop "
                             "is declared with kind reduce")

    sources = tuple(placeholder(operand.shape, operand.dtype, name=operand.name)
                    for operand in operands if operand.role != "dst")
    tensors = {tensor.name: tensor for tensor in sources}
    indices = {operand.name: tuple(operand.index) for operand in operands}
    reduce_axes = {loop.name: reduce_axis(loop.extent, loop.name) for loop in reduce_loops}
    converter: _Converter | None = None

    def body(*axes: IterVar) -> Expr:
        nonlocal converter
        variables = dict(zip(statement.lhs, axes)) | reduce_axes
        converter = _Converter(text, variables, tensors, indices)
        value = as_expr(converter.convert(statement.rhs))
        if value.dtype != dst.dtype:
            raise SemanticsError(f"{text!r} computes {value.dtype} values but {dst.name} is "
                                 f"{dst.dtype}; cast with cast({dst.dtype}, ...)")
        if reduce_axes:
            reducer = _REDUCTIONS[statement.reduction or "sum"]
            if statement.reduction in ("max", "min"):
                return reducer(value, axis=tuple(reduce_axes.values()))
            return reducer(value, tuple(reduce_axes.values()))
        return value

    def build(name: str, function: Callable[..., Any]) -> Tensor:
        try:
            return compute(extents, _named_function(statement.lhs, function), name=name)
        except SemanticsError:
            raise
        except IndexBoundsError as err:
            problem = str(err).split("; guard")[0].removeprefix(f"compute {name}: ")
            raise SemanticsError(f"{text!r}: an operand's shape does not match the loop "
                                 f"extents: {problem}; make the shape cover the index") from None
        except TilecraftError as err:
            raise SemanticsError(f"{text!r}: {err}") from None

    accumulator = None
    if statement.accumulate:
        accumulator = placeholder(dst.shape, dst.dtype, name=f"{dst.name}_in")
        if reduce_axes:
            partial = build(f"{dst.name}_acc", body)
            main = partial
            output = build(dst.name, lambda *ax: accumulator[ax] + partial[ax])
        else:
            main = output = build(dst.name, lambda *ax: accumulator[ax] + body(*ax))
    else:
        main = output = build(dst.name, body)
    assert converter is not None
    _check_covering_shapes(text, by_name, converter.load_indices)
    unused = [name for name in tensors if name not in converter.used_operands]
    if unused:
        raise SemanticsError(f"operand {unused[0]} is declared but {text!r} does not read it")
    unused_loops = [name for name in reduce_axes if name not in converter.used_loops]
    if unused_loops:
        raise SemanticsError(f"reduce loop {unused_loops[0]} is declared but {text!r} does not "
                             "use it")
    loop_vars = dict(zip(statement.lhs, main.axes)) | reduce_axes
    ordered = {loop.name: loop_vars[loop.name] for loop in loops}
    return IntrinsicProgram(sources, accumulator, main, output, ordered)
