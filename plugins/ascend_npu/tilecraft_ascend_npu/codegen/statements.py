"""Kernel IR statements as the body of an AscendC kernel's ``Process()``.

A loop bound to ``block_idx`` reads ``GetBlockIdx()`` (the kernel is launched on as many AI
cores as its extent); serial, vector, unrolled and pipelined loops are ``for`` loops. A nest is
one AscendC call where :mod:`.patterns` recognises it:

- copies between GM and UB: ``DataCopyPad`` per contiguous row (the count clamped by the
  nest's edge guard); the queue hand-offs of :mod:`.buffers` around them (``EnQue`` after a
  copy-in, ``DeQue`` before the first use; ``EnQue`` + ``DeQue`` before a copy-out);
- Cube operands: GM -> L1 (``DataCopyPad`` rows into a zero-filled staging tensor) -> L0A /
  L0B (``LoadData`` into zZ / nZ fractals); the tile's contraction one ``Mmad``; the result
  L0C -> UB (``Fixpipe``, row-major) -> GM (rows);
- elementwise vector loops on UB: ``Add`` ... ``Exp`` ... ``Cast``; float32 row reductions:
  ``ReduceSum`` / ``ReduceMax`` / ``ReduceMin`` into a scratch element.

Everything else is a scalar fallback: ``for`` loops reading and writing elements through
``GetValue`` / ``SetValue`` (the scalar unit reaches UB and GM only) — contractions on the
vector unit's buffers (float32 GEMM: the Cube takes float16 and int8), reductions of other
dtypes, element moves that are not contiguous rows (transposes, gathers), guarded or
unaligned elementwise loops, expressions with no single vector op (gelu, select ...).

Refused with a CodegenError naming the kernel and construct: scalar access to L1 / L0 (the
hardware has none), a Cube operand filled other than by a copy from GM, statements outside the
AI-core loop, barriers, intrinsic and micro-kernel calls, copies, streams.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from tilecraft.codegen.c_expressions import CExprPrinter, Names, combine, flat_index
from tilecraft.errors import CodegenError
from tilecraft.kernel_ir.nodes import (
    Allocate,
    Buffer,
    BufferLoad,
    For,
    IfThenElse,
    Kernel,
    LoopKind,
    Seq,
    Stmt,
    Store,
    walk_expr,
)
from tilecraft.kernel_ir.visitor import KernelVisitor, walk_stmts
from tilecraft.te.expr import Cast, Const, Expr, Var
from tilecraft_ascend_npu.codegen.buffers import BufferPlan
from tilecraft_ascend_npu.codegen.dialect import ASCEND
from tilecraft_ascend_npu.codegen.patterns import (
    Row,
    match_contraction,
    match_reduction,
    match_row,
    match_vector,
    nest_store,
)

__all__ = ["AscendEmitter", "Levels"]

FRACTAL = 16


class Levels:
    """The spec's level names the generator places buffers in."""

    def __init__(self, vector: str, l1: str, l0a: str, l0b: str, l0c: str) -> None:
        self.vector, self.l1, self.l0a, self.l0b, self.l0c = vector, l1, l0a, l0b, l0c

    @property
    def cube(self) -> tuple[str, str, str]:
        return self.l0a, self.l0b, self.l0c


def _round_up(value: int, step: int) -> int:
    return -(-value // step) * step


class AscendEmitter(KernelVisitor[None]):
    """Emits the lines of ``Process()`` and collects the queues it uses (module doc)."""

    def __init__(self, kernel: Kernel, names: Names, plan: BufferPlan, levels: Levels) -> None:
        self.kernel = kernel
        self.names = names
        self.plan = plan
        self.levels = levels
        self.params = set(kernel.params)
        self.lines: list[str] = []
        self.depth = 1
        self.ranges: dict[Var, tuple[int, int]] = {}
        self.printer = CExprPrinter(kernel.name, names, ASCEND, self.ranges, self.element)
        #: (declaration, init line) of every queue / TBuf of the pipe
        self.pipe_members: list[tuple[str, str]] = []
        self.block_extent = 1
        self.in_block = False
        #: buffers enqueued and not yet dequeued, per open statement list
        self.pending: list[list[Buffer]] = [[]]
        self.uses_reduction_scratch = False
        self.calls: set[str] = set()

    # writing ------------------------------------------------------------------------------
    def line(self, text: str) -> None:
        self.lines.append("    " * self.depth + text)

    @contextmanager
    def scope(self, header: str = "") -> Iterator[None]:
        """``header {`` ... ``}`` around the lines the body writes."""
        self.line(f"{header} {{".lstrip())
        self.depth += 1
        yield
        self.depth -= 1
        self.line("}")

    def expr(self, expr: Expr) -> str:
        return self.printer.expr(expr)

    def fail(self, what: str, fix: str) -> CodegenError:
        return self.printer.fail(what, fix)

    def tensor(self, buffer: Buffer) -> str:
        """The C name of a buffer's tensor (``xGm`` for a parameter)."""
        name = self.names.buffer(buffer)
        return f"{name}Gm" if buffer in self.params else name

    def ctype(self, buffer: Buffer) -> str:
        if buffer.dtype not in ASCEND.supported:
            raise self.fail(f"buffer {buffer.name} of dtype {buffer.dtype}",
                            "use float32, float16, int32, int8 or uint8")
        return ASCEND.storage_type(buffer.dtype)

    def element(self, buffer: Buffer, indices: tuple[Expr, ...]) -> str:
        self.require_scalar(buffer)
        return f"{self.tensor(buffer)}.GetValue({self.expr(flat_index(buffer, indices))})"

    def require_scalar(self, buffer: Buffer) -> None:
        if buffer in self.params or buffer.level == self.levels.vector:
            return
        raise self.fail(f"a scalar access to {buffer.name} in {buffer.level}",
                        "the AI core's scalar unit reaches GM and UB only; move Cube operands "
                        "by copies from GM and compute on them with the contraction the Cube "
                        "runs")

    # queues -------------------------------------------------------------------------------
    def queue(self, buffer: Buffer, suffix: str, position: str, bytes_: int,
              depth: int = 2) -> str:
        name = f"{self.names.buffer(buffer)}_{suffix}"
        self.pipe_members.append((f"TQue<TPosition::{position}, {depth}> {name};",
                                  f"pipe.InitBuffer({name}, {depth}, {bytes_});"))
        return name

    def declare_buffer(self, buffer: Buffer) -> None:
        """The pipe members of an allocated buffer, and its allocation line."""
        role = self.plan.roles[buffer]
        name, ctype = self.names.buffer(buffer), self.ctype(buffer)
        nbytes = _round_up(max(1, buffer.size) * buffer.dtype.bytes, 32)
        if role in ("vecin", "vecout"):
            queue = self.queue(buffer, "que", "VECIN" if role == "vecin" else "VECOUT", nbytes)
            self.line(f"LocalTensor<{ctype}> {name} = {queue}.AllocTensor<{ctype}>();")
        elif role == "calc":
            self.pipe_members.append((f"TBuf<TPosition::VECCALC> {name}_buf;",
                                      f"pipe.InitBuffer({name}_buf, {nbytes});"))
            self.line(f"LocalTensor<{ctype}> {name} = {name}_buf.Get<{ctype}>();")
        else:
            rows, cols = self.fractal_shape(buffer)
            tile = _round_up(rows * cols * buffer.dtype.bytes, 32)
            if role == "cube_c":
                self.queue(buffer, "co1", "CO1", tile)
                self.queue(buffer, "co2", "CO2", tile)
                self.line(f"LocalTensor<{ctype}> {name} = {name}_co1.AllocTensor<{ctype}>();")
            else:
                stage, local = ("a1", "a2") if role == "cube_a" else ("b1", "b2")
                self.queue(buffer, stage, stage.upper(), tile)
                self.queue(buffer, local, local.upper(), tile)
                self.line(f"LocalTensor<{ctype}> {name};")

    def fractal_shape(self, buffer: Buffer) -> tuple[int, int]:
        if len(buffer.shape) != 2:
            raise self.fail(f"the Cube buffer {buffer.name} of shape {list(buffer.shape)}",
                            "Cube operands are 2-D tiles")
        rows, cols = buffer.shape
        return _round_up(rows, FRACTAL), _round_up(cols, FRACTAL)

    def dequeue_pending(self, stmt: Stmt | None) -> None:
        """``DeQue`` the buffers of this statement list still in their queues that ``stmt``
        uses (all of them when ``stmt`` is None: the list ends)."""
        pending = self.pending[-1]
        for buffer in list(pending):
            if stmt is None or _uses(stmt, buffer):
                name, ctype = self.names.buffer(buffer), self.ctype(buffer)
                self.line(f"{name} = {name}_que.DeQue<{ctype}>();")
                pending.remove(buffer)

    @contextmanager
    def statement_list(self) -> Iterator[None]:
        self.pending.append([])
        try:
            yield
            self.dequeue_pending(None)
        finally:
            self.pending.pop()

    # statements ---------------------------------------------------------------------------
    def visit_Seq(self, stmt: Seq) -> None:
        with self.statement_list():
            for child in stmt.stmts:
                self.dequeue_pending(child)
                self.visit(child)

    def visit_Allocate(self, stmt: Allocate) -> None:
        self.require_block(f"the allocation of {stmt.buffer.name}")
        buffer = stmt.buffer
        self.declare_buffer(buffer)
        with self.statement_list():
            self.visit(stmt.body)
        role, name = self.plan.roles[buffer], self.names.buffer(buffer)
        if role in ("vecin", "vecout"):
            self.line(f"{name}_que.FreeTensor({name});")
        elif role == "cube_c":
            self.line(f"{name}_co1.EnQue({name});")
            self.line(f"{name}_co1.FreeTensor({name}_co1.DeQue<{self.ctype(buffer)}>());")
        elif role in ("cube_a", "cube_b"):
            local = "a2" if role == "cube_a" else "b2"
            self.line(f"{name}_{local}.FreeTensor({name});")

    def require_block(self, what: str) -> None:
        if not self.in_block and self.block_extent > 1:
            raise self.fail(f"{what} outside the loop bound to block_idx",
                            "every AI core would run it; put it inside the bound loop")

    def visit_For(self, loop: For) -> None:
        if loop.kind is LoopKind.BOUND:
            self.bound(loop)
            return
        if loop.kind not in (LoopKind.SERIAL, LoopKind.VECTOR, LoopKind.UNROLLED,
                             LoopKind.PIPELINED):
            raise self.fail(f"a {loop.kind.value} loop (over {loop.var.name})",
                            "use serial, vector, unrolled, pipelined or bound loops")
        self.require_block(f"the loop over {loop.var.name}")
        if self.cube_statement(loop) or self.copy_statement(loop) or self.vector_statement(loop):
            return
        self.counted(loop)

    def counted(self, loop: For) -> None:
        name = self.names.var(loop.var)
        if isinstance(loop.extent, Const):
            self.ranges[loop.var] = (0, max(0, int(loop.extent.value) - 1))
        try:
            with self.scope(f"for (int32_t {name} = 0; {name} < {self.expr(loop.extent)}; "
                            f"++{name})"):
                with self.statement_list():
                    self.visit(loop.body)
        finally:
            self.ranges.pop(loop.var, None)

    def bound(self, loop: For) -> None:
        if loop.axis != "block_idx" or self.in_block or not isinstance(loop.extent, Const):
            raise self.fail(f"the loop over {loop.var.name} bound to {loop.axis}",
                            "bind one constant loop to block_idx (the AI cores), outermost")
        self.block_extent = int(loop.extent.value)
        self.ranges[loop.var] = (0, self.block_extent - 1)
        self.in_block = True
        with self.scope():
            self.line(f"const int32_t {self.names.var(loop.var)} = "
                      "static_cast<int32_t>(GetBlockIdx());")
            with self.statement_list():
                self.visit(loop.body)
        self.in_block = False

    def visit_IfThenElse(self, stmt: IfThenElse) -> None:
        with self.scope(f"if ({self.expr(stmt.cond)})"):
            with self.statement_list():
                self.visit(stmt.then_body)
        if stmt.else_body is not None:
            with self.scope("else"):
                with self.statement_list():
                    self.visit(stmt.else_body)

    def visit_Store(self, stmt: Store) -> None:
        self.require_block(f"the store into {stmt.buffer.name}")
        if not self.cube_statement(stmt) and not self.copy_statement(stmt):
            self.scalar_store(stmt)

    def scalar_store(self, stmt: Store) -> None:
        """``buffer.SetValue(offset, value)`` (the scalar fallback)."""
        buffer = stmt.buffer
        self.require_scalar(buffer)
        value = self.expr(stmt.value)
        if stmt.accumulate is not None:
            old = self.expr(BufferLoad(buffer, stmt.indices))
            value = combine(stmt.accumulate, old, value, ASCEND, buffer.dtype)
        offset = self.expr(flat_index(buffer, stmt.indices))
        self.line(f"{self.tensor(buffer)}.SetValue({offset}, "
                  f"{ASCEND.store_value(value, buffer.dtype)});")

    def generic_visit(self, stmt: Stmt, *args: object) -> None:
        kind = type(stmt).__name__
        raise self.fail(f"the statement {kind} ({str(stmt).strip()[:80]})",
                        f"the AscendC code generator has no form for {kind}; lower the kernel "
                        "without it")

    # copies -------------------------------------------------------------------------------
    def copy_statement(self, loop: For | Store) -> bool:
        """A nest copying between GM and UB: rows of DataCopyPad, with the queue hand-offs."""
        store = nest_store(loop)
        if store is None or not isinstance(store.value, BufferLoad) or store.accumulate:
            return False
        src, dst = store.value.buffer, store.buffer
        role_in = self.plan.roles.get(dst) if src in self.params else None
        role_out = self.plan.roles.get(src) if dst in self.params else None
        if role_out == "vecout":
            name, ctype = self.names.buffer(src), self.ctype(src)
            self.line(f"{name}_que.EnQue({name});")
            self.line(f"{name} = {name}_que.DeQue<{ctype}>();")
        if role_in is None and role_out is None:
            return False
        self.copy_nest(loop)
        if role_in == "vecin":
            self.line(f"{self.names.buffer(dst)}_que.EnQue({self.names.buffer(dst)});")
            self.pending[-1].append(dst)
        return True

    def copy_nest(self, stmt: Stmt, rename: dict[Buffer, str] | None = None,
                  scalar_ok: bool = True) -> None:
        """A copy nest with its innermost loop as one DataCopyPad where it is a row, element
        moves otherwise (``rename``: tensors standing in for buffers, e.g. a staging one)."""
        if isinstance(stmt, IfThenElse):
            with self.scope(f"if ({self.expr(stmt.cond)})"):
                self.copy_nest(stmt.then_body, rename, scalar_ok)
            return
        if isinstance(stmt, For):
            row = match_row(stmt)
            if row is not None:
                self.row_copy(row, rename or {})
                return
            name = self.names.var(stmt.var)
            self.ranges[stmt.var] = (0, max(0, int(stmt.extent.value) - 1)) \
                if isinstance(stmt.extent, Const) else self.ranges.get(stmt.var, (0, 0))
            try:
                with self.scope(f"for (int32_t {name} = 0; {name} < "
                                f"{self.expr(stmt.extent)}; ++{name})"):
                    self.copy_nest(stmt.body, rename, scalar_ok)
            finally:
                self.ranges.pop(stmt.var, None)
            return
        assert isinstance(stmt, Store)
        value = stmt.value
        if rename and isinstance(value, BufferLoad) and value.buffer.dtype == stmt.buffer.dtype:
            # one element through a staging tensor: a row of one
            self.row_copy(Row(stmt.buffer, flat_index(stmt.buffer, stmt.indices), value.buffer,
                              flat_index(value.buffer, value.indices), 1, None), rename)
            return
        if not scalar_ok:
            raise self.fail(f"the element copy into {stmt.buffer.name} ({str(stmt).strip()})",
                            "Cube operands are copied from GM in contiguous rows")
        if rename:
            raise self.fail(f"an element copy through a staging tensor ({str(stmt).strip()})",
                            "copy contiguous rows")
        self.scalar_store(stmt)

    def row_copy(self, row: Row, rename: dict[Buffer, str]) -> None:
        ctype = self.ctype(row.dst)
        dst = rename.get(row.dst, self.tensor(row.dst))
        src = rename.get(row.src, self.tensor(row.src))
        count = str(row.extent)
        if row.limit is not None:
            count = f"tc_min({row.extent}, {self.expr(row.limit)})"
        with self.scope():
            self.line(f"const int32_t tc_count = {count};")
            with self.scope("if (tc_count > 0)"):
                params = f"{{1, static_cast<uint32_t>(tc_count * sizeof({ctype})), 0, 0, 0}}"
                dst_view = f"{dst}[{self.expr(row.dst_offset)}]"
                src_view = f"{src}[{self.expr(row.src_offset)}]"
                if row.src in self.params:
                    self.line(f"DataCopyPad({dst_view}, {src_view}, DataCopyExtParams{params}, "
                              f"DataCopyPadExtParams<{ctype}>{{false, 0, 0, 0}});")
                else:
                    self.line(f"DataCopyPad({dst_view}, {src_view}, DataCopyExtParams{params});")
        self.calls.add("DataCopyPad")

    # Cube ---------------------------------------------------------------------------------
    def cube_statement(self, loop: For | Store) -> bool:
        store = nest_store(loop)
        if store is None:
            return False
        roles = self.plan.roles
        role = roles.get(store.buffer)
        if role in ("cube_a", "cube_b"):
            self.load_operand(loop, store)
            return True
        if role == "cube_c":
            contraction = match_contraction(loop, self.levels.cube)
            if contraction is not None:
                self.mmad(contraction.c, contraction.a, contraction.b)
                return True
            if isinstance(store.value, Const) and store.accumulate is None:
                self.fill_accumulator(store)
                return True
            raise self.fail(f"the nest computing {store.buffer.name} in {store.buffer.level} "
                            f"({str(store).strip()})", "the Cube writes L0C only through its "
                            "contraction C[i, j] += A[i, k] * B[k, j] and a fill")
        value = store.value.x if isinstance(store.value, Cast) else store.value
        if isinstance(value, BufferLoad) and roles.get(value.buffer) == "cube_c" \
                and store.buffer in self.params:
            self.copy_out_accumulator(loop, value.buffer, store.buffer)
            return True
        return False

    def load_operand(self, loop: For | Store, store: Store) -> None:
        """GM -> L1 (staging, zero-padded) -> L0A / L0B (fractals); or, for a fused chain's
        intermediate, L0C -> UB -> L1 -> L0A / L0B (:meth:`load_intermediate`)."""
        buffer = store.buffer
        value = store.value.x if isinstance(store.value, Cast) else store.value
        if isinstance(value, BufferLoad) and self.plan.roles.get(value.buffer) == "cube_c":
            self.load_intermediate(buffer, value.buffer)
            return
        if not isinstance(store.value, BufferLoad) or store.value.buffer not in self.params:
            raise self.fail(f"the fill of the Cube operand {buffer.name} "
                            f"({str(store).strip()})", "Cube operands are copied from GM")
        name, ctype = self.names.buffer(buffer), self.ctype(buffer)
        stage, local = ("a1", "a2") if self.plan.roles[buffer] == "cube_a" else ("b1", "b2")
        rows, cols = self.fractal_shape(buffer)
        staged = f"{name}_l1"
        with self.scope():
            self.line(f"LocalTensor<{ctype}> {staged} = {name}_{stage}.AllocTensor<{ctype}>();")
            self.line(f"InitConstValue({staged}, InitConstValueParams<{ctype}>"
                      f"{{1, {rows * cols * buffer.dtype.bytes // 32}, 0, {ctype}(0)}});")
            padded = Buffer(buffer.name, (rows, cols), buffer.dtype, level=self.levels.l1)
            self.copy_nest(_retarget(loop, buffer, padded), {padded: staged}, scalar_ok=False)
            self.line(f"{name}_{stage}.EnQue({staged});")
            self.line(f"{staged} = {name}_{stage}.DeQue<{ctype}>();")
            self.line(f"{name} = {name}_{local}.AllocTensor<{ctype}>();")
            self.line(f"LoadData({name}, {staged}, LoadData2DParams{{{rows}, {cols}}});")
            self.line(f"{name}_{stage}.FreeTensor({staged});")
            self.line(f"{name}_{local}.EnQue({name});")
            self.line(f"{name} = {name}_{local}.DeQue<{ctype}>();")
        self.calls.update({"LoadData", "InitConstValue"})

    def load_intermediate(self, operand: Buffer, accumulator: Buffer) -> None:
        """A fused chain's intermediate (thesis §3.4): the first product's L0C tile, converted
        to the operand's dtype by Fixpipe into UB, copied into L1 and loaded into L0A / L0B
        as the second product's operand — it never goes to GM. The nest stores the whole
        tile (the padding of the first product's operands is zero, so is the tile's)."""
        acc, acc_ctype = self.names.buffer(accumulator), self.ctype(accumulator)
        name, ctype = self.names.buffer(operand), self.ctype(operand)
        rows, cols = self.fractal_shape(accumulator)
        if (rows, cols) != self.fractal_shape(operand):
            raise self.fail(f"the Cube operand {operand.name} {list(operand.shape)} filled from "
                            f"the accumulator {accumulator.name} {list(accumulator.shape)}",
                            "an intermediate tile is loaded whole: give both one shape")
        stage, local = ("a1", "a2") if self.plan.roles[operand] == "cube_a" else ("b1", "b2")
        staged_ub, staged_l1 = f"{acc}_ub", f"{name}_l1"
        with self.scope():
            self.line(f"{acc}_co1.EnQue({acc});")
            self.line(f"{acc} = {acc}_co1.DeQue<{acc_ctype}>();")
            self.line(f"LocalTensor<{ctype}> {staged_ub} = {acc}_co2.AllocTensor<{ctype}>();")
            self.line(f"Fixpipe({staged_ub}, {acc}, FixpipeParams{{{rows}, {cols}}});")
            self.line(f"{acc}_co2.EnQue({staged_ub});")
            self.line(f"{staged_ub} = {acc}_co2.DeQue<{ctype}>();")
            self.line(f"LocalTensor<{ctype}> {staged_l1} = {name}_{stage}.AllocTensor<{ctype}>();")
            self.line(f"DataCopy({staged_l1}, {staged_ub}, {rows * cols});")
            self.line(f"{acc}_co2.FreeTensor({staged_ub});")
            self.line(f"{name}_{stage}.EnQue({staged_l1});")
            self.line(f"{staged_l1} = {name}_{stage}.DeQue<{ctype}>();")
            self.line(f"{name} = {name}_{local}.AllocTensor<{ctype}>();")
            self.line(f"LoadData({name}, {staged_l1}, LoadData2DParams{{{rows}, {cols}}});")
            self.line(f"{name}_{stage}.FreeTensor({staged_l1});")
            self.line(f"{name}_{local}.EnQue({name});")
            self.line(f"{name} = {name}_{local}.DeQue<{ctype}>();")
        self.calls.update({"Fixpipe", "DataCopy", "LoadData"})

    def mmad(self, c: Buffer, a: Buffer, b: Buffer) -> None:
        m, k = self.fractal_shape(a)
        n = self.fractal_shape(b)[1]
        allowed = {("float16", "float32"), ("int8", "int32")}
        if (a.dtype.value, c.dtype.value) not in allowed or a.dtype != b.dtype:
            raise self.fail(f"a Cube contraction of {a.dtype} x {b.dtype} into {c.dtype}",
                            "the Cube multiplies float16 into float32 or int8 into int32")
        with self.scope():
            self.line("MmadParams tc_mmad;")
            self.line(f"tc_mmad.m = {m}; tc_mmad.n = {n}; tc_mmad.k = {k}; "
                      "tc_mmad.cmatrixInitVal = false;")
            self.line(f"Mmad({self.names.buffer(c)}, {self.names.buffer(a)}, "
                      f"{self.names.buffer(b)}, tc_mmad);")
        self.calls.add("Mmad")

    def fill_accumulator(self, store: Store) -> None:
        buffer = store.buffer
        rows, cols = self.fractal_shape(buffer)
        ctype = self.ctype(buffer)
        self.line(f"InitConstValue({self.names.buffer(buffer)}, InitConstValueParams<{ctype}>"
                  f"{{1, {rows * cols * buffer.dtype.bytes // 32}, 0, "
                  f"{ASCEND.literal(store.value.value, buffer.dtype)}}});")

    def copy_out_accumulator(self, loop: For | Store, accumulator: Buffer,
                             output: Buffer) -> None:
        """L0C -> UB (Fixpipe: row-major, converted to the output's dtype) -> GM rows."""
        name, ctype = self.names.buffer(accumulator), self.ctype(accumulator)
        out_ctype = self.ctype(output)
        rows, cols = self.fractal_shape(accumulator)
        staged = f"{name}_ub"
        with self.scope():
            self.line(f"{name}_co1.EnQue({name});")
            self.line(f"{name} = {name}_co1.DeQue<{ctype}>();")
            self.line(f"LocalTensor<{out_ctype}> {staged} = "
                      f"{name}_co2.AllocTensor<{out_ctype}>();")
            self.line(f"Fixpipe({staged}, {name}, FixpipeParams{{{rows}, {cols}}});")
            self.line(f"{name}_co2.EnQue({staged});")
            self.line(f"{staged} = {name}_co2.DeQue<{out_ctype}>();")
            padded = Buffer(accumulator.name, (rows, cols), output.dtype,
                            level=self.levels.vector)
            self.copy_nest(_retarget(loop, accumulator, padded), {padded: staged},
                           scalar_ok=False)
            self.line(f"{name}_co2.FreeTensor({staged});")
        self.calls.add("Fixpipe")

    # vector unit --------------------------------------------------------------------------
    def vector_statement(self, loop: For) -> bool:
        level = self.levels.vector
        op = match_vector(loop, level)
        if op is not None:
            args = [f"{self.tensor(op.dst)}[{self.expr(op.dst_offset)}]"]
            args += [f"{self.tensor(b)}[{self.expr(offset)}]" for b, offset in op.operands]
            if op.call == "Cast":
                args.append("RoundMode::CAST_RINT" if op.dst.dtype.bytes == 2
                            else "RoundMode::CAST_NONE")
            if op.scalar is not None:
                args.append(f"static_cast<{self.ctype(op.dst)}>"
                            f"({ASCEND.literal(op.scalar.value, op.dst.dtype)})")
            self.line(f"{op.call}({', '.join(args)}, {op.count});")
            self.calls.add(op.call)
            return True
        reduction = match_reduction(loop, level)
        if reduction is None:
            return False
        self.uses_reduction_scratch = True
        acc = reduction.acc
        with self.scope():
            self.line(f"{reduction.call}(tc_reduce, {self.tensor(reduction.src)}"
                      f"[{self.expr(reduction.src_offset)}], tc_reduce[8], {reduction.count});")
            old = self.expr(BufferLoad(acc.buffer, acc.indices))
            value = combine(reduction.op, old, "tc_reduce.GetValue(0)", ASCEND, acc.buffer.dtype)
            offset = self.expr(flat_index(acc.buffer, acc.indices))
            self.line(f"{self.tensor(acc.buffer)}.SetValue({offset}, {value});")
        self.calls.add(reduction.call)
        return True


def _uses(stmt: Stmt, buffer: Buffer) -> bool:
    """Whether ``stmt`` reads or writes ``buffer``."""
    for node in walk_stmts(stmt):
        if isinstance(node, Store) and node.buffer == buffer:
            return True
        for name in type(node).expr_fields:
            value = getattr(node, name)
            exprs = value if isinstance(value, tuple) else (value,)
            for expr in exprs:
                if isinstance(expr, Expr) and any(
                        isinstance(n, BufferLoad) and n.buffer == buffer for n in walk_expr(expr)):
                    return True
    return False


def _retarget(stmt: Stmt, old: Buffer, new: Buffer) -> Stmt:
    """``stmt`` with every access of ``old`` made an access of ``new`` (same indices)."""
    from tilecraft.kernel_ir.visitor import KernelTransformer

    class Retarget(KernelTransformer):
        def visit_Store(self, node: Store) -> Stmt:
            store = super().generic_visit(node)
            if isinstance(store, Store) and store.buffer == old:
                return Store(new, store.indices, store.value, store.accumulate)
            return store

        def visit_expr(self, expr: Expr) -> Expr:
            from tilecraft.te.visit import transform

            def swap(node: Expr) -> Expr | None:
                if isinstance(node, Cast) and isinstance(node.x, BufferLoad) \
                        and node.x.buffer == old and node.to == new.dtype:
                    return BufferLoad(new, node.x.indices)  # converted on the way (Fixpipe)
                if isinstance(node, BufferLoad) and node.buffer == old:
                    return BufferLoad(new, node.indices)
                return None

            return transform(expr, swap)

    return Retarget().visit(stmt)
