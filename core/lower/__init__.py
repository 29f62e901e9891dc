"""Lowering te computes to Kernel IR: one kernel per compute, by the schedule the target's
lowering strategy builds (:mod:`tilecraft.schedule.strategies`), lowered by
:meth:`tilecraft.schedule.Schedule.lower` — the one schedule type, FlexTensor's.

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

__all__ = ["LoweringOptions", "clamp_guarded_loads", "lower_compute", "lower_graph"]
