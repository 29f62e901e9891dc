"""The loop IR and the schedule primitives of thesis §4.1 (Eq. 4.1-4.5, Table 4.1), lowered to
Kernel IR.

A schedule (TVM-like) has one stage per compute of a program. Primitives transform a stage's
loops (split, fuse, reorder, tile), set their kind (unroll, vectorize, parallel, bind,
pipeline), move computation (compute_inline, compute_at) and data (cache_read, cache_write,
buffer, partition). A target spec says which primitives it offers; every primitive checks it
and its arguments, raising a :class:`ScheduleError` that names the primitive, the stage and
the loop. ``s.lower(target)`` gives Kernel IR kernels that the Kernel IR interpreter and the
targets' code generators run. This is tilecraft's one schedule representation: the default
schedule of every compute is built with these primitives too, by the lowering strategy the
target's spec selects (:mod:`tilecraft.schedule.strategies`: CPU, GPU, NPU, FPGA), and every
schedule travels as its trace.

>>> from tilecraft import te
>>> from tilecraft.lower import LoweringOptions
>>> A = te.placeholder((64, 32), name="A")
>>> B = te.placeholder((32, 48), name="B")
>>> k = te.reduce_axis(32, name="k")
>>> C = te.compute((64, 48), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
>>> s = create_schedule(C)
>>> i, j = s[C].axes
>>> io, ii = s[C].split(i, factor=8, names=("io", "ii"))
>>> jo, ji = s[C].split(j, factor=16, names=("jo", "ji"))
>>> s[C].reorder(io, jo, s[C].reduce_axes[0], ii, ji)
>>> s[C].parallel(s[C].fuse(io, jo, name="f"))
>>> s[C].unroll(ii)
>>> s[C].vectorize(ji)
>>> print(s.lower(LoweringOptions(vector_lanes=16))[0])
kernel C(A: float32[64, 32], B: float32[32, 48], C: float32[64, 48]) -> (C):
  for f in parallel(24):
    for ii in unrolled(8, lanes=8):
      for ji in vector(16, lanes=16):
        C[((f // 3) * 8) + ii, ((f % 3) * 16) + ji] = 0.0
    for k in serial(32):
      for ii in unrolled(8, lanes=8):
        for ji in vector(16, lanes=16):
          C[((f // 3) * 8) + ii, ((f % 3) * 16) + ji]
            sum= A[(((f // 3) * 8) + ii), k] * B[k, (((f % 3) * 16) + ji)]
"""

from tilecraft.schedule.config import apply_config
from tilecraft.schedule.errors import ScheduleError
from tilecraft.schedule.loop import Loop
from tilecraft.schedule.schedule import Schedule, create_schedule
from tilecraft.schedule.stage import Stage
from tilecraft.schedule.trace import replay

__all__ = ["Loop", "Schedule", "ScheduleError", "Stage", "apply_config", "create_schedule",
           "replay"]
