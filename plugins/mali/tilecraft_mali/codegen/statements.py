"""Kernel IR statements as OpenCL C lines (the body of the ``__kernel`` function).

- a loop bound to ``group_id.x`` / ``local_id.y`` ... reads ``get_group_id(0)`` /
  ``get_local_id(1)`` (guarded when its extent is below the launched one); serial loops are
  ``for`` loops, unrolled ones carry ``#pragma unroll``, vector loops use ``vloadN`` /
  ``vstoreN`` where provably contiguous (:mod:`.vector`);
- ``Barrier`` (work_group / block) is ``barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE)``;
  ``SubgroupReduce`` a butterfly through ``__local`` memory (:mod:`.reduction`);
  ``AtomicUpdate`` ``atomic_add`` (a compare-and-swap loop for float32); ``Copy`` element loops;
  ``IntrinsicCall`` of ``arm_dot`` / ``arm_dot_acc`` on ``char4`` loads (:mod:`.intrinsics`).

Refused with a CodegenError naming the kernel and construct: a barrier or reduction under a
condition that depends on the work-item (the others would wait forever), a write to
``__local`` or global memory outside the loops bound to the launched axes (every work-item
would run it), the asynchronous copies and pipelines of CUDA, any other statement kind.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from tilecraft.codegen.c_expressions import CExprPrinter, Names, combine, flat_index
from tilecraft.codegen.launch import Launch
from tilecraft.errors import CodegenError
from tilecraft.kernel_ir.concurrency import AtomicUpdate, SubgroupReduce
from tilecraft.kernel_ir.nodes import (
    Allocate,
    Barrier,
    Buffer,
    BufferLoad,
    Copy,
    For,
    IfThenElse,
    IntrinsicCall,
    Kernel,
    LoopKind,
    Seq,
    Stmt,
    Store,
    walk_expr,
)
from tilecraft.kernel_ir.visitor import KernelVisitor
from tilecraft.target.hierarchy import LaunchScope
from tilecraft.te.expr import Const, Expr, ReduceOp, Var, const
from tilecraft_mali.codegen.dialect import OPENCL
from tilecraft_mali.codegen.memory import LocalMemoryPlan

__all__ = ["OpenCLEmitter", "axis_call"]

#: the Kernel IR barrier scopes that synchronise a whole work-group
WORK_GROUP_SCOPES = ("work_group", "block")
_AXIS_FUNCTIONS = {"group_id": "get_group_id", "local_id": "get_local_id",
                   "global_id": "get_global_id"}


def axis_call(axis: str) -> str:
    """The OpenCL C index of a bound axis of the spec: ``local_id.y`` -> ``get_local_id(1)``.

    >>> axis_call("group_id.x"), axis_call("local_id.z")
    ('get_group_id(0)', 'get_local_id(2)')
    """
    kind, _, component = axis.partition(".")
    return f"{_AXIS_FUNCTIONS[kind]}({'xyz'.index(component)})"


class OpenCLEmitter(KernelVisitor[None]):
    """Emits the lines of one kernel's body (module docstring)."""

    def __init__(self, kernel: Kernel, names: Names, launch: Launch,
                 plan: LocalMemoryPlan) -> None:
        self.kernel = kernel
        self.names = names
        self.launch = launch
        self.plan = plan
        self.lines: list[str] = []
        self.indent = "    "
        self.ranges: dict[Var, tuple[int, int]] = {}
        self.printer = CExprPrinter(kernel.name, names, OPENCL, self.ranges, self.element)
        #: variables of the enclosing bound loops -> their axes
        self.bound: dict[Var, str] = {}
        #: the enclosing condition that depends on the work-item (for messages), if any
        self.divergent: str | None = None
        self.uses_float_atomics = False
        #: whether arm_dot / arm_dot_acc are called (their declarations go into the program)
        self.uses_dot_products = False
        #: bytes of __local scratch per dtype the reductions need (see .reduction)
        self.scratch: dict[str, int] = {}

    # writing ------------------------------------------------------------------------------
    def fail(self, what: str, fix: str) -> CodegenError:
        return self.printer.fail(what, fix)

    def line(self, text: str) -> None:
        self.lines.append(self.indent + text)

    @contextmanager
    def scope(self, header: str = "") -> Iterator[None]:
        """``header { ... }`` around what the body emits."""
        self.line(f"{header} {{".lstrip())
        outer = self.indent
        self.indent += "    "
        try:
            yield
        finally:
            self.indent = outer
            self.line("}")

    def expr(self, expr: Expr) -> str:
        return self.printer.expr(expr)

    def element(self, buffer: Buffer, indices: tuple[Expr, ...]) -> str:
        return f"{self.names.buffer(buffer)}[{self.expr(flat_index(buffer, indices))}]"

    def store(self, buffer: Buffer, indices: tuple[Expr, ...], value: str) -> None:
        self.line(OPENCL.store_statement(self.element(buffer, indices), value, buffer.dtype))

    # work-item facts ----------------------------------------------------------------------
    def work_item_dependent(self, expr: Expr) -> bool:
        local = {var for var, axis in self.bound.items()
                 if self.launch.scopes[axis] is LaunchScope.BLOCK}
        return any(node in local or isinstance(node, BufferLoad) for node in walk_expr(expr))

    @contextmanager
    def branch(self, header: str, condition: str, divergent: bool) -> Iterator[None]:
        outer = self.divergent
        if divergent and outer is None:
            self.divergent = condition
        try:
            with self.scope(header):
                yield
        finally:
            self.divergent = outer

    def require_uniform(self, what: str) -> None:
        if self.divergent is not None:
            raise self.fail(f"{what} under the work-item-dependent condition "
                            f"({self.divergent})", "work-items that skip it would leave the "
                            "others waiting at the barrier; move it out of the condition")

    def check_writer(self, buffer: Buffer, what: str) -> None:
        """A write to ``__local`` or global memory runs inside loops bound to every launched
        axis that would otherwise repeat it."""
        if self.plan.is_private(buffer):
            return
        inside = set(self.bound.values())
        repeated = sorted(
            axis for axis, extent in self.launch.extents.items()
            if extent > 1 and axis not in inside
            and (self.launch.scopes[axis] is LaunchScope.BLOCK or not self.plan.is_local(buffer)))
        if repeated:
            raise self.fail(f"{what} outside the loops bound to {', '.join(repeated)}: every "
                            "work-item launched along those axes would run it",
                            "move it into the bound loops, or guard it by their variables")

    # statements ---------------------------------------------------------------------------
    def visit_For(self, loop: For) -> None:
        emit = {LoopKind.BOUND: self._bound, LoopKind.SERIAL: self._counted,
                LoopKind.UNROLLED: self._counted, LoopKind.VECTOR: self._vector}.get(loop.kind)
        if emit is None:
            raise self.fail(f"a {loop.kind.value} loop (over {loop.var.name})",
                            "use serial, unrolled, vector or bound loops on Mali")
        if isinstance(loop.extent, Const):
            self.ranges[loop.var] = (0, max(0, int(loop.extent.value) - 1))
        try:
            emit(loop, self.names.var(loop.var))
        finally:
            self.ranges.pop(loop.var, None)

    def _header(self, loop: For, name: str) -> str:
        return f"for (int {name} = 0; {name} < {self.expr(loop.extent)}; ++{name})"

    def _counted(self, loop: For, name: str) -> None:
        if loop.kind is LoopKind.UNROLLED:
            self.line("#pragma unroll")
        with self.scope(self._header(loop, name)):
            self.visit(loop.body)

    def _vector(self, loop: For, name: str) -> None:
        from tilecraft_mali.codegen.vector import emit_vector_loop

        emit_vector_loop(self, loop, name, self._header(loop, name))

    def _bound(self, loop: For, name: str) -> None:
        axis = loop.axis or ""
        outer = next((var for var, bound in self.bound.items() if bound == axis), None)
        if outer is not None:
            raise self.fail(f"the loop over {loop.var.name} bound to {axis} inside the loop "
                            f"over {outer.name} bound to it too", "bind each axis once on a "
                            "path of nested loops")
        extent = int(loop.extent.value)  # a constant: the launch configuration checked it
        self.bound[loop.var] = axis
        try:
            with self.scope():
                self.line(f"const int {name} = (int){axis_call(axis)};")
                if extent >= self.launch.extents[axis]:
                    self.visit(loop.body)
                    return
                guard = f"{name} < {extent}"
                local = self.launch.scopes[axis] is LaunchScope.BLOCK
                with self.branch(f"if ({guard})", guard, local):
                    self.visit(loop.body)
        finally:
            del self.bound[loop.var]

    def visit_IfThenElse(self, stmt: IfThenElse) -> None:
        divergent = self.work_item_dependent(stmt.cond)
        condition = self.expr(stmt.cond)
        with self.branch(f"if ({condition})", condition, divergent):
            self.visit(stmt.then_body)
        if stmt.else_body is not None:
            with self.branch("else", f"!{condition}", divergent):
                self.visit(stmt.else_body)

    def visit_Allocate(self, stmt: Allocate) -> None:
        buffer = stmt.buffer
        if self.plan.is_private(buffer):
            ctype = OPENCL.storage_type(buffer.dtype)
            self.line(f"{ctype} {self.names.buffer(buffer)}[{max(1, buffer.size)}];")
        self.visit(stmt.body)

    def visit_Store(self, stmt: Store) -> None:
        self.check_writer(stmt.buffer, f"the store into {stmt.buffer.name}")
        value = self.expr(stmt.value)
        if stmt.accumulate is not None:
            old = self.expr(BufferLoad(stmt.buffer, stmt.indices))
            value = combine(stmt.accumulate, old, value, OPENCL, stmt.buffer.dtype)
        self.store(stmt.buffer, stmt.indices, value)

    def visit_Barrier(self, stmt: Barrier) -> None:
        if stmt.scope not in WORK_GROUP_SCOPES:
            raise self.fail(f"a barrier of scope {stmt.scope!r}",
                            f"use one of {', '.join(WORK_GROUP_SCOPES)} (a work-group barrier)")
        self.require_uniform(f"a {stmt.scope} barrier")
        self.line("barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);")

    def visit_SubgroupReduce(self, stmt: SubgroupReduce) -> None:
        from tilecraft_mali.codegen.reduction import emit_subgroup_reduce

        emit_subgroup_reduce(self, stmt)

    def visit_AtomicUpdate(self, stmt: AtomicUpdate) -> None:
        dtype = stmt.buffer.dtype.value
        if stmt.op is not ReduceOp.SUM or dtype not in ("float32", "int32"):
            raise self.fail(f"an atomic {stmt.op.value} on {dtype} (into {stmt.buffer.name})",
                            "atomics add float32 or int32 values; accumulate in those types")
        self.check_writer(stmt.buffer, f"the atomic update of {stmt.buffer.name}")
        call = "atomic_add" if dtype == "int32" else "tc_atomic_add_f"
        self.uses_float_atomics |= dtype == "float32"
        self.line(f"{call}(&{self.element(stmt.buffer, stmt.indices)}, "
                  f"{self.expr(stmt.value)});")

    def visit_IntrinsicCall(self, stmt: IntrinsicCall) -> None:
        from tilecraft_mali.codegen.intrinsics import emit_intrinsic_call

        emit_intrinsic_call(self, stmt)

    def visit_Copy(self, stmt: Copy) -> None:
        """Element by element over the region's dimensions wider than one (the regions'
        squeezed shapes must agree)."""
        dst, src = stmt.dst, stmt.src
        self.check_writer(dst.buffer, f"the copy into {dst.buffer.name}")
        wide = [[(d, e) for d, e in enumerate(region.extents) if e != 1] for region in (dst, src)]
        if [e for _, e in wide[0]] != [e for _, e in wide[1]]:
            raise self.fail(f"a copy between regions of extents {list(src.extents)} and "
                            f"{list(dst.extents)}", "copy regions of the same shape")
        counters = [Var(f"copy_i{n}") for n in range(len(wide[0]))]

        def at(region_index: int) -> tuple[Expr, ...]:
            region = (dst, src)[region_index]
            indices = list(region.base)
            for counter, (d, _) in zip(counters, wide[region_index]):
                step = region.steps[d]
                indices[d] = region.base[d] + (counter if step == 1 else counter * const(step))
            return tuple(indices)

        opened = []
        try:
            for counter, (_, extent) in zip(counters, wide[0]):
                self.ranges[counter] = (0, extent - 1)
                name = self.names.var(counter)
                self.lines.append(f"{self.indent}for (int {name} = 0; {name} < {extent}; "
                                  f"++{name}) {{")
                self.indent += "    "
                opened.append(counter)
            value = self.expr(BufferLoad(src.buffer, at(1)))
            if src.buffer.dtype != dst.buffer.dtype:
                value = OPENCL.cast_value(value, src.buffer.dtype, dst.buffer.dtype)
            self.store(dst.buffer, at(0), value)
        finally:
            for counter in opened:
                self.indent = self.indent[:-4]
                self.line("}")
                self.ranges.pop(counter, None)

    def visit_Seq(self, stmt: Seq) -> None:
        for child in stmt.stmts:
            self.visit(child)

    def generic_visit(self, stmt: Stmt, *args: object) -> None:
        kind = type(stmt).__name__
        raise self.fail(f"the statement {kind} ({str(stmt).strip()[:80]})",
                        f"OpenCL C has no form for {kind} here; lower the kernel without it")
