"""Test-only workloads, targets and schedule builders for the tuning tests.

Worker processes import this file by path (``f"{__file__}:name"`` references), so everything
here is module-level. :class:`MisbehavingTarget` runs kernels with the Kernel IR interpreter
(any machine) and misbehaves as a kernel's ``misbehave`` attribute says — set by
:func:`misbehaving_builder` from the candidate's schedule — so each failure happens in the stage
it is meant to: a segfault (``ctypes.string_at(0)``), ``os.abort()``, ``sys.exit``, a hang,
an exception, a wrong result or overwritten inputs while running, an allocation of
:data:`ALLOCATE_BYTES` (past a worker's memory limit), a ``SIGKILL`` as the kernel's OOM
killer sends, a slow run (``slow-*``: :data:`SLOW_RUN_S` a run); an exception, a crash or a
leak of :data:`LEAK_BYTES` while building; an exception, a crash or a hang while lowering.
:class:`TemplateTarget` offers such modes as a schedule-template space, so whole tuning runs
(:func:`tilecraft.tuning.tuner.tune`) meet them.

Every build and run appends a line ``event pid start end`` to the file named by the
``TILECRAFT_TEST_LOG`` environment variable (when set), so tests can see when builds and runs
happened in which process; a run's event names the loaded kernel (``run-PID-N``), and its
first run is the correctness check.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import signal
import sys
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from tilecraft import te
from tilecraft.errors import CodegenError, LoweringError
from tilecraft.graph import Graph
from tilecraft.kernel_ir.interpreter import compile_kernel
from tilecraft.kernel_ir.nodes import Kernel
from tilecraft.lower import LoweringOptions, lower_graph
from tilecraft.search.space import ChoiceSpace, Space
from tilecraft.target.base import Artifact, Availability, Estimate, Source, Target, TemplateSpace
from tilecraft.target.spec import TargetSpec, load_spec
from tilecraft.tuning.workload import WorkloadInstance

HERE = os.path.abspath(__file__)
LOG_VARIABLE = "TILECRAFT_TEST_LOG"
_LOADS = itertools.count()
#: what mode ``allocate`` allocates (and touches)
ALLOCATE_BYTES = 2 << 30
#: what mode ``leak`` keeps allocated (and touched) per build, for the life of the process
LEAK_BYTES = 96 << 20
#: how long one run of a ``slow-*`` mode sleeps
SLOW_RUN_S = 0.04
_LEAKED: list[np.ndarray] = []


def ref(name: str) -> str:
    """A reference to ``name`` in this file, as workers resolve it."""
    return f"{HERE}:{name}"


def _log(event: str, start: float, end: float) -> None:
    path = os.environ.get(LOG_VARIABLE)
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(f"{event} {os.getpid()} {start!r} {end!r}\n")


def read_log(path: str) -> list[tuple[str, int, float, float]]:
    rows = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            event, pid, start, end = line.split()
            rows.append((event, int(pid), float(start), float(end)))
    return rows


# workloads ------------------------------------------------------------------------------------
def scaled(n: int, factor: float = 2.0) -> te.Tensor:
    """``out[i] = A[i] * factor`` over ``n`` elements."""
    A = te.placeholder((n,), name="A")
    return te.compute((n,), lambda i: A[i] * factor, name="out")


def row_sums(m: int, n: int) -> WorkloadInstance:
    """``out[i] = sum_j A[i, j]`` with integer-valued inputs (exact in float32)."""
    A = te.placeholder((m, n), name="A")
    j = te.reduce_axis(n, name="j")
    out = te.compute((m,), lambda i: te.sum(A[i, j], axis=j), name="out")
    values = np.arange(m * n, dtype=np.float32).reshape(m, n) % 7
    return WorkloadInstance(Graph.from_outputs([out]), {"A": values})


def broken_workload() -> te.Tensor:
    raise LoweringError("this workload cannot be built (test)")


# targets --------------------------------------------------------------------------------------
def _spec(name: str, evaluation: str) -> TargetSpec:
    return load_spec({
        "name": name, "api_version": 1, "version": "0.1",
        "memory": {"levels": [
            {"name": "DRAM", "size_bytes": None, "bandwidth_bytes_per_cycle": 8,
             "kind": "dram"},
            {"name": "register", "size_bytes": 1024, "bandwidth_bytes_per_cycle": 64}]},
        "compute": {"cores": 1, "frequency_hz": 1e9, "vector_bits": 128},
        "primitives": ["split", "reorder", "vectorize"],
        "loop_kinds": ["serial", "vector"],
        "evaluation": evaluation,
        "capabilities": {"executes_natively": evaluation != "estimate",
                         "models_performance": evaluation != "measure"}})


def _misbehave(mode: str | None) -> None:
    """Do what ``mode`` says, in this process, now."""
    if mode == "segfault":
        ctypes.string_at(0)
    elif mode == "abort":
        os.abort()
    elif mode == "exit":
        sys.exit(3)
    elif mode == "os-exit":
        os._exit(4)
    elif mode == "hang":
        while True:
            time.sleep(0.01)
    elif mode == "raise":
        raise RuntimeError("the kernel raised (test)")
    elif mode == "allocate":
        np.ones(ALLOCATE_BYTES, dtype=np.uint8)
    elif mode == "oom-killed":  # what the kernel's out-of-memory killer does
        os.kill(os.getpid(), signal.SIGKILL)
    elif mode is not None and mode.startswith("slow"):
        time.sleep(SLOW_RUN_S)


class MisbehavingTarget(Target):
    """Runs kernels with the Kernel IR interpreter; misbehaves on request (module docstring).

    ``build_delay_s`` makes every build take that long (to see builds overlap)."""

    def __init__(self, evaluation: str = "measure", build_delay_s: float = 0.0):
        self._spec = _spec("misbehaving", evaluation)
        self.build_delay_s = build_delay_s

    @property
    def spec(self) -> TargetSpec:
        return self._spec

    def available(self) -> Availability:
        return Availability(codegen=True, build=True, execute=True, emulate=True,
                            estimate=True)

    def codegen(self, kernel: Kernel) -> Source:
        mode = kernel.attrs.get("misbehave")
        if mode == "codegen-raise":
            raise CodegenError(f"kernel {kernel.name}: this target cannot express it (test)")
        return Source(self.name, kernel.name, "kernel-ir", str(kernel), kernel.name,
                      meta={"kernel": kernel, "misbehave": mode})

    def build(self, source: Source) -> Artifact:
        start = time.time()
        mode = source.meta["misbehave"]
        if mode == "build-crash":
            _misbehave("segfault")
        if mode == "leak":
            _LEAKED.append(np.ones(LEAK_BYTES, dtype=np.uint8))
        if self.build_delay_s:
            time.sleep(self.build_delay_s)
        _log("build", start, time.time())
        return Artifact(self.name, source.kernel_name, handle=source.meta["kernel"],
                        meta=dict(source.meta))

    def load(self, artifact: Artifact) -> Any:
        kernel: Kernel = artifact.handle
        mode = artifact.meta["misbehave"]
        compiled = compile_kernel(kernel)
        run_id = f"run-{os.getpid()}-{next(_LOADS)}"

        def run(arrays: Mapping[str, np.ndarray]) -> None:
            start = time.time()
            _misbehave(mode)
            compiled(arrays)
            if mode == "wrong":
                for name in kernel.outputs:
                    arrays[name][...] += 1
            if mode == "scribble":  # a correct result, but the inputs are overwritten
                for name in arrays:
                    if name not in kernel.outputs:
                        arrays[name][...] = 99
            _log(run_id, start, time.time())

        return run

    def estimate(self, kernel: Kernel) -> Estimate:
        """A model that prefers the schedule named in the kernel's ``modelled_cost`` attribute
        (so tests know which candidates it ranks first)."""
        return Estimate(float(kernel.attrs.get("modelled_cost", 1e-3)))


class TemplateTarget(MisbehavingTarget):
    """A measuring MisbehavingTarget with a schedule template: one parameter, ``mode``, whose
    choices are ``modes`` (``"ok-*"`` modes behave), so tuning runs meet those misbehaviours."""

    def __init__(self, modes: tuple[str, ...]):
        super().__init__("measure")
        self.modes = modes

    def template_space(self, tensor: te.Tensor) -> TemplateSpace:
        space = Space([("mode", ChoiceSpace(list(self.modes)))], name="modes")
        return TemplateSpace(space, space.decode)

    def lower_compute(self, tensor: te.Tensor, options: LoweringOptions,
                      config: Mapping[str, Any] | None = None) -> list[Kernel]:
        mode = (config or {}).get("mode")
        return misbehaving_builder(Graph.from_outputs([tensor]), mode, self)


#: the modes of :func:`faults_template_target`
FAULT_MODES = ("ok-1", "segfault", "hang", "wrong", "allocate", "oom-killed", "raise", "ok-2")


def faults_template_target() -> TemplateTarget:
    return TemplateTarget(FAULT_MODES)


def slow_template_target() -> TemplateTarget:
    """Sixteen well-behaved modes whose runs take :data:`SLOW_RUN_S` each."""
    return TemplateTarget(tuple(f"slow-{k}" for k in range(16)))


def measuring_target() -> MisbehavingTarget:
    return MisbehavingTarget("measure")


def slow_building_target() -> MisbehavingTarget:
    return MisbehavingTarget("measure", build_delay_s=0.3)


def estimating_target() -> MisbehavingTarget:
    return MisbehavingTarget("estimate")


def both_target() -> MisbehavingTarget:
    return MisbehavingTarget("both")


# schedule builders ----------------------------------------------------------------------------
def misbehaving_builder(graph: Graph, schedule: Any, target: Target) -> list[Kernel]:
    """Lower with default schedules; ``schedule`` is a misbehaviour mode (run-time modes are
    attached to the kernels, lowering modes happen here), or ``{"modelled_cost": seconds}``."""
    mode = schedule if isinstance(schedule, str) else None
    if mode == "lower-raise":
        raise LoweringError("this schedule splits an axis by 0 (test)")
    if mode == "lower-crash":
        _misbehave("segfault")
    if mode == "lower-hang":
        _misbehave("hang")
    kernels = lower_graph(graph, LoweringOptions.from_spec(target.spec))
    attrs: dict[str, Any] = {"misbehave": mode}
    if isinstance(schedule, Mapping):
        attrs.update(schedule)
    return [Kernel(k.name, k.params, k.outputs, k.body, k.launch, {**k.attrs, **attrs})
            for k in kernels]


def tripled_builder(graph: Graph, schedule: Any, target: Target) -> list[Kernel]:
    """Lowers ``A[i] * 3`` whatever the graph says: a wrong result on a real target."""
    (out,) = graph.outputs
    return lower_graph(Graph.from_outputs([scaled(out.shape[0], 3.0)]),
                       LoweringOptions.from_spec(target.spec))


def not_kernels_builder(graph: Graph, schedule: Any, target: Target) -> list[Any]:
    return ["not a kernel"]
