"""Loop-nest schedules (:mod:`tilecraft.lower.schedule`) expressed through the primitives.

A :class:`~tilecraft.lower.schedule.LoopNestSchedule` lists a compute's loops outermost first,
each over one axis or several fused axes, with a kind. :func:`apply_loop_nest` builds the same
nest with reorder, fuse and the annotating primitives, so the default schedule of
:func:`~tilecraft.lower.schedule.default_schedule` is also a point of this schedule layer
(:func:`apply_default_schedule`), recorded in the trace like any other.

>>> from tilecraft import te
>>> from tilecraft.lower import LoweringOptions
>>> from tilecraft.schedule import create_schedule
>>> A = te.placeholder((6, 40), name="A")
>>> B = te.compute((6, 40), lambda i, j: A[i, j] * 2.0, name="B")
>>> s = create_schedule(B)
>>> options = LoweringOptions(vector_lanes=16, cores=2)
>>> apply_default_schedule(s, options)
>>> print(s.lower(options)[0])
kernel B(A: float32[6, 40], B: float32[6, 40]) -> (B):
  for i in parallel(6):
    for j in vector(40, lanes=16):
      B[i, j] = A[i, j] * 2.0
"""

from __future__ import annotations

from typing import Any

from tilecraft.errors import LoweringError
from tilecraft.kernel_ir.nodes import LoopKind
from tilecraft.lower.options import LoweringOptions
from tilecraft.lower.schedule import LoopNestSchedule, default_schedule
from tilecraft.schedule.errors import schedule_error
from tilecraft.schedule.loop import Loop
from tilecraft.schedule.schedule import Schedule
from tilecraft.schedule.stage import Stage
from tilecraft.schedule.stage_base import AttachKind


def apply_loop_nest(schedule: Schedule, tensor: Any, nest: LoopNestSchedule) -> Stage:
    """Give the stage of ``tensor`` the loops of ``nest`` (axes numbered spatial then reduce,
    as :func:`~tilecraft.lower.schedule.compute_axes`); axes of extent 1 without a loop go
    first. ``local_accumulator`` needs no primitive for half-precision outputs (they always
    accumulate in float32) and is refused otherwise: use ``cache_write`` for that."""
    stage = schedule.stage(tensor, "apply_loop_nest")
    try:
        nest.validate(stage.tensor)
    except LoweringError as err:  # the nest's own message says what is wrong
        raise schedule_error("apply_loop_nest", stage.name, None, str(err)) from err
    if len(stage.root_loops) != len(stage.tensor.axes) + len(stage.tensor.reduce_axes):
        raise schedule_error("apply_loop_nest", stage.name, None, "cache_write moved the "
                             "stage's reduction to its cache stage; schedule that one")
    if nest.local_accumulator and stage.tensor.dtype.value not in ("float16", "bfloat16"):
        raise schedule_error("apply_loop_nest", stage.name, None, "local_accumulator is a "
                             "cache_write: call s.cache_write(tensor, level) instead")
    roots = stage.root_loops
    used = [position for loop in nest.loops for position in loop.axes]
    order = [roots[p] for p in range(len(roots)) if p not in used] + [roots[p] for p in used]
    if len(order) > 1 and order != list(stage.leaf_loops):
        stage.reorder(*order)
    for scheduled in nest.loops:
        loops = [roots[p] for p in scheduled.axes]
        loop: Loop = stage.fuse(*loops) if len(loops) > 1 else loops[0]
        kind = scheduled.kind
        if kind is LoopKind.PARALLEL:
            stage.parallel(loop)
        elif kind is LoopKind.VECTOR:
            stage.vectorize(loop, lanes=scheduled.lanes or None)
        elif kind is LoopKind.UNROLLED:
            stage.unroll(loop, factor=scheduled.lanes or None)
        elif kind is LoopKind.BOUND:
            stage.bind(loop, scheduled.axis or "")
        elif kind is LoopKind.PIPELINED:
            stage.pipeline(loop, initiation_interval=scheduled.initiation_interval or 1)
        elif kind is not LoopKind.SERIAL:
            raise schedule_error("apply_loop_nest", stage.name, loop.name, f"loop kind "
                                 f"{kind.value} has no schedule primitive")
    return stage


def apply_default_schedule(schedule: Schedule, options: LoweringOptions) -> None:
    """Give every untransformed stage computed in its own kernel the default schedule that
    :func:`~tilecraft.lower.lower_compute` would use."""
    for stage in schedule.stages:
        untouched = not stage.relations and not stage.annotations and \
            len(stage.root_loops) == len(stage.tensor.axes) + len(stage.tensor.reduce_axes)
        if stage.attach.kind is AttachKind.ROOT and stage.cache is None and untouched:
            apply_loop_nest(schedule, stage, default_schedule(stage.tensor, options))


__all__ = ["apply_default_schedule", "apply_loop_nest"]
