"""The CPU strategy: FlexTensor's CPU template (thesis §4.5, Fig. 4.4a) at its defaults —
the outermost spatial loops fused into one parallel loop over the cores, the innermost loop
vectorised, a short innermost reduce loop unrolled.

The loop nest is :func:`~tilecraft.lower.schedule.default_schedule`'s, built with the
primitives (:func:`~tilecraft.schedule.loop_nest.apply_loop_nest`).

>>> from tilecraft import te
>>> from tilecraft.lower import LoweringOptions
>>> from tilecraft.schedule import create_schedule
>>> A = te.placeholder((6, 40), name="A")
>>> B = te.compute((6, 40), lambda i, j: A[i, j] * 2.0, name="B")
>>> options = LoweringOptions(vector_lanes=16, cores=2)
>>> s = create_schedule(B, options)
>>> CpuStrategy().apply(s, B, options)
>>> print(s.lower(options)[0])
kernel B(A: float32[6, 40], B: float32[6, 40]) -> (B):
  for i in parallel(6):
    for j in vector(40, lanes=16):
      B[i, j] = A[i, j] * 2.0
"""

from __future__ import annotations

from typing import Any

from tilecraft.lower.options import LoweringOptions
from tilecraft.te.tensor import Tensor

__all__ = ["CpuStrategy"]


class CpuStrategy:
    """Parallel outer loop, vector inner loop (module docstring)."""

    name = "cpu"

    def selects(self, options: LoweringOptions) -> bool:
        return True

    def apply(self, schedule: Any, tensor: Tensor, options: LoweringOptions) -> None:
        from tilecraft.lower.schedule import default_schedule
        from tilecraft.schedule.loop_nest import apply_loop_nest

        apply_loop_nest(schedule, tensor, default_schedule(tensor, options))
