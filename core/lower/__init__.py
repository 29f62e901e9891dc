"""Lowering te computes to Kernel IR: one kernel per compute, following a loop-nest schedule.

This is the fixed-structure path (a permutation of the axes, fused groups, loop kinds) that the
default schedules use; :mod:`tilecraft.schedule` lowers full schedules (split, fuse, tile,
compute_at, caches, ...) to the same Kernel IR, and expresses these loop-nest schedules through
its primitives (:mod:`tilecraft.schedule.loop_nest`).

>>> from tilecraft import te
>>> from tilecraft.lower import LoweringOptions, lower_compute
>>> A = te.placeholder((4, 20), name="A")
>>> B = te.compute((4, 20), lambda i, j: te.max(A[i, j], 0.0), name="B")
>>> print(lower_compute(B, LoweringOptions(vector_lanes=16, cores=1)))
kernel B(A: float32[4, 20], B: float32[4, 20]) -> (B):
  for i in parallel(4):
    for j in vector(20, lanes=16):
      B[i, j] = max(A[i, j], 0.0)
"""

from tilecraft.lower.compute import lower_compute, lower_graph
from tilecraft.lower.guards import clamp_guarded_loads
from tilecraft.lower.options import LoweringOptions
from tilecraft.lower.schedule import (
    LoopNestSchedule,
    ScheduledLoop,
    compute_axes,
    default_schedule,
)

__all__ = [
    "LoopNestSchedule", "LoweringOptions", "ScheduledLoop", "clamp_guarded_loads",
    "compute_axes", "default_schedule", "lower_compute", "lower_graph",
]
