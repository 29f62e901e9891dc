"""What a piece of Kernel IR needs from outside itself: the buffers, streams and loop variables
it uses but does not declare. A dataflow stage becomes its own C++ function (HLS wants each
stage a function call), and these are its parameters.

>>> from tilecraft.dtypes import DType
>>> from tilecraft.kernel_ir import Allocate, Buffer, BufferLoad, For, LoopKind, Store
>>> from tilecraft.te import Var, const
>>> A, T = Buffer("A", (4, 8), DType.FLOAT32), Buffer("T", (8,), DType.FLOAT32, level="BRAM")
>>> i, j = Var("i"), Var("j")
>>> body = Allocate(T, For(j, const(8), LoopKind.SERIAL,
...                        Store(T, (j,), BufferLoad(A, (i, j)))))
>>> used = free_names(body)
>>> [b.name for b in used.buffers], [v.name for v in used.variables], used.streams
(['A'], ['i'], [])
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tilecraft.kernel_ir.nodes import (
    Allocate,
    Buffer,
    BufferLoad,
    For,
    Region,
    Stmt,
    Stream,
    StreamPop,
    StreamPush,
    walk_expr,
)
from tilecraft.kernel_ir.visitor import stmt_children
from tilecraft.te.expr import Expr, Var

__all__ = ["FreeNames", "free_names"]


@dataclass
class FreeNames:
    """Buffers, streams and variables used but not declared, in order of first use."""

    buffers: list[Buffer] = field(default_factory=list)
    streams: list[Stream] = field(default_factory=list)
    variables: list[Var] = field(default_factory=list)
    #: buffers some statement writes (stores, pops, copy destinations, intrinsic outputs)
    written: list[Buffer] = field(default_factory=list)

    def _add(self, items: list, item: object) -> None:
        if not any(existing is item for existing in items):
            items.append(item)


def _expressions(value: object) -> list[Expr]:
    if isinstance(value, tuple):
        return [e for item in value for e in _expressions(item)]
    if isinstance(value, Region):
        return [BufferLoad(value.buffer, value.base)]
    return [value] if isinstance(value, Expr) else []


def free_names(stmt: Stmt) -> FreeNames:
    """What ``stmt`` uses from outside itself (module docstring)."""
    found = FreeNames()
    declared_buffers: set[int] = set()
    declared_vars: set[Var] = set()
    _collect(stmt, found, declared_buffers, declared_vars)
    return found


def _collect(stmt: Stmt, found: FreeNames, buffers: set[int], variables: set[Var]) -> None:
    if isinstance(stmt, Allocate):
        buffers = buffers | {id(stmt.buffer)}
    if isinstance(stmt, For):
        _expr_names(stmt.extent, found, buffers, variables)
        variables = variables | {stmt.var}
    if isinstance(stmt, (StreamPush, StreamPop)):
        found._add(found.streams, stmt.stream)
    written = _written_buffer(stmt)
    for buffer in written:
        if id(buffer) not in buffers:
            found._add(found.buffers, buffer)
            found._add(found.written, buffer)
    for name in type(stmt).expr_fields:
        if isinstance(stmt, For) and name == "extent":
            continue
        for expr in _expressions(getattr(stmt, name)):
            _expr_names(expr, found, buffers, variables)
    for child in stmt_children(stmt):
        _collect(child, found, buffers, variables)


def _written_buffer(stmt: Stmt) -> list[Buffer]:
    from tilecraft.kernel_ir.nodes import Copy, IntrinsicCall, Store

    if isinstance(stmt, (Store, StreamPop)):
        return [stmt.buffer]
    if isinstance(stmt, Copy):
        return [stmt.dst.buffer]
    if isinstance(stmt, IntrinsicCall) and stmt.operands:
        return [stmt.operands[-1].buffer]
    return []


def _expr_names(expr: Expr, found: FreeNames, buffers: set[int], variables: set[Var]) -> None:
    for node in walk_expr(expr):
        if isinstance(node, Var) and node not in variables:
            if node not in found.variables:
                found.variables.append(node)
        elif isinstance(node, BufferLoad) and id(node.buffer) not in buffers:
            found._add(found.buffers, node.buffer)
