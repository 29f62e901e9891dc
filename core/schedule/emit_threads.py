"""Emitting a cross-thread reduction: a reduce loop bound to a thread axis (``bind``).

TVM's allreduce on a GPU: the threads of the bound reduce loop ("lanes") each accumulate a
share of the reduction in a register, a ``SubgroupReduce`` (warp shuffles) combines the partial
results of each subgroup, and the first lane stores the total. Within one subgroup::

    for lane in bound(16, axis=threadIdx.x):
      alloc S_partial: float32[1] in register
      alloc S_total: float32[1] in register
      S_partial[0] = 0.0
      for k_outer in serial(2):
        if (((k_outer * 16) + lane) < 19):
          S_partial[0] sum= A[i, ((k_outer * 16) + lane)]
      subgroup_reduce_sum(S_total[0] <- S_partial[0], lane=lane, width=16)
      if (lane == 0):
        S[i] = S_total[0]

A block reduction (the lanes are several subgroups, a power of two of them, at most one
subgroup's worth): each subgroup's first lane puts its subgroup's total in a buffer of the
spec's shared level (``threads.shared_level``), a block barrier, then every group of that many
consecutive lanes reduces the subgroup totals with one more ``SubgroupReduce`` — so every
thread holds the row's total, and no barrier or shuffle sits under a thread-dependent
condition::

    alloc S_subgroups: float32[4] in shared
    for lane in bound(128, axis=threadIdx.x):
      ...
      subgroup_reduce_sum(S_total[0] <- S_partial[0], lane=lane, width=32)
      if ((lane % 32) == 0):
        S_subgroups[lane // 32] = S_total[0]
      barrier(block)
      subgroup_reduce_sum(S_total[0] <- S_subgroups[(lane % 4)], lane=lane, width=4)
      if (lane == 0):
        S[i] = S_total[0]

When a loop that is not bound to the grid encloses the lanes (the block reduces more than one
output element), a second barrier ends each reduction, so the next one does not overwrite
subgroup totals still being read. The block barrier is the spec's first barrier scope (its
widest: ``block`` on CUDA, ``work_group`` on OpenCL).

The bound loop must be the stage's outermost reduce loop and every loop inside it a reduce
loop, so that its threads compute one output element.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tilecraft.dtypes import DType
from tilecraft.kernel_ir.concurrency import SubgroupReduce
from tilecraft.kernel_ir.nodes import (
    Allocate,
    Barrier,
    Buffer,
    BufferLoad,
    IfThenElse,
    LoopKind,
    Stmt,
    Store,
)
from tilecraft.schedule.errors import schedule_error
from tilecraft.schedule.loop import Guard
from tilecraft.schedule.nest import Scope, build_nest, guard_with, seq
from tilecraft.te.expr import AxisKind, CompareOp, Expr, Reduce, Var, compare, const

if TYPE_CHECKING:
    from tilecraft.schedule.nest import Leaf

_HALF = (DType.FLOAT16, DType.BFLOAT16)

__all__ = ["CrossThreadReduction", "block_barrier_scope"]


def block_barrier_scope(threads: Any) -> str | None:
    """The barrier scope that synchronises a whole block of ``threads`` (a thread hierarchy):
    the first of its ``barrier_scopes``, None when it declares none."""
    scopes = tuple(getattr(threads, "barrier_scopes", ()) or ())
    return scopes[0] if scopes else None


class CrossThreadReduction:
    """The cross-thread reduction of :class:`~tilecraft.schedule.emit.KernelEmitter` (module
    docstring); the emitter supplies ``convert``, ``_store``, ``local_buffer``, ``view``,
    ``options`` and ``_attach_fn``."""

    view: Any
    options: Any

    def _cross_thread_reduction(self, ctx: Any, target: tuple[Buffer, tuple[Expr, ...]],
                                scope: Scope, first: int) -> Stmt:
        body = ctx.body
        assert isinstance(body, Reduce)
        stage, leaves = ctx.stage, ctx.leaves
        lane, inner = leaves[first], leaves[first + 1:]
        if any(not leaf.loop.is_reduce for leaf in inner):
            spatial = next(leaf for leaf in inner if not leaf.loop.is_reduce)
            raise schedule_error("bind", stage.name, lane.loop.name, f"the reduce loop is bound "
                                 f"to {lane.annotation.axis} but the spatial loop "
                                 f"{spatial.loop.name} runs inside it; a cross-thread reduction "
                                 "needs every spatial loop outside it (reorder them outward)")
        if any(leaf.kind is LoopKind.BOUND for leaf in inner):
            raise schedule_error("bind", stage.name, lane.loop.name, "two reduce loops are "
                                 "bound to thread axes; bind only the outermost one")
        width = lane.extent
        group, shared, barrier = self._subgroups_of(stage.name, lane)
        out, out_indices = target
        dtype = DType.FLOAT32 if out.dtype in _HALF else out.dtype
        register = self.options.register_level or self.options.param_level
        lane_var = lane.var
        assert lane_var is not None  # a bound loop keeps its variable
        # a loop around the lanes that is not a grid axis runs several reductions per block
        repeated = any(leaf.var is not None and leaf.kind is not LoopKind.BOUND
                       for leaf in leaves[:first])

        def lanes(outer_scope: Scope, pending: list[Guard]) -> Stmt:
            partial = self.local_buffer(f"{stage.name}_partial", (1,), dtype, register)
            total = self.local_buffer(f"{stage.name}_total", (1,), dtype, register)
            zero = (const(0),)
            identity = Reduce(body.op, body.body.astype(dtype), body.axes).identity()
            lane_scope = outer_scope.bind(lane_var)

            def update(s: Scope, _: list[Guard]) -> Stmt:
                value = self.convert(body.body, ctx.values, s).astype(dtype)
                return self._store(partial, zero, value, s, body.op)

            accumulate = build_nest(inner, pending, lane_scope, self._attach_fn(ctx, first + 1),
                                    update)
            spatial = [g for g in pending if g.kind is AxisKind.SPATIAL]
            store = guard_with(spatial, self._store(out, out_indices,
                                                    BufferLoad(total, zero), lane_scope))
            stmts: list[Stmt] = [
                self._store(partial, zero, const(identity, dtype), lane_scope),
                accumulate,
                SubgroupReduce(total, zero, BufferLoad(partial, zero), lane_var, group,
                               body.op)]
            subgroups = width // group
            held: Buffer | None = None
            if subgroups > 1:
                assert shared is not None and barrier is not None
                held = self.local_buffer(f"{stage.name}_subgroups", (subgroups,), dtype, shared)
                stmts += _combine_subgroups(held, total, lane_var, group, subgroups, barrier,
                                            body.op, repeated)
            stmts.append(IfThenElse(compare(CompareOp.EQ, lane_var, 0), store))
            nest = lane.wrap(Allocate(partial, Allocate(total, seq(stmts))))
            return nest if held is None else Allocate(held, nest)

        return build_nest(leaves[:first], ctx.guards, scope, self._attach_fn(ctx, 0), lanes)

    def _subgroups_of(self, stage: str, lane: Leaf) -> tuple[int, str | None, str | None]:
        """The width of each subgroup reduction over the ``lane`` loop, and for a block
        reduction (more than one subgroup) the shared level and the block barrier scope."""
        width = lane.extent
        threads = self.options.threads
        subgroup = self.options.subgroup_size if threads is not None else width
        if width & (width - 1):
            raise schedule_error("bind", stage, lane.loop.name, f"the reduce loop runs {width} "
                                 f"threads, but a cross-thread reduction on {self.view.name} "
                                 "takes a power of two; split the reduce loop by one")
        if width <= subgroup:
            return width, None, None
        shared, barrier = threads.shared_level, block_barrier_scope(threads)
        subgroups = width // subgroup
        if shared is None or barrier is None or subgroups > subgroup:
            why = ("it declares no shared level and block barrier" if shared is None
                   or barrier is None else f"{subgroups} subgroups are more than one subgroup "
                   f"of {subgroup} lanes can combine")
            raise schedule_error("bind", stage, lane.loop.name, f"the reduce loop runs {width} "
                                 f"threads, more than a subgroup of {self.view.name} "
                                 f"({subgroup}), and a block reduction is not possible: {why}; "
                                 "split the reduce loop by a smaller power of two")
        return subgroup, shared, barrier


def _combine_subgroups(held: Buffer, total: Buffer, lane: Var, group: int, subgroups: int,
                       barrier: str, op: Any, repeated: bool) -> list[Stmt]:
    """A block reduction's second step (module docstring): subgroup totals through ``held``
    in shared memory, a barrier, one more subgroup reduction of ``subgroups`` lanes."""
    zero = (const(0),)
    first_lane = compare(CompareOp.EQ, lane % group, 0)
    stmts: list[Stmt] = [
        IfThenElse(first_lane, Store(held, (lane // group,), BufferLoad(total, zero))),
        Barrier(barrier),
        SubgroupReduce(total, zero, BufferLoad(held, (lane % subgroups,)), lane, subgroups, op)]
    if repeated:
        stmts.append(Barrier(barrier))
    return stmts
