"""The verifier's checks of names against the target spec and of concurrent constructs.

Mixed into the verifier (:mod:`.verify`), which supplies ``fail``, ``_access``, ``_region``,
``_expr``, ``_stmt`` and ``_declare``. With a spec it checks that a bound loop's axis is one of
the spec's bindable axes and its extent within the axis' limit, that a barrier's scope is one of
its barrier scopes; always, that buffer layouts fit their shapes, vector element types line up,
accumulations shared by threads are atomic, asynchronous copies are waited for before their
data is read, pipelines rotate enough buffers, dataflow streams balance and subgroup reductions
reduce over a bound lane (the rules are in :mod:`.concurrency`); with the spec's thread
hierarchy, that no barrier or subgroup reduction sits under a condition differing between the
threads of a block.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tilecraft.errors import LoweringError
from tilecraft.kernel_ir.concurrency import (
    AsyncCopy,
    AtomicUpdate,
    CommitGroup,
    Dataflow,
    LaneReduce,
    Pipeline,
    SubgroupReduce,
    WaitGroup,
)
from tilecraft.kernel_ir.layout import parse_layout
from tilecraft.kernel_ir.nodes import (
    Buffer,
    BufferLoad,
    For,
    IfThenElse,
    LoopKind,
    Region,
    Stmt,
    Store,
    Stream,
    StreamPop,
    StreamPush,
    expr_children,
    walk_expr,
)
from tilecraft.kernel_ir.visitor import stmt_children, walk_stmts
from tilecraft.target.hierarchy import LaunchScope
from tilecraft.te.bounds import Affine, affine
from tilecraft.te.expr import Binary, BinaryOp, Const, Expr, Var


@dataclass
class Scope:
    ranges: dict[Var, tuple[int, int] | None] = field(default_factory=dict)
    buffers: set[int] = field(default_factory=set)
    facts: list[Affine] = field(default_factory=list)
    loops: tuple[Any, ...] = ()
    under_condition: bool = False


def _describe(stmt: Stmt) -> str:
    from tilecraft.kernel_ir.printer import stmt_head

    return f"`{stmt_head(stmt)}`"


def _vars(exprs: tuple[Expr, ...]) -> set[Var]:
    return {node for expr in exprs for node in walk_expr(expr) if isinstance(node, Var)}


def lanes_of(expr: Expr) -> int:
    """The lanes of a Kernel IR value: those of the vector buffers it loads (1: a scalar); a
    ``LoweringError`` when two different widths meet."""
    if isinstance(expr, BufferLoad):
        return expr.buffer.lanes
    if isinstance(expr, LaneReduce):
        return 1
    widths = {lanes_of(child) for child in expr_children(expr)} - {1}
    if len(widths) > 1:
        raise LoweringError(f"the value {expr} mixes vectors of {sorted(widths)} lanes; give "
                            "every vector operand the same lanes")
    return widths.pop() if widths else 1


class ConcurrencyChecks:
    """Spec-name and concurrency checks of the verifier (module docstring)."""

    def __init__(self, spec: Any) -> None:
        self.threads = getattr(spec, "threads", None) if spec is not None else None
        scopes = getattr(spec, "barrier_scopes", None) if spec is not None else None
        self.barrier_scopes: tuple[str, ...] | None = \
            tuple(scopes) if isinstance(scopes, (tuple, list)) else None
        self.alloc_depth: dict[int, int] = {}
        self.shared_bytes = 0
        #: whether a buffer with a vector element type was declared (values need lane checks)
        self.has_vectors = False
        self.rotating: dict[int, tuple[Var, int]] = {}
        self.open_copies: list[AsyncCopy] = []
        self.committed: list[list[AsyncCopy]] = []
        #: the enclosing conditions that differ between the threads of a block
        self.divergent: list[Expr] = []

    # names against the spec -------------------------------------------------------------
    def check_axis(self, loop: For, where: str, enclosing: tuple[Any, ...] = ()) -> None:
        if self.threads is None:
            return
        axes = {axis.name: axis for axis in self.threads.axes}
        axis = axes.get(loop.axis or "")
        if axis is None:
            self.fail(where, f"loop {loop.var.name} is bound to axis {loop.axis!r}, which is "
                      f"not a bindable axis of {self.spec_name} ({', '.join(axes)}); bind it to "
                      "one of those")
        if isinstance(loop.extent, Const) and int(loop.extent.value) > axis.max_extent:
            self.fail(where, f"loop {loop.var.name} has {loop.extent.value} iterations but axis "
                      f"{axis.name} of {self.spec_name} allows at most {axis.max_extent}; split "
                      "the loop and bind the parts to two axes")
        if axis.scope is LaunchScope.BLOCK:
            threads = 1
            for outer in (*enclosing, loop):
                if isinstance(outer, For) and outer.kind is LoopKind.BOUND and \
                        isinstance(outer.extent, Const) and outer.axis in axes and \
                        axes[outer.axis].scope is LaunchScope.BLOCK:
                    threads *= int(outer.extent.value)
            limit = self.threads.max_threads_per_block
            if threads > limit:
                self.fail(where, f"the block has {threads} threads but {self.spec_name} runs at "
                          f"most {limit} per block; bind fewer iterations to thread axes")

    def check_shared_memory(self, buffer: Buffer, where: str) -> None:
        """Block-shared allocations together fit the most shared memory a block can get."""
        if self.threads is None or buffer.level != self.threads.shared_level:
            return
        self.shared_bytes += buffer.nbytes
        limit = self.threads.max_shared_bytes_per_block
        if limit is not None and self.shared_bytes > limit:
            self.fail(where, f"the kernel's {buffer.level} allocations take "
                      f"{self.shared_bytes} bytes but a block of {self.spec_name} gets at most "
                      f"{limit}; use smaller tiles")

    def check_element_type_and_layout(self, buffer: Buffer, where: str) -> None:
        if buffer.lanes != 1:
            if buffer.lanes < 1:
                self.fail(where, f"{buffer.name} has lanes={buffer.lanes}; a vector element "
                          "type needs lanes >= 1")
            self.has_vectors = True
        if buffer.layout == "row_major":
            return
        try:
            layout = parse_layout(buffer.layout)
        except LoweringError as err:
            self.fail(where, str(err))
        problem = layout.problem(buffer.shape)
        if problem is not None:
            self.fail(where, f"layout {buffer.layout} of {buffer.name} {problem}; choose a "
                      "layout that fits the shape")

    def check_lanes(self, buffer: Buffer, value: Expr, where: str) -> None:
        if not self.has_vectors:
            return
        try:
            lanes = lanes_of(value)
        except LoweringError as err:
            self.fail(f"in {where}", str(err))
        if lanes not in (1, buffer.lanes):
            self.fail(f"in {where}", f"the value is a vector of {lanes} lanes but "
                      f"{buffer.name} holds {buffer.element_type}; reduce it with LaneReduce "
                      "or store into a buffer of that many lanes")

    def check_shared_accumulation(self, stmt: Store | AtomicUpdate, scope: Scope,
                                  where: str) -> None:
        """An accumulation into an element that threads of an enclosing bound loop share."""
        threads = [loop for loop in scope.loops[self.alloc_depth.get(id(stmt.buffer), 0):]
                   if isinstance(loop, For) and loop.kind is LoopKind.BOUND]
        if not threads:
            return
        forms = [affine(index) for index in stmt.indices]
        for loop in threads:
            # each thread owns its element only when an index moves with the thread's variable
            # (an affine term); a data-dependent index (a histogram's) may collide
            if not any(form is not None and form.terms().get(loop.var, 0) != 0
                       for form in forms):
                self.fail(f"in {where}", f"every thread of {loop.var.name} (axis {loop.axis}) "
                          f"accumulates into the same element of {stmt.buffer.name}, a race; "
                          "use AtomicUpdate, a SubgroupReduce, or give each thread its own "
                          "element")

    # synchronisation under conditions -----------------------------------------------------
    def differs_between_threads(self, cond: Expr, scope: Scope) -> bool:
        """Whether ``cond`` reads the variable of an enclosing loop bound to a thread axis of
        a block (known only with the spec's thread hierarchy)."""
        if self.threads is None:
            return False
        block = {axis.name for axis in self.threads.axes if axis.scope is LaunchScope.BLOCK}
        threads = {loop.var for loop in scope.loops if isinstance(loop, For)
                   and loop.kind is LoopKind.BOUND and loop.axis in block}
        return bool(threads & _vars((cond,)))

    def check_converged(self, what: str, where: str) -> None:
        """A barrier or a subgroup reduction is reached by every thread of its group: none
        sits under a condition that differs between the threads of a block."""
        if self.divergent:
            self.fail(where, f"{what} sits under `if {self.divergent[-1]}`, which differs "
                      "between the threads of a block; threads that skip it would leave the "
                      "others waiting (move it out of the condition, giving the threads that "
                      "have nothing to contribute the identity)")

    # asynchronous copies ------------------------------------------------------------------
    def in_flight(self) -> list[AsyncCopy]:
        return self.open_copies + [copy for group in self.committed for copy in group]

    def check_not_in_flight(self, buffer: Buffer, indices: tuple[Expr, ...] | None,
                            base: tuple[Expr, ...] | None, where: str) -> None:
        """Fail when the access certainly touches the destination of a copy still in flight
        (a copy covering the whole dimension, or starting at the same index)."""
        if not self.open_copies and not self.committed:
            return
        for copy in self.in_flight():
            dst = copy.dst
            if dst.buffer is not buffer:
                continue
            starts = indices if indices is not None else base
            if starts is None or all(extent == size or str(start) == str(at)
                                     for extent, size, start, at in
                                     zip(dst.extents, buffer.shape, dst.base, starts)):
                self.fail(where, f"{buffer.name} is read while the asynchronous copy "
                          f"{_describe(copy)} into it may still be in flight; commit the copy "
                          "and wait_group for it first")

    def visit_AsyncCopy(self, stmt: AsyncCopy, scope: Scope) -> None:
        where = _describe(stmt)
        self._region(stmt.dst, scope, where)
        self._region(stmt.src, scope, where)
        if stmt.dst.buffer.dtype != stmt.src.buffer.dtype:
            self.fail(where, f"copies {stmt.src.buffer.dtype.value} into "
                      f"{stmt.dst.buffer.dtype.value}; an asynchronous copy does not convert")
        counts = [1, 1]
        for position, region in enumerate((stmt.dst, stmt.src)):
            for extent in region.extents:
                counts[position] *= extent
        if counts[0] != counts[1]:
            self.fail(where, f"copies {counts[1]} elements into a region of {counts[0]}; give "
                      "both regions the same extents")
        self.open_copies.append(stmt)

    def visit_CommitGroup(self, stmt: CommitGroup, scope: Scope) -> None:
        # an empty group counts too, as cp.async.commit_group's does
        self.committed.append(self.open_copies)
        self.open_copies = []

    def visit_WaitGroup(self, stmt: WaitGroup, scope: Scope) -> None:
        if stmt.pending < 0:
            self.fail(_describe(stmt), f"wait_group({stmt.pending}): the number of groups "
                      "left in flight must be >= 0")
        keep = stmt.pending
        self.committed = self.committed[len(self.committed) - keep:] if keep else []

    def check_all_copies_waited(self) -> None:
        pending = self.in_flight()
        if pending:
            self.fail(_describe(pending[0]), "the asynchronous copy is never waited for before "
                      "the kernel ends; commit it and end with wait_group(0)")

    # pipelines and dataflow ---------------------------------------------------------------
    def visit_Pipeline(self, stmt: Pipeline, scope: Scope) -> None:
        where = f"in {_describe(stmt)}"
        if not stmt.stages:
            self.fail(where, "a pipeline needs at least one stage")
        used = [buffers_used(stage) for stage in stmt.stages]
        for buffer in stmt.buffers:
            stages = [number for number, found in enumerate(used) if id(buffer) in found]
            span = stages[-1] - stages[0] + 1 if stages else 0
            if span > stmt.depth:
                self.fail(where, f"rotating buffer {buffer.name} is used by stages {stages[0]} "
                          f"to {stages[-1]}, which overlap {span} iterations, but the pipeline "
                          f"has depth {stmt.depth}: an earlier stage would overwrite the copy "
                          f"a later stage still reads; use depth >= {span}")
            if id(buffer) not in scope.buffers:
                self.fail(where, f"rotating buffer {buffer.name} is neither a parameter nor "
                          "allocated around the pipeline")
            if not buffer.shape or buffer.shape[0] != stmt.depth:
                self.fail(where, f"rotating buffer {buffer.name} has shape {list(buffer.shape)}"
                          f"; its first dimension must be the depth {stmt.depth}")
            self.rotating[id(buffer)] = (stmt.var, stmt.depth)
        for stage in stmt.stages:
            self._for(For(stmt.var, stmt.extent, LoopKind.SERIAL, stage), scope)
        for buffer in stmt.buffers:
            self.rotating.pop(id(buffer), None)

    def check_rotation(self, buffer: Buffer, first: Expr, where: str) -> None:
        """An access of a rotating buffer picks its copy with ``(var + c) % depth``."""
        found = self.rotating.get(id(buffer))
        if found is None:
            return
        var, depth = found
        if not (isinstance(first, Binary) and first.op is BinaryOp.MOD
                and isinstance(first.b, Const) and int(first.b.value) == depth
                and var in _vars((first.a,))):
            self.fail(where, f"rotating buffer {buffer.name} is indexed with {first} in its "
                      f"first dimension; pick the stage's copy with ({var.name} + c) % {depth}")

    def visit_Dataflow(self, stmt: Dataflow, scope: Scope) -> None:
        where = f"in {_describe(stmt)}"
        declared = {id(stream) for stream in stmt.streams}
        pushes: dict[int, tuple[int, int | None]] = {}
        pops: dict[int, tuple[int, int | None]] = {}
        names: dict[int, Stream] = {}
        for number, stage in enumerate(stmt.stages):
            self._stmt(stage, scope)
            for table, counts in ((pushes, _stream_counts(stage, StreamPush)),
                                  (pops, _stream_counts(stage, StreamPop))):
                for stream, count in counts.items():
                    names[id(stream)] = stream
                    if id(stream) not in declared:
                        self.fail(where, f"stage {number} uses stream {stream.name}, which the "
                                  "region does not declare; list it in Dataflow(streams=...)")
                    if id(stream) in table:
                        verb = "pushed" if table is pushes else "popped"
                        self.fail(where, f"stream {stream.name} is {verb} by stages "
                                  f"{table[id(stream)][0]} and {number}; a stream links one "
                                  "producer stage to one consumer stage")
                    table[id(stream)] = (number, count)
        for stream in stmt.streams:
            push, pop = pushes.get(id(stream)), pops.get(id(stream))
            if push is None or pop is None:
                missing = "pushed" if push is None else "popped"
                self.fail(where, f"stream {stream.name} is never {missing} in the region; "
                          "remove it or add the missing stage")
            if pop[0] <= push[0]:
                self.fail(where, f"stream {stream.name} is popped by stage {pop[0]} but pushed "
                          f"by stage {push[0]}; order the producer stage before the consumer")
            if push[1] is not None and pop[1] is not None and push[1] != pop[1]:
                self.fail(where, f"stream {stream.name} is pushed {push[1]} times but popped "
                          f"{pop[1]} times; a dataflow region must drain every stream")

    # atomics and subgroup reductions --------------------------------------------------------
    def visit_AtomicUpdate(self, stmt: AtomicUpdate, scope: Scope) -> None:
        where = _describe(stmt)
        self._access(stmt.buffer, stmt.indices, scope, f"in {where}", "updates")
        self._expr(stmt.value, scope, where)
        if stmt.value.dtype != stmt.buffer.dtype:
            self.fail(f"in {where}", f"the value has dtype {stmt.value.dtype.value} but "
                      f"{stmt.buffer.name} holds {stmt.buffer.dtype.value}; cast the value")
        if stmt.buffer.lanes != 1 or lanes_of(stmt.value) != 1:
            self.fail(f"in {where}", "atomics update one scalar element; use a scalar buffer")

    def visit_SubgroupReduce(self, stmt: SubgroupReduce, scope: Scope) -> None:
        where = f"in {_describe(stmt)}"
        self._access(stmt.buffer, stmt.indices, scope, where, "stores into")
        self._expr(stmt.value, scope, where.removeprefix("in "))
        if stmt.value.dtype != stmt.buffer.dtype:
            self.fail(where, f"the value has dtype {stmt.value.dtype.value} but "
                      f"{stmt.buffer.name} holds {stmt.buffer.dtype.value}; cast the value")
        self.check_converged("the subgroup reduction", where)
        lane = next((loop for loop in scope.loops if isinstance(loop, For)
                     and loop.var == stmt.lane and loop.kind is LoopKind.BOUND), None)
        if lane is None:
            self.fail(where, f"the lane variable {stmt.lane.name} is not bound by an enclosing "
                      "BOUND loop; a subgroup reduction runs across the threads of one")
        width = stmt.width
        if width < 1 or width & (width - 1):
            self.fail(where, f"width {width} must be a power of two")
        if isinstance(lane.extent, Const) and int(lane.extent.value) % width:
            self.fail(where, f"the lane loop {lane.var.name} has {lane.extent.value} threads, not "
                      f"a multiple of the width {width}")
        if self.threads is not None and width > self.threads.subgroup_size:
            self.fail(where, f"width {width} exceeds the subgroup size "
                      f"{self.threads.subgroup_size} of {self.spec_name}; reduce in shared "
                      "memory across subgroups")


def buffers_used(stmt: Stmt) -> set[int]:
    """The ids of the buffers ``stmt`` reads or writes."""
    found: set[int] = set()

    def collect(value: Any) -> None:
        if isinstance(value, tuple):
            for item in value:
                collect(item)
        elif isinstance(value, Region):
            found.add(id(value.buffer))
            collect(value.base)
        elif isinstance(value, Expr):
            found.update(id(node.buffer) for node in walk_expr(value)
                         if isinstance(node, BufferLoad))

    for node in walk_stmts(stmt):
        buffer = getattr(node, "buffer", None)
        if isinstance(buffer, Buffer):
            found.add(id(buffer))
        for name in type(node).expr_fields:
            collect(getattr(node, name))
    return found


def _stream_counts(stmt: Stmt, kind: type) -> dict[Stream, int | None]:
    """How often each stream is pushed (or popped) by ``stmt``: None when a condition or a
    non-constant extent makes the count unknown."""
    counts: dict[Stream, int | None] = {}
    if isinstance(stmt, kind):
        counts[stmt.stream] = 1  # type: ignore[attr-defined]
        return counts
    multiplier: int | None = 1
    if isinstance(stmt, (For, Pipeline)):
        multiplier = int(stmt.extent.value) if isinstance(stmt.extent, Const) else None
    elif isinstance(stmt, IfThenElse):
        multiplier = None
    for child in stmt_children(stmt):
        for stream, count in _stream_counts(child, kind).items():
            total = None if count is None or multiplier is None else count * multiplier
            if stream in counts:
                previous = counts[stream]
                total = None if previous is None or total is None else previous + total
            counts[stream] = total
    return counts

