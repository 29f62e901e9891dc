"""Loop annotations of a stage: unroll, vectorize, parallel, bind, pipeline (thesis Table 4.1).

Each sets the Kernel IR kind of one leaf loop; the target must offer the primitive and express
the loop kind. Where a loop may sit (the one parallel loop outermost in its kernel, the vector
loop innermost in its stage) is checked when lowering, when the final order is known.
"""

from __future__ import annotations

from tilecraft.kernel_ir.nodes import LoopKind
from tilecraft.schedule.errors import schedule_error
from tilecraft.schedule.loop import Loop, LoopAnnotation
from tilecraft.schedule.stage_base import LoopRef, StageBase, check_positive
from tilecraft.target.hierarchy import LaunchScope
from tilecraft.target.spec import SchedulePrimitive


class LoopAnnotations(StageBase):
    """unroll, vectorize, parallel, bind and pipeline."""

    def unroll(self, loop: LoopRef, factor: int | None = None) -> None:
        """Unroll ``loop``: its body is repeated, fully or ``factor`` times per iteration
        (TVM ``unroll``; Kernel IR ``UNROLLED``).

        >>> from tilecraft import te
        >>> from tilecraft.schedule import create_schedule
        >>> A = te.placeholder((3,), name="A")
        >>> B = te.compute((3,), lambda i: A[i] * 2.0, name="B")
        >>> s = create_schedule(B)
        >>> print(s.lower()[0])
        kernel B(A: float32[3], B: float32[3]) -> (B):
          for i in serial(3):
            B[i] = A[i] * 2.0
        >>> s[B].unroll(s[B].axes[0])
        >>> print(s.lower()[0])
        kernel B(A: float32[3], B: float32[3]) -> (B):
          for i in unrolled(3, lanes=3):
            B[i] = A[i] * 2.0
        """
        leaf = self._leaf("unroll", loop)
        self._require(SchedulePrimitive.UNROLL, "unroll", leaf)
        if factor is not None:
            check_positive("unroll", self.name, leaf.name, "factor", factor)
        self.annotations[leaf] = LoopAnnotation(LoopKind.UNROLLED, factor=factor)
        self._record("unroll", loop=leaf.name, factor=factor)

    def vectorize(self, loop: LoopRef, lanes: int | None = None) -> None:
        """Run ``loop`` on SIMD lanes (TVM ``vectorize``; Kernel IR ``VECTOR``): ``lanes``
        elements at a time, the target's lanes for the stage's dtype by default. It must be
        the innermost loop of the stage when lowered. A reduce loop becomes a vector
        reduction (lane-wise partial results combined at the end) where the target can.

        >>> from tilecraft import te
        >>> from tilecraft.schedule import create_schedule
        >>> A = te.placeholder((20,), name="A")
        >>> B = te.compute((20,), lambda i: A[i] * 2.0, name="B")
        >>> s = create_schedule(B)
        >>> print(s.lower()[0])
        kernel B(A: float32[20], B: float32[20]) -> (B):
          for i in serial(20):
            B[i] = A[i] * 2.0
        >>> s[B].vectorize(s[B].axes[0])
        >>> print(s.lower()[0])
        kernel B(A: float32[20], B: float32[20]) -> (B):
          for i in vector(20, lanes=16):
            B[i] = A[i] * 2.0
        """
        leaf = self._leaf("vectorize", loop)
        self._require(SchedulePrimitive.VECTORIZE, "vectorize", leaf)
        if lanes is not None:
            check_positive("vectorize", self.name, leaf.name, "lanes", lanes)
        if leaf.is_reduce:
            why = self.schedule.target.vector_reduction(self.tensor.dtype)
            if why is not None:
                raise schedule_error("vectorize", self.name, leaf.name, f"the loop is a "
                                     f"reduction and {why}; vectorise a spatial loop instead "
                                     "(reorder one innermost)")
        self.annotations[leaf] = LoopAnnotation(LoopKind.VECTOR, lanes=lanes)
        self._record("vectorize", loop=leaf.name, lanes=lanes)

    def parallel(self, loop: LoopRef) -> None:
        """Run the iterations of ``loop`` on the target's cores (TVM ``parallel``; Kernel IR
        ``PARALLEL``). A kernel has one parallel loop, its outermost, over spatial axes.

        >>> from tilecraft import te
        >>> from tilecraft.schedule import create_schedule
        >>> A = te.placeholder((8,), name="A")
        >>> B = te.compute((8,), lambda i: A[i] * 2.0, name="B")
        >>> s = create_schedule(B)
        >>> print(s.lower()[0])
        kernel B(A: float32[8], B: float32[8]) -> (B):
          for i in serial(8):
            B[i] = A[i] * 2.0
        >>> s[B].parallel(s[B].axes[0])
        >>> print(s.lower()[0])
        kernel B(A: float32[8], B: float32[8]) -> (B):
          for i in parallel(8):
            B[i] = A[i] * 2.0
        """
        leaf = self._leaf("parallel", loop)
        self._require(SchedulePrimitive.PARALLEL, "parallel", leaf)
        if leaf.is_reduce:
            raise schedule_error("parallel", self.name, leaf.name, "the loop is a reduction: "
                                 "parallel iterations would race on the output; parallelise a "
                                 "spatial loop")
        self.annotations[leaf] = LoopAnnotation(LoopKind.PARALLEL)
        self._record("parallel", loop=leaf.name)

    def bind(self, loop: LoopRef, thread_axis: str) -> None:
        """Bind ``loop`` to a hardware axis such as ``blockIdx.x`` or ``threadIdx.y`` (TVM
        ``bind``; Kernel IR ``BOUND``): each iteration runs on its own block or thread. Only
        targets with BOUND loops (GPUs, OpenCL devices) offer it. Loops bound to the axes of
        the target's thread hierarchy (``spec.threads``) set the kernel's launch grid and
        block; without a target there is no hierarchy, hence no launch configuration.

        A reduce loop bound to a thread axis is a cross-thread reduction (TVM's allreduce):
        each thread accumulates its share of the reduction in a register, a subgroup reduction
        (``SubgroupReduce``: warp shuffles) combines the partial results and the first thread
        stores the total. The loop must be the stage's outermost reduce loop with only reduce
        loops inside it, and run a power of two of threads: within the subgroup size, or — a
        block reduction, where the spec has a shared level and a barrier — several subgroups
        (at most one subgroup's worth of them, within the block's limit) whose totals meet in
        shared memory.

        >>> from tilecraft import te
        >>> from tilecraft.lower import LoweringOptions
        >>> from tilecraft.schedule import create_schedule
        >>> A = te.placeholder((64,), name="A")
        >>> B = te.compute((64,), lambda i: A[i] * 2.0, name="B")
        >>> s = create_schedule(B)
        >>> print(s.lower()[0])
        kernel B(A: float32[64], B: float32[64]) -> (B):
          for i in serial(64):
            B[i] = A[i] * 2.0
        >>> block, thread = s[B].split(s[B].axes[0], factor=32)
        >>> s[B].bind(block, "blockIdx.x"); s[B].bind(thread, "threadIdx.x")
        >>> kernel = s.lower()[0]
        >>> print(kernel)
        kernel B(A: float32[64], B: float32[64]) -> (B):
          for i_outer in bound(2, axis=blockIdx.x):
            for i_inner in bound(32, axis=threadIdx.x):
              B[(i_outer * 32) + i_inner] = A[((i_outer * 32) + i_inner)] * 2.0
        >>> kernel.launch is None
        True
        """
        leaf = self._leaf("bind", loop)
        self._require(SchedulePrimitive.BIND, "bind", leaf)
        if not isinstance(thread_axis, str) or not thread_axis.strip():
            raise schedule_error("bind", self.name, leaf.name, f"the hardware axis "
                                 f"{thread_axis!r} must be a name such as 'blockIdx.x' or "
                                 "'threadIdx.x'")
        if leaf.is_reduce:
            self._check_cross_thread(leaf, thread_axis)
        self.annotations[leaf] = LoopAnnotation(LoopKind.BOUND, axis=thread_axis)
        self._record("bind", loop=leaf.name, thread_axis=thread_axis)

    def _check_cross_thread(self, leaf: Loop, thread_axis: str) -> None:
        """A reduce loop bound to a thread axis is a cross-thread reduction (module doc):
        a power of two of threads, each with a partial result, within one subgroup or a
        block of subgroups."""
        extent = leaf.extent
        if extent & (extent - 1):
            raise schedule_error("bind", self.name, leaf.name, f"the reduce loop has {extent} "
                                 "iterations; a cross-thread reduction runs on a power of two "
                                 "of threads (split the reduce loop by one)")
        threads = self.schedule.target.threads()
        if threads is None:
            return
        axis = next((a for a in threads.axes if a.name == thread_axis), None)
        if axis is not None and axis.scope is not LaunchScope.BLOCK:
            raise schedule_error("bind", self.name, leaf.name, f"the loop is a reduction and "
                                 f"{thread_axis} indexes blocks, which cannot combine partial "
                                 "results; bind it to a thread axis of a block")
        subgroup = threads.subgroup_size
        if extent <= subgroup:
            return
        # more than a subgroup: a block reduction, subgroup totals combined in shared memory
        # by one more subgroup reduction (tilecraft.schedule.emit_threads)
        block = min(threads.max_threads_per_block, axis.max_extent if axis else extent)
        largest = min(block, subgroup * subgroup)
        if not threads.shared_level or not threads.barrier_scopes:
            largest = subgroup
        if extent > largest:
            raise schedule_error("bind", self.name, leaf.name, f"the reduce loop has {extent} "
                                 f"iterations but a cross-thread reduction on "
                                 f"{self.schedule.target.name} runs on at most {largest} "
                                 f"threads (a subgroup has {subgroup}); split it by at most "
                                 "that")

    def pipeline(self, loop: LoopRef, initiation_interval: int = 1) -> None:
        """Pipeline ``loop`` in hardware with the given initiation interval: a new iteration
        starts every ``initiation_interval`` cycles (HLS ``#pragma HLS pipeline II=n``;
        Kernel IR ``PIPELINED``).

        >>> from tilecraft import te
        >>> from tilecraft.schedule import create_schedule
        >>> A = te.placeholder((8,), name="A")
        >>> B = te.compute((8,), lambda i: A[i] * 2.0, name="B")
        >>> s = create_schedule(B)
        >>> print(s.lower()[0])
        kernel B(A: float32[8], B: float32[8]) -> (B):
          for i in serial(8):
            B[i] = A[i] * 2.0
        >>> s[B].pipeline(s[B].axes[0], initiation_interval=2)
        >>> print(s.lower()[0])
        kernel B(A: float32[8], B: float32[8]) -> (B):
          for i in pipelined(8, II=2):
            B[i] = A[i] * 2.0
        """
        leaf = self._leaf("pipeline", loop)
        self._require(SchedulePrimitive.PIPELINE, "pipeline", leaf)
        check_positive("pipeline", self.name, leaf.name, "initiation_interval",
                       initiation_interval)
        self.annotations[leaf] = LoopAnnotation(LoopKind.PIPELINED,
                                                initiation_interval=initiation_interval)
        self._record("pipeline", loop=leaf.name, initiation_interval=initiation_interval)


__all__ = ["LoopAnnotations"]
