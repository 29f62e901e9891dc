"""One tuning candidate: what to evaluate, how, and what came out — the steps a worker runs.

A :class:`MeasureInput` names a workload, a target and a schedule (any picklable payload —
a schedule trace, a search-space config, a template's parameters) plus the *builder* that turns
``(graph, schedule, target)`` into Kernel IR kernels. Evaluating it goes through stages, and
the stage that fails decides the :class:`~tilecraft.tuning.record.ErrorKind`:

- ``workload``: rebuild the program and its inputs — a failure is ``invalid``;
- ``lower``: the builder applies the schedule and lowers — ``invalid``;
- ``codegen``, ``build``, ``load``: the target's stages — ``build``;
- ``check``: run once on poisoned outputs, compare with the numpy reference — ``run``, or
  ``wrong-result`` when the values differ;
- ``time``: warm-up, then repeated timed runs — ``run``.

A stage that runs past the timeout is ``timeout`` whatever the stage; one that runs out of
memory (a ``MemoryError``: the worker's memory limit, ``MeasureSettings.memory_limit_bytes``)
is ``out-of-memory`` whatever the stage. The functions here run in whatever process calls
them; :mod:`tilecraft.tuning.worker` runs them in isolation.

>>> from tilecraft.tuning.workload import Workload
>>> result = evaluate_in_process(MeasureInput(Workload.from_catalog("relu[13x17]"), "x86_avx512"),
...                              MeasureSettings(repeats=2))  # doctest: +SKIP
>>> result.ok, result.error_kind  # doctest: +SKIP
(True, None)
"""

from __future__ import annotations

import enum
import math
import statistics
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tilecraft.errors import TilecraftError
from tilecraft.graph import Graph
from tilecraft.kernel_ir.nodes import Kernel
from tilecraft.target.base import Target
from tilecraft.tuning.builders import DEFAULT_BUILDER, Builder
from tilecraft.tuning.record import ErrorKind, TuningRecord
from tilecraft.tuning.workload import TuningError, Workload, WorkloadInstance, resolve_reference

__all__ = ["DEFAULT_BUILDER", "Builder", "CandidateFailure", "MeasureInput", "MeasureResult",
           "MeasureSettings", "PreparedCandidate", "Stage", "check_candidate",
           "estimate_candidate", "evaluate_in_process", "prepare_candidate", "resolve_target",
           "time_candidate"]

_MESSAGE_LIMIT = 2000


class Stage(str, enum.Enum):
    """Where a candidate is in its evaluation (and so what kind a failure there is)."""

    WORKLOAD = "workload"
    LOWER = "lower"
    CODEGEN = "codegen"
    BUILD = "build"
    LOAD = "load"
    CHECK = "check"
    TIME = "time"

    @property
    def error_kind(self) -> ErrorKind:
        """The kind of a failure (exception or crash) in this stage."""
        if self in (Stage.WORKLOAD, Stage.LOWER):
            return ErrorKind.INVALID
        if self in (Stage.CODEGEN, Stage.BUILD, Stage.LOAD):
            return ErrorKind.BUILD
        return ErrorKind.RUN


@dataclass(frozen=True)
class MeasureSettings:
    """How candidates are timed and checked.

    ``warmup`` untimed runs, then ``repeats`` measurements; each measurement runs the program
    as many times as needed to last at least ``min_seconds`` and records the mean per run.
    ``timeout_s`` bounds each candidate's preparation (lower, build, check) and, separately,
    its timing. ``check`` compares the first run with the reference before any time counts.
    ``measure_fraction`` is the share of estimated candidates measured when a target
    evaluates in mode ``both``.

    Worker processes (:class:`~tilecraft.tuning.measure.Measurer`): ``memory_limit_bytes``
    caps each worker's data memory (``RLIMIT_DATA``; ``None``: three quarters of this
    machine's memory shared by the workers, ``0``: no limit), so a candidate allocating too
    much fails as ``out-of-memory`` instead of swapping or waking the kernel's OOM killer;
    a worker is replaced by a fresh one after ``recycle_after`` candidates (``None``: never)
    or once its resident memory passes ``recycle_rss_bytes`` (``None``: half its memory
    limit, at most 2 GiB; ``0``: never) — leaks of JIT engines and allocators stay bounded.
    """

    warmup: int = 1
    repeats: int = 5
    min_seconds: float = 0.01
    timeout_s: float = 10.0
    check: bool = True
    measure_fraction: float = 0.25
    memory_limit_bytes: int | None = None
    recycle_after: int | None = 500
    recycle_rss_bytes: int | None = None
    #: the runner timing each candidate, by its name registered through the runners hook
    #: (:mod:`tilecraft.runtime.runners`)
    runner: str = "in_process"

    def __post_init__(self) -> None:
        problems = []
        if self.warmup < 0:
            problems.append(f"warmup={self.warmup} (use 0 or more)")
        if self.repeats < 1:
            problems.append(f"repeats={self.repeats} (use 1 or more)")
        if not self.min_seconds >= 0:
            problems.append(f"min_seconds={self.min_seconds} (use 0 or more)")
        if not self.timeout_s > 0:
            problems.append(f"timeout_s={self.timeout_s} (use a positive number of seconds)")
        if not 0 < self.measure_fraction <= 1:
            problems.append(f"measure_fraction={self.measure_fraction} (use 0 < f <= 1)")
        for name in ("memory_limit_bytes", "recycle_rss_bytes"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 0):
                problems.append(f"{name}={value!r} (use a number of bytes, 0 for no limit, or "
                                "None for the automatic one)")
        if self.recycle_after is not None and (not isinstance(self.recycle_after, int)
                                               or self.recycle_after < 1):
            problems.append(f"recycle_after={self.recycle_after!r} (use 1 or more candidates, "
                            "or None for never)")
        if not isinstance(self.runner, str) or not self.runner:
            problems.append(f"runner={self.runner!r} (use a registered runner's name)")
        if problems:
            raise TuningError(f"MeasureSettings: invalid {'; '.join(problems)}")


@dataclass(frozen=True)
class MeasureInput:
    """A candidate: ``workload`` under ``schedule`` on ``target``.

    ``target`` is an installed target's name (``"x86_avx512"``) or a reference
    ``"module:factory"`` / ``"file.py:factory"`` to a Target instance, class or zero-argument
    factory (worker processes do not see targets registered in-process). ``builder`` is the
    reference of a :data:`Builder`; the default replays a schedule's trace. ``label`` names
    the candidate in events.
    """

    workload: Workload
    target: str
    schedule: Any = None
    builder: str = DEFAULT_BUILDER
    label: str = ""

    def schedule_json(self) -> dict[str, Any]:
        """The schedule as a JSON object for a :class:`TuningRecord`."""
        return _schedule_json(self.schedule)


@dataclass(frozen=True)
class MeasureResult:
    """What evaluating a candidate gave: ``costs`` are seconds per run (empty on failure);
    ``estimate_seconds`` a model's prediction where the target models; ``pruned`` when the
    model ruled the candidate out before measuring (mode ``both``)."""

    costs: tuple[float, ...] = ()
    error_kind: ErrorKind | None = None
    error_message: str = ""
    stage: Stage | None = None
    build_seconds: float = 0.0
    total_seconds: float = 0.0
    flops: int = 0
    estimate_seconds: float | None = None
    estimated: bool = False
    pruned: bool = False
    worker_pid: int | None = None
    max_abs_error: float | None = None
    #: the machine (host name, or a runner's node name) that evaluated the candidate
    node: str = ""

    @property
    def ok(self) -> bool:
        return self.error_kind is None and bool(self.costs)

    @property
    def median(self) -> float | None:
        """Median seconds per run, or None when the candidate failed or was pruned."""
        return statistics.median(self.costs) if self.ok else None

    @property
    def cost(self) -> float:
        """Median seconds, ``math.inf`` for a failed or pruned candidate (what search engines
        minimise)."""
        median = self.median
        return math.inf if median is None else median

    @property
    def gflops(self) -> float | None:
        median = self.median
        if median is None or not self.flops:
            return None
        return self.flops / median / 1e9

    def to_record(self, candidate: MeasureInput, hardware: str = "", plugin: str = "",
                  plugin_version: str = "", target_options: str = "{}") -> TuningRecord:
        """A tuning-database record of this result (pruned candidates have none to store)."""
        if self.pruned:
            raise TuningError("a pruned candidate was never measured; store only measured or "
                              "failed candidates")
        return TuningRecord(workload_key=candidate.workload.key,
                            workload=candidate.workload.label, target=_target_name(candidate),
                            target_options=target_options, hardware=hardware, plugin=plugin,
                            plugin_version=plugin_version, schedule=candidate.schedule_json(),
                            costs=self.costs if self.error_kind is None else (),
                            error_kind=self.error_kind, error_message=self.error_message,
                            estimated=self.estimated)


def failure(kind: ErrorKind, message: str, stage: Stage | None, **extra: Any) -> MeasureResult:
    return MeasureResult(error_kind=kind, error_message=message[:_MESSAGE_LIMIT], stage=stage,
                         **extra)


class CandidateFailure(Exception):
    """Raised inside an evaluation step: the candidate failed with ``kind`` in ``stage``."""

    def __init__(self, kind: ErrorKind, stage: Stage, message: str,
                 max_abs_error: float | None = None):
        super().__init__(message)
        self.kind, self.stage, self.message = kind, stage, message
        self.max_abs_error = max_abs_error


def describe_exception(err: BaseException) -> str:
    """``Type: message``, with the innermost frames for errors that are not tilecraft's own
    (those are bugs somewhere, and where matters)."""
    if isinstance(err, SystemExit):
        return f"the candidate called sys.exit({err.code!r})"
    text = f"{type(err).__name__}: {err}"
    if not isinstance(err, TilecraftError):
        frames = traceback.extract_tb(err.__traceback__)[-3:]
        text += "".join(f"\n  at {f.filename}:{f.lineno} in {f.name}" for f in frames)
    return text


# targets -------------------------------------------------------------------------------------
_TARGETS: dict[str, Target] = {}


def _is_target_variant(reference: str) -> bool:
    """Whether ``reference`` is ``TARGET:VARIANT`` of a registered target (a target's
    variant, named as its ``name`` says) rather than ``module:attribute``."""
    from tilecraft.target.registry import list_targets

    base = reference.partition(":")[0]
    return "." not in base and "/" not in base \
        and any(info.name == base for info in list_targets())


def resolve_target(reference: str) -> Target:
    """The target a :class:`MeasureInput` names (cached per process)."""
    if reference in _TARGETS:
        return _TARGETS[reference]
    if ":" in reference and _is_target_variant(reference):
        from tilecraft.target.registry import get_target

        target = get_target(reference)
    elif ":" in reference:
        obj = resolve_reference(reference, "target")
        if isinstance(obj, type) and issubclass(obj, Target):
            obj = obj()
        elif not isinstance(obj, Target) and callable(obj):
            obj = obj()
        if not isinstance(obj, Target):
            raise TuningError(f"target reference {reference!r} gave {type(obj).__name__}, not a "
                              "Target; name a Target instance, subclass or factory")
        target = obj
    else:
        from tilecraft.target.registry import get_target

        target = get_target(reference)
    _TARGETS[reference] = target
    return target


def _target_name(candidate: MeasureInput) -> str:
    if ":" not in candidate.target:
        return candidate.target
    return resolve_target(candidate.target).name


def _schedule_json(schedule: Any) -> dict[str, Any]:
    if schedule is None:
        return {}
    trace = getattr(schedule, "trace", None)
    if isinstance(trace, list):  # a Schedule: its trace is what replays it
        return {"trace": trace}
    to_json = getattr(schedule, "to_json", None)
    if callable(to_json):
        value = to_json()
        return value if isinstance(value, dict) else {"schedule": value}
    if isinstance(schedule, Mapping):
        return {str(k): v for k, v in schedule.items()}
    if isinstance(schedule, (list, tuple)):  # a trace: a list of steps
        return {"trace": list(schedule)}
    return {"schedule": repr(schedule)}


# evaluation steps ----------------------------------------------------------------------------
StageCallback = Callable[[Stage], None]


@dataclass
class PreparedCandidate:
    """A built candidate: its kernels loaded, its arrays allocated, ready to run."""

    instance: WorkloadInstance
    kernels: list[Kernel]
    functions: list[Callable[[Mapping[str, np.ndarray]], None]]
    arrays: dict[str, np.ndarray]
    build_seconds: float
    views: list[dict[str, np.ndarray]] = field(default_factory=list)
    #: kernels (by index) that read only constants and what such kernels wrote — a template
    #: packing a constant weight: only the first run runs them, as an Executable runs them
    #: once when it is loaded, so a candidate's time is what a call of the program costs
    once: frozenset[int] = frozenset()
    ran: bool = False

    def run(self) -> None:
        """Run every kernel, in order (those of :attr:`once` on the first run only)."""
        skip = self.once if self.ran else frozenset()
        for index, (function, view) in enumerate(zip(self.functions, self.views)):
            if index not in skip:
                function(view)
        self.ran = True


def _run_once(graph: Graph, kernels: list[Kernel]) -> frozenset[int]:
    """Indices of the kernels that read only constants or what such kernels wrote, and write
    neither a graph output nor what another kernel writes (as the Executable decides)."""
    known = {t.name for t in graph.constants}
    if not known:
        return frozenset()
    writers: dict[str, int] = {}
    for kernel in kernels:
        for name in kernel.outputs:
            writers[name] = writers.get(name, 0) + 1
    outputs = {t.name for t in graph.outputs}
    once = set()
    for index, kernel in enumerate(kernels):
        reads = [p.name for p in kernel.params if p.name not in kernel.outputs]
        if kernel.outputs and reads and all(name in known for name in reads) and not any(
                name in outputs or writers[name] > 1 for name in kernel.outputs):
            once.add(index)
            known.update(kernel.outputs)
    return frozenset(once)


def _step(stage: Stage, on_stage: StageCallback, action: Callable[[], Any]) -> Any:
    on_stage(stage)
    try:
        return action()
    except CandidateFailure:
        raise
    except MemoryError as err:  # the worker's memory limit (or the machine's) was reached
        raise CandidateFailure(ErrorKind.OUT_OF_MEMORY, stage,
                               f"ran out of memory in stage {stage.value} ("
                               f"{describe_exception(err)}); it needs more memory than the "
                               "worker's limit (MeasureSettings.memory_limit_bytes)") from None
    except (Exception, SystemExit) as err:  # noqa: BLE001 - a candidate's failure is a result
        raise CandidateFailure(stage.error_kind, stage, describe_exception(err)) from err


def _lower(candidate: MeasureInput, target: Target, on_stage: StageCallback
           ) -> tuple[WorkloadInstance, list[Kernel]]:
    instance = _step(Stage.WORKLOAD, on_stage, candidate.workload.instantiate)

    def lower() -> list[Kernel]:
        builder = resolve_reference(candidate.builder, "schedule builder")
        kernels = list(builder(instance.graph, candidate.schedule, target))
        if not kernels or not all(isinstance(k, Kernel) for k in kernels):
            raise TuningError(f"schedule builder {candidate.builder!r} must return a non-empty "
                              f"list of Kernel IR kernels, got {kernels!r:.200}")
        return kernels

    return instance, _step(Stage.LOWER, on_stage, lower)


def prepare_candidate(candidate: MeasureInput, on_stage: StageCallback = lambda stage: None
                      ) -> PreparedCandidate:
    """Rebuild, lower, generate code, build and load; raises :class:`CandidateFailure`."""
    start = time.perf_counter()
    target = _step(Stage.WORKLOAD, on_stage, lambda: resolve_target(candidate.target))
    instance, kernels = _lower(candidate, target, on_stage)
    functions = []
    for kernel in kernels:
        source = _step(Stage.CODEGEN, on_stage, lambda k=kernel: target.codegen(k))
        artifact = _step(Stage.BUILD, on_stage, lambda s=source: target.build(s))
        functions.append(_step(Stage.LOAD, on_stage, lambda a=artifact: target.load(a)))
    # a copy per candidate: a kernel that scribbles over its inputs must not change the
    # inputs of the candidates after it
    arrays = {name: np.array(array, order="C", copy=True)
              for name, array in instance.inputs.items()}
    # constants are no inputs: their kernels read the bound values, as an Executable passes them
    arrays.update((t.name, np.array(t.constant_value, order="C", copy=True))
                  for t in instance.graph.constants if t.name not in arrays)
    tensors = {t.name: t for t in instance.graph.computes}
    for kernel in kernels:
        for buffer in kernel.params:
            if buffer.name not in arrays:
                tensor = tensors.get(buffer.name)  # a graph tensor keeps its own shape
                shape = tensor.shape if tensor is not None else buffer.shape
                arrays[buffer.name] = np.empty(shape, buffer.dtype.numpy)
    # a kernel may view a tensor in another shape of the same size (a template's [batch, M, N])
    views = [{p.name: arrays[p.name].reshape(p.shape) for p in kernel.params}
             for kernel in kernels]
    return PreparedCandidate(instance, kernels, functions, arrays,
                             time.perf_counter() - start, views,
                             _run_once(instance.graph, kernels))


def _poison(array: np.ndarray) -> None:
    """Fill a result buffer with values a correct kernel overwrites (so an output element the
    kernel never writes cannot pass the check by luck)."""
    if array.dtype.kind == "f" or array.dtype.name == "bfloat16":
        array.fill(np.nan)
    elif array.dtype.kind == "b":
        array.fill(True)
    else:
        array.fill(np.iinfo(array.dtype).max // 3 + 7)


def check_candidate(prepared: PreparedCandidate, on_stage: StageCallback = lambda s: None
                    ) -> float | None:
    """Run once on poisoned outputs and compare every graph output with the reference;
    returns the largest absolute error, raises :class:`CandidateFailure` when it is off."""
    instance = prepared.instance
    # the reference is the workload's business: its failure is not the candidate's run
    expected = _step(Stage.WORKLOAD, on_stage, lambda: instance.expected)
    given = set(instance.inputs) | {t.name for t in instance.graph.constants}
    for name, array in prepared.arrays.items():
        if name not in given:
            _poison(array)
    prepared.ran = False  # the check runs every kernel: the poisoned buffers included
    _step(Stage.CHECK, on_stage, prepared.run)
    worst = 0.0
    for tensor in instance.graph.outputs:
        if tensor.name not in prepared.arrays:
            raise CandidateFailure(ErrorKind.WRONG_RESULT, Stage.CHECK,
                                   f"no kernel writes the output {tensor.name!r}")
        rtol, atol = instance.tolerance(tensor)
        error = _compare(tensor.name, prepared.arrays[tensor.name], expected[tensor.name],
                         rtol, atol)
        worst = max(worst, error)
    return worst


def _compare(name: str, actual: np.ndarray, expected: np.ndarray, rtol: float,
             atol: float) -> float:
    got = actual.astype(np.float64)
    want = expected.astype(np.float64)
    close = np.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
    difference = np.abs(got - want)
    finite = difference[np.isfinite(difference)]
    worst = float(finite.max()) if finite.size else 0.0
    if not close.all():
        bad = np.argwhere(~close)
        where = tuple(int(i) for i in bad[0])
        raise CandidateFailure(
            ErrorKind.WRONG_RESULT, Stage.CHECK,
            f"output {name!r}: {len(bad)} of {close.size} elements differ from the reference "
            f"beyond rtol={rtol:g}, atol={atol:g}; first at index {list(where)}: got "
            f"{got[where]!r}, expected {want[where]!r} (largest finite difference {worst:g})",
            max_abs_error=worst)
    return worst


def time_candidate(prepared: PreparedCandidate, settings: MeasureSettings,
                   on_stage: StageCallback = lambda s: None) -> tuple[float, ...]:
    """Warm-up runs, then ``settings.repeats`` measurements of at least
    ``settings.min_seconds`` each; seconds per run of each measurement. The runner named by
    ``settings.runner`` (registered through the runners hook) runs and times the calls."""
    from tilecraft.runtime.runners import get_runner

    def measure() -> tuple[float, ...]:
        runner = get_runner(settings.runner)

        def call(_arrays: Any) -> None:
            prepared.run()

        (first,) = runner.run(call, {}, repeat=1, warmup=settings.warmup, number=1)
        number = max(1, min(1_000_000, math.ceil(settings.min_seconds / max(first, 1e-9))))
        costs = runner.run(call, {}, repeat=settings.repeats, warmup=0, number=number)
        return tuple(max(float(cost), 1e-12) for cost in costs)

    return _step(Stage.TIME, on_stage, measure)


def evaluate_in_process(candidate: MeasureInput, settings: MeasureSettings | None = None
                        ) -> MeasureResult:
    """Prepare, check and time one candidate in this process — no isolation, no timeout (a
    crash takes this process down): for debugging a candidate, and for trusted builders."""
    settings = settings or MeasureSettings()
    start = time.perf_counter()
    flops = 0
    try:
        prepared = prepare_candidate(candidate)
        flops = prepared.instance.flops
        error = check_candidate(prepared) if settings.check else None
        costs = time_candidate(prepared, settings)
    except CandidateFailure as err:
        return failure(err.kind, err.message, err.stage,
                       flops=flops or candidate.workload.built_flops(),
                       total_seconds=time.perf_counter() - start, max_abs_error=err.max_abs_error)
    return MeasureResult(costs=costs, build_seconds=prepared.build_seconds,
                         total_seconds=time.perf_counter() - start, flops=flops,
                         max_abs_error=error)


def estimate_candidate(candidate: MeasureInput, target: Target) -> MeasureResult:
    """Lower the candidate and sum the target's model of each kernel (no build, no run)."""
    start = time.perf_counter()
    flops = 0
    try:
        instance, kernels = _lower(candidate, target, lambda stage: None)
        flops = instance.flops

        def model() -> float:
            return sum(float(target.estimate(kernel).seconds) for kernel in kernels)

        seconds = _step(Stage.LOWER, lambda stage: None, model)
        if not (seconds > 0 and math.isfinite(seconds)):
            raise CandidateFailure(ErrorKind.INVALID, Stage.LOWER,
                                   f"the performance model of {target.name} returned {seconds} "
                                   "seconds; it must be a positive finite number")
    except CandidateFailure as err:
        # evaluated by the model too: an infeasible design is the model's verdict
        return failure(err.kind, err.message, err.stage,
                       flops=flops or candidate.workload.built_flops(),
                       total_seconds=time.perf_counter() - start, estimated=True)
    return MeasureResult(costs=(seconds,), estimate_seconds=seconds, estimated=True,
                         flops=flops, total_seconds=time.perf_counter() - start)
