"""Structural checks of a kernel before any code generator or the interpreter sees it.

``verify_kernel(kernel, spec)`` raises :class:`~tilecraft.errors.LoweringError` naming the
kernel, the statement and the fix when:

- a variable is used outside every loop that binds it, or a loop rebinds a variable of an
  enclosing loop; a te ``IterVar`` / ``Load`` / ``Reduce`` was left in the IR;
- a buffer is used that is neither a parameter nor allocated around the use; names of
  parameters and allocations are not unique; an output is not a parameter;
- a store, load, region or stream pop has the wrong number of indices, non-integer indices,
  or a stored value of another dtype than its buffer;
- there is more than one PARALLEL loop, or one that is nested in a loop or a condition;
- a VECTOR loop has no lanes, a BOUND loop no axis, a PIPELINED loop no initiation interval;
- (with ``check_bounds``) an index provably can leave its buffer: its range, given the loop
  extents and the conditions guarding it, is known and exceeds the buffer;
- (with a target spec) a buffer lives in a memory level the spec does not have, or a loop
  kind is not among the spec's ``loop_kinds``; a bound loop's axis is not one of the spec's
  bindable axes (``spec.threads``) or exceeds its limit, a block has more threads than
  ``max_threads_per_block``, the shared level's allocations exceed a block's shared memory, a
  barrier's scope is not one of ``spec.barrier_scopes``, a subgroup reduction is wider than the
  subgroup;
- a layout does not fit its buffer's shape, a vector value meets a buffer of other lanes, an
  accumulation that threads of a bound loop share is not atomic, an asynchronous copy's data is
  read before a wait covers it (where one statement sequence shows it) or never waited for, a
  pipeline has fewer rotating copies than stages a buffer is live across, a dataflow region's
  streams do not link one producer to one later consumer with as many pops as pushes (see
  :mod:`.verify_concurrency`).

>>> from tilecraft.dtypes import DType
>>> from tilecraft.kernel_ir.nodes import Buffer, For, Kernel, LoopKind, Store
>>> from tilecraft.te import Var, const
>>> A = Buffer("A", (4,), DType.FLOAT32)
>>> i, j = Var("i"), Var("j")
>>> verify_kernel(Kernel("ok", (A,), ("A",), For(i, const(4), LoopKind.SERIAL,
...                                                Store(A, (i,), const(0.0)))))
>>> verify_kernel(Kernel("bad", (A,), ("A",), Store(A, (j,), const(0.0))))
Traceback (most recent call last):
...
tilecraft.errors.LoweringError: kernel bad: in `A[j] = 0.0`: variable j is not bound by an \
enclosing loop; bind it with a For loop around this statement or substitute a value for it
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tilecraft.dtypes import DType
from tilecraft.errors import LoweringError
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
    MicroKernelCall,
    Region,
    Seq,
    Stmt,
    Store,
    StreamPop,
    StreamPush,
    expr_children,
)
from tilecraft.kernel_ir.printer import stmt_head
from tilecraft.kernel_ir.verify_concurrency import ConcurrencyChecks, Scope
from tilecraft.kernel_ir.visitor import KernelVisitor
from tilecraft.te.bounds import Affine, affine, facts_from_condition, index_in_bounds, interval
from tilecraft.te.bounds import tighten as tighten_ranges
from tilecraft.te.expr import Expr, IterVar, Load, Reduce, Select, Var


def verify_kernel(kernel: Kernel, spec: Any = None, *, check_bounds: bool = True) -> None:
    """Raise :class:`~tilecraft.errors.LoweringError` if ``kernel`` is malformed (see the
    module docstring); ``spec`` is a target spec (``memory.levels``, ``loop_kinds``)."""
    _Verifier(kernel, spec, check_bounds).run()


_Scope = Scope


def _describe(stmt: Stmt) -> str:
    return f"`{stmt_head(stmt)}`"


class _Verifier(ConcurrencyChecks, KernelVisitor[None]):
    def __init__(self, kernel: Kernel, spec: Any, check_bounds: bool):
        super().__init__(spec)
        self.kernel = kernel
        self.check_bounds = check_bounds
        self.levels = [level.name for level in spec.memory.levels] if spec is not None else None
        self.loop_kinds = ({getattr(k, "value", k) for k in spec.loop_kinds}
                           if spec is not None else None)
        self.spec_name = getattr(spec, "name", "the target")
        self.names: set[str] = set()
        self.parallel: For | None = None

    def fail(self, where: str, problem: str) -> None:
        raise LoweringError(f"kernel {self.kernel.name}: {where}: {problem}")

    def run(self) -> None:
        scope = _Scope()
        for buffer in self.kernel.params:
            where = f"parameter {buffer.name}"
            self._declare(buffer, where)
            scope.buffers.add(id(buffer))
        params = [b.name for b in self.kernel.params]
        for name in self.kernel.outputs:
            if name not in params:
                self.fail(f"output {name}", f"not a parameter of the kernel (parameters: "
                          f"{', '.join(params)}); add a parameter buffer named {name}")
        self._stmt(self.kernel.body, scope)
        self.check_all_copies_waited()

    def _declare(self, buffer: Buffer, where: str) -> None:
        if buffer.name in self.names:
            self.fail(where, f"the name {buffer.name} is used by two buffers; give every "
                      "parameter and allocation of a kernel a unique name")
        self.names.add(buffer.name)
        if any(extent < 1 for extent in buffer.shape):
            self.fail(where, f"shape {list(buffer.shape)} has an extent below 1")
        self.check_element_type_and_layout(buffer, where)
        if self.levels is not None and buffer.level not in self.levels:
            self.fail(where, f"memory level {buffer.level!r} is not in the memory hierarchy of "
                      f"{self.spec_name} ({', '.join(self.levels)}); place the buffer in one of "
                      "those levels")

    # statements ---------------------------------------------------------------------------
    def _stmt(self, stmt: Stmt, scope: _Scope) -> None:
        self.visit(stmt, scope)

    def generic_visit(self, stmt: Stmt, scope: _Scope) -> None:
        self.fail(repr(stmt), f"{type(stmt).__name__} is not a Kernel IR statement; build "
                  "the body from the nodes in tilecraft.kernel_ir")

    def visit_Seq(self, stmt: Seq, scope: _Scope) -> None:
        for part in stmt.stmts:
            self._stmt(part, scope)

    def visit_For(self, stmt: For, scope: _Scope) -> None:
        self._for(stmt, scope)

    def visit_Store(self, stmt: Store, scope: _Scope) -> None:
        where = _describe(stmt)
        self._access(stmt.buffer, stmt.indices, scope, f"in {where}", "stores into")
        self._expr(stmt.value, scope, where)
        if stmt.value.dtype != stmt.buffer.dtype:
            self.fail(f"in {where}", f"the value has dtype {stmt.value.dtype.value} but "
                      f"{stmt.buffer.name} holds {stmt.buffer.dtype.value}; cast the value "
                      f"with .astype('{stmt.buffer.dtype.value}')")
        self.check_lanes(stmt.buffer, stmt.value, where)
        if stmt.accumulate is not None:
            self.check_shared_accumulation(stmt, scope, where)

    def visit_Allocate(self, stmt: Allocate, scope: _Scope) -> None:
        if id(stmt.buffer) in scope.buffers:
            self.fail(_describe(stmt), f"{stmt.buffer.name} is allocated again inside its "
                      "own scope; allocate a new buffer object")
        self._declare(stmt.buffer, f"allocation of {stmt.buffer.name}")
        self.alloc_depth[id(stmt.buffer)] = len(scope.loops)
        self.check_shared_memory(stmt.buffer, _describe(stmt))
        inner = _Scope(scope.ranges, scope.buffers | {id(stmt.buffer)}, scope.facts,
                       scope.loops, scope.under_condition)
        self._stmt(stmt.body, inner)

    def visit_IfThenElse(self, stmt: IfThenElse, scope: _Scope) -> None:
        self._if(stmt, scope)

    def visit_Copy(self, stmt: Copy, scope: _Scope) -> None:
        where = _describe(stmt)
        self._region(stmt.dst, scope, where)
        self._region(stmt.src, scope, where)
        if _count(stmt.dst.extents) != _count(stmt.src.extents):
            self.fail(where, f"copies {_count(stmt.src.extents)} elements into a region of "
                      f"{_count(stmt.dst.extents)}; give both regions the same extents")

    def visit_IntrinsicCall(self, stmt: IntrinsicCall | MicroKernelCall, scope: _Scope) -> None:
        for region in stmt.operands:
            self._region(region, scope, _describe(stmt))

    visit_MicroKernelCall = visit_IntrinsicCall

    def visit_StreamPush(self, stmt: StreamPush, scope: _Scope) -> None:
        self._expr(stmt.value, scope, _describe(stmt))
        if stmt.value.dtype != stmt.stream.dtype:
            self.fail(_describe(stmt), f"stream {stmt.stream.name} carries "
                      f"{stmt.stream.dtype.value} but the value has dtype "
                      f"{stmt.value.dtype.value}; cast the value")

    def visit_StreamPop(self, stmt: StreamPop, scope: _Scope) -> None:
        where = _describe(stmt)
        self._access(stmt.buffer, stmt.indices, scope, f"in {where}", "pops into")
        if stmt.stream.dtype != stmt.buffer.dtype:
            self.fail(where, f"stream {stmt.stream.name} carries {stmt.stream.dtype.value} "
                      f"but {stmt.buffer.name} holds {stmt.buffer.dtype.value}")

    def visit_Barrier(self, stmt: Barrier, scope: _Scope) -> None:
        self.check_converged(f"the {stmt.scope} barrier", _describe(stmt))
        if self.barrier_scopes is not None and stmt.scope not in self.barrier_scopes:
            allowed = ", ".join(self.barrier_scopes) or "none: it synchronises no threads"
            self.fail(_describe(stmt), f"barrier scope {stmt.scope!r} is not one of "
                      f"{self.spec_name}'s barrier scopes ({allowed}); use one of those")

    def _for(self, loop: For, scope: _Scope) -> None:
        where = f"in {_describe(loop)}"
        if loop.var in scope.ranges:
            self.fail(where, f"loop variable {loop.var.name} is already bound by an enclosing "
                      "loop; use a fresh te.Var for every nested loop")
        if not isinstance(loop.var, Var) or not loop.var.dtype.is_int:
            self.fail(where, f"the loop variable {loop.var} must be an integer te.Var")
        self._expr(loop.extent, scope, where)
        if not loop.extent.dtype.is_int:
            self.fail(where, f"the extent {loop.extent} is not an integer")
        kind = loop.kind
        if kind is LoopKind.BOUND and loop.axis:
            self.check_axis(loop, where, scope.loops)
        if self.loop_kinds is not None and kind.value not in self.loop_kinds:
            self.fail(where, f"loop kind {kind.value} is not offered by {self.spec_name} (it "
                      f"offers {', '.join(sorted(self.loop_kinds))}); use one of those")
        if kind is LoopKind.VECTOR and loop.lanes < 1:
            self.fail(where, "a vector loop needs lanes >= 1; set For(..., lanes=N)")
        if kind is LoopKind.BOUND and not loop.axis:
            self.fail(where, "a bound loop needs the hardware axis it is bound to; set "
                      "For(..., axis='threadIdx.x') or similar")
        if kind is LoopKind.PIPELINED and (loop.initiation_interval or 0) < 1:
            self.fail(where, "a pipelined loop needs an initiation interval >= 1; set "
                      "For(..., initiation_interval=1)")
        if kind is LoopKind.PARALLEL:
            if self.parallel is not None:
                self.fail(where, f"a second parallel loop (the first is over "
                          f"{self.parallel.var.name}); a kernel has at most one parallel loop: "
                          "make this one serial or fuse the two nests")
            if scope.loops or scope.under_condition:
                outer = scope.loops[-1].var.name if scope.loops else "a condition"
                self.fail(where, f"the parallel loop is nested inside {outer}; the parallel "
                          "loop must be the outermost loop of the kernel (only allocations may "
                          "enclose it)")
            self.parallel = loop
        extent = interval(loop.extent, _known(scope.ranges))
        var_range = None if extent is None else (0, max(extent[1] - 1, 0))
        inner = _Scope({**scope.ranges, loop.var: var_range}, scope.buffers, scope.facts,
                       scope.loops + (loop,), scope.under_condition)
        self._stmt(loop.body, inner)

    def _if(self, branch: IfThenElse, scope: _Scope) -> None:
        where = f"in {_describe(branch)}"
        self._expr(branch.cond, scope, where)
        if branch.cond.dtype != DType.BOOL:
            self.fail(where, f"the condition {branch.cond} is not a comparison")
        divergent = self.differs_between_threads(branch.cond, scope)
        if divergent:
            self.divergent.append(branch.cond)
        for body, holds in ((branch.then_body, True), (branch.else_body, False)):
            if body is None:
                continue
            facts = scope.facts + facts_from_condition(branch.cond, holds)
            self._stmt(body, _Scope(scope.ranges, scope.buffers, facts, scope.loops, True))
        if divergent:
            self.divergent.pop()

    # accesses and expressions -------------------------------------------------------------
    def _access(self, buffer: Buffer, indices: Sequence[Expr], scope: _Scope, where: str,
                verb: str, facts: list[Affine] | None = None) -> None:
        if id(buffer) not in scope.buffers:
            self.fail(where, f"{buffer.name} is neither a parameter nor allocated around this "
                      "statement; add it to the kernel's params or wrap the use in an Allocate")
        self.check_not_in_flight(buffer, tuple(indices), None, where)
        if indices:
            self.check_rotation(buffer, indices[0], where)
        if len(indices) != buffer.ndim:
            self.fail(where, f"{verb} {buffer.name} with {len(indices)} indices but it has "
                      f"{buffer.ndim} dimensions {list(buffer.shape)}; give one index per "
                      "dimension")
        for position, index in enumerate(indices):
            self._expr(index, scope, where.removeprefix("in "), facts)
            if not index.dtype.is_int:
                self.fail(where, f"index {position} of {buffer.name} ({index}) has dtype "
                          f"{index.dtype.value}; indices must be integers")
            if self.check_bounds:
                self._bounds(buffer, position, index, scope,
                             scope.facts if facts is None else facts, where)

    def _bounds(self, buffer: Buffer, position: int, index: Expr, scope: _Scope,
                facts: list[Affine], where: str) -> None:
        extent = buffer.shape[position]
        ranges = _known(scope.ranges)
        if index_in_bounds(index, extent, ranges, facts):
            return
        narrowed = tighten_ranges(ranges, facts)
        rng = interval(index, narrowed)
        form = affine(index)
        exact = form.interval(narrowed) if form is not None else None
        if exact is not None and (rng is None or exact[1] - exact[0] < rng[1] - rng[0]):
            rng = exact
        if rng is None or (rng[0] >= 0 and rng[1] < extent):
            return
        self.fail(where, f"index {position} of {buffer.name} ({index}) ranges over "
                  f"[{rng[0]}, {rng[1]}] but dimension {position} has extent {extent}; clamp "
                  "it with te.max/te.min, guard it with a condition, or fix the loop extents "
                  "(verify_kernel(..., check_bounds=False) skips this check)")

    def _region(self, region: Region, scope: _Scope, where: str) -> None:
        buffer = region.buffer
        if id(buffer) not in scope.buffers:
            self.fail(where, f"{buffer.name} is neither a parameter nor allocated around this "
                      "statement")
        self.check_not_in_flight(buffer, None, tuple(region.base), where)
        if region.base:
            self.check_rotation(buffer, region.base[0], where)
        sizes = {len(region.base), len(region.extents), len(region.steps)}
        if sizes != {buffer.ndim}:
            self.fail(where, f"the region of {buffer.name} has {len(region.base)} bases, "
                      f"{len(region.extents)} extents and {len(region.steps)} steps but the "
                      f"buffer has {buffer.ndim} dimensions; give one of each per dimension")
        if any(e < 1 for e in region.extents) or any(s < 1 for s in region.steps):
            self.fail(where, f"the region of {buffer.name} needs extents and steps >= 1, got "
                      f"extents {list(region.extents)} and steps {list(region.steps)}")
        for base in region.base:
            self._expr(base, scope, where)
        if self.check_bounds:
            ranges = tighten_ranges(_known(scope.ranges), scope.facts)
            for dim, (base, extent, step) in enumerate(zip(region.base, region.extents,
                                                           region.steps)):
                rng = interval(base, ranges)
                if rng is not None and (rng[0] < 0 or
                                        rng[1] + (extent - 1) * step >= buffer.shape[dim]):
                    self.fail(where, f"the region of {buffer.name} can cover "
                              f"[{rng[0]}, {rng[1] + (extent - 1) * step}] in dimension {dim}, "
                              f"outside its extent {buffer.shape[dim]}; fix the base or extents")

    def _expr(self, expr: Expr, scope: _Scope, where: str,
              facts: list[Affine] | None = None) -> None:
        facts = scope.facts if facts is None else facts
        if isinstance(expr, Var):
            if expr not in scope.ranges:
                self.fail(f"in {where}", f"variable {expr.name} is not bound by an enclosing "
                          "loop; bind it with a For loop around this statement or substitute a "
                          "value for it")
            return
        if isinstance(expr, (IterVar, Load, Reduce)):
            self.fail(f"in {where}", f"the te node {expr} ({type(expr).__name__}) is not Kernel "
                      "IR; lower computes with tilecraft.lower.lower_compute, which replaces "
                      "IterVars by loop Vars and tensor loads by BufferLoads of parameters")
        if isinstance(expr, BufferLoad):
            self._access(expr.buffer, expr.indices, scope, f"in {where}",
                         f"loads {expr}: reads", facts)
            return
        if isinstance(expr, Select):
            self._expr(expr.cond, scope, where, facts)
            if expr.cond.dtype != DType.BOOL:
                self.fail(f"in {where}", f"the select condition {expr.cond} is not a comparison")
            self._expr(expr.true_value, scope, where,
                       facts + facts_from_condition(expr.cond, True))
            self._expr(expr.false_value, scope, where,
                       facts + facts_from_condition(expr.cond, False))
            return
        for child in expr_children(expr):
            self._expr(child, scope, where, facts)


def _known(ranges: dict[Var, tuple[int, int] | None]) -> dict[Var, tuple[int, int]]:
    return {var: rng for var, rng in ranges.items() if rng is not None}


def _count(extents: Sequence[int]) -> int:
    total = 1
    for extent in extents:
        total *= extent
    return total


__all__ = ["verify_kernel"]
