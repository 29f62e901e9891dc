"""The GPU strategy: FlexTensor's GPU template (thesis §4.5, Fig. 4.4b) for a target whose
spec declares a thread hierarchy.

Outer loops go to blocks, inner loops to threads: the output's spatial loops are fused into
one, split by the threads of a block (a multiple of the subgroup, within
``max_threads_per_block`` and the x axis' limit), the inner part bound to the block's x axis
and the outer part to the grid (over x, y, z when x alone cannot take it). Extents that do
not divide leave a guard. A reduction runs serially in each thread, accumulating in a register
(``cache_write`` into the innermost level, computed at the thread loop) that is stored once —
FlexTensor "always keeps intermediate results in registers and writes back after the
computation".

Where the innermost output axis walks every load contiguously and divides by the spec's vector
width for the dtype (``compute.vector_bits``: 4 float32 or 8 float16 lanes of 128 bits), each
thread computes that many consecutive elements in a ``vector`` loop (:mod:`.gpu_vectors`),
which a CUDA code generator turns into ``float4`` loads and stores.

A row reduction (softmax's max and sum, layer_norm's mean: the reduce axis walks memory, the
output does not) runs across threads instead: each output row gets a block, the reduce loop is
split by the row's threads and its inner part bound to the block's x axis — a cross-thread
reduction combining the threads' partial results with a ``SubgroupReduce``
(:mod:`tilecraft.schedule.emit_threads`). A row gets one subgroup, or, when it is long and the
rows are too few to fill the cores, a block of several subgroups whose totals meet in shared
memory (:func:`row_threads`). Other reductions (a column sum, pooling: the reduce axis does not
walk memory) keep one output element per thread, whose loads of neighbouring threads are then
neighbouring elements.

>>> from tilecraft import te
>>> from tilecraft.lower import LoweringOptions
>>> from tilecraft.schedule import create_schedule
>>> from tilecraft.target.hierarchy import ThreadHierarchy
>>> threads = ThreadHierarchy(axes=[
...     {"name": "blockIdx.x", "scope": "grid", "dim": 0, "max_extent": 65535},
...     {"name": "threadIdx.x", "scope": "block", "dim": 0, "max_extent": 1024}],
...     max_threads_per_block=1024, subgroup_size=32)
>>> options = LoweringOptions(threads=threads, register_level="register")
>>> A = te.placeholder((40,), name="A")
>>> B = te.compute((40,), lambda i: A[i] * 2.0, name="B")
>>> s = create_schedule(B, options)
>>> GpuStrategy().apply(s, B, options)
>>> print(s.lower(options)[0])
kernel B(A: float32[40], B: float32[40]) -> (B):
  for i_block in bound(1, axis=blockIdx.x):
    for i_thread in bound(64, axis=threadIdx.x):
      if (i_thread < 40):
        B[i_thread] = A[i_thread] * 2.0
"""

from __future__ import annotations

from typing import Any

from tilecraft.errors import LoweringError
from tilecraft.lower.options import LoweringOptions
from tilecraft.schedule.stage import Stage
from tilecraft.schedule.strategies.base import (
    bind_to_grid,
    fuse_all,
    grid_axes,
    is_row_reduction,
)
from tilecraft.schedule.strategies.gpu_vectors import vector_lanes
from tilecraft.target.hierarchy import LaunchScope
from tilecraft.target.spec import SchedulePrimitive
from tilecraft.te.tensor import Tensor

__all__ = ["GpuStrategy", "row_threads"]

#: threads per block when the hierarchy allows more (FlexTensor tunes it; 256 is the usual
#: starting point: eight warps, enough to hide latency, few enough for many blocks per SM)
PREFERRED_THREADS_PER_BLOCK = 256

#: reduction elements one thread of a row reduction accumulates before the row gets more
#: subgroups (a few loads in flight per thread hide the memory latency; more threads per row
#: shorten its serial part)
ELEMENTS_PER_THREAD = 16


class GpuStrategy:
    """Blocks and threads (module docstring)."""

    name = "gpu"

    def selects(self, options: LoweringOptions) -> bool:
        threads = options.threads
        return threads is not None and any(axis.scope is LaunchScope.BLOCK
                                           for axis in threads.axes)

    def apply(self, schedule: Any, tensor: Tensor, options: LoweringOptions) -> None:
        stage = schedule[tensor]
        if stage.is_reduction and self._on_subgroups(tensor, options):
            self._rows_on_subgroups(stage, tensor, options)
            return
        local = None
        if stage.is_reduction:
            if not schedule.target.offers(SchedulePrimitive.CACHE):
                raise LoweringError(
                    f"compute {tensor.name}: the GPU strategy accumulates each thread's "
                    f"reduction in a register (cache_write), but {schedule.target.name} does "
                    "not offer the cache primitive; add cache to its spec's primitives, or "
                    "give the target a lower_compute of its own")
            local = schedule.cache_write(tensor, options.register_level or options.param_level)
        lanes = 1
        if local is None and schedule.target.offers(SchedulePrimitive.VECTORIZE):
            lanes = vector_lanes(tensor, options)
        thread = self._bind_elements(stage, options, lanes)
        if local is not None and thread is not None:
            schedule[local].compute_at(stage, thread)

    # the elements of the output: one per thread -------------------------------------------
    @staticmethod
    def _bind_elements(stage: Stage, options: LoweringOptions, lanes: int = 1) -> Any:
        """Fuse the spatial loops, split them into blocks of threads, bind both; with
        ``lanes`` > 1 each thread computes that many consecutive elements of the innermost axis
        in a vector loop. Returns the thread loop (None for a stage without spatial loops)."""
        threads = options.threads
        loops = list(stage.axes)
        if not loops:
            return None
        if lanes > 1:
            innermost = loops.pop()
            vectors, lane = stage.split(innermost, factor=lanes,
                                        names=(f"{innermost.name}_vectors",
                                               f"{innermost.name}_lanes"))
            loops.append(vectors)
            stage.vectorize(lane, lanes)
        fused = fuse_all(stage, loops)
        block_x = _block_axis(threads)
        per_block = min(threads.max_threads_per_block, block_x.max_extent,
                        PREFERRED_THREADS_PER_BLOCK)
        subgroup = threads.subgroup_size
        wanted = -(-fused.extent // subgroup) * subgroup
        per_block = max(1, min(per_block, wanted))
        block, thread = stage.split(fused, factor=per_block,
                                    names=(f"{fused.name}_block", f"{fused.name}_thread"))
        stage.bind(thread, block_x.name)
        bind_to_grid(stage, block, threads)
        return thread

    # row reductions: one subgroup per output element ----------------------------------------
    @staticmethod
    def _on_subgroups(tensor: Tensor, options: LoweringOptions) -> bool:
        threads = options.threads
        if options.subgroup_size < 2 or not is_row_reduction(tensor):
            return False
        rows = 1
        for axis in tensor.axes:
            rows *= axis.extent
        grid = grid_axes(threads)
        return bool(grid) and rows <= grid[0].max_extent

    @staticmethod
    def _rows_on_subgroups(stage: Stage, tensor: Tensor, options: LoweringOptions) -> None:
        threads = options.threads
        reduce = [loop for loop in stage.reduce_axes if loop.extent > 1]
        row = reduce[-1]
        width = row_threads(tensor, options)
        outer, lane = stage.split(row, factor=width,
                                  names=(f"{row.name}_outer", f"{row.name}_lane"))
        rows = list(stage.axes)
        others = [loop for loop in stage.leaf_loops
                  if loop.is_reduce and loop not in (outer, lane)]
        stage.reorder(*rows, lane, *others, outer)
        if rows:
            stage.bind(fuse_all(stage, rows), grid_axes(threads)[0].name)
        stage.bind(lane, _block_axis(threads).name)


def row_threads(tensor: Tensor, options: LoweringOptions) -> int:
    """The threads reducing one row of the row reduction ``tensor``: one subgroup (no wider
    than the row, a power of two), or a block of several subgroups when the row is long —
    more than ``ELEMENTS_PER_THREAD`` elements per thread of one subgroup — and the rows alone
    cannot fill the cores with subgroups. The subgroups are a power of two, at most one
    subgroup's worth (their totals are combined by one more subgroup reduction), within the
    block's limits; a spec without a shared level or a barrier gets one subgroup.

    >>> from tilecraft import te
    >>> from tilecraft.target.hierarchy import ThreadHierarchy
    >>> threads = ThreadHierarchy(axes=[
    ...     {"name": "blockIdx.x", "scope": "grid", "dim": 0, "max_extent": 65535},
    ...     {"name": "threadIdx.x", "scope": "block", "dim": 0, "max_extent": 1024}],
    ...     max_threads_per_block=1024, subgroup_size=32, shared_level="shared",
    ...     barrier_scopes=["block"])
    >>> options = LoweringOptions(threads=threads, cores=108)
    >>> def row_sum(rows, n):
    ...     A = te.placeholder((rows, n), name="A")
    ...     k = te.reduce_axis(n, name="k")
    ...     return te.compute((rows,), lambda i: te.sum(A[i, k], axis=k), name="S")
    >>> row_threads(row_sum(7, 13), options), row_threads(row_sum(3, 5000), options)
    (16, 512)
    >>> row_threads(row_sum(100_000, 5000), options)  # the rows fill the cores
    32
    """
    threads = options.threads
    subgroup = options.subgroup_size
    extent = next(axis.extent for axis in reversed(tensor.reduce_axes) if axis.extent > 1)
    one = min(subgroup, _power_of_two_at_least(extent))
    if one < subgroup or not threads.shared_level or not threads.barrier_scopes:
        return one
    block = min(threads.max_threads_per_block, _block_axis(threads).max_extent)
    most = _power_of_two_at_most(min(subgroup, block // subgroup))
    rows = 1
    for axis in tensor.axes:
        rows *= axis.extent
    resident = threads.residency[0].max_threads if threads.residency \
        else threads.max_threads_per_block
    fill = -(-options.cores * resident // subgroup // rows)
    by_length = -(-extent // (subgroup * ELEMENTS_PER_THREAD))
    subgroups = min(_power_of_two_at_least(by_length), _power_of_two_at_least(fill), most)
    return max(1, subgroups) * subgroup


def _power_of_two_at_least(value: int) -> int:
    return 1 << max(value - 1, 0).bit_length()


def _power_of_two_at_most(value: int) -> int:
    return 1 << (max(value, 1).bit_length() - 1)


def _block_axis(threads: Any) -> Any:
    """The block-scope axis of the lowest launch dimension (threadIdx.x)."""
    return min((axis for axis in threads.axes if axis.scope is LaunchScope.BLOCK),
               key=lambda axis: axis.dim)
