"""Indented text of Kernel IR, for reports and dumps.

>>> from tilecraft.kernel_ir.nodes import Barrier
>>> print(stmt_to_str(Barrier()))
barrier(block)
"""

from __future__ import annotations

from tilecraft.kernel_ir.nodes import (
    Allocate,
    Barrier,
    Copy,
    For,
    IfThenElse,
    IntrinsicCall,
    Kernel,
    LoopKind,
    MicroKernelCall,
    Region,
    Seq,
    Stmt,
    Store,
    StreamPop,
    StreamPush,
)
from tilecraft.te.expr import Expr
from tilecraft.te.printer import expr_to_str


def _expr(expr: Expr) -> str:
    return expr_to_str(expr, top=True)


def _region(region: Region) -> str:
    base = ", ".join(_expr(b) for b in region.base)
    extents = "x".join(str(e) for e in region.extents)
    steps = "" if all(s == 1 for s in region.steps) else f" step {list(region.steps)}"
    return f"{region.buffer.name}[{base} : {extents}{steps}]"


def _loop_header(loop: For) -> str:
    extra = ""
    if loop.kind is LoopKind.VECTOR or (loop.kind is LoopKind.UNROLLED and loop.lanes):
        extra = f", lanes={loop.lanes}"
    elif loop.kind is LoopKind.BOUND:
        extra = f", axis={loop.axis}"
    elif loop.kind is LoopKind.PIPELINED:
        extra = f", II={loop.initiation_interval}"
    return f"for {loop.var.name} in {loop.kind.value}({_expr(loop.extent)}{extra}):"


def _lines(stmt: Stmt, depth: int) -> list[str]:
    pad = "  " * depth
    if isinstance(stmt, Seq):
        return [line for s in stmt.stmts for line in _lines(s, depth)]
    if isinstance(stmt, For):
        return [pad + _loop_header(stmt)] + _lines(stmt.body, depth + 1)
    if isinstance(stmt, Store):
        target = f"{stmt.buffer.name}[{', '.join(_expr(i) for i in stmt.indices)}]"
        if stmt.accumulate is None:
            return [f"{pad}{target} = {_expr(stmt.value)}"]
        return [f"{pad}{target} {stmt.accumulate.value}= {_expr(stmt.value)}"]
    if isinstance(stmt, Allocate):
        b = stmt.buffer
        head = f"{pad}alloc {b.name}: {b.dtype.value}{list(b.shape)} in {b.level}"
        if b.layout != "row_major":
            head += f" layout {b.layout}"
        return [head] + _lines(stmt.body, depth)
    if isinstance(stmt, IfThenElse):
        lines = [f"{pad}if {_expr(stmt.cond)}:"] + _lines(stmt.then_body, depth + 1)
        if stmt.else_body is not None:
            lines += [f"{pad}else:"] + _lines(stmt.else_body, depth + 1)
        return lines
    if isinstance(stmt, Copy):
        return [f"{pad}copy {_region(stmt.dst)} <- {_region(stmt.src)}"]
    if isinstance(stmt, IntrinsicCall):
        args = ", ".join(_region(r) for r in stmt.operands)
        return [f"{pad}intrinsic {stmt.intrinsic}({args})"]
    if isinstance(stmt, MicroKernelCall):
        args = ", ".join(_region(r) for r in stmt.operands)
        return [f"{pad}micro_kernel {stmt.micro_kernel}({args})"]
    if isinstance(stmt, Barrier):
        return [f"{pad}barrier({stmt.scope})"]
    if isinstance(stmt, StreamPush):
        return [f"{pad}push {stmt.stream.name} <- {_expr(stmt.value)}"]
    if isinstance(stmt, StreamPop):
        idx = ", ".join(_expr(i) for i in stmt.indices)
        return [f"{pad}{stmt.buffer.name}[{idx}] <- pop {stmt.stream.name}"]
    return [f"{pad}{stmt!r}"]


def stmt_to_str(stmt: Stmt) -> str:
    return "\n".join(_lines(stmt, 0))


def kernel_to_str(kernel: Kernel) -> str:
    params = ", ".join(f"{b.name}: {b.dtype.value}{list(b.shape)}" for b in kernel.params)
    head = f"kernel {kernel.name}({params}) -> ({', '.join(kernel.outputs)}):"
    return "\n".join([head] + _lines(kernel.body, 1))


__all__ = ["stmt_to_str", "kernel_to_str"]
