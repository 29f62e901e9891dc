"""How the interpreter executes the statements of concurrent hardware (:mod:`.concurrency`).

Mixed into :class:`~tilecraft.kernel_ir.interpreter.InterpretedKernel`, which supplies
``kernel``, ``_exprs``, ``_stmt``, ``_stream_slot`` and ``_streams``. The semantics:

- ``AsyncCopy`` reads its source when issued and writes its destination only when a
  ``WaitGroup`` retires its group (groups retire oldest first; ``CommitGroup`` closes one).
  Until then the destination elements are *in flight*: a load of one raises a
  :class:`~tilecraft.errors.LoweringError` naming the load — the race a device would have.
  Threads running in lockstep (a bound loop with a barrier) each commit and wait for their own
  groups, as CUDA threads do; copies still in flight when a thread or the kernel ends are an
  error.
- ``Pipeline``: at step ``t`` stage ``s`` runs iteration ``t - s``, earlier stages first: the
  order in which overlapped hardware stages can overwrite a rotating copy a later stage still
  needs, so a pipeline with too few copies computes a wrong result here as on the device.
- ``Dataflow``: stages run one after another over unbounded FIFOs (the result of the
  concurrent stages of an acyclic region); a stream left non-empty is an error.
- ``AtomicUpdate``: a read-modify-write of one element (sequential execution is atomic).
- ``SubgroupReduce`` runs under lockstep execution (:mod:`.interpreter_lockstep`): the
  threads are grouped by the values of every other loop variable and by ``lane // width``; each
  gets its group's reduction, combined in lane order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tilecraft.errors import IndexBoundsError, LoweringError
from tilecraft.kernel_ir.concurrency import (
    AsyncCopy,
    AtomicUpdate,
    CommitGroup,
    Dataflow,
    Pipeline,
    SubgroupReduce,
    WaitGroup,
)
from tilecraft.kernel_ir.interpreter_expr import Env, StmtFn, accumulate_scalar
from tilecraft.kernel_ir.nodes import Kernel, Region
from tilecraft.kernel_ir.visitor import walk_stmts


@dataclass
class _Copy:
    array: np.ndarray
    mask_slot: int
    where: tuple[slice, ...]
    data: np.ndarray


@dataclass
class _AsyncState:
    open: list[_Copy] = field(default_factory=list)
    committed: list[list[_Copy]] = field(default_factory=list)


class ConcurrentStatements:
    """Closures for the concurrent statements (module docstring)."""

    kernel: Kernel
    _exprs: Any

    def _setup_concurrency(self, kernel: Kernel) -> None:
        self._async_slot = self._exprs.new_slot()
        for stmt in walk_stmts(kernel.body):
            if isinstance(stmt, AsyncCopy):
                key = id(stmt.dst.buffer)
                if key not in self._exprs.load_guards:
                    self._exprs.load_guards[key] = self._exprs.new_slot()

    def _start_concurrency(self, env: Env) -> None:
        env[self._async_slot] = _AsyncState()
        for slot in self._exprs.load_guards.values():
            env[slot] = None
        for buffer in self.kernel.params:
            guard = self._exprs.load_guards.get(id(buffer))
            if guard is not None:
                env[guard] = np.zeros(buffer.storage_shape, bool)

    def _fork_threads(self, threads: list[Env]) -> None:
        """Threads running in lockstep each commit and wait for their own copy groups."""
        if self._exprs.load_guards:
            for env in threads:
                env[self._async_slot] = _AsyncState()

    def _join_threads(self, threads: list[Env]) -> None:
        if self._exprs.load_guards:
            for env in threads:
                self._finish_concurrency(env, "its thread ends")

    def _finish_concurrency(self, env: Env, when: str = "the kernel ends") -> None:
        state: _AsyncState = env[self._async_slot]
        if state.open or any(state.committed):
            raise LoweringError(f"kernel {self.kernel.name}: asynchronous copies are still in "
                                f"flight when {when}; end with wait_group(0)")

    def _slices(self, region: Region, what: str) -> Callable[[Env], tuple[slice, ...]]:
        bases = [self._exprs.compile(b) for b in region.base]
        buffer, name = region.buffer, self.kernel.name

        def slices(env: Env) -> tuple[slice, ...]:
            found = []
            for dim, (base_fn, extent, step, size) in enumerate(
                    zip(bases, region.extents, region.steps, buffer.shape)):
                base = int(base_fn(env))
                last = base + (extent - 1) * step
                if base < 0 or last >= size:
                    raise IndexBoundsError(
                        f"kernel {name}: {what}: region of {buffer.name} covers [{base}, {last}] "
                        f"in dimension {dim}, outside [0, {size}); fix the region's base")
                found.append(slice(base, last + 1, step))
            return tuple(found)

        return slices

    def visit_AsyncCopy(self, stmt: AsyncCopy) -> StmtFn:
        what = f"async copy into {stmt.dst.buffer.name}"
        dst, src = self._slices(stmt.dst, what), self._slices(stmt.src, what)
        dst_slot = self._exprs.buffer_slot(stmt.dst.buffer, what)
        src_slot = self._exprs.buffer_slot(stmt.src.buffer, what)
        mask_slot = self._exprs.load_guards[id(stmt.dst.buffer)]
        state_slot = self._async_slot
        shape = stmt.dst.buffer.storage_shape

        def issue(env: Env) -> None:
            data = np.array(env[src_slot][src(env)])
            if env[mask_slot] is None:
                env[mask_slot] = np.zeros(shape, dtype=bool)
            where = dst(env)
            env[mask_slot][where] = True
            env[state_slot].open.append(_Copy(env[dst_slot], mask_slot, where, data))

        return issue

    def visit_CommitGroup(self, stmt: CommitGroup) -> StmtFn:
        state_slot = self._async_slot

        def commit(env: Env) -> None:
            state: _AsyncState = env[state_slot]
            state.committed.append(state.open)  # an empty group counts, as in CUDA
            state.open = []

        return commit

    def visit_WaitGroup(self, stmt: WaitGroup) -> StmtFn:
        state_slot, keep = self._async_slot, stmt.pending

        def wait(env: Env) -> None:
            state: _AsyncState = env[state_slot]
            while len(state.committed) > keep:
                for copy in state.committed.pop(0):
                    target = copy.array[copy.where]
                    target[...] = copy.data.reshape(target.shape)
                    env[copy.mask_slot][copy.where] = False

        return wait

    def visit_Pipeline(self, stmt: Pipeline) -> StmtFn:
        extent = self._exprs.compile(stmt.extent)
        slot = self._exprs.bind_var(stmt.var)
        stages = [self._stmt(stage) for stage in stmt.stages]
        count = len(stages)

        def run_pipeline(env: Env) -> None:
            total = int(extent(env))
            for step in range(total + count - 1):
                for number in range(count):
                    iteration = step - number
                    if 0 <= iteration < total:
                        env[slot] = iteration
                        stages[number](env)

        return run_pipeline

    def visit_Dataflow(self, stmt: Dataflow) -> StmtFn:
        stages = [self._stmt(stage) for stage in stmt.stages]
        streams = [(stream, self._stream_slot(stream)) for stream in stmt.streams]
        name = self.kernel.name

        def run_dataflow(env: Env) -> None:
            for stage in stages:
                stage(env)
            for stream, slot in streams:
                if env[slot]:
                    raise LoweringError(f"kernel {name}: stream {stream.name} still holds "
                                        f"{len(env[slot])} value(s) when its dataflow region "
                                        "ends; pop every value the producer pushes")

        return run_dataflow

    def visit_AtomicUpdate(self, stmt: AtomicUpdate) -> StmtFn:
        slot = self._exprs.buffer_slot(stmt.buffer, stmt)
        index = self._exprs.index(stmt.buffer, stmt.indices, f"atomic {stmt.buffer.name}")
        value = self._exprs.compile(stmt.value)
        combine = accumulate_scalar(stmt.op, stmt.buffer.dtype)

        def run_atomic(env: Env) -> None:
            array = env[slot]
            where = index(env)
            array[where] = combine(array[where], value(env))

        return run_atomic

    def visit_SubgroupReduce(self, stmt: SubgroupReduce) -> StmtFn:
        raise LoweringError(f"kernel {self.kernel.name}: a subgroup reduction over "
                            f"{stmt.lane.name} runs outside the bound loop of its lanes; put it "
                            "inside a BOUND loop over the lane variable")
