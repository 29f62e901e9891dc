"""The FPGA strategy: FlexTensor's FPGA template (thesis §4.5, Fig. 4.4c) for a target whose
spec declares a spatial architecture on a fabric budget (reconfigurable logic).

Every compute becomes the three-stage coarse-grained pipeline of the thesis: a read stage
streams the operands from off-chip memory, a compute stage consumes them as they arrive and
a write stage drains the results — a Kernel IR dataflow region whose stages are linked by
streams (the ``dataflow`` primitive), each stage's innermost loop pipelined with an
initiation interval of 1.

>>> from tilecraft import te
>>> from tilecraft.lower import LoweringOptions
>>> from tilecraft.schedule import create_schedule
>>> A = te.placeholder((4, 9), name="A")
>>> k = te.reduce_axis(9, name="k")
>>> S = te.compute((4,), lambda i: te.sum(A[i, k], axis=k), name="S")
>>> options = LoweringOptions(register_level="register")
>>> s = create_schedule(S, options)
>>> FpgaStrategy().apply(s, S, options)
>>> print(s.lower(options)[0])
kernel S(A: float32[4, 9], S: float32[4]) -> (S):
  dataflow streams A_stream: float32 depth 2, S_stream: float32 depth 2:
    stage 0:
      for read in stage(1):
        for i in serial(4):
          for k in pipelined(9, II=1):
            push A_stream <- A[i, k]
    stage 1:
      for compute in stage(1):
        alloc A_reg: float32[1] in register
        alloc S_acc: float32[1] in register
        for i in serial(4):
          S_acc[0] = 0.0
          for k in pipelined(9, II=1):
            A_reg[0] <- pop A_stream
            S_acc[0] sum= A_reg[0]
          push S_stream <- S_acc[0]
    stage 2:
      for write in stage(1):
        for i in pipelined(4, II=1):
          S[i] <- pop S_stream
"""

from __future__ import annotations

from typing import Any

from tilecraft.lower.options import LoweringOptions
from tilecraft.te.tensor import Tensor

__all__ = ["FpgaStrategy"]


class FpgaStrategy:
    """Read / compute / write dataflow (module docstring)."""

    name = "fpga"

    def selects(self, options: LoweringOptions) -> bool:
        spatial = getattr(options.spec, "spatial", None)
        return spatial is not None and spatial.fabric is not None

    def apply(self, schedule: Any, tensor: Tensor, options: LoweringOptions) -> None:
        schedule[tensor].dataflow(initiation_interval=1)
