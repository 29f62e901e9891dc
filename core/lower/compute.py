"""Lowering one te compute to one Kernel IR kernel: the schedule the target's lowering strategy
builds with the schedule primitives (FlexTensor's template for a CPU, a GPU, an NPU or an
FPGA, chosen from the spec: :mod:`tilecraft.schedule.strategies`), lowered by
:meth:`tilecraft.schedule.Schedule.lower`.

The kernel's parameters are the compute's input tensors (in order of first use) and its
output, as buffers named after the tensors in ``options.param_level``. On a CPU, for a
reduction ``C[i, j] = sum(A[i, k] * B[k, j], axis=k)`` the body is::

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

from collections.abc import Mapping

from tilecraft.errors import LoweringError
from tilecraft.graph import Graph
from tilecraft.kernel_ir.nodes import Buffer, BufferLoad, Kernel
from tilecraft.kernel_ir.simplify import simplify
from tilecraft.lower.options import LoweringOptions
from tilecraft.te.expr import Expr, IterVar, Load
from tilecraft.te.tensor import Tensor
from tilecraft.te.visit import substitute, transform


def lower_compute(tensor: Tensor, options: LoweringOptions) -> Kernel:
    """One kernel computing ``tensor`` from its inputs (see the module docstring), verified
    against ``options.spec``; ``kernel.attrs`` name the strategy and hold the schedule's
    trace. Raises :class:`~tilecraft.errors.LoweringError` naming the compute when it cannot
    be lowered."""
    from tilecraft.schedule.strategies import lower_with_strategy

    if not isinstance(tensor, Tensor) or tensor.is_placeholder:
        raise LoweringError(f"{tensor!r} is not a compute; only computes are lowered "
                            "(placeholders become kernel parameters)")
    names: dict[str, Tensor] = {}
    for read in [*tensor.inputs, tensor]:
        if names.setdefault(read.name, read) is not read:
            raise LoweringError(f"compute {tensor.name}: two different tensors read by it are "
                                f"both named {read.name!r}; give every tensor a unique name")
    return lower_with_strategy(tensor, options)


def lower_graph(graph: Graph, options: LoweringOptions) -> list[Kernel]:
    """One kernel per compute of ``graph``, producers first, each by its target's strategy
    (schedule a graph otherwise with :func:`tilecraft.schedule.create_schedule`)."""
    return [lower_compute(t, options) for t in graph.computes]


def to_kernel_expr(expr: Expr, values: Mapping[IterVar, Expr],
                   buffers: Mapping[Tensor, Buffer]) -> Expr:
    """``expr`` with each axis replaced by its value in ``values`` (simplified) and each te
    ``Load`` by a ``BufferLoad`` of the tensor's buffer in ``buffers``.

    >>> from tilecraft import te
    >>> from tilecraft.dtypes import DType
    >>> A = te.placeholder((4,), name="A")
    >>> B = te.compute((4,), lambda i: A[i] * 2.0, name="B")
    >>> i = te.Var("i")
    >>> buffer = Buffer("A", (4,), DType.FLOAT32)
    >>> print(to_kernel_expr(B.body, {B.axes[0]: i + 1}, {A: buffer}))
    (A[(i + 1)] * 2.0)
    """
    expr = simplify(substitute(expr, values))

    def to_buffer_load(node: Expr) -> Expr | None:
        if isinstance(node, Load):
            indices = tuple(transform(i, to_buffer_load) for i in node.indices)
            return BufferLoad(buffers[node.tensor], indices)
        return None

    return transform(expr, to_buffer_load)


__all__ = ["lower_compute", "lower_graph", "to_kernel_expr"]
