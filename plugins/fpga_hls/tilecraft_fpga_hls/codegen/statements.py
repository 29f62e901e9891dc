"""Kernel IR statements as Vitis-HLS C++ lines.

:class:`HlsEmitter` walks a kernel with the core's :class:`KernelVisitor`:

- a ``pipelined`` loop carries ``#pragma HLS PIPELINE II=n``, an ``unrolled`` one
  ``#pragma HLS UNROLL`` (``factor=`` when it unrolls by less than its extent), every loop a
  label (``L_<var>``); a loop nested in a pipelined loop is unrolled by HLS, so its extent must
  be a constant;
- ``Allocate`` declares an on-chip array in its shape, with ``ARRAY_PARTITION`` for the
  buffer's partitions (registers are partitioned completely) and ``BIND_STORAGE`` for BRAM /
  URAM;
- a ``Dataflow`` region becomes a function of its own holding ``#pragma HLS DATAFLOW``, its
  streams (``hls::stream<T, depth>`` with ``#pragma HLS STREAM``) and one call per stage; each
  stage is a function (``<kernel>_read``, ``<kernel>_compute``, ``<kernel>_write``) taking the
  buffers, streams and loop variables it uses (:mod:`.scope`);
- ``StreamPush`` / ``StreamPop`` are ``write`` / ``read``; a ``Copy`` is a loop nest pipelined
  at II=1 on its innermost dimension; the ``mac_array`` intrinsic a k-loop over a completely
  unrolled ``rows x cols`` array of multiply-accumulates (the PE array).

Anything else (barriers, atomics, asynchronous copies, warp reductions, micro-kernel calls, a
loop kind HLS has no form for) is a CodegenError naming the kernel and the construct.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from tilecraft.codegen import CExprPrinter, Names, combine, flat_index
from tilecraft.errors import CodegenError
from tilecraft.kernel_ir.concurrency import Dataflow
from tilecraft.kernel_ir.nodes import (
    Allocate,
    Buffer,
    BufferLoad,
    Copy,
    For,
    IfThenElse,
    IntrinsicCall,
    Kernel,
    LoopKind,
    PartitionKind,
    Region,
    Seq,
    Stmt,
    Store,
    Stream,
    StreamPop,
    StreamPush,
)
from tilecraft.kernel_ir.visitor import KernelVisitor
from tilecraft.te.expr import Const, Expr, ReduceOp, Var, const
from tilecraft_fpga_hls.codegen.dialect import HlsDialect
from tilecraft_fpga_hls.codegen.scope import FreeNames, free_names

__all__ = ["Function", "HlsEmitter", "copy_loops", "mac_array_loops"]

#: on-chip memory levels and the storage HLS binds them to
_STORAGE_BINDING = {"BRAM": "bram", "URAM": "uram"}
INDENT = "    "


@dataclass
class Function:
    """One generated C++ function: ``role`` is ``top``, ``dataflow`` or ``stage``."""

    name: str
    role: str
    params: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)


class HlsEmitter(KernelVisitor[None]):
    """Emits the functions of one kernel (module docstring); ``functions`` lists the helper
    functions (stages, dataflow regions) in definition order, callees first."""

    def __init__(self, kernel: Kernel, names: Names, dialect: HlsDialect, entry: str) -> None:
        self.kernel = kernel
        self.names = names
        self.dialect = dialect
        self.entry = entry
        self.params = {id(buffer) for buffer in kernel.params}
        self.ranges: dict[Var, tuple[int, int]] = {}
        self.printer = CExprPrinter(kernel.name, names, dialect, self.ranges, self.access)
        self.functions: list[Function] = []
        self.lines: list[str] = []
        self.depth = 1
        #: the enclosing pipelined loop's variable name (loops inside it are unrolled)
        self.pipelined: str | None = None
        self.stage_names: list[str] = []
        self.streams: list[Stream] = []

    # output helpers ---------------------------------------------------------------------
    def fail(self, what: str, fix: str) -> CodegenError:
        return self.printer.fail(what, fix)

    def line(self, text: str) -> None:
        self.lines.append(INDENT * self.depth + text)

    def pragma(self, text: str) -> None:
        """HLS pragmas start their line (as Vitis examples write them)."""
        self.lines.append(f"#pragma HLS {text}")

    @contextmanager
    def braces(self, header: str) -> Iterator[None]:
        """``header { ... }``; a CodegenError abandons the whole unit, so no cleanup."""
        self.line(f"{header} {{")
        self.depth += 1
        yield
        self.depth -= 1
        self.line("}")

    @contextmanager
    def function(self, function: Function) -> Iterator[None]:
        """Emit into ``function``'s body instead of the current one."""
        outer = (self.lines, self.depth, self.pipelined)
        self.lines, self.depth, self.pipelined = function.lines, 1, None
        yield
        self.lines, self.depth, self.pipelined = outer

    def expr(self, expr: Expr) -> str:
        return self.printer.expr(expr)

    def access(self, buffer: Buffer, indices: tuple[Expr, ...]) -> str:
        """A kernel parameter is a flat pointer (``A[i * 17 + k]``); an on-chip array keeps
        its dimensions (``acc[i][j]``), which ``ARRAY_PARTITION`` refers to."""
        name = self.names.buffer(buffer)
        if id(buffer) in self.params:
            return f"{name}[{self.expr(flat_index(buffer, indices))}]"
        if not indices:
            return f"{name}[0]"
        return name + "".join(f"[{self.expr(index)}]" for index in indices)

    # declarations -----------------------------------------------------------------------
    def declaration(self, buffer: Buffer, const_: bool = False) -> str:
        """The C declaration of ``buffer`` as a parameter or a local array."""
        ctype = self.dialect.storage_type(buffer.dtype)
        name = self.names.buffer(buffer)
        if id(buffer) in self.params:
            return f"{'const ' if const_ else ''}{ctype}* {name}"
        dims = "".join(f"[{extent}]" for extent in buffer.shape) or "[1]"
        return f"{ctype} {name}{dims}"

    def stream_name(self, stream: Stream) -> str:
        return self.names.buffer(stream)  # type: ignore[arg-type]  # keyed by identity and name

    def stream_type(self, stream: Stream) -> str:
        return f"hls::stream<{self.dialect.storage_type(stream.dtype)}, {stream.depth}>"

    # statements ---------------------------------------------------------------------------
    def generic_visit(self, stmt: Stmt, *args: object) -> None:
        raise self.fail(f"the statement {type(stmt).__name__} ({str(stmt).strip()[:80]})",
                        "an HLS accelerator has no form for it; lower the kernel with the "
                        "FPGA strategy (read / compute / write dataflow)")

    def visit_Seq(self, stmt: Seq) -> None:
        for child in stmt.stmts:
            self.visit(child)

    def visit_For(self, loop: For) -> None:
        name = self.names.var(loop.var)
        extent = loop.extent
        if loop.kind not in (LoopKind.SERIAL, LoopKind.PIPELINED, LoopKind.UNROLLED,
                             LoopKind.STAGE):
            raise self.fail(f"a {loop.kind.value} loop (over {loop.var.name})",
                            "use serial, pipelined, unrolled or stage loops on an FPGA")
        if self.pipelined is not None and not isinstance(extent, Const):
            raise self.fail(f"the loop over {loop.var.name} of extent {extent} inside the "
                            f"pipelined loop {self.pipelined}: HLS unrolls loops inside a "
                            "pipelined loop, which needs a constant extent",
                            "give the inner loop a constant extent or pipeline it instead")
        if isinstance(extent, Const):
            self.ranges[loop.var] = (0, max(0, int(extent.value) - 1))
        label = self.names.fresh(f"L_{loop.var.name}")
        outer_pipelined = self.pipelined
        try:
            with self.braces(f"{label}: for (int {name} = 0; {name} < {self.expr(extent)}; "
                            f"++{name})"):
                if loop.kind is LoopKind.PIPELINED:
                    if outer_pipelined is None:
                        self.pragma(f"PIPELINE II={loop.initiation_interval or 1}")
                        self.pipelined = loop.var.name
                elif loop.kind is LoopKind.UNROLLED:
                    trips = int(extent.value) if isinstance(extent, Const) else None
                    factor = loop.lanes if 1 < loop.lanes and loop.lanes != trips else 0
                    self.pragma(f"UNROLL factor={factor}" if factor else "UNROLL")
                self.visit(loop.body)
        finally:
            self.pipelined = outer_pipelined
            self.ranges.pop(loop.var, None)

    def visit_IfThenElse(self, stmt: IfThenElse) -> None:
        with self.braces(f"if ({self.expr(stmt.cond)})"):
            self.visit(stmt.then_body)
        if stmt.else_body is not None:
            with self.braces("else"):
                self.visit(stmt.else_body)

    def visit_Allocate(self, stmt: Allocate) -> None:
        buffer = stmt.buffer
        if buffer.level not in ("register", *_STORAGE_BINDING):
            raise self.fail(f"the allocation of {buffer.name} in {buffer.level}",
                            "allocate on chip (register, BRAM or URAM); off-chip arrays are "
                            "the kernel's parameters")
        if buffer.lanes != 1:
            raise self.fail(f"the vector element type {buffer.element_type} of {buffer.name}",
                            "use scalar elements (partition the array for parallel access)")
        name = self.names.buffer(buffer)
        # declared where it is allocated: its scope ends with the enclosing block, and every
        # buffer has its own name (Names), so no block of its own is needed
        self.line(f"{self.declaration(buffer)};")
        if buffer.level == "register":
            self.pragma(f"ARRAY_PARTITION variable={name} type=complete dim=0")
        else:
            self.pragma(f"BIND_STORAGE variable={name} type=ram_2p "
                        f"impl={_STORAGE_BINDING[buffer.level]}")
        for partition in buffer.partitions:
            if not 0 <= partition.dim < max(1, buffer.ndim):
                raise self.fail(f"the partition of dimension {partition.dim} of "
                                f"{buffer.name}, which has {buffer.ndim}",
                                "partition a dimension the buffer has")
            kind = partition.kind.value
            factor = "" if partition.kind is PartitionKind.COMPLETE else \
                f" factor={partition.factor}"
            self.pragma(f"ARRAY_PARTITION variable={name} type={kind}{factor} "
                        f"dim={partition.dim + 1}")
        self.visit(stmt.body)

    def visit_Store(self, stmt: Store) -> None:
        target = self.access(stmt.buffer, stmt.indices)
        value = self.expr(stmt.value)
        dtype = stmt.buffer.dtype
        if stmt.accumulate is not None:
            old = self.expr(BufferLoad(stmt.buffer, stmt.indices))
            value = combine(stmt.accumulate, old, value, self.dialect, dtype)
        self.line(self.dialect.store_statement(target, value, dtype))

    def visit_StreamPush(self, stmt: StreamPush) -> None:
        value = self.dialect.store_value(self.expr(stmt.value), stmt.stream.dtype)
        self.line(f"{self.stream_name(stmt.stream)}.write({value});")

    def visit_StreamPop(self, stmt: StreamPop) -> None:
        read = f"{self.stream_name(stmt.stream)}.read()"
        value = self.dialect.load_value(read, stmt.stream.dtype)
        target = self.access(stmt.buffer, stmt.indices)
        self.line(self.dialect.store_statement(target, value, stmt.buffer.dtype))

    def visit_Copy(self, stmt: Copy) -> None:
        if stmt.dst.extents != stmt.src.extents:
            raise self.fail(f"the copy {str(stmt).strip()} between regions of extents "
                            f"{stmt.dst.extents} and {stmt.src.extents}",
                            "copy regions of the same extents")
        self.visit(copy_loops(stmt, pipelined=self.pipelined is not None))

    def visit_IntrinsicCall(self, stmt: IntrinsicCall) -> None:
        if stmt.intrinsic != "mac_array":
            raise self.fail(f"the intrinsic {stmt.intrinsic}",
                            "the fpga_hls target declares only mac_array")
        self.visit(mac_array_loops(stmt, pipelined=self.pipelined is not None))

    def visit_Dataflow(self, stmt: Dataflow) -> None:
        """The region as a function of its own, each stage a function (module docstring)."""
        region = Function(self.names.fresh(f"{self.entry}_dataflow"), "dataflow")
        streams = list(stmt.streams)
        calls = []
        for index, stage in enumerate(stmt.stages):
            used = free_names(stage)
            for stream in used.streams:
                if not any(stream is known for known in streams):
                    streams.append(stream)
            calls.append(self._stage_function(index, stage, used))
        self.streams.extend(streams)
        used_region = free_names(stmt)
        region.params = self._parameters(used_region, streams=())
        with self.function(region):
            self.pragma("DATAFLOW")
            for stream in streams:
                name = self.stream_name(stream)
                self.line(f"{self.stream_type(stream)} {name}(\"{stream.name}\");")
                self.pragma(f"STREAM variable={name} depth={stream.depth}")
            for call in calls:
                self.line(call)
            for stream in streams:
                self.line(f"TC_CHECK_DRAINED({self.stream_name(stream)});")
        self.functions.append(region)
        self.line(f"{region.name}({', '.join(self._arguments(used_region, ()))});")

    # dataflow helpers ---------------------------------------------------------------------
    def _stage_function(self, index: int, stage: Stmt, used: FreeNames) -> str:
        """Emit stage ``index`` as a function; return the line calling it."""
        body = stage
        hint = f"stage{index}"
        if isinstance(stage, For) and stage.kind is LoopKind.STAGE:
            hint = stage.var.name
        function = Function(self.names.fresh(f"{self.entry}_{hint}"), "stage")
        function.params = self._parameters(used, used.streams)
        self.stage_names.append(function.name)
        with self.function(function):
            if isinstance(stage, For) and stage.kind is LoopKind.STAGE \
                    and stage.extent == const(1):
                # a stage loop of one trip: its variable is 0
                if stage.var in free_names(stage.body).variables:
                    self.line(f"const int {self.names.var(stage.var)} = 0;")
                body = stage.body
            self.visit(body)
        self.functions.append(function)
        arguments = self._arguments(used, used.streams)
        return f"{function.name}({', '.join(arguments)});"

    def _parameters(self, used: FreeNames, streams: Sequence[Stream]) -> list[str]:
        params = [self.declaration(buffer, const_=not any(buffer is w for w in used.written))
                  for buffer in used.buffers]
        params += [f"{self.stream_type(stream)}& {self.stream_name(stream)}"
                   for stream in streams]
        params += [f"int {self.names.var(var)}" for var in used.variables]
        return params

    def _arguments(self, used: FreeNames, streams: Sequence[Stream]) -> list[str]:
        return ([self.names.buffer(buffer) for buffer in used.buffers]
                + [self.stream_name(stream) for stream in streams]
                + [self.names.var(var) for var in used.variables])


def _element(region: Region, loops: list[Var]) -> tuple[Expr, ...]:
    """The indices of element ``loops`` of ``region`` (base + loop * step per dimension)."""
    indices = []
    for base, var, step in zip(region.base, loops, region.steps):
        offset = var * step if step != 1 else var
        indices.append(offset if base == const(0) else base + offset)
    return tuple(indices)


def copy_loops(copy: Copy, pipelined: bool) -> Stmt:
    """``dst <- src`` as a loop nest whose innermost loop is pipelined at II=1 (every loop
    unrolled inside an enclosing pipelined loop), converting the element type if needed."""
    loops = [Var(f"c{d}") for d in range(len(copy.dst.extents))]
    value: Expr = BufferLoad(copy.src.buffer, _element(copy.src, loops))
    if copy.src.buffer.dtype is not copy.dst.buffer.dtype:
        value = value.astype(copy.dst.buffer.dtype)
    body: Stmt = Store(copy.dst.buffer, _element(copy.dst, loops), value)
    for depth in reversed(range(len(loops))):
        kind = LoopKind.PIPELINED if depth == len(loops) - 1 else LoopKind.SERIAL
        if pipelined:
            kind = LoopKind.UNROLLED
        body = For(loops[depth], const(copy.dst.extents[depth]), kind, body,
                   initiation_interval=1 if kind is LoopKind.PIPELINED else None)
    return body


def mac_array_loops(call: IntrinsicCall, pipelined: bool) -> Stmt:
    """``Dst[i1, i2] += Src1[i1, r1] * Src2[r1, i2]`` (in the accumulator's type) as Kernel
    IR: a k-loop (pipelined at II=1, unrolled inside a pipelined loop) over the completely
    unrolled ``rows x cols`` PE array."""
    src1, src2, dst = call.operands
    rows, depth = src1.extents
    cols = src2.extents[1]
    i1, i2, r1 = Var("i1"), Var("i2"), Var("r1")
    accumulator = dst.buffer.dtype
    a: Expr = BufferLoad(src1.buffer, _element(src1, [i1, r1]))
    b: Expr = BufferLoad(src2.buffer, _element(src2, [r1, i2]))
    if a.dtype is not accumulator:
        a, b = a.astype(accumulator), b.astype(accumulator)
    update = Store(dst.buffer, _element(dst, [i1, i2]), a * b, accumulate=ReduceOp.SUM)
    array = For(i1, const(rows), LoopKind.UNROLLED,
                For(i2, const(cols), LoopKind.UNROLLED, update))
    kind = LoopKind.UNROLLED if pipelined else LoopKind.PIPELINED
    return For(r1, const(depth), kind, array,
               initiation_interval=None if pipelined else 1)
