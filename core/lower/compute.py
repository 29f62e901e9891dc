"""Lowering one te compute to one Kernel IR kernel, following a loop-nest schedule.

Without a schedule, the target's lowering strategy (chosen from its spec,
:mod:`tilecraft.schedule.strategies`) decides: a GPU, an NPU or an FPGA gets its strategy's
schedule, lowered by :meth:`tilecraft.schedule.Schedule.lower`; a CPU gets the default loop nest
below.

The kernel's parameters are the compute's input tensors (in order of first use) and its
output, as buffers named after the tensors in ``options.param_level``. For a reduction

``C[i, j] = sum(A[i, k] * B[k, j], axis=k)`` under ``i: parallel > k: serial > j: vector``

the body is::

    for i in parallel(M):
      for j in vector(N, lanes=16):
        C[i, j] = 0.0                      # the reduction identity, over the inner spatial loops
      for k in serial(K):
        for j in vector(N, lanes=16):
          C[i, j] sum= A[i, k] * B[k, j]

Half-precision outputs accumulate in a float32 local buffer, stored (rounded) at the end.
Loads kept in bounds only by a select guard get clamped indices (:mod:`.guards`).

>>> from tilecraft import te
>>> from tilecraft.lower.options import LoweringOptions
>>> A = te.placeholder((6, 5), name="A")
>>> r = te.reduce_axis(5, name="r")
>>> S = te.compute((6,), lambda i: te.sum(A[i, r], axis=r), name="S")
>>> print(lower_compute(S, LoweringOptions(vector_lanes=8, parallel=False)))
kernel S(A: float32[6, 5], S: float32[6]) -> (S):
  for i in serial(6):
    S[i] = 0.0
    for r in vector(5, lanes=8):
      S[i] sum= A[i, r]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from tilecraft.dtypes import DType
from tilecraft.errors import LoweringError
from tilecraft.graph import Graph
from tilecraft.kernel_ir.nodes import Allocate, Buffer, BufferLoad, For, Kernel, Seq, Stmt, Store
from tilecraft.kernel_ir.simplify import simplify
from tilecraft.kernel_ir.verify import verify_kernel
from tilecraft.lower.guards import clamp_guarded_loads
from tilecraft.lower.options import LoweringOptions
from tilecraft.lower.schedule import (
    LoopNestSchedule,
    ScheduledLoop,
    compute_axes,
    default_schedule,
)
from tilecraft.te.expr import AxisKind, Expr, IterVar, Load, Reduce, Var, const
from tilecraft.te.tensor import Tensor
from tilecraft.te.visit import substitute, transform

_HALF = (DType.FLOAT16, DType.BFLOAT16)


@dataclass(frozen=True)
class _Loop:
    """A scheduled loop with its variable and the te axes it runs over."""

    spec: ScheduledLoop
    var: Var
    extent: int
    axes: tuple[IterVar, ...]

    @property
    def is_reduce(self) -> bool:
        return self.axes[0].kind is AxisKind.REDUCE

    def wrap(self, body: Stmt) -> For:
        spec = self.spec
        return For(self.var, const(self.extent), spec.kind, body, lanes=spec.lanes,
                   axis=spec.axis, initiation_interval=spec.initiation_interval)


def lower_compute(tensor: Tensor, options: LoweringOptions,
                  schedule: LoopNestSchedule | None = None) -> Kernel:
    """One kernel computing ``tensor`` from its inputs (see the module docstring).

    ``schedule`` defaults to :func:`~tilecraft.lower.schedule.default_schedule`. Raises
    :class:`~tilecraft.errors.LoweringError` naming the compute when it cannot be lowered.
    """
    if not isinstance(tensor, Tensor) or tensor.is_placeholder:
        raise LoweringError(f"{tensor!r} is not a compute; only computes are lowered "
                            "(placeholders become kernel parameters)")
    if schedule is None:
        from tilecraft.schedule.strategies import lower_with_strategy, strategy_for

        strategy = strategy_for(options)
        if strategy.name != "cpu":
            return lower_with_strategy(tensor, options, strategy)
        schedule = default_schedule(tensor, options)
    schedule.validate(tensor, options)
    buffers = _parameters(tensor, options)
    output = buffers[tensor]
    loops = _make_loops(tensor, schedule, {b.name for b in buffers.values()})
    values = _axis_values(tensor, loops)

    def lowered(expr: Expr) -> Expr:
        return to_kernel_expr(clamp_guarded_loads(expr), values, buffers)

    body = tensor.op.body
    out_indices = tuple(values[axis] for axis in tensor.axes)
    if not isinstance(body, Reduce):
        stmt: Stmt = Store(output, out_indices, lowered(body))
        for loop in reversed(loops):
            stmt = loop.wrap(stmt)
    else:
        stmt = _lower_reduction(tensor, body, loops, out_indices, output, lowered,
                                schedule.local_accumulator or tensor.dtype in _HALF,
                                options, {b.name for b in buffers.values()})
    kernel = Kernel(tensor.name, tuple(buffers.values()), (tensor.name,), stmt,
                    attrs={"compute": tensor.name, "statement": tensor.statement(),
                           "schedule": schedule.describe(tensor), "loop_nest": schedule})
    verify_kernel(kernel, options.spec)
    return kernel


def lower_graph(graph: Graph, options: LoweringOptions,
                schedules: Mapping[str, LoopNestSchedule] | None = None) -> list[Kernel]:
    """One kernel per compute of ``graph``, producers first; ``schedules`` maps compute
    names to their schedule (the default schedule for the others)."""
    schedules = dict(schedules or {})
    names = {t.name for t in graph.computes}
    unknown = sorted(set(schedules) - names)
    if unknown:
        raise LoweringError(f"schedules given for {', '.join(unknown)}, which are not computes "
                            f"of the graph (its computes: {', '.join(sorted(names))})")
    return [lower_compute(t, options, schedules.get(t.name)) for t in graph.computes]


def _parameters(tensor: Tensor, options: LoweringOptions) -> dict[Tensor, Buffer]:
    buffers: dict[Tensor, Buffer] = {}
    names: dict[str, Tensor] = {}
    for t in [*tensor.inputs, tensor]:
        if t.name in names and names[t.name] is not t:
            raise LoweringError(f"compute {tensor.name}: two different tensors read by it are "
                                f"both named {t.name!r}; give every tensor a unique name")
        names[t.name] = t
        buffers[t] = Buffer(t.name, t.shape, t.dtype, level=options.param_level)
    return buffers


def _make_loops(tensor: Tensor, schedule: LoopNestSchedule, taken: set[str]) -> list[_Loop]:
    """One loop variable per scheduled loop, named after its axes; names are made unique
    and distinct from the buffer names ``taken``, so source-level code generators can use
    them as identifiers (a conv's loop ``w`` next to its weight ``w`` becomes ``w1``)."""
    all_axes = compute_axes(tensor)
    used = set(taken)
    loops = []
    for spec in schedule.loops:
        axes = tuple(all_axes[p] for p in spec.axes)
        base = "_".join(a.name for a in axes)
        name, count = base, 0
        while name in used:
            count += 1
            name = f"{base}{count}"
        used.add(name)
        loops.append(_Loop(spec, Var(name), spec.extent(tensor), axes))
    return loops


def _axis_values(tensor: Tensor, loops: list[_Loop]) -> dict[IterVar, Expr]:
    """Each axis of the compute as an expression of the loop variables (0 for axes of
    extent 1 without a loop; div/mod of the fused variable for fused axes)."""
    values: dict[IterVar, Expr] = {axis: const(0) for axis in compute_axes(tensor)}
    for loop in loops:
        inner = 1
        for position in range(len(loop.axes) - 1, -1, -1):
            axis = loop.axes[position]
            value: Expr = loop.var
            if inner > 1:
                value = value // inner
            if position > 0:
                value = value % axis.extent
            values[axis] = value
            inner *= axis.extent
    return values


def to_kernel_expr(expr: Expr, values: Mapping[IterVar, Expr],
                   buffers: Mapping[Tensor, Buffer]) -> Expr:
    """``expr`` with each axis replaced by its value in ``values`` (simplified) and each te
    ``Load`` by a ``BufferLoad`` of the tensor's buffer in ``buffers``."""
    expr = simplify(substitute(expr, values))

    def to_buffer_load(node: Expr) -> Expr | None:
        if isinstance(node, Load):
            indices = tuple(transform(i, to_buffer_load) for i in node.indices)
            return BufferLoad(buffers[node.tensor], indices)
        return None

    return transform(expr, to_buffer_load)


def _lower_reduction(tensor: Tensor, body: Reduce, loops: list[_Loop],
                     out_indices: tuple[Expr, ...], output: Buffer,
                     lowered: Callable[[Expr], Expr], local: bool, options: LoweringOptions,
                     taken: set[str]) -> Stmt:
    """``outer loops { [alloc acc] init over inner spatial loops; accumulate over the inner
    loops; [store acc over inner spatial loops] }``, the inner loops being those from the
    first reduce loop on."""
    first_reduce = next((n for n, loop in enumerate(loops) if loop.is_reduce), len(loops))
    outer, inner = loops[:first_reduce], loops[first_reduce:]
    inner_spatial = [loop for loop in inner if not loop.is_reduce]

    def nest(stmt: Stmt, over: list[_Loop]) -> Stmt:
        for loop in reversed(over):
            stmt = loop.wrap(stmt)
        return stmt

    if local:
        target = _accumulator(tensor, inner_spatial, options,
                              taken | {loop.var.name for loop in loops})
        target_indices: tuple[Expr, ...] = tuple(loop.var for loop in inner_spatial) or \
            (const(0),)
    else:
        target, target_indices = output, out_indices
    identity = Reduce(body.op, body.body.astype(target.dtype), body.axes).identity()
    stmts = [
        nest(Store(target, target_indices, const(identity, target.dtype)), inner_spatial),
        nest(Store(target, target_indices, lowered(body.body).astype(target.dtype),
                   accumulate=body.op), inner),
    ]
    if local:
        result = BufferLoad(target, target_indices).astype(output.dtype)
        stmts.append(nest(Store(output, out_indices, result), inner_spatial))
    stmt: Stmt = Seq(tuple(stmts))
    if local:
        stmt = Allocate(target, stmt)
    return nest(stmt, outer)


def _accumulator(tensor: Tensor, inner_spatial: list[_Loop], options: LoweringOptions,
                 taken: set[str]) -> Buffer:
    """The local buffer a reduction accumulates in: one element per iteration of the inner
    spatial loops, float32 for half-precision outputs, in the register level when it fits."""
    dtype = DType.FLOAT32 if tensor.dtype in _HALF else tensor.dtype
    shape = tuple(loop.extent for loop in inner_spatial) or (1,)
    name = f"{tensor.name}_acc"
    while name in taken:
        name += "_"
    nbytes = dtype.bytes
    for extent in shape:
        nbytes *= extent
    fits = options.register_bytes is None or nbytes <= options.register_bytes
    level = options.register_level if options.register_level and fits else options.param_level
    return Buffer(name, shape, dtype, level=level)


__all__ = ["lower_compute", "lower_graph"]
