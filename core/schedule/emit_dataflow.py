"""Emitting a stage as a dataflow region (``dataflow``): read, compute and write stages
linked by streams (thesis Fig. 4.4c; an HLS ``#pragma HLS dataflow`` region).

Every stage walks the same loops: the read stage pushes each value the computation loads
into its input's stream (in one fixed order per iteration); the compute stage pops them into
registers, computes — a reduction accumulating in a register over the reduce loops — and
pushes each result; the write stage, over the spatial loops only, pops the results into the
output. The innermost loop of each stage is pipelined; each stage's loops sit in a ``stage``
loop of one iteration, named after it, which a code generator turns into a dataflow process.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from tilecraft.dtypes import DType
from tilecraft.kernel_ir.concurrency import Dataflow
from tilecraft.kernel_ir.nodes import (
    Allocate,
    Buffer,
    BufferLoad,
    For,
    LoopKind,
    Stmt,
    Stream,
    StreamPop,
    StreamPush,
)
from tilecraft.schedule.errors import schedule_error
from tilecraft.schedule.loop import Guard, LoopAnnotation
from tilecraft.schedule.nest import Leaf, Scope, build_nest, no_attach, seq
from tilecraft.te.expr import AxisKind, Expr, Load, Reduce, Var, const
from tilecraft.te.tensor import Tensor
from tilecraft.te.visit import children, transform

if TYPE_CHECKING:
    from tilecraft.schedule.stage_base import Streaming

_HALF = (DType.FLOAT16, DType.BFLOAT16)


class DataflowEmission:
    """The dataflow region of :class:`~tilecraft.schedule.emit.KernelEmitter` (module
    docstring); the emitter supplies ``convert``, ``in_bounds``, ``_store``, ``local_buffer``,
    ``fresh``, ``options``, ``children`` and ``params``."""

    options: Any
    children: Any
    params: Any

    def _dataflow(self, ctx: Any, target: tuple[Buffer, tuple[Expr, ...]], scope: Scope,
                  region: Any) -> Stmt:
        stage = ctx.stage
        self._check_streamable(stage, region)
        streaming: Streaming = stage.streaming
        leaves = ctx.leaves
        first = next((n for n, leaf in enumerate(leaves) if leaf.loop.is_reduce), len(leaves))
        late = next((leaf for leaf in leaves[first:] if not leaf.loop.is_reduce), None)
        if late is not None:
            raise schedule_error("dataflow", stage.name, late.loop.name, "the spatial loop runs "
                                 "inside a reduce loop; a dataflow stage pushes one result per "
                                 "output element, so put the reduce loops innermost")
        spatial, reduce = leaves[:first], leaves[first:]
        out, out_indices = target
        ii, depth = streaming.initiation_interval, streaming.depth
        body = ctx.body
        value = body.body if isinstance(body, Reduce) else body
        register = self.options.register_level or self.options.param_level
        loads = _outer_loads(value)
        streams: dict[Tensor, Stream] = {}
        registers: dict[Tensor, Buffer] = {}
        slots: dict[Load, BufferLoad] = {}
        for load in loads:
            tensor = load.tensor
            if tensor not in streams:
                streams[tensor] = Stream(self.fresh(f"{tensor.name}_stream"), tensor.dtype,
                                         depth)
                count = sum(1 for other in loads if other.tensor is tensor)
                registers[tensor] = self.local_buffer(f"{tensor.name}_reg", (count,),
                                                      tensor.dtype, register)
            taken = sum(1 for known in slots if known.tensor is tensor)
            slots[load] = BufferLoad(registers[tensor], (const(taken),))
        on_registers = transform(value, lambda node: slots.get(node)
                                 if isinstance(node, Load) else None)
        out_stream = Stream(self.fresh(f"{out.name}_stream"), out.dtype, depth)

        def read(s: Scope, pending: list[Guard]) -> Stmt:
            return seq([StreamPush(streams[load.tensor], self.convert(load, ctx.values, s))
                        for load in loads])

        def pops_and_value(s: Scope) -> tuple[list[Stmt], Expr]:
            pops: list[Stmt] = [StreamPop(streams[load.tensor], slots[load].buffer,
                                          slots[load].indices) for load in loads]
            return pops, self.convert(on_registers, ctx.values, s)

        if isinstance(body, Reduce):
            dtype = DType.FLOAT32 if out.dtype in _HALF else out.dtype
            acc = self.local_buffer(f"{stage.name}_acc", (1,), dtype, register)
            zero = (const(0),)
            identity = Reduce(body.op, body.body.astype(dtype), body.axes).identity()

            def accumulate(s: Scope, pending: list[Guard]) -> Stmt:
                pops, result = pops_and_value(s)
                return seq([*pops, self._store(acc, zero, result.astype(dtype), s, body.op)])

            def per_element(s: Scope, pending: list[Guard]) -> Stmt:
                return seq([self._store(acc, zero, const(identity, dtype), s),
                            build_nest(_pipelined(reduce, ii), pending, s, no_attach,
                                       accumulate),
                            StreamPush(out_stream, BufferLoad(acc, zero).astype(out.dtype))])

            # the innermost loop of the stage is pipelined: a reduce loop, or a spatial one
            # where every reduce loop has a single iteration
            outer = spatial if any(leaf.var is not None for leaf in reduce) \
                else _pipelined(spatial, ii)
            compute = Allocate(acc, build_nest(outer, ctx.guards, scope, no_attach,
                                               per_element))
        else:
            def per_element(s: Scope, pending: list[Guard]) -> Stmt:
                pops, result = pops_and_value(s)
                return seq([*pops, StreamPush(out_stream, result.astype(out.dtype))])

            compute = build_nest(_pipelined(leaves, ii), ctx.guards, scope, no_attach,
                                 per_element)
        for buffer in reversed(list(registers.values())):
            compute = Allocate(buffer, compute)

        def write(s: Scope, pending: list[Guard]) -> Stmt:
            return StreamPop(out_stream, out, self.in_bounds(out, out_indices, s))

        spatial_guards = [g for g in ctx.guards if g.kind is AxisKind.SPATIAL]
        stages = [self._stage_loop("compute", compute),
                  self._stage_loop("write", build_nest(_pipelined(spatial, ii), spatial_guards,
                                                       scope, no_attach, write))]
        if loads:
            reader = build_nest(_pipelined(leaves, ii), ctx.guards, scope, no_attach, read)
            stages.insert(0, self._stage_loop("read", reader))
        return Dataflow(tuple(stages), (*streams.values(), out_stream))

    def _stage_loop(self, name: str, body: Stmt) -> Stmt:
        return For(Var(self.fresh(name)), const(1), LoopKind.STAGE, body)

    def _check_streamable(self, stage: Any, region: Any) -> None:
        problem = None
        if region is not None:
            problem = "it is computed inside another stage"
        elif self.children.get(stage.name):
            problem = "other stages are computed inside it"
        elif stage.level is not None or stage.read_buffers:
            problem = "it has on-chip buffers (buffer): the streams are its buffers"
        if problem is not None:
            raise schedule_error("dataflow", stage.name, None, f"{problem}; a dataflow stage "
                                 "is computed in its own kernel, alone")


def _outer_loads(expr: Expr) -> list[Load]:
    """The distinct loads of ``expr`` that are not inside another load's indices, in order."""
    found: list[Load] = []

    def collect(node: Expr) -> None:
        if isinstance(node, Load):
            if node not in found:
                found.append(node)
            return
        for child in children(node):
            collect(child)

    collect(expr)
    return found


def _pipelined(leaves: list[Leaf], ii: int) -> list[Leaf]:
    """``leaves`` with the innermost one that runs a loop pipelined (unless annotated)."""
    found = [n for n, leaf in enumerate(leaves) if leaf.var is not None]
    if not found or leaves[found[-1]].kind is not LoopKind.SERIAL:
        return list(leaves)
    position = found[-1]
    pipelined = replace(leaves[position], annotation=LoopAnnotation(
        LoopKind.PIPELINED, initiation_interval=ii))
    return [*leaves[:position], pipelined, *leaves[position + 1:]]


__all__ = ["DataflowEmission"]
