"""The compiled program: numpy arrays in, numpy arrays out, plus a report.

An Executable holds one compiled kernel per compute of the graph and runs them in topological
order; its intermediate tensors are allocated on a first call and kept for the next ones
(outputs are fresh every call). A kernel that reads only constants (or
what such kernels wrote) — a template packing a constant weight, typically: graph computes of
constants alone are folded before — runs once, when the kernels are installed, and calls read
what it wrote.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import groupby
from types import MappingProxyType
from typing import Any, NamedTuple

import numpy as np

from tilecraft.errors import InputError, TargetError
from tilecraft.graph import Graph
from tilecraft.kernel_ir.nodes import Kernel
from tilecraft.runtime.aligned import aligned_empty
from tilecraft.runtime.allocation import CHECK_ABOVE_BYTES, check_allocation, tensor_bytes
from tilecraft.runtime.inputs import InputBinder
from tilecraft.runtime.memory_plan import Lifetime, MemoryPlan, plan_memory
from tilecraft.runtime.report import KernelReport, Report
from tilecraft.target.base import Source

KernelRunner = Callable[[Mapping[str, np.ndarray]], None]

#: the workspaces of a program that has none (never written: no step has a workspace)
_NO_WORKSPACES: Mapping[str, np.ndarray] = MappingProxyType({})
#: how a memory check names a set's arena of intermediates and workspaces
_ARENA = "intermediates and workspaces (one arena)"


@dataclass
class CompiledKernel:
    """A kernel, its generated source, and how to run it here (``None`` when this machine can
    only compile for the target)."""

    kernel: Kernel
    source: Source
    runner: KernelRunner | None


@dataclass(frozen=True)
class _Step:
    """One kernel of a call, with everything about it that does not change between calls."""

    runner: KernelRunner | None
    report: KernelReport  # its ``run_seconds`` get each call's time
    allocations: tuple[tuple[str, tuple[int, ...], np.dtype], ...]  # fresh graph tensors
    workspaces: tuple[tuple[str, tuple[int, ...], np.dtype], ...]  # kept between calls
    params: tuple[tuple[str, tuple[int, ...] | None], ...]  # name, shape to view it in or None


class _Call(NamedTuple):
    """A step as one call runs it: ``run`` takes the arrays of ``passed`` (name, shape to view
    it in or None: the call's inputs and fresh outputs), its other parameters' arrays bound
    when the workspace set (or, without workspaces, the plan) was made. (A tuple: the loop
    between two kernels touches as few objects as it can — they come back from cold caches.)
    ``chained``: the ``run_seconds`` lists of the reports of several steps ``run(arrays)`` runs
    at once, returning each one's seconds (a chain: see :meth:`Executable._bind_steps`; the lists
    themselves, one object fewer to fetch per kernel); empty for one step."""

    allocations: tuple[tuple[str, tuple[int, ...], np.dtype], ...]
    run: Callable[..., Any]
    passed: tuple[tuple[str, tuple[int, ...] | None], ...]
    report: KernelReport
    chained: tuple[list[float], ...] = ()


@dataclass(frozen=True)
class _WorkspaceSet:
    """One concurrently running call's intermediates and workspaces (arrays over one arena),
    and the plan's steps bound to them."""

    arrays: Mapping[str, np.ndarray]
    calls: tuple[_Call, ...]


@dataclass(frozen=True)
class _Plan:
    """What a call runs: the kernels and their steps, and the sets of template workspaces no
    call is using now (a plan's own: another plan's kernels may want other workspaces)."""

    compiled: tuple[CompiledKernel, ...]
    steps: tuple[_Step, ...]
    allocations: tuple[tuple[str, tuple[int, ...], np.dtype], ...]
    checks_memory: bool
    has_workspaces: bool
    idle_workspaces: list[_WorkspaceSet]
    #: what the kernels that read only constants wrote, run once when the plan was made
    precomputed: Mapping[str, np.ndarray]
    #: where each intermediate and workspace lives in a set's one arena (by lifetime)
    memory: MemoryPlan
    #: the buffers of a set: name, shape, dtype
    workspace_buffers: tuple[tuple[str, tuple[int, ...], np.dtype], ...]
    #: a plan without workspaces: its steps bound once, on the first call (shared by calls)
    calls: list[tuple[_Call, ...]]


class Executable:
    """Call with arrays for the graph's inputs (by name, or positionally in ``graph.inputs``
    order); returns the output array, or a tuple for several outputs.

    One Executable may be called from several threads at once: every call gets fresh output
    arrays, and a set of intermediate tensors and template workspaces no other running call
    uses (sets are kept between calls: as many as calls ever ran at once; fresh pages would
    fault on every call, 21% of the small CNN training step's 126 ms). Per-call sets cost less
    than one lock: from 4 threads a 384^3 GEMM took 0.57-0.67 ms a call against 0.96-1.33 ms
    serialised; a 32^3 one 11-24 us against 12-18 us, as noisy as the machine; one thread pays
    the same either way (bench/executable_threads.py, 2-core Zen 4).
    """

    def __init__(self, graph: Graph, target_name: str, compiled: Sequence[CompiledKernel],
                 report: Report, unavailable_reason: str | None = None):
        self.graph = graph
        self.target_name = target_name
        self.report = report
        self._unavailable_reason = unavailable_reason
        self._outputs_by_name = {t.name: t for t in graph.computes}
        self._bind = InputBinder(graph.inputs)
        #: constants' values, passed to the kernels like inputs (one writable copy each: a
        #: kernel's argument conversion may refuse read-only arrays; kernels never write them)
        self._constants = {t.name: np.array(t.constant_value) for t in graph.constants}
        self._output_names = tuple(t.name for t in graph.outputs)
        #: outputs that are constants (a folded graph): returned as they are, no kernel writes
        #: them. Calls put nothing else of the constants in their values: a step is passed
        #: only the arrays its runner did not bind (inputs, fresh outputs)
        self._constant_outputs = tuple((name, self._constants[name])
                                       for name in self._output_names if name in self._constants)
        self._passed_through = tuple(t.name for t in graph.outputs if t.is_placeholder)
        #: everything a call runs, swapped whole by :meth:`install` (a call reads it once)
        self._plan = self._make_plan(compiled, report.kernels)

    def install(self, compiled: Sequence[CompiledKernel],
                reports: Sequence[KernelReport]) -> None:
        """Run ``compiled`` (with their report rows) from the next call on. Atomic: a call
        that has started finishes with the kernels it started with, and no call ever sees
        part of one set and part of the other (the new plan is built aside, then one
        reference is replaced)."""
        plan = self._make_plan(compiled, reports)
        self._plan = plan
        self.report.kernels = list(reports)

    def _make_plan(self, compiled: Sequence[CompiledKernel],
                   reports: Sequence[KernelReport]) -> _Plan:
        """Per kernel, once: which arrays to allocate, which workspaces to use, and which
        parameters need a view in another shape (e.g. a template's ``[batch, M, N]``)."""
        shapes: dict[str, tuple[int, ...]] = {t.name: tuple(t.shape) for t in self.graph.inputs}
        shapes.update((t.name, tuple(t.shape)) for t in self.graph.constants)
        outputs = set(self._output_names)
        steps = []
        for entry, report in zip(compiled, reports):
            allocations, workspaces = [], []
            for out_name in entry.kernel.outputs:
                if out_name in shapes:
                    continue
                tensor = self._outputs_by_name.get(out_name)
                if tensor is not None:
                    shape, dtype = tuple(tensor.shape), tensor.dtype.numpy
                    # a graph output is fresh each call (the caller keeps it); an
                    # intermediate is kept between calls like a workspace
                    (allocations if out_name in outputs else workspaces).append(
                        (out_name, shape, dtype))
                else:  # a workspace of the target's template (e.g. a packed operand),
                    # kept between calls: fresh pages would fault on every call
                    buffer = next(p for p in entry.kernel.params if p.name == out_name)
                    shape, dtype = tuple(buffer.shape), buffer.dtype.numpy
                    workspaces.append((out_name, shape, dtype))
                shapes[out_name] = shape
            params = tuple((p.name, None if shapes.get(p.name, tuple(p.shape)) == tuple(p.shape)
                            else tuple(p.shape)) for p in entry.kernel.params)
            steps.append(_Step(entry.runner, report, tuple(allocations),
                               tuple(workspaces), params))
        steps, precomputed = self._precompute(compiled, steps)
        buffers = {item[0]: item for step in steps for item in step.workspaces}
        memory = plan_memory(_lifetimes(steps, buffers))
        # what a call may allocate: its fresh tensors, and a set's arena when it needs one
        allocations = tuple(item for step in steps for item in step.allocations)
        if buffers:
            allocations += ((_ARENA, (memory.size,), np.dtype(np.uint8)),)
        return _Plan(tuple(compiled), tuple(steps), allocations,
                     sum(tensor_bytes(shape, dtype) for _, shape, dtype
                         in allocations) >= CHECK_ABOVE_BYTES,
                     bool(buffers), [],
                     MappingProxyType(precomputed) if precomputed else _NO_WORKSPACES,
                     memory, tuple(buffers.values()), [])

    def _precompute(self, compiled: Sequence[CompiledKernel], steps: list[_Step]
                    ) -> tuple[list[_Step], dict[str, np.ndarray]]:
        """Run, once, each kernel that reads only constants and what such kernels wrote, and
        writes nothing that is a graph output or that another kernel writes too: the steps
        left for calls, and the arrays those kernels wrote (calls only read them)."""
        if self._unavailable_reason is not None or not self._constants:
            return steps, {}
        writers: dict[str, int] = {}
        for entry in compiled:
            for name in entry.kernel.outputs:
                writers[name] = writers.get(name, 0) + 1
        outputs = set(self._output_names)
        known: dict[str, np.ndarray] = dict(self._constants)
        precomputed: dict[str, np.ndarray] = {}
        left = []
        for entry, step in zip(compiled, steps):
            written = entry.kernel.outputs
            reads = [p.name for p in entry.kernel.params if p.name not in written]
            if step.runner is None or not written or not reads \
                    or any(name not in known for name in reads) \
                    or any(name in outputs or writers[name] > 1 for name in written):
                left.append(step)
                continue
            values = dict(known)
            for name, shape, dtype in (*step.allocations, *step.workspaces):
                values[name] = aligned_empty(shape, dtype)
            start = time.perf_counter()
            step.runner({name: values[name] if shape is None else values[name].reshape(shape)
                         for name, shape in step.params})
            step.report.run_seconds.append(time.perf_counter() - start)
            for name in written:
                known[name] = precomputed[name] = values[name]
        return left, precomputed

    @property
    def compiled(self) -> list[CompiledKernel]:
        """The kernels calls run now, in order."""
        return list(self._plan.compiled)

    @property
    def _steps(self) -> tuple[_Step, ...]:
        """The steps calls run now (for tests that look inside)."""
        return self._plan.steps

    @property
    def sources(self) -> dict[str, Source]:
        """Generated source per kernel name."""
        return {c.kernel.name: c.source for c in self.compiled}

    @property
    def kernels(self) -> list[Kernel]:
        return [c.kernel for c in self.compiled]

    @property
    def input_names(self) -> list[str]:
        return [t.name for t in self.graph.inputs]

    def __call__(self, *args: Any, **kwargs: Any) -> np.ndarray | tuple[np.ndarray, ...]:
        if self._unavailable_reason is not None:
            raise TargetError(f"this executable was compiled for {self.target_name}, which this "
                              f"machine cannot run: {self._unavailable_reason}; its sources are "
                              "in exe.sources")
        values: dict[str, np.ndarray] = self._bind(args, kwargs)
        values.update(self._constant_outputs)
        plan = self._plan  # read once: a swap (install) never changes a running call's kernels
        if not plan.has_workspaces:
            self._check_memory(plan, _NO_WORKSPACES)
            if not plan.calls:
                plan.calls.append(self._bind_steps(plan, _NO_WORKSPACES))
            self._run(plan.calls[0], values)
        else:
            # concurrent calls (ctypes releases the GIL) must not pack operands into the same
            # workspace: each call takes an idle set of workspaces (list.pop and append are
            # atomic), or a new one (one arena: runtime/memory_plan.py) while every set is in
            # use, and gives it back afterwards
            try:
                workspaces = plan.idle_workspaces.pop()
            except IndexError:
                workspaces = None
            try:
                self._check_memory(plan, workspaces)
                if workspaces is None:
                    arrays = plan.memory.allocate(plan.workspace_buffers)
                    workspaces = _WorkspaceSet(arrays, self._bind_steps(plan, arrays))
                self._run(workspaces.calls, values)
            finally:
                if workspaces is not None:
                    plan.idle_workspaces.append(workspaces)
        for name in self._passed_through:  # an input that is an output: a copy, as the
            values[name] = values[name].copy()  # reference gives (never the caller's array)
        if len(self._output_names) == 1:
            return values[self._output_names[0]]
        return tuple(values[name] for name in self._output_names)

    def _check_memory(self, plan: _Plan, workspaces: Mapping[str, np.ndarray] | None) -> None:
        """Refuse a call whose allocations cannot succeed, before allocating (``workspaces``:
        the set this call reuses, already there; ``None``: a new set's arena is allocated)."""
        if plan.checks_memory:
            fresh = [item for item in plan.allocations
                     if workspaces is None or item[0] != _ARENA]
            check_allocation(fresh,
                             f"calling the {self.target_name} executable of "
                             f"{', '.join(self._output_names)}")

    def _bind_steps(self, plan: _Plan, workspaces: Mapping[str, np.ndarray]
                    ) -> tuple[_Call, ...]:
        """The plan's steps with the arrays that are the same objects every call bound:
        ``workspaces`` (a set's intermediates and workspaces), constants, precomputed arrays.
        A runner offering ``bind(fixed) -> bound`` (``bound.names``: the parameters each call
        passes, in order; ``bound(arrays)`` runs) checks those arrays once; any other runner
        gets the whole mapping each call. Consecutive bound steps run as one chain where their
        type offers ``chain(bounds, shared) -> chained | None`` (``chained(arrays)`` runs them in
        order, with the arrays of each bound's ``names`` one bound after another, and returns
        each one's seconds): no Python between those kernels, a network's input and output
        kernels included. ``shared``: the bound intermediates and workspaces that steps outside
        the chain also read or write, the only ones a chain keeping its data in a device's own
        memory must copy between the host's arrays and its own on each call."""
        kept = {name for step in plan.steps for name, _, _ in step.workspaces}
        fixed = {**self._constants, **plan.precomputed,
                 **{name: array for name, array in workspaces.items() if name in kept}}
        calls = []
        for step in plan.steps:
            assert step.runner is not None
            views = {name: fixed[name] if shape is None else fixed[name].reshape(shape)
                     for name, shape in step.params if name in fixed}
            bind = getattr(step.runner, "bind", None)
            run = bind(views) if bind is not None else _MappingCall(step.runner, views, tuple(
                name for name, _ in step.params if name not in views))
            shapes = dict(step.params)
            calls.append(_Call(step.allocations, run,
                               tuple((name, shapes[name]) for name in run.names), step.report))
        chained: list[_Call] = []
        position = 0
        for kind, group in groupby(calls, lambda call: type(call.run)):
            members = list(group)
            inside = plan.steps[position:position + len(members)]
            position += len(members)
            chain = getattr(kind, "chain", None) if len(members) > 1 else None
            run = chain([call.run for call in members], _shared(plan.steps, inside, kept)) \
                if chain is not None else None
            if run is None:
                chained.extend(members)
            else:
                chained.append(_Call(
                    tuple(item for call in members for item in call.allocations), run,
                    tuple(item for call in members for item in call.passed), members[0].report,
                    tuple(call.report.run_seconds for call in members)))
        return tuple(chained)

    def _run(self, calls: Sequence[_Call], values: dict[str, np.ndarray]) -> None:
        """Run every kernel in order: fresh arrays for the graph's outputs, bound ones for the
        rest (see :meth:`_bind_steps`)."""
        # the fresh outputs first: between two kernels, which leave the interpreter's and
        # numpy's code and data out of the caches, allocating one took ~60 us (mobilenet_v2's
        # call minus its kernels' seconds, 1 thread: 201 us allocating in the loop, 121 before)
        for call in calls:
            for name, shape, dtype in call.allocations:
                values[name] = aligned_empty(shape, dtype)
        clock = time.perf_counter
        for _, run, passed, report, chained in calls:
            arrays = [values[name] if shape is None else values[name].reshape(shape)
                      for name, shape in passed] if passed else ()
            if chained:
                for timings, seconds in zip(chained, run(arrays)):
                    timings.append(seconds)
                    if len(timings) > 1000:
                        del timings[:-100]
                continue
            start = clock()
            run(arrays)
            timings = report.run_seconds
            timings.append(clock() - start)
            if len(timings) > 1000:
                del timings[:-100]

    def benchmark(self, *args: Any, repeat: int = 20, warmup: int = 2,
                  **kwargs: Any) -> float:
        """Median wall time of a whole call in seconds (after ``warmup`` calls)."""
        if repeat < 1 or warmup < 0:
            raise InputError(f"benchmark(repeat={repeat}, warmup={warmup}): repeat must be at "
                             "least 1 and warmup at least 0")
        for _ in range(warmup):
            self(*args, **kwargs)
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            self(*args, **kwargs)
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    def __repr__(self) -> str:
        return (f"Executable(target={self.target_name!r}, kernels="
                f"{[c.kernel.name for c in self.compiled]})")


class _MappingCall:
    """A runner without ``bind``, called with the whole mapping: ``fixed`` and the arrays of
    ``names`` (passed in that order)."""

    def __init__(self, runner: KernelRunner, fixed: Mapping[str, np.ndarray],
                 names: tuple[str, ...]) -> None:
        self.runner, self.fixed, self.names = runner, fixed, names

    def __call__(self, arrays: Sequence[np.ndarray]) -> None:
        self.runner({**self.fixed, **dict(zip(self.names, arrays))})


def _shared(steps: Sequence[_Step], inside: Sequence[_Step], kept: set[str]) -> frozenset[str]:
    """The intermediates and workspaces (``kept``) that the steps of ``inside`` (a chain) take
    and that any other step takes too."""
    outside = {name for step in steps if not any(step is member for member in inside)
               for name, _ in step.params}
    return frozenset(name for step in inside for name, _ in step.params
                     if name in kept and name in outside)


def _lifetimes(steps: Sequence[_Step], buffers: Mapping[str, tuple[str, tuple[int, ...], np.dtype]]
               ) -> list[Lifetime]:
    """Each buffer's bytes and the first and last step naming it (as a parameter)."""
    spans: dict[str, list[int]] = {}
    for index, step in enumerate(steps):
        for name, _ in step.params:
            if name in buffers:
                span = spans.setdefault(name, [index, index])
                span[1] = index
    return [(name, tensor_bytes(shape, dtype), *spans.get(name, (0, len(steps))))
            for name, shape, dtype in buffers.values()]
