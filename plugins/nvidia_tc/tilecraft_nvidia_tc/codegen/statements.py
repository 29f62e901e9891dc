"""Kernel IR statements as CUDA C lines (the body of the ``__global__`` function).

:class:`StatementEmitter` walks the kernel with the core's :class:`KernelVisitor`:

- a loop bound to ``blockIdx.x`` / ``threadIdx.x`` / ... reads that index (guarded when its
  extent is below the launched extent, :mod:`.launch`); serial loops are ``for`` loops,
  unrolled ones carry ``#pragma unroll``, vector loops become 128-bit ``float4`` accesses where
  that is provably legal (:mod:`.vector`) and unrolled scalar code otherwise;
- ``Barrier`` is ``__syncthreads()`` (block) or ``__syncwarp()`` (warp); ``SubgroupReduce`` a
  ``__shfl_xor_sync`` butterfly; ``AsyncCopy`` / ``CommitGroup`` / ``WaitGroup`` the
  ``tc_cp_async_*`` helpers of ``tilecraft_cuda.h`` (sm_80+); ``Pipeline`` a loop over steps
  running each stage on its own iteration; ``AtomicUpdate`` ``atomicAdd``;
- WMMA fragments (:mod:`.wmma`): their ``Allocate`` a ``wmma::fragment``, a ``Copy`` into or
  out of one ``load_matrix_sync`` / ``store_matrix_sync``, the ``IntrinsicCall`` of a WMMA
  intrinsic ``wmma::mma_sync``; mma.sync fragments (:mod:`.mma_sync`) the lane's registers,
  gathered and scattered per lane, multiplied by the inline-PTX ``mma.sync.aligned.m16n8k16``
  function the unit defines; a call of any other intrinsic is a CodegenError.

What CUDA cannot do safely is refused with a CodegenError naming the kernel and construct: a
barrier or a warp shuffle under a condition that depends on the thread (threads of one block
or warp would not all reach it), a write to shared or global memory outside the loops bound to
the launched axes (every thread would run it), a statement kind CUDA has no form for.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from tilecraft.codegen.c_expressions import combine, flat_index
from tilecraft.dtypes import DType
from tilecraft.errors import CodegenError
from tilecraft.kernel_ir.concurrency import (
    AsyncCopy,
    AtomicUpdate,
    CommitGroup,
    Pipeline,
    SubgroupReduce,
    WaitGroup,
)
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
    Region,
    Seq,
    Stmt,
    Store,
    walk_expr,
)
from tilecraft.kernel_ir.visitor import KernelVisitor
from tilecraft.target.hierarchy import LaunchScope
from tilecraft.te.expr import Cast, Const, Expr, ReduceOp, Var, const
from tilecraft_nvidia_tc.codegen.affine import linear_form
from tilecraft_nvidia_tc.codegen.dtypes import HALF_TYPES, storage_type, store_value
from tilecraft_nvidia_tc.codegen.expressions import ExprPrinter, Names
from tilecraft_nvidia_tc.codegen.launch import Launch
from tilecraft_nvidia_tc.codegen.memory import MemoryPlan

__all__ = ["FULL_MASK", "StatementEmitter", "combine", "exact_source", "flat_index"]

FULL_MASK = "0xffffffffu"
#: the first architecture with cp.async (Ampere)
ASYNC_COPY_ARCH = 80


class StatementEmitter(KernelVisitor[None]):
    """Emits the lines of one kernel's body (module docstring)."""

    def __init__(self, kernel: Kernel, names: Names, launch: Launch, plan: MemoryPlan,
                 subgroup_size: int, arch: int) -> None:
        self.kernel = kernel
        self.names = names
        self.launch = launch
        self.plan = plan
        self.subgroup_size = subgroup_size
        self.arch = arch
        self.lines: list[str] = []
        self.depth = 1
        self.ranges: dict[Var, tuple[int, int]] = {}
        self.printer = ExprPrinter(kernel.name, names, self.ranges, self.access)
        #: loop variable -> the axis it is bound to, for the enclosing bound loops
        self.bound: dict[Var, str] = {}
        #: the enclosing condition that depends on the thread, if any (text for messages)
        self.divergent: str | None = None
        self.uses_async_copy = False
        #: (input, accumulator) dtypes of the mma.sync calls emitted (their helpers go first)
        self.mma_variants: set[tuple[DType, DType]] = set()

    # output helpers ---------------------------------------------------------------------
    def fail(self, what: str, fix: str) -> CodegenError:
        return self.printer.fail(what, fix)

    def line(self, text: str) -> None:
        self.lines.append("    " * self.depth + text)

    @contextmanager
    def block(self, opening: str) -> Iterator[None]:
        self.line(f"{opening} {{" if opening else "{")
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1
            self.line("}")

    def expr(self, expr: Expr) -> str:
        return self.printer.expr(expr)

    def access(self, buffer: Buffer, indices: tuple[Expr, ...]) -> str:
        return f"{self.names.buffer(buffer)}[{self.expr(flat_index(buffer, indices))}]"

    # facts about the thread ---------------------------------------------------------------
    def thread_vars(self) -> set[Var]:
        return {var for var, axis in self.bound.items()
                if self.launch.scopes[axis] is LaunchScope.BLOCK}

    def depends_on_thread(self, expr: Expr) -> bool:
        threads = self.thread_vars()
        return any(node in threads or isinstance(node, BufferLoad) for node in walk_expr(expr))

    @contextmanager
    def condition(self, text: str, divergent: bool) -> Iterator[None]:
        before = self.divergent
        if divergent and before is None:
            self.divergent = text
        try:
            with self.block(f"if ({text})"):
                yield
        finally:
            self.divergent = before

    def check_writer(self, buffer: Buffer, what: str) -> None:
        """A write to shared or global memory must run inside loops bound to every launched
        axis that spreads copies of it (module docstring)."""
        if self.plan.is_register(buffer):
            return
        shared = self.plan.is_shared(buffer)
        covered = set(self.bound.values())
        missing = [axis for axis, extent in self.launch.extents.items()
                   if extent > 1 and axis not in covered
                   and (not shared or self.launch.scopes[axis] is LaunchScope.BLOCK)]
        if missing:
            raise self.fail(f"{what} outside the loops bound to {', '.join(sorted(missing))}: "
                            "every thread launched along those axes would run it",
                            "move the statement into the bound loops, or guard it with a "
                            "condition on their variables")

    # statements ---------------------------------------------------------------------------
    def generic_visit(self, stmt: Stmt, *args: object) -> None:
        raise self.fail(f"the statement {type(stmt).__name__} ({str(stmt).strip()[:80]})",
                        "this target has no CUDA form for it; lower the kernel without it")

    def visit_Seq(self, stmt: Seq) -> None:
        for child in stmt.stmts:
            self.visit(child)

    def visit_For(self, loop: For) -> None:
        name = self.names.var(loop.var)
        extent = loop.extent
        if isinstance(extent, Const):
            self.ranges[loop.var] = (0, max(0, int(extent.value) - 1))
        try:
            if loop.kind is LoopKind.BOUND:
                self._bound_loop(loop, name)
            elif loop.kind is LoopKind.SERIAL:
                with self.block(f"for (int {name} = 0; {name} < {self.expr(extent)}; ++{name})"):
                    self.visit(loop.body)
            elif loop.kind is LoopKind.UNROLLED:
                self.line(f"#pragma unroll {loop.lanes}" if loop.lanes > 1 else "#pragma unroll")
                with self.block(f"for (int {name} = 0; {name} < {self.expr(extent)}; ++{name})"):
                    self.visit(loop.body)
            elif loop.kind is LoopKind.VECTOR:
                from tilecraft_nvidia_tc.codegen.vector import emit_vector_loop

                emit_vector_loop(self, loop, name)
            else:
                raise self.fail(f"a {loop.kind.value} loop (over {loop.var.name})",
                                "use serial, unrolled, vector or bound loops on a GPU")
        finally:
            self.ranges.pop(loop.var, None)

    def _bound_loop(self, loop: For, name: str) -> None:
        axis = loop.axis or ""
        if axis in self.bound.values():
            raise self.fail(f"two nested loops bound to {axis} ({loop.var.name} inside another)",
                            "bind each hardware axis once on a path of nested loops")
        extent = int(loop.extent.value)  # constant: checked by the launch configuration
        with self.block(""):
            self.line(f"const int {name} = (int){axis};")
            self.bound[loop.var] = axis
            try:
                if extent < self.launch.extents[axis]:
                    divergent = self.launch.scopes[axis] is LaunchScope.BLOCK
                    with self.condition(f"{name} < {extent}", divergent):
                        self.visit(loop.body)
                else:
                    self.visit(loop.body)
            finally:
                del self.bound[loop.var]

    def visit_IfThenElse(self, stmt: IfThenElse) -> None:
        divergent = self.depends_on_thread(stmt.cond)
        text = self.expr(stmt.cond)
        with self.condition(text, divergent):
            self.visit(stmt.then_body)
        if stmt.else_body is not None:
            before = self.divergent
            if divergent and before is None:
                self.divergent = f"!({text})"
            try:
                with self.block("else"):
                    self.visit(stmt.else_body)
            finally:
                self.divergent = before

    def visit_Allocate(self, stmt: Allocate) -> None:
        buffer = stmt.buffer
        fragment = self.plan.fragments.get(id(buffer))
        if fragment is not None and fragment.form == "mma_sync":
            from tilecraft_nvidia_tc.codegen.mma_sync import declaration

            self.line(declaration(fragment, self.names.buffer(buffer)))
        elif fragment is not None:
            from tilecraft_nvidia_tc.codegen.wmma import fragment_type

            name = self.names.buffer(buffer)
            self.line(f"{fragment_type(fragment)} {name};")
            if fragment.use == "accumulator":  # Kernel IR allocations start at zero
                self.line(f"nvcuda::wmma::fill_fragment({name}, 0);")
        elif self.plan.is_register(buffer):
            name = self.names.buffer(buffer)
            self.line(f"alignas(16) {storage_type(buffer.dtype)} {name}[{max(1, buffer.size)}];")
        self.visit(stmt.body)

    def visit_Store(self, stmt: Store) -> None:
        self.check_writer(stmt.buffer, f"the store into {stmt.buffer.name}")
        target = self.access(stmt.buffer, stmt.indices)
        self.line(f"{target} = {self.stored(stmt)};")

    @staticmethod
    def copied_load(stmt: Store) -> BufferLoad | None:
        """The load whose element ``stmt`` stores unchanged, if it does: its value is a load
        of the store's element type, possibly through casts that change nothing once the
        value is stored (:func:`exact_source`), and it does not accumulate."""
        dtype = stmt.buffer.dtype
        value = exact_source(stmt.value, dtype)
        if stmt.accumulate is None and isinstance(value, BufferLoad) \
                and value.buffer.dtype is dtype and value.buffer.lanes == stmt.buffer.lanes == 1:
            return value
        return None

    def stored(self, stmt: Store, raw: Mapping[BufferLoad, str] | None = None) -> str:
        """The text ``stmt`` stores into its element: the element of a load it copies
        unchanged as is (``raw`` maps a load to its unconverted text where that is not its
        access, a vector lane), else the computed value in the buffer's storage form
        (``__float2half(..)``), a cast rounding to that type dropped (rounding twice to the
        same type is rounding once)."""
        dtype = stmt.buffer.dtype
        copied = self.copied_load(stmt)
        if copied is not None:
            return (raw or {}).get(copied) or self.access(copied.buffer, copied.indices)
        if stmt.accumulate is not None:
            old = self.expr(BufferLoad(stmt.buffer, stmt.indices))
            value = combine(stmt.accumulate, old, self.expr(stmt.value))
        else:
            value = self.expr(exact_source(stmt.value, dtype))
        return store_value(value, dtype)

    def visit_Barrier(self, stmt: Barrier) -> None:
        call = {"block": "__syncthreads()", "warp": "__syncwarp()"}.get(stmt.scope)
        if call is None:
            raise self.fail(f"a barrier of scope {stmt.scope!r}", "use scope block or warp")
        if self.divergent is not None:
            raise self.fail(f"a {stmt.scope} barrier under the thread-dependent condition "
                            f"({self.divergent})", "threads that skip it would deadlock the "
                            "others; move the barrier out of the condition")
        self.line(f"{call};")

    def visit_SubgroupReduce(self, stmt: SubgroupReduce) -> None:
        self.check_writer(stmt.buffer, f"the subgroup reduction into {stmt.buffer.name}")
        axis = self.bound.get(stmt.lane)
        width = stmt.width
        if axis is None or self.launch.scopes[axis] is not LaunchScope.BLOCK \
                or not axis.endswith(".x"):
            raise self.fail(f"a subgroup reduction over {stmt.lane.name}, which is not the "
                            "variable of an enclosing loop bound to threadIdx.x",
                            "bind the lane loop to threadIdx.x")
        if width < 1 or width & (width - 1) or width > self.subgroup_size \
                or self.launch.extents[axis] % width:
            raise self.fail(f"a subgroup reduction of width {width} over {axis} launched "
                            f"{self.launch.extents[axis]} wide",
                            f"use a power of two up to {self.subgroup_size} dividing the block")
        if self.divergent is not None:
            raise self.fail(f"a warp shuffle under the thread-dependent condition "
                            f"({self.divergent})", "lanes that skip it would leave the others "
                            "waiting; reduce outside the condition (give those lanes the "
                            "identity instead)")
        dtype = stmt.value.dtype
        value = self.names.fresh("tc_reduced")
        mask = self.warp_mask()
        ctype = "float" if dtype.is_float else "int"
        with self.block(""):
            self.line(f"{ctype} {value} = {self.expr(stmt.value)};")
            offset = width // 2
            while offset:
                shuffled = f"__shfl_xor_sync({mask}, {value}, {offset})"
                self.line(f"{value} = {combine(stmt.op, value, shuffled)};")
                offset //= 2
            target = self.access(stmt.buffer, stmt.indices)
            self.line(f"{target} = {store_value(value, stmt.buffer.dtype)};")

    def warp_mask(self) -> str:
        """The lanes of this thread's warp that exist: all 32 unless the block's last warp is
        partial."""
        threads = self.launch.threads_per_block
        if threads % self.subgroup_size == 0:
            return FULL_MASK
        if threads < self.subgroup_size:
            return f"0x{(1 << threads) - 1:x}u"
        bx, by, _ = self.launch.block
        linear = f"(threadIdx.x + {bx} * (threadIdx.y + {by} * threadIdx.z))"
        lanes = f"({threads} - ({linear} & ~{self.subgroup_size - 1}))"
        return f"({lanes} >= {self.subgroup_size} ? {FULL_MASK} : ((1u << {lanes}) - 1u))"

    def visit_AtomicUpdate(self, stmt: AtomicUpdate) -> None:
        dtype = stmt.buffer.dtype
        if stmt.op is not ReduceOp.SUM or dtype.value not in ("float32", "int32"):
            raise self.fail(f"an atomic {stmt.op.value} on {dtype} (into {stmt.buffer.name})",
                            "atomics are atomicAdd on float32 or int32; accumulate in those "
                            "types, or reduce without atomics")
        self.check_writer(stmt.buffer, f"the atomic update of {stmt.buffer.name}")
        self.line(f"atomicAdd(&{self.access(stmt.buffer, stmt.indices)}, "
                  f"{self.expr(stmt.value)});")

    # copies -------------------------------------------------------------------------------
    def region_loops(self, region: Region, hint: str) -> list[tuple[Var, int]]:
        """One loop per dimension of ``region`` wider than 1 (a copy's regions may differ in
        rank, e.g. a row of a matrix into a vector; their squeezed shapes must agree)."""
        return [(Var(f"{hint}{d}"), extent) for d, extent in enumerate(region.extents)
                if extent != 1]

    @staticmethod
    def element(region: Region, loops: list[tuple[Var, int]]) -> tuple[Expr, ...]:
        """The indices of the region's element at the loops' variables."""
        free = iter(loops)
        indices: list[Expr] = []
        for base, extent, step in zip(region.base, region.extents, region.steps):
            if extent == 1:
                indices.append(base)
                continue
            var, _ = next(free)
            indices.append(base + var if step == 1 else base + var * const(step))
        return tuple(indices)

    def same_shape(self, dst: Region, src: Region, what: str) -> None:
        squeezed = [[e for e in region.extents if e != 1] for region in (dst, src)]
        if squeezed[0] != squeezed[1]:
            raise self.fail(f"{what} between regions of extents {list(src.extents)} and "
                            f"{list(dst.extents)}", "copy regions of the same shape")

    @contextmanager
    def nest(self, loops: list[tuple[Var, int]]) -> Iterator[None]:
        opened = 0
        try:
            for var, extent in loops:
                self.ranges[var] = (0, extent - 1)
                name = self.names.var(var)
                self.line(f"for (int {name} = 0; {name} < {extent}; ++{name}) {{")
                self.depth += 1
                opened += 1
            yield
        finally:
            for var, _ in loops[:opened]:
                self.depth -= 1
                self.line("}")
                self.ranges.pop(var, None)

    def visit_Copy(self, stmt: Copy) -> None:
        dst, src = stmt.dst, stmt.src
        if id(dst.buffer) in self.plan.fragments or id(src.buffer) in self.plan.fragments:
            self.fragment_copy(stmt)
            return
        self.check_writer(dst.buffer, f"the copy into {dst.buffer.name}")
        self.same_shape(dst, src, "a copy")
        loops = self.region_loops(dst, "copy_i")
        with self.nest(loops):
            target = self.access(dst.buffer, self.element(dst, loops))
            source = BufferLoad(src.buffer, self.element(src, loops))
            if src.buffer.dtype == dst.buffer.dtype:  # the element as is, no conversion pair
                self.line(f"{target} = {self.access(source.buffer, source.indices)};")
            else:
                from tilecraft_nvidia_tc.codegen.dtypes import cast_value

                value = cast_value(self.expr(source), src.buffer.dtype, dst.buffer.dtype)
                self.line(f"{target} = {store_value(value, dst.buffer.dtype)};")

    # WMMA ---------------------------------------------------------------------------------
    def fragment_copy(self, stmt: Copy) -> None:
        """``load_matrix_sync`` into a fragment from a region of whole-tile rows, or
        ``store_matrix_sync`` of an accumulator into one (:mod:`.wmma`)."""
        from tilecraft_nvidia_tc.codegen.wmma import leading_dimension

        dst, src = stmt.dst, stmt.src
        loading = id(dst.buffer) in self.plan.fragments
        fragment_region, memory = (dst, src) if loading else (src, dst)
        fragment = self.plan.fragments[id(fragment_region.buffer)]
        what = (f"the fragment {'load' if loading else 'store'} {src.buffer.name} -> "
                f"{dst.buffer.name}")
        shape = [e for e in memory.extents if e != 1]
        if id(memory.buffer) in self.plan.fragments or self.plan.is_register(memory.buffer) \
                or memory.extents[-1] != fragment.columns or shape != [fragment.rows,
                                                                       fragment.columns] \
                or any(step != 1 for step in memory.steps) \
                or any(e != 1 for e in memory.extents[:-2]) \
                or tuple(fragment_region.extents) != (fragment.rows, fragment.columns):
            raise self.fail(f"{what} over extents {list(memory.extents)}",
                            f"copy a whole {fragment.rows}x{fragment.columns} fragment from "
                            "or to consecutive rows of a shared or global buffer")
        if not loading and fragment.use != "accumulator":
            raise self.fail(what, "only accumulator fragments can be stored")
        if memory.buffer.dtype != fragment.dtype:
            raise self.fail(f"{what} between {memory.buffer.dtype.value} and "
                            f"{fragment.dtype.value}", "stage the fragment in its own dtype")
        self.check_writer(dst.buffer, what)
        if self.divergent is not None:
            raise self.fail(f"{what} under the thread-dependent condition ({self.divergent})",
                            "WMMA operations are collective over a warp: call them outside "
                            "the condition")
        # mma.sync lanes gather their own elements: any row length will do
        ldm = memory.buffer.shape[-1] if fragment.form == "mma_sync" \
            else leading_dimension(self.kernel, memory.buffer, what)
        pointer = f"&{self.access(memory.buffer, memory.base)}"
        name = self.names.buffer(fragment_region.buffer)
        if fragment.form == "mma_sync":
            from tilecraft_nvidia_tc.codegen.mma_sync import load_call, store_call

            self.line(load_call(fragment, name, pointer, ldm) if loading
                      else store_call(fragment, name, pointer, ldm))
        elif loading:
            self.line(f"nvcuda::wmma::load_matrix_sync({name}, {pointer}, {ldm});")
        else:
            self.line(f"nvcuda::wmma::store_matrix_sync({pointer}, {name}, {ldm}, "
                      "nvcuda::wmma::mem_row_major);")

    def visit_IntrinsicCall(self, stmt: IntrinsicCall) -> None:
        fragments = [self.plan.fragments.get(id(region.buffer)) for region in stmt.operands]
        if len(fragments) != 3 or any(f is None for f in fragments) \
                or [f.use for f in fragments if f is not None] != ["matrix_a", "matrix_b",
                                                                    "accumulator"]:
            raise self.fail(f"the intrinsic call {stmt.intrinsic}",
                            "the CUDA code generator expresses WMMA mma_sync on whole "
                            "fragments only; lower other intrinsics without the call")
        if self.divergent is not None:
            raise self.fail(f"{stmt.intrinsic} under the thread-dependent condition "
                            f"({self.divergent})", "WMMA operations are collective over a "
                            "warp: call them outside the condition")
        a, b, d = (self.names.buffer(region.buffer) for region in stmt.operands)
        operands = tuple(f for f in fragments if f is not None)
        if operands[0].form == "mma_sync":
            from tilecraft_nvidia_tc.codegen.mma_sync import check, mma_call

            first, _, accumulator = operands
            check((first, operands[1], accumulator),
                  f"kernel {self.kernel.name}: the call of {stmt.intrinsic}")
            self.mma_variants.add((first.dtype, accumulator.dtype))
            self.line(mma_call((first, operands[1], accumulator), (a, b, d)))
            return
        self.line(f"nvcuda::wmma::mma_sync({d}, {a}, {b}, {d});")

    def visit_AsyncCopy(self, stmt: AsyncCopy) -> None:
        self.require_async_copy("an asynchronous copy")
        dst, src = stmt.dst, stmt.src
        self.check_writer(dst.buffer, f"the asynchronous copy into {dst.buffer.name}")
        if not self.plan.is_shared(dst.buffer) or self.plan.is_shared(src.buffer) \
                or self.plan.is_register(src.buffer):
            raise self.fail(f"an asynchronous copy {src.buffer.name} -> {dst.buffer.name}",
                            "cp.async copies global memory into shared memory only")
        self.same_shape(dst, src, "an asynchronous copy")
        if dst.buffer.dtype != src.buffer.dtype:
            raise self.fail(f"an asynchronous copy from {src.buffer.dtype} to "
                            f"{dst.buffer.dtype}", "cp.async copies bytes: copy same-typed "
                            "regions, convert afterwards")
        size = dst.buffer.dtype.bytes
        chunk = 16 // size
        loops = self.region_loops(dst, "copy_i")
        wide = bool(loops) and loops[-1][1] % chunk == 0 \
            and all(self._rows_aligned(region, chunk) for region in (dst, src))
        if wide:
            inner_var, inner_extent = loops[-1]
            chunks = [*loops[:-1], (inner_var, inner_extent // chunk)]
            scaled = [(v, e) for v, e in loops[:-1]] + [(inner_var, inner_extent)]
            with self.nest(chunks):
                def at(region: Region) -> str:
                    indices = self.element(region, scaled)
                    last = _innermost_wide_dim(region)
                    fixed = list(indices)
                    fixed[last] = region.base[last] + inner_var * const(chunk)
                    return self.access(region.buffer, tuple(fixed))

                self.line(f"tc_cp_async_16(&{at(dst)}, &{at(src)});")
        elif size == 4:
            with self.nest(loops):
                self.line(f"tc_cp_async_4(&{self.access(dst.buffer, self.element(dst, loops))}, "
                          f"&{self.access(src.buffer, self.element(src, loops))});")
        else:
            raise self.fail(f"an asynchronous copy of {dst.buffer.dtype} elements in pieces "
                            "smaller than 16 bytes (or not 16-byte aligned)", "cp.async moves "
                            "4 or 16 bytes: copy rows of 16-byte multiples at aligned offsets")

    @staticmethod
    def _rows_aligned(region: Region, chunk: int) -> bool:
        """Whether the region's innermost copied dimension is the buffer's last (contiguous,
        step 1) and every row of it starts at a multiple of ``chunk`` elements."""
        last = _innermost_wide_dim(region)
        if last != region.buffer.ndim - 1 or region.steps[last] != 1:
            return False
        strides = region.buffer.strides()
        if any(strides[d] * region.steps[d] % chunk for d in range(last)
               if region.extents[d] != 1):
            return False
        form = linear_form(flat_index(region.buffer, region.base), Var("unused"))
        return form is not None and form.multiple_of(chunk)

    def require_async_copy(self, what: str) -> None:
        if self.arch < ASYNC_COPY_ARCH:
            raise self.fail(f"{what} (cp.async) for sm_{self.arch}",
                            f"cp.async needs sm_{ASYNC_COPY_ARCH} or newer; copy synchronously")
        self.uses_async_copy = True

    def visit_CommitGroup(self, stmt: CommitGroup) -> None:
        self.require_async_copy("a commit group")
        self.line("tc_cp_async_commit();")

    def visit_WaitGroup(self, stmt: WaitGroup) -> None:
        self.require_async_copy("a wait group")
        self.line(f"tc_cp_async_wait<{int(stmt.pending)}>();")

    def visit_Pipeline(self, stmt: Pipeline) -> None:
        """At step ``t`` stage ``s`` runs iteration ``t - s`` (earlier stages first)."""
        count = len(stmt.stages)
        step = self.names.fresh(f"{stmt.var.name}_step")
        name = self.names.var(stmt.var)
        extent = self.expr(stmt.extent)
        if isinstance(stmt.extent, Const):
            self.ranges[stmt.var] = (0, max(0, int(stmt.extent.value) - 1))
        try:
            with self.block(f"for (int {step} = 0; {step} < {extent} + {count - 1}; ++{step})"):
                for index, stage in enumerate(stmt.stages):
                    with self.block(""):
                        self.line(f"const int {name} = {step} - {index};")
                        with self.block(f"if ({name} >= 0 && {name} < {extent})"):
                            self.visit(stage)
        finally:
            self.ranges.pop(stmt.var, None)


def exact_source(value: Expr, dtype: DType) -> Expr:
    """``value`` without the casts that change nothing once it is stored into a ``dtype``
    element: a cast of a float to the half type ``dtype`` (the store rounds again, to the same
    value) and a widening of a ``dtype`` half value to float32 (exact, rounded back unchanged).

    >>> from tilecraft.te.expr import Cast
    >>> x = Var("x", DType.FLOAT32)
    >>> exact_source(Cast(DType.FLOAT16, x), DType.FLOAT16) == x
    True
    >>> exact_source(Cast(DType.FLOAT16, x), DType.BFLOAT16) == x
    False
    """
    while isinstance(value, Cast) and dtype in HALF_TYPES and value.x.dtype.is_float \
            and (value.to is dtype or (value.to is DType.FLOAT32 and value.x.dtype is dtype)):
        value = value.x
    return value


def _innermost_wide_dim(region: Region) -> int:
    """The last dimension of ``region`` with an extent above 1 (-1 for a single element)."""
    wide = [d for d, extent in enumerate(region.extents) if extent != 1]
    return wide[-1] if wide else -1
