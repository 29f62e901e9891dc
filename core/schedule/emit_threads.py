"""Emitting a cross-thread reduction: a reduce loop bound to a thread axis (``bind``).

TVM's allreduce on a GPU: the threads of the bound reduce loop ("lanes", one subgroup) each
accumulate a share of the reduction in a register, a ``SubgroupReduce`` (warp shuffles)
combines the partial results, and the first lane stores the total::

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

The bound loop must be the stage's outermost reduce loop and every loop inside it a reduce
loop, so that one subgroup computes one output element.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tilecraft.dtypes import DType
from tilecraft.kernel_ir.concurrency import SubgroupReduce
from tilecraft.kernel_ir.nodes import Allocate, BufferLoad, IfThenElse, LoopKind, Stmt
from tilecraft.schedule.errors import schedule_error
from tilecraft.schedule.loop import Guard
from tilecraft.schedule.nest import Scope, build_nest, guard_with, seq
from tilecraft.te.expr import AxisKind, CompareOp, Expr, Reduce, compare, const

if TYPE_CHECKING:
    from tilecraft.kernel_ir.nodes import Buffer

_HALF = (DType.FLOAT16, DType.BFLOAT16)


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
        subgroup = self.options.subgroup_size
        if width & (width - 1) or (self.options.threads is not None and width > subgroup):
            raise schedule_error("bind", stage.name, lane.loop.name, f"the reduce loop runs "
                                 f"{width} threads, but a cross-thread reduction on "
                                 f"{self.view.name} takes a power of two of at most {subgroup}; "
                                 "split the reduce loop by such a factor")
        out, out_indices = target
        dtype = DType.FLOAT32 if out.dtype in _HALF else out.dtype
        register = self.options.register_level or self.options.param_level
        lane_var = lane.var
        assert lane_var is not None  # a bound loop keeps its variable

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
            stmts = [self._store(partial, zero, const(identity, dtype), lane_scope),
                     accumulate,
                     SubgroupReduce(total, zero, BufferLoad(partial, zero), lane_var, width,
                                    body.op),
                     IfThenElse(compare(CompareOp.EQ, lane_var, 0), store)]
            return lane.wrap(Allocate(partial, Allocate(total, seq(stmts))))

        return build_nest(leaves[:first], ctx.guards, scope, self._attach_fn(ctx, 0), lanes)


__all__ = ["CrossThreadReduction"]
