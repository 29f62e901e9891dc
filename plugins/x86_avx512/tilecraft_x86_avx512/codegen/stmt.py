"""Kernel IR statements to LLVM IR: loops, stores, allocations, conditionals, copies.

- SERIAL loops are counted i64 loops; UNROLLED loops with a constant extent up to the unroll
  limit become straight-line copies with the variable bound to each constant (so register
  tiles get constant indices), longer ones a loop with ``llvm.loop.unroll`` metadata; VECTOR
  loops are handled by :mod:`.vector`; the kernel's PARALLEL loop runs ``[begin, end)``.
- Allocated buffers live on the stack (an entry-block ``alloca``, so one per call and thread)
  or, above the stack limit, in memory malloc'ed at entry and freed at exit. They are zeroed
  where the Allocate is, so kernels reading before writing are still deterministic.
- A Copy becomes the equivalent loop nest of element stores (vectorised on its last axis).
"""

from __future__ import annotations

from collections.abc import Callable

from tilecraft.kernel_ir.nodes import (
    Allocate,
    BufferLoad,
    Copy,
    For,
    IfThenElse,
    IntrinsicCall,
    LoopKind,
    MicroKernelCall,
    Seq,
    Stmt,
    Store,
)
from tilecraft.kernel_ir.visitor import KernelVisitor
from tilecraft.te.expr import Cast, Expr, Var, const
from tilecraft_x86_avx512.codegen.analysis import const_int, flat_coefficient
from tilecraft_x86_avx512.codegen.builder import Value, index_const
from tilecraft_x86_avx512.codegen.context import EmitContext
from tilecraft_x86_avx512.codegen.expr import ExprEmitter
from tilecraft_x86_avx512.codegen.intrinsic import emit_intrinsic_call
from tilecraft_x86_avx512.codegen.microkernel import emit_micro_kernel_call
from tilecraft_x86_avx512.codegen.types import storage_type


class StmtEmitter(KernelVisitor[None]):
    """Emits one statement with ``emit`` (the Kernel IR visitor's dispatch)."""

    def __init__(self, ctx: EmitContext) -> None:
        from tilecraft_x86_avx512.codegen.vector import VectorLoopEmitter

        self.ctx = ctx
        self.fb = ctx.fb
        self.exprs = ExprEmitter(ctx)
        self.vector_loops = VectorLoopEmitter(self)

    def emit(self, stmt: Stmt) -> None:
        self.visit(stmt)

    def generic_visit(self, stmt: Stmt) -> None:
        raise self.ctx.error(f"cannot generate the statement {type(stmt).__name__}")

    def visit_Seq(self, stmt: Seq) -> None:
        for child in stmt.stmts:
            self.emit(child)

    def visit_For(self, stmt: For) -> None:
        self.loop(stmt)

    def visit_Store(self, stmt: Store) -> None:
        self.store(stmt)

    def visit_Allocate(self, stmt: Allocate) -> None:
        self.open_allocation(stmt)
        self.emit(stmt.body)

    def visit_IfThenElse(self, stmt: IfThenElse) -> None:
        self.if_then_else(stmt)

    def visit_Copy(self, stmt: Copy) -> None:
        self.copy(stmt)

    def visit_MicroKernelCall(self, stmt: MicroKernelCall) -> None:
        emit_micro_kernel_call(self, stmt)

    def visit_IntrinsicCall(self, stmt: IntrinsicCall) -> None:
        emit_intrinsic_call(self, stmt)

    # loops -----------------------------------------------------------------------------------
    def loop(self, loop: For) -> None:
        if loop.kind is LoopKind.VECTOR:
            self.vector_loops.emit(loop)
        elif loop.kind is LoopKind.UNROLLED:
            self.unrolled_loop(loop)
        elif loop.kind in (LoopKind.SERIAL, LoopKind.PARALLEL):
            self.serial_loop(loop)
        else:
            raise self.ctx.error(f"cannot generate a {loop.kind.value} loop")

    def serial_loop(self, loop: For, loop_md: str | None = None) -> None:
        extent = self.uniform_index(loop.extent, f"the extent of the loop over {loop.var.name}")
        self.counted_loop(loop, index_const(0), extent, loop_md)

    def counted_loop(self, loop: For, start: Value, end: Value, loop_md: str | None) -> None:
        def body(iv: Value) -> None:
            with self.ctx.bind(loop.var, iv):
                self.emit(loop.body)

        self.fb.counted_loop(start, end, 1, body, loop_md, hint=loop.var.name)

    def unrolled_loop(self, loop: For) -> None:
        extent = const_int(loop.extent)
        limit = self.ctx.options.unroll_limit
        if extent is not None and extent <= limit and (not loop.lanes or loop.lanes >= extent):
            for k in range(max(extent, 0)):
                with self.ctx.bind(loop.var, index_const(k)):
                    self.emit(loop.body)
            return
        module = self.fb.module
        if loop.lanes and (extent is None or loop.lanes < extent):
            md = module.loop_metadata(['!"llvm.loop.unroll.count", i32 ' + str(loop.lanes)])
        else:
            md = module.loop_metadata(['!"llvm.loop.unroll.full"'])
        self.serial_loop(loop, md)

    def parallel_loop(self, loop: For, begin: Value, end: Value) -> None:
        """The kernel's PARALLEL loop over ``[max(begin, 0), min(end, extent))``."""
        extent = self.uniform_index(loop.extent, "the parallel extent")
        start = self.exprs.intrinsic("smax", begin, index_const(0))
        stop = self.exprs.intrinsic("smin", end, extent)
        self.counted_loop(loop, start, stop, None)

    def uniform_index(self, expr: Expr, what: str) -> Value:
        value = self.exprs.index(expr)
        if value.is_vector:
            raise self.ctx.error(f"{what} ({expr}) varies across the lanes of a vector loop")
        return value

    # stores ----------------------------------------------------------------------------------
    def store_value(self, stmt: Store) -> Value:
        value_expr = stmt.value
        if value_expr.dtype != stmt.buffer.dtype:
            value_expr = Cast(stmt.buffer.dtype, value_expr)
        return self.exprs.value(value_expr)

    def store(self, stmt: Store) -> None:
        vector = self.ctx.vector
        value = self.store_value(stmt)
        if stmt.accumulate is None:
            self.exprs.memory.store(stmt.buffer, stmt.indices, value)
            return
        if vector is None or flat_coefficient(stmt.buffer, stmt.indices, vector.var) != 0:
            old = self.exprs.memory.load(stmt.buffer, stmt.indices)
            combined = self.exprs.combine(stmt.accumulate, old, value, stmt.buffer.dtype)
            self.exprs.memory.store(stmt.buffer, stmt.indices, combined)
            return
        # a reduction across the lanes into one location
        slot = vector.partials.get(id(stmt))
        if slot is not None:
            self.vector_loops.update_partial(slot, value)
            return
        reduced = self.vector_loops.reduce_lanes(stmt.accumulate, value, stmt.buffer.dtype)
        with self.ctx.uniform():
            self.accumulate_scalar(stmt, reduced)

    def accumulate_scalar(self, stmt: Store, value: Value) -> None:
        """``buffer[indices] op= value`` outside any vector loop."""
        assert stmt.accumulate is not None
        old = self.exprs.memory.load(stmt.buffer, stmt.indices)
        combined = self.exprs.combine(stmt.accumulate, old, value, stmt.buffer.dtype)
        self.exprs.memory.store(stmt.buffer, stmt.indices, combined)

    # allocations, conditionals, copies ------------------------------------------------------
    def open_allocation(self, stmt: Allocate) -> None:
        buffer, fb = stmt.buffer, self.fb
        elem = storage_type(buffer.dtype)
        size = buffer.nbytes
        options = self.ctx.options
        if size <= options.stack_limit_bytes \
                and self.ctx.stack_bytes + size <= options.stack_budget_bytes:
            self.ctx.stack_bytes += size
            pointer = fb.alloca(elem, buffer.size, 64, hint=buffer.name)
        else:
            pointer = fb.fresh(buffer.name)
            fb.module.declare("aligned_alloc", "ptr", ["i64", "i64"])
            fb.module.declare("free", "void", ["ptr"])
            padded = -(-size // 64) * 64
            fb.entry_line(f'{pointer} = call ptr @"aligned_alloc"(i64 64, i64 {padded})')
            self.ctx.cleanup.append(f'call void @"free"(ptr {pointer})')
        if stmt.zeroed:  # else the lowering writes every element before reading it
            fb.call_void("llvm.memset.p0.i64", [("ptr", f"ptr align 64 {pointer}"),
                                                Value("0", "i8"), index_const(size),
                                                Value("false", "i1")])
        self.ctx.pointers[buffer] = pointer

    def if_then_else(self, stmt: IfThenElse) -> None:
        cond = self.exprs.value(stmt.cond)
        if cond.is_vector:
            self.vector_loops.masked_branches(stmt, cond)
            return
        otherwise = (lambda: self.emit(stmt.else_body)) if stmt.else_body is not None else None
        self.fb.if_then(cond, lambda: self.emit(stmt.then_body), otherwise)

    def copy(self, stmt: Copy) -> None:
        self.emit(copy_as_loops(stmt, vectorize=self.ctx.vector is None, error=self.ctx.error))


def copy_as_loops(stmt: Copy, vectorize: bool,
                  error: Callable[[str], Exception] = ValueError) -> Stmt:
    """The loop nest equivalent to a Copy: ``dst[base + t * step] = src[base + t * step]``."""
    dst, src = stmt.dst, stmt.src
    if tuple(dst.extents) != tuple(src.extents) or len(dst.base) != dst.buffer.ndim \
            or len(src.base) != src.buffer.ndim or len(dst.extents) != dst.buffer.ndim:
        message = (f"the copy {dst.buffer.name} <- {src.buffer.name} has regions of different "
                   f"extents or ranks ({list(dst.extents)} vs {list(src.extents)}); a Copy "
                   "moves a region to a region of the same extents, indexing every dimension")
        raise error(message)
    variables = [Var(f"copy{d}") for d in range(len(dst.extents))]
    dst_index = tuple(base + var * step if step != 1 else base + var
                      for base, var, step in zip(dst.base, variables, dst.steps))
    src_index = tuple(base + var * step if step != 1 else base + var
                      for base, var, step in zip(src.base, variables, src.steps))
    value: Expr = BufferLoad(src.buffer, src_index)
    if src.buffer.dtype != dst.buffer.dtype:
        value = Cast(dst.buffer.dtype, value)
    body: Stmt = Store(dst.buffer, dst_index, value)
    for depth in reversed(range(len(variables))):
        innermost = depth == len(variables) - 1
        kind = LoopKind.VECTOR if innermost and vectorize and dst.extents[depth] > 1 \
            else LoopKind.SERIAL
        body = For(variables[depth], const(dst.extents[depth]), kind, body,
                   lanes=16 if kind is LoopKind.VECTOR else 0)
    return body

