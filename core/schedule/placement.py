"""Where a stage is computed and where its data lives: compute_inline, compute_at, buffer,
partition, dataflow (thesis Table 4.1).

``compute_inline`` substitutes an elementwise stage into its consumers; ``compute_at``
computes the region of a stage that one iteration of a consumer's loop needs, right inside that
loop, in a local buffer (bound inference: :mod:`.region`); ``buffer`` adds on-chip read/write
buffers (FPGA: the read / compute / write structure of Fig. 4.4c); ``partition`` splits a
buffer into banks (HLS ``array_partition``); ``dataflow`` streams the stage through read /
compute / write stages (FPGA: the three-stage pipeline of Fig. 4.4c).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tilecraft.kernel_ir.nodes import ArrayPartition, PartitionKind
from tilecraft.schedule.errors import schedule_error
from tilecraft.schedule.stage_base import (
    Attach,
    AttachKind,
    LoopRef,
    StageBase,
    Streaming,
    check_positive,
)
from tilecraft.target.spec import SchedulePrimitive
from tilecraft.te.tensor import Tensor


class Placement(StageBase):
    """compute_inline, compute_at, compute_root, buffer, partition and dataflow."""

    def compute_inline(self) -> None:
        """Substitute this stage's body into every consumer instead of storing it (TVM
        ``compute_inline``). Only stages without reductions that are not outputs of the
        program can be inlined.

        >>> from tilecraft import te
        >>> from tilecraft.schedule import create_schedule
        >>> A = te.placeholder((4,), name="A")
        >>> P = te.compute((4,), lambda i: A[i] + 1.0, name="P")
        >>> C = te.compute((4,), lambda i: P[i] * 2.0, name="C")
        >>> s = create_schedule(C)
        >>> for kernel in s.lower():
        ...     print(kernel)
        kernel P(A: float32[4], P: float32[4]) -> (P):
          for i in serial(4):
            P[i] = A[i] + 1.0
        kernel C(P: float32[4], C: float32[4]) -> (C):
          for i in serial(4):
            C[i] = P[i] * 2.0
        >>> s[P].compute_inline()
        >>> for kernel in s.lower():
        ...     print(kernel)
        kernel C(A: float32[4], C: float32[4]) -> (C):
          for i in serial(4):
            C[i] = (A[i] + 1.0) * 2.0
        """
        self._require(SchedulePrimitive.INLINE, "compute_inline", None)
        if self.is_reduction:
            raise schedule_error("compute_inline", self.name, self.reduce_axes[0].name,
                                 "the stage is a reduction, which has no value per element to "
                                 "substitute; compute it at a consumer's loop instead")
        self._not_output("compute_inline")
        self.attach = Attach(AttachKind.INLINE)
        self._record("compute_inline")

    def compute_at(self, parent: Any, loop: LoopRef) -> None:
        """Compute this stage inside ``loop`` of the stage ``parent`` (TVM ``compute_at``):
        each iteration of ``loop`` first computes the region of this stage that the loops
        inside it read, into a local buffer, then runs them.

        >>> from tilecraft import te
        >>> from tilecraft.schedule import create_schedule
        >>> A = te.placeholder((4, 6), name="A")
        >>> P = te.compute((4, 6), lambda i, j: A[i, j] * 2.0, name="P")
        >>> C = te.compute((4, 5), lambda i, j: P[i, j] + P[i, j + 1], name="C")
        >>> s = create_schedule(C)
        >>> for kernel in s.lower():
        ...     print(kernel)
        kernel P(A: float32[4, 6], P: float32[4, 6]) -> (P):
          for i in serial(4):
            for j in serial(6):
              P[i, j] = A[i, j] * 2.0
        kernel C(P: float32[4, 6], C: float32[4, 5]) -> (C):
          for i in serial(4):
            for j in serial(5):
              C[i, j] = P[i, j] + P[i, (j + 1)]
        >>> s[P].compute_at(s[C], s[C].axes[0])
        >>> for kernel in s.lower():
        ...     print(kernel)
        kernel C(A: float32[4, 6], C: float32[4, 5]) -> (C):
          for i in serial(4):
            alloc P: float32[1, 6] in global
            for j1 in serial(6):
              P[0, j1] = A[i, j1] * 2.0
            for j in serial(5):
              C[i, j] = P[0, j] + P[0, (j + 1)]
        """
        self._require(SchedulePrimitive.COMPUTE_AT, "compute_at", None)
        target = self.schedule.stage(parent, "compute_at")
        if target is self:
            raise schedule_error("compute_at", self.name, None, "a stage cannot be computed "
                                 "inside its own loops; pick a consumer's loop")
        leaf = target._leaf("compute_at", loop)
        self._not_output("compute_at")
        siblings = [s for s in self.schedule.stages if s.attach.kind is AttachKind.AT
                    and s.attach.stage == target.name and s.attach.loop is leaf]
        if not any(self.tensor in self.schedule.reads_of(reader)
                   for reader in [target, *siblings]):
            raise schedule_error("compute_at", self.name, leaf.name, f"stage {target.name} does "
                                 f"not read {self.name}, so no region of it is needed there; "
                                 f"attach it to the stage that reads it")
        self.attach = Attach(AttachKind.AT, target.name, leaf)
        self._record("compute_at", parent=target.name, loop=leaf.name)

    def compute_root(self) -> None:
        """Compute this stage in its own kernel again (undo ``compute_inline`` /
        ``compute_at``; TVM ``compute_root``)."""
        if self.cache is not None:
            raise schedule_error("compute_root", self.name, None, "a cache stage lives in a "
                                 "local buffer of its reader's kernel; attach it with "
                                 "compute_at instead")
        self.attach = Attach(AttachKind.ROOT)
        self._record("compute_root")

    def buffer(self, level: str, tensors: Sequence[Any] | None = None) -> None:
        """Add data buffers in memory ``level`` for this stage's reads and writes (thesis
        Table 4.1 "buffer": like cache, adds read/write buffers; its parameter says which
        tensors are buffered — this stage's own tensor by default).

        For its own tensor: a stage computed inside another (or a cache stage) keeps its
        buffer in ``level``; a stage with its own kernel computes into a buffer in ``level``
        and copies it out to the kernel's output at the end. For a tensor it reads: the
        tensor is copied into a buffer in ``level`` before the stage's loops, which then read
        the copy. This is the read / compute / write structure of FPGA kernels (Fig. 4.4c).

        >>> from tilecraft import te
        >>> from tilecraft.schedule import create_schedule
        >>> A = te.placeholder((4,), name="A")
        >>> B = te.compute((4,), lambda i: A[i] * 2.0, name="B")
        >>> s = create_schedule(B)
        >>> print(s.lower()[0])
        kernel B(A: float32[4], B: float32[4]) -> (B):
          for i in serial(4):
            B[i] = A[i] * 2.0
        >>> s[B].buffer("BRAM", tensors=[A, B])
        >>> print(s.lower()[0])
        kernel B(A: float32[4], B: float32[4]) -> (B):
          alloc B_BRAM: float32[4] in BRAM
          alloc A_BRAM: float32[4] in BRAM
          copy A_BRAM[0 : 4] <- A[0 : 4]
          for i in serial(4):
            B_BRAM[i] = A_BRAM[i] * 2.0
          copy B[0 : 4] <- B_BRAM[0 : 4]
        """
        self._require(SchedulePrimitive.BUFFER, "buffer", None)
        self.schedule.target.require_level("buffer", self.name, level)
        names = [self.name] if tensors is None else [self._tensor_name(t) for t in tensors]
        reads = {t.name for t in self.schedule.reads_of(self)}
        for name in names:
            if name != self.name and name not in reads:
                raise schedule_error("buffer", self.name, None, f"the stage does not read "
                                     f"{name!r} (it reads {', '.join(sorted(reads)) or 'nothing'}"
                                     f"); buffer its own tensor {self.name!r} or one it reads")
        for name in names:
            if name == self.name:
                self.level = level
            else:
                self.read_buffers[name] = level
        self._record("buffer", level=level, tensors=names)

    def partition(self, dim: int, kind: PartitionKind | str = PartitionKind.CYCLIC,
                  factor: int = 1) -> None:
        """Partition dimension ``dim`` of this stage's on-chip buffer into ``factor`` banks,
        ``cyclic`` (element ``i`` in bank ``i % factor``), ``block`` (consecutive blocks) or
        ``complete`` (one register per element) — HLS ``#pragma HLS array_partition``. The
        stage needs an on-chip buffer: computed inside another stage, a cache stage, or
        given one with :meth:`buffer`.

        >>> from tilecraft import te
        >>> from tilecraft.schedule import create_schedule
        >>> A = te.placeholder((8,), name="A")
        >>> B = te.compute((8,), lambda i: A[i] * 2.0, name="B")
        >>> s = create_schedule(B)
        >>> s[B].buffer("BRAM")
        >>> s.lower()[0].body.buffer.partitions
        ()
        >>> s[B].partition(0, "cyclic", 4)
        >>> kernel = s.lower()[0]
        >>> print(kernel)
        kernel B(A: float32[8], B: float32[8]) -> (B):
          alloc B_BRAM: float32[8] in BRAM
          for i in serial(8):
            B_BRAM[i] = A[i] * 2.0
          copy B[0 : 8] <- B_BRAM[0 : 8]
        >>> kernel.body.buffer.partitions
        (ArrayPartition(dim=0, kind=<PartitionKind.CYCLIC: 'cyclic'>, factor=4),)
        """
        self._require(SchedulePrimitive.PARTITION, "partition", None)
        ndim = self.tensor.ndim
        if isinstance(dim, bool) or not isinstance(dim, int) or not 0 <= dim < ndim:
            raise schedule_error("partition", self.name, None, f"dimension {dim!r} is not one "
                                 f"of the {ndim} dimensions of {self.name} (0 to {ndim - 1})")
        try:
            partition_kind = PartitionKind(getattr(kind, "value", kind))
        except ValueError:
            kinds = ", ".join(k.value for k in PartitionKind)
            raise schedule_error("partition", self.name, None, f"unknown partition kind "
                                 f"{kind!r}; use one of {kinds}") from None
        check_positive("partition", self.name, None, "factor", factor)
        self.partitions.append(ArrayPartition(dim, partition_kind, factor))
        self._record("partition", dim=dim, kind=partition_kind.value, factor=factor)

    def dataflow(self, initiation_interval: int = 1, depth: int = 2) -> None:
        """Lower this stage as a dataflow region of three stages linked by streams — read,
        compute, write — running concurrently (thesis Table 4.1 "pipeline" with three stages;
        Fig. 4.4c; HLS ``#pragma HLS dataflow``). The read stage walks the stage's loops and
        pushes every value the computation loads into one stream per input; the compute
        stage pops them into registers, computes (a reduction accumulates in a register)
        and pushes each result; the write stage pops the results into the output. The
        innermost loop of each stage is pipelined with ``initiation_interval``; streams hold
        ``depth`` values. Each stage's loops sit in a Kernel IR ``stage`` loop.

        The stage must be computed in its own kernel, with its reduce loops inside its
        spatial loops and no other stage computed inside it.

        >>> from tilecraft import te
        >>> from tilecraft.schedule import create_schedule
        >>> A = te.placeholder((6,), name="A")
        >>> B = te.compute((6,), lambda i: A[i] * 2.0, name="B")
        >>> s = create_schedule(B)
        >>> s[B].dataflow()
        >>> print(s.lower()[0])
        kernel B(A: float32[6], B: float32[6]) -> (B):
          dataflow streams A_stream: float32 depth 2, B_stream: float32 depth 2:
            stage 0:
              for read in stage(1):
                for i in pipelined(6, II=1):
                  push A_stream <- A[i]
            stage 1:
              for compute in stage(1):
                alloc A_reg: float32[1] in global
                for i in pipelined(6, II=1):
                  A_reg[0] <- pop A_stream
                  push B_stream <- A_reg[0] * 2.0
            stage 2:
              for write in stage(1):
                for i in pipelined(6, II=1):
                  B[i] <- pop B_stream
        """
        self._require(SchedulePrimitive.PIPELINE, "dataflow", None)
        check_positive("dataflow", self.name, None, "initiation_interval", initiation_interval)
        check_positive("dataflow", self.name, None, "depth", depth)
        self.streaming = Streaming(initiation_interval, depth)
        self._record("dataflow", initiation_interval=initiation_interval, depth=depth)

    # helpers -----------------------------------------------------------------------------
    def _not_output(self, verb: str) -> None:
        if self.tensor in self.schedule.outputs:
            raise schedule_error(verb, self.name, None, f"{self.name} is an output of the "
                                 "program, so it must be stored in its own kernel; schedule "
                                 "its producers this way instead")

    def _tensor_name(self, value: Any) -> str:
        if isinstance(value, Tensor):
            return value.name
        if isinstance(value, str):
            return value
        name = getattr(value, "name", None)
        if isinstance(name, str):
            return name
        raise schedule_error("buffer", self.name, None, f"{value!r} is not a tensor; pass "
                             "Tensors or tensor names")


__all__ = ["Placement"]
