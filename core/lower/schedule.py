"""Loop-nest schedules of one compute: which loops, in which order, of which kind.

A :class:`LoopNestSchedule` lists the loops of a compute's nest from outermost to innermost.
Each :class:`ScheduledLoop` runs over one axis of the compute, or over several fused axes
(``axes=(0, 1)`` iterates ``f`` over ``extent0 * extent1`` with ``i = f // extent1`` and
``j = f % extent1``). Axes are numbered as in :func:`compute_axes`: the spatial axes of the
output, then the reduce axes. Axes of extent 1 need no loop. Loops after the first reduce loop
form the reduction nest; lowering initialises the output over the spatial loops among them
before accumulating.

:func:`default_schedule` is the schedule lowering uses when given none; schedule search builds
others through the same structure.

>>> from tilecraft import te
>>> from tilecraft.lower.options import LoweringOptions
>>> A = te.placeholder((1, 32, 64), name="A")
>>> W = te.placeholder((64, 48), name="W")
>>> k = te.reduce_axis(64, name="k")
>>> C = te.compute((1, 32, 48), lambda b, i, j: te.sum(A[b, i, k] * W[k, j], axis=k), name="C")
>>> print(default_schedule(C, LoweringOptions(vector_lanes=16, cores=2)).describe(C))
i: parallel(32) > k: serial(64) > j: vector(48, lanes=16)
"""

from __future__ import annotations

from dataclasses import dataclass

from tilecraft.dtypes import DType
from tilecraft.errors import LoweringError
from tilecraft.kernel_ir.nodes import LoopKind
from tilecraft.lower.options import LoweringOptions
from tilecraft.te.bounds import affine
from tilecraft.te.expr import AxisKind, IterVar
from tilecraft.te.tensor import Tensor
from tilecraft.te.visit import loads_in


def compute_axes(tensor: Tensor) -> tuple[IterVar, ...]:
    """The axes a schedule numbers: spatial axes of the output, then reduce axes."""
    return tensor.axes + tensor.reduce_axes


@dataclass(frozen=True)
class ScheduledLoop:
    """One loop of a nest: over ``axes`` (one axis, or several fused, outer first), of
    ``kind``, with the ``lanes`` of a VECTOR loop (or the unroll factor of an UNROLLED one),
    the hardware ``axis`` of a BOUND loop, the ``initiation_interval`` of a PIPELINED one."""

    axes: tuple[int, ...]
    kind: LoopKind = LoopKind.SERIAL
    lanes: int = 0
    axis: str | None = None
    initiation_interval: int | None = None

    def extent(self, tensor: Tensor) -> int:
        all_axes = compute_axes(tensor)
        total = 1
        for position in self.axes:
            total *= all_axes[position].extent
        return total

    def describe(self, tensor: Tensor) -> str:
        all_axes = compute_axes(tensor)
        names = ".".join(all_axes[p].name for p in self.axes)
        extra = ""
        if self.kind in (LoopKind.VECTOR, LoopKind.UNROLLED) and self.lanes:
            extra = f", lanes={self.lanes}"
        elif self.kind is LoopKind.BOUND:
            extra = f", axis={self.axis}"
        elif self.kind is LoopKind.PIPELINED:
            extra = f", II={self.initiation_interval}"
        return f"{names}: {self.kind.value}({self.extent(tensor)}{extra})"


@dataclass(frozen=True)
class LoopNestSchedule:
    """The loops of a compute's nest, outermost first.

    ``local_accumulator`` accumulates reductions in a local buffer and stores the output
    once at the end; lowering always does so for float16/bfloat16 outputs, accumulating in
    float32 as the reference semantics require.
    """

    loops: tuple[ScheduledLoop, ...]
    local_accumulator: bool = False

    def describe(self, tensor: Tensor) -> str:
        text = " > ".join(loop.describe(tensor) for loop in self.loops) or "(no loops)"
        if self.local_accumulator:
            text += "; accumulate in a local buffer"
        return text

    def validate(self, tensor: Tensor, options: LoweringOptions | None = None) -> None:
        """Raise :class:`~tilecraft.errors.LoweringError` if this schedule does not fit
        ``tensor`` (and the loop kinds of ``options``)."""
        all_axes = compute_axes(tensor)

        def fail(problem: str) -> None:
            raise LoweringError(f"compute {tensor.name}: schedule `{self._safe_text(tensor)}`: "
                                f"{problem}")

        seen: set[int] = set()
        for position, loop in enumerate(self.loops):
            if not loop.axes:
                fail(f"loop {position} runs over no axis; give it at least one axis")
            for axis in loop.axes:
                if not 0 <= axis < len(all_axes):
                    fail(f"loop {position} names axis {axis} but the compute has "
                         f"{len(all_axes)} axes (spatial then reduce: "
                         f"{', '.join(a.name for a in all_axes)})")
                if axis in seen:
                    fail(f"axis {all_axes[axis].name} ({axis}) appears in two loops")
                seen.add(axis)
            kinds = {all_axes[a].kind for a in loop.axes}
            if len(kinds) > 1:
                fail(f"loop {position} fuses spatial and reduce axes; fuse axes of one kind")
            reduces = kinds == {AxisKind.REDUCE}
            if options is not None and not options.allows(loop.kind):
                offered = ", ".join(sorted(k.value for k in options.loop_kinds or ()))
                fail(f"loop kind {loop.kind.value} is not offered by the target ({offered})")
            if loop.kind is LoopKind.PARALLEL and (position != 0 or reduces):
                fail("only the outermost loop may be parallel, and only over spatial axes (a "
                     "parallel reduction would race on the output)")
            if loop.kind is LoopKind.BOUND and reduces:
                fail("a reduce axis cannot be bound to a hardware axis (threads would race on "
                     "the output)")
            if loop.kind is LoopKind.VECTOR:
                if position != len(self.loops) - 1:
                    fail(f"the vector loop (loop {position}) must be the innermost loop")
                if loop.lanes < 1:
                    fail("the vector loop needs lanes >= 1")
            if loop.kind is LoopKind.BOUND and not loop.axis:
                fail(f"the bound loop {position} needs a hardware axis name")
        missing = [a.name for p, a in enumerate(all_axes) if p not in seen and a.extent > 1]
        if missing:
            fail(f"axes {', '.join(missing)} have no loop; every axis of extent > 1 needs one")

    def _safe_text(self, tensor: Tensor) -> str:
        try:
            return self.describe(tensor)
        except (IndexError, LoweringError):
            return repr(self.loops)


def _contiguous_loads(tensor: Tensor, axis: IterVar) -> int:
    """How many loads of ``tensor``'s body step by one element along ``axis`` (coefficient 1 in
    their last index)."""
    count = 0
    for load in loads_in(tensor.body):
        form = affine(load.indices[-1]) if load.indices else None
        if form is not None and form.terms().get(axis) == 1:
            count += 1
    return count


def default_schedule(tensor: Tensor, options: LoweringOptions) -> LoopNestSchedule:
    """The schedule lowering uses when given none.

    Spatial axes outermost, in order; then the reduce axes; the innermost spatial axis (the
    output's contiguous one) innermost, VECTOR when vectorising — or, when it has extent 1,
    the innermost reduce axis as a vector reduction, as it is when no load walks memory
    contiguously along the innermost spatial axis but some do along the innermost reduce axis.
    The outermost spatial loop is PARALLEL,
    fusing leading spatial axes until it has ``options.parallel_threshold`` iterations. The
    innermost non-vector reduce loop is UNROLLED when its extent is within
    ``options.unroll_limit``. Axes of extent 1 get no loop.
    """
    all_axes = compute_axes(tensor)
    spatial = [p for p, a in enumerate(tensor.axes) if a.extent > 1]
    reduce = [len(tensor.axes) + p for p, a in enumerate(tensor.reduce_axes) if a.extent > 1]
    last_spatial = len(tensor.axes) - 1
    inner_spatial = [last_spatial] if reduce and last_spatial in spatial else []
    if (inner_spatial and _contiguous_loads(tensor, all_axes[last_spatial]) == 0
            and _contiguous_loads(tensor, all_axes[reduce[-1]]) > 0):
        # a row reduction (softmax's max and sum): the reduce axis walks memory contiguously,
        # so it becomes the vector reduction and every spatial axis stays outside (parallel)
        inner_spatial = []
    outer_spatial = [p for p in spatial if p not in inner_spatial]
    order = outer_spatial + reduce + inner_spatial
    kinds = {p: LoopKind.SERIAL for p in order}
    lanes = {p: 0 for p in order}

    lane_count = options.lanes(tensor.dtype)
    vector_axis = None
    if options.vectorize and options.allows(LoopKind.VECTOR) and lane_count > 1 and order:
        if order[-1] == last_spatial or (reduce and order[-1] == reduce[-1]):
            vector_axis = order[-1]
            kinds[vector_axis], lanes[vector_axis] = LoopKind.VECTOR, lane_count

    if options.unroll_limit and options.allows(LoopKind.UNROLLED):
        candidates = [p for p in reduce if p != vector_axis]
        if candidates and all_axes[candidates[-1]].extent <= options.unroll_limit:
            innermost = candidates[-1]
            kinds[innermost] = LoopKind.UNROLLED
            lanes[innermost] = all_axes[innermost].extent

    fused: list[int] = []
    if options.parallel and options.allows(LoopKind.PARALLEL):
        product = 1
        for position in order:
            if position not in outer_spatial or position == vector_axis:
                break
            fused.append(position)
            product *= all_axes[position].extent
            if product >= options.parallel_threshold:
                break

    loops: list[ScheduledLoop] = []
    if fused:
        loops.append(ScheduledLoop(tuple(fused), LoopKind.PARALLEL))
    for position in order:
        if position not in fused:
            loops.append(ScheduledLoop((position,), kinds[position], lanes[position]))
    local = bool(tensor.reduce_axes) and tensor.dtype in (DType.FLOAT16, DType.BFLOAT16)
    return LoopNestSchedule(tuple(loops), local_accumulator=local)


__all__ = ["LoopNestSchedule", "ScheduledLoop", "compute_axes", "default_schedule"]
