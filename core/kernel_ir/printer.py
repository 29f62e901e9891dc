"""Indented text of Kernel IR, for reports and dumps.

>>> from tilecraft.kernel_ir.nodes import Barrier
>>> print(stmt_to_str(Barrier()))
barrier(block)
"""

from __future__ import annotations

from tilecraft.kernel_ir.concurrency import (
    AsyncCopy,
    AtomicUpdate,
    CommitGroup,
    Dataflow,
    Pipeline,
    SubgroupReduce,
    WaitGroup,
)
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
from tilecraft.kernel_ir.visitor import KernelVisitor
from tilecraft.te.expr import Expr
from tilecraft.te.printer import expr_to_str


def _expr(expr: Expr) -> str:
    return expr_to_str(expr, top=True)


def _region(region: Region) -> str:
    base = ", ".join(_expr(b) for b in region.base)
    extents = "x".join(str(e) for e in region.extents)
    steps = "" if all(s == 1 for s in region.steps) else f" step {list(region.steps)}"
    return f"{region.buffer.name}[{base} : {extents}{steps}]"


def _target(buffer_name: str, indices: tuple[Expr, ...]) -> str:
    return f"{buffer_name}[{', '.join(_expr(i) for i in indices)}]"


def _loop_header(loop: For) -> str:
    extra = ""
    if loop.kind is LoopKind.VECTOR or (loop.kind is LoopKind.UNROLLED and loop.lanes):
        extra = f", lanes={loop.lanes}"
    elif loop.kind is LoopKind.BOUND:
        extra = f", axis={loop.axis}"
    elif loop.kind is LoopKind.PIPELINED:
        extra = f", II={loop.initiation_interval}"
    return f"for {loop.var.name} in {loop.kind.value}({_expr(loop.extent)}{extra}):"


class _Printer(KernelVisitor[list[str]]):
    """The lines of a statement at indentation ``depth``."""

    def generic_visit(self, stmt: Stmt, depth: int) -> list[str]:
        return [f"{'  ' * depth}{stmt!r}"]

    def visit_Seq(self, stmt: Seq, depth: int) -> list[str]:
        return [line for s in stmt.stmts for line in self.visit(s, depth)]

    def visit_For(self, stmt: For, depth: int) -> list[str]:
        return ["  " * depth + _loop_header(stmt)] + self.visit(stmt.body, depth + 1)

    def visit_Store(self, stmt: Store, depth: int) -> list[str]:
        target = _target(stmt.buffer.name, stmt.indices)
        op = "" if stmt.accumulate is None else stmt.accumulate.value
        return [f"{'  ' * depth}{target} {op}= {_expr(stmt.value)}"]

    def visit_Allocate(self, stmt: Allocate, depth: int) -> list[str]:
        b = stmt.buffer
        head = f"{'  ' * depth}alloc {b.name}: {b.element_type}{list(b.shape)} in {b.level}"
        if b.layout != "row_major":
            head += f" layout {b.layout}"
        if not stmt.zeroed:
            head += " (not zeroed)"
        return [head] + self.visit(stmt.body, depth)

    def visit_IfThenElse(self, stmt: IfThenElse, depth: int) -> list[str]:
        pad = "  " * depth
        lines = [f"{pad}if {_expr(stmt.cond)}:"] + self.visit(stmt.then_body, depth + 1)
        if stmt.else_body is not None:
            lines += [f"{pad}else:"] + self.visit(stmt.else_body, depth + 1)
        return lines

    def visit_Copy(self, stmt: Copy, depth: int) -> list[str]:
        return [f"{'  ' * depth}copy {_region(stmt.dst)} <- {_region(stmt.src)}"]

    def visit_IntrinsicCall(self, stmt: IntrinsicCall, depth: int) -> list[str]:
        args = ", ".join(_region(r) for r in stmt.operands)
        return [f"{'  ' * depth}intrinsic {stmt.intrinsic}({args})"]

    def visit_MicroKernelCall(self, stmt: MicroKernelCall, depth: int) -> list[str]:
        args = ", ".join(_region(r) for r in stmt.operands)
        return [f"{'  ' * depth}micro_kernel {stmt.micro_kernel}({args})"]

    def visit_Barrier(self, stmt: Barrier, depth: int) -> list[str]:
        return [f"{'  ' * depth}barrier({stmt.scope})"]

    def visit_StreamPush(self, stmt: StreamPush, depth: int) -> list[str]:
        return [f"{'  ' * depth}push {stmt.stream.name} <- {_expr(stmt.value)}"]

    def visit_StreamPop(self, stmt: StreamPop, depth: int) -> list[str]:
        return [f"{'  ' * depth}{_target(stmt.buffer.name, stmt.indices)} <- pop "
                f"{stmt.stream.name}"]

    def visit_AsyncCopy(self, stmt: AsyncCopy, depth: int) -> list[str]:
        return [f"{'  ' * depth}async_copy {_region(stmt.dst)} <- {_region(stmt.src)}"]

    def visit_CommitGroup(self, stmt: CommitGroup, depth: int) -> list[str]:
        return [f"{'  ' * depth}commit_group"]

    def visit_WaitGroup(self, stmt: WaitGroup, depth: int) -> list[str]:
        return [f"{'  ' * depth}wait_group({stmt.pending})"]

    def visit_Pipeline(self, stmt: Pipeline, depth: int) -> list[str]:
        pad = "  " * depth
        rotating = ", ".join(b.name for b in stmt.buffers)
        lines = [f"{pad}pipeline {stmt.var.name} in range({_expr(stmt.extent)}), depth="
                 f"{stmt.depth}" + (f" rotating {rotating}" if rotating else "") + ":"]
        for number, stage in enumerate(stmt.stages):
            lines += [f"{pad}  stage {number}:"] + self.visit(stage, depth + 2)
        return lines

    def visit_Dataflow(self, stmt: Dataflow, depth: int) -> list[str]:
        pad = "  " * depth
        streams = ", ".join(f"{s.name}: {s.dtype.value} depth {s.depth}" for s in stmt.streams)
        lines = [f"{pad}dataflow" + (f" streams {streams}" if streams else "") + ":"]
        for number, stage in enumerate(stmt.stages):
            lines += [f"{pad}  stage {number}:"] + self.visit(stage, depth + 2)
        return lines

    def visit_AtomicUpdate(self, stmt: AtomicUpdate, depth: int) -> list[str]:
        return [f"{'  ' * depth}atomic {_target(stmt.buffer.name, stmt.indices)} "
                f"{stmt.op.value}= {_expr(stmt.value)}"]

    def visit_SubgroupReduce(self, stmt: SubgroupReduce, depth: int) -> list[str]:
        return [f"{'  ' * depth}{_target(stmt.buffer.name, stmt.indices)} = subgroup_"
                f"{stmt.op.value}({_expr(stmt.value)}, lane={stmt.lane.name}, "
                f"width={stmt.width})"]


class _HeadPrinter(_Printer):
    """Renders only what stays at the outermost indentation: the first line is that of
    :class:`_Printer`, without rendering the loop bodies below it."""

    def visit(self, stmt: Stmt, depth: int) -> list[str]:  # type: ignore[override]
        return [] if depth > 0 else super().visit(stmt, depth)


_PRINTER = _Printer()
_HEAD_PRINTER = _HeadPrinter()


def stmt_to_str(stmt: Stmt) -> str:
    return "\n".join(_PRINTER.visit(stmt, 0))


def stmt_head(stmt: Stmt) -> str:
    """The first line of :func:`stmt_to_str` (cheap for a large loop nest: error messages).

    >>> from tilecraft.dtypes import DType
    >>> from tilecraft.kernel_ir.nodes import Buffer, For, LoopKind, Store
    >>> from tilecraft.te import Var, const
    >>> i = Var("i")
    >>> stmt_head(For(i, const(4), LoopKind.SERIAL, Store(Buffer("A", (4,), DType.INT32),
    ...                                                   (i,), i)))
    'for i in serial(4):'
    """
    lines = _HEAD_PRINTER.visit(stmt, 0)
    return lines[0].strip() if lines else ""


def kernel_to_str(kernel: Kernel) -> str:
    params = ", ".join(f"{b.name}: {b.element_type}{list(b.shape)}" for b in kernel.params)
    head = f"kernel {kernel.name}({params}) -> ({', '.join(kernel.outputs)}):"
    return "\n".join([head] + _PRINTER.visit(kernel.body, 1))


__all__ = ["kernel_to_str", "stmt_head", "stmt_to_str"]
