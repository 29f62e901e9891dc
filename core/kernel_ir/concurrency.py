"""Kernel IR statements and expressions of concurrent hardware (see :mod:`.nodes` for the rest).

- :class:`AsyncCopy`, :class:`CommitGroup`, :class:`WaitGroup`: CUDA's ``cp.async`` (and an
  NPU's MTE queues): a copy is issued, copies issued since the last commit form a group, and
  ``wait(n)`` blocks until at most ``n`` committed groups are still in flight. The destination
  of a copy holds its new data only after a wait that covers the copy's group; reading it
  earlier is a race (the verifier refuses it where the order is visible in one statement
  sequence, the interpreter wherever it happens).
- :class:`Pipeline`: a multi-stage software pipeline over ``var``: at step ``t`` stage ``s``
  runs iteration ``t - s``, so stage 0 (a copy-in) of iteration ``i + 1`` overlaps stage 1 (the
  compute) of iteration ``i``. Buffers written by one stage and read by a later one rotate
  through ``depth`` copies: their first dimension has extent ``depth`` and is indexed with
  ``var % depth`` (double buffering is ``depth=2``); ``depth`` must be at least the number of
  iterations a buffer is live across (from the first to the last stage using it), which the
  verifier checks.
- :class:`Dataflow`: an HLS dataflow region: stages run concurrently, linked only by streams
  (``StreamPush`` / ``StreamPop``); every stream is pushed by one stage and popped by one
  later stage as many times as it is pushed.
- :class:`AtomicUpdate`: ``buffer[indices] op= value`` as one indivisible read-modify-write,
  for several threads updating one element (``atomicAdd``, ``atomic_max``).
- :class:`SubgroupReduce`: a cross-lane (warp, subgroup) reduction: every thread of a group of
  ``width`` consecutive values of the bound loop variable ``lane`` gets the reduction of
  ``value`` over the group (``__shfl_xor_sync`` butterflies, ``sub_group_reduce_add``).
- :class:`LaneReduce`: the reduction of the lanes of a vector value to one scalar.

>>> from tilecraft.dtypes import DType
>>> from tilecraft.kernel_ir.nodes import Buffer, Region
>>> from tilecraft.te import const
>>> A = Buffer("A", (8,), DType.FLOAT32)
>>> S = Buffer("S", (8,), DType.FLOAT32, level="shared")
>>> print(AsyncCopy(Region(S, (const(0),), (8,)), Region(A, (const(0),), (8,))))
async_copy S[0 : 8] <- A[0 : 8]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from tilecraft.dtypes import DType
from tilecraft.kernel_ir.nodes import Buffer, Region, Stmt, Stream
from tilecraft.te.expr import Expr, ReduceOp, Var

__all__ = ["AsyncCopy", "AtomicUpdate", "CommitGroup", "Dataflow", "LaneReduce", "Pipeline",
           "SubgroupReduce", "WaitGroup"]


@dataclass(frozen=True)
class AsyncCopy(Stmt):
    """Start copying ``src`` into ``dst`` (same element count); it lands at a covering wait."""

    expr_fields: ClassVar[tuple[str, ...]] = ("dst", "src")

    dst: Region
    src: Region


@dataclass(frozen=True)
class CommitGroup(Stmt):
    """Close the group of asynchronous copies issued since the previous commit."""


@dataclass(frozen=True)
class WaitGroup(Stmt):
    """Block until at most ``pending`` committed groups of copies are still in flight."""

    pending: int = 0


@dataclass(frozen=True)
class Pipeline(Stmt):
    """``for var in range(extent)`` with ``stages`` software-pipelined (module docstring);
    ``buffers`` are the rotating buffers, each with first dimension ``depth``."""

    child_fields: ClassVar[tuple[str, ...]] = ("stages",)
    expr_fields: ClassVar[tuple[str, ...]] = ("extent",)

    var: Var
    extent: Expr
    stages: tuple[Stmt, ...]
    depth: int = 2
    buffers: tuple[Buffer, ...] = ()


@dataclass(frozen=True)
class Dataflow(Stmt):
    """Stages running concurrently, linked by ``streams`` (module docstring)."""

    child_fields: ClassVar[tuple[str, ...]] = ("stages",)

    stages: tuple[Stmt, ...]
    streams: tuple[Stream, ...] = ()


@dataclass(frozen=True)
class AtomicUpdate(Stmt):
    """``buffer[indices] = op(buffer[indices], value)``, indivisibly."""

    expr_fields: ClassVar[tuple[str, ...]] = ("indices", "value")

    buffer: Buffer
    indices: tuple[Expr, ...]
    value: Expr
    op: ReduceOp = ReduceOp.SUM


@dataclass(frozen=True)
class SubgroupReduce(Stmt):
    """``buffer[indices] = op over the group of lane values of value`` (module docstring)."""

    expr_fields: ClassVar[tuple[str, ...]] = ("indices", "value")

    buffer: Buffer
    indices: tuple[Expr, ...]
    value: Expr
    lane: Var
    width: int
    op: ReduceOp = ReduceOp.SUM


@dataclass(frozen=True, eq=True)
class LaneReduce(Expr):
    """The ``op``-reduction of the lanes of the vector value ``x`` (a scalar of its dtype)."""

    op: ReduceOp
    x: Expr

    @property
    def dtype(self) -> DType:
        return self.x.dtype

    def ir_children(self) -> tuple[Expr, ...]:
        return (self.x,)

    def ir_rebuild(self, new_children: tuple[Expr, ...]) -> LaneReduce:
        return LaneReduce(self.op, new_children[0])

    def render_text(self, render: Any) -> str:
        return f"lane_{self.op.value}({render(self.x)})"
