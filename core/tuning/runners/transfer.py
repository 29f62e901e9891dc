"""Build on one machine, measure on another: a candidate's built code as bytes that travel.

A remote runner builds candidates on any node (lowering, code generation and compilation need
only CPUs) and measures them on a node with the device. :func:`build_candidate` does the first
half and returns a :class:`BuiltCandidate` — plain data (Kernel IR, bytes, picklable
artifacts), no path on the building node's disk, no in-memory handle — which a runner ships to
the device node (through Ray's object store); :func:`measure_built` there loads, checks
against the reference and times it, without building anything.

How the built code travels, by what the target offers (plain Target hooks, nothing
target-specific here):

- ``export`` (ahead of time, e.g. x86's ``lib<name>.so``): the files it writes travel as bytes;
  the device node writes them into a scratch folder and loads each kernel from the first one
  (the library :meth:`~tilecraft.target.base.Target.load` opens by its ``path``);
- else an artifact that pickles (a target whose ``build`` keeps its code in ``handle`` or
  ``meta``) travels as it is, with the bytes of its ``path`` file when it names one;
- else the generated sources travel and the device node builds them (counted in
  :data:`ROLE_COUNTS` as ``"device-build"``: that target's builds cannot leave the device).

A build node compiles for *its* CPU when the target is a host target (``x86_avx512`` with no
CPU variant); give build nodes the device nodes' CPU, or tune a named variant
(``x86_avx512:<cpu>``), whose libraries refuse to load on a CPU lacking their features.

>>> from tilecraft.tuning.workload import Workload
>>> candidate = MeasureInput(Workload.from_catalog("relu[13x17]"), "x86_avx512")
>>> built = build_candidate(candidate, MeasureSettings())           # doctest: +SKIP
>>> measure_built(built, MeasureSettings(repeats=2)).ok             # doctest: +SKIP
True
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import socket
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tilecraft.kernel_ir import Kernel
from tilecraft.target.base import Artifact, Source, Target
from tilecraft.target.spec import EvaluationMode
from tilecraft.tuning.candidate import (
    CandidateFailure,
    MeasureInput,
    MeasureResult,
    MeasureSettings,
    PreparedCandidate,
    Stage,
    _lower,
    _step,
    check_candidate,
    estimate_candidate,
    failure,
    resolve_target,
    time_candidate,
)

__all__ = ["ROLE_COUNTS", "BuiltCandidate", "build_candidate", "measure_built"]

#: what this process did, by role: ``"build"`` (candidates built here), ``"measure"``
#: (candidates measured here) and ``"device-build"`` (candidates a measuring process had to
#: build because their code cannot travel); a runner's workers report it
ROLE_COUNTS: Counter[str] = Counter()


@dataclass(frozen=True)
class BuiltCandidate:
    """A candidate built on one machine, ready to be measured on another.

    ``files`` are the exported files by name (bytes), shared by every kernel; ``artifacts``
    the picklable artifacts, one per kernel, with ``artifact_files`` the bytes of their
    ``path`` files; ``sources`` are kept for a target whose code cannot travel (then neither
    ``files`` nor ``artifacts``). ``built_on`` is the (node, pid) that built it.
    """

    candidate: MeasureInput
    kernels: tuple[Kernel, ...]
    how: str  # "export", "artifact" or "source"
    files: dict[str, bytes] = field(default_factory=dict)
    artifacts: tuple[Artifact, ...] = ()
    artifact_files: tuple[bytes | None, ...] = ()
    sources: tuple[Source, ...] = ()
    build_seconds: float = 0.0
    flops: int = 0
    estimate_seconds: float | None = None
    built_on: tuple[str, int] = ("", 0)

    @property
    def size_bytes(self) -> int:
        """Bytes of built code that travel (files and artifact files)."""
        return (sum(len(data) for data in self.files.values())
                + sum(len(data) for data in self.artifact_files if data is not None))


def _overrides(target: Target, hook: str) -> bool:
    return getattr(type(target), hook) is not getattr(Target, hook)


def _exported(target: Target, kernels: list[Kernel], sources: list[Source], graph: Any
              ) -> dict[str, bytes]:
    with tempfile.TemporaryDirectory(prefix="tilecraft_build_") as scratch:
        paths = target.export(list(zip(kernels, sources)), graph, Path(scratch), "candidate")
        return {Path(path).name: Path(path).read_bytes() for path in paths}


def _travelling(artifact: Artifact) -> tuple[Artifact, bytes | None] | None:
    """``artifact`` and its path file's bytes when it pickles, else None."""
    try:
        pickle.dumps(artifact)
    except Exception:  # noqa: BLE001 - ctypes handles, JIT engines, locks: it cannot travel
        return None
    path = artifact.path
    data = Path(path).read_bytes() if path is not None and Path(path).is_file() else None
    return artifact, data


def build_candidate(candidate: MeasureInput, settings: MeasureSettings
                    ) -> BuiltCandidate | MeasureResult:
    """Lower, generate code and build ``candidate`` in this process (no device needed); a
    :class:`MeasureResult` instead when nothing is left to measure: a failure (typed by its
    stage), or the model's estimate for a target that estimates."""
    ROLE_COUNTS["build"] += 1
    start = time.perf_counter()
    flops = 0
    try:
        target = _step(Stage.WORKLOAD, lambda s: None, lambda: resolve_target(candidate.target))
        mode = target.spec.evaluation
        if mode is EvaluationMode.ESTIMATE:
            return estimate_candidate(candidate, target)
        estimate = (estimate_candidate(candidate, target).estimate_seconds
                    if mode is EvaluationMode.BOTH else None)
        instance, kernels = _lower(candidate, target, lambda s: None)
        flops = instance.flops
        sources = [_step(Stage.CODEGEN, lambda s: None, lambda k=k: target.codegen(k))
                   for k in kernels]
        common: dict[str, Any] = {"candidate": candidate, "kernels": tuple(kernels),
                                  "flops": flops, "estimate_seconds": estimate,
                                  "built_on": (socket.gethostname(), os.getpid())}
        if _overrides(target, "export"):
            files = _step(Stage.BUILD, lambda s: None,
                          lambda: _exported(target, kernels, sources, instance.graph))
            if files:
                return BuiltCandidate(how="export", files=files, sources=tuple(sources),
                                      build_seconds=time.perf_counter() - start, **common)
        artifacts = [_step(Stage.BUILD, lambda s: None, lambda s=s: target.build(s))
                     for s in sources]
        travelling = [_travelling(artifact) for artifact in artifacts]
        elapsed = time.perf_counter() - start
        if all(item is not None for item in travelling):
            return BuiltCandidate(how="artifact", build_seconds=elapsed,
                                  artifacts=tuple(item[0] for item in travelling),  # type: ignore[index]
                                  artifact_files=tuple(item[1] for item in travelling),  # type: ignore[index]
                                  **common)
        return BuiltCandidate(how="source", sources=tuple(sources), build_seconds=elapsed,
                              **common)
    except CandidateFailure as err:
        return failure(err.kind, err.message, err.stage,
                       flops=flops or candidate.workload.built_flops(),
                       total_seconds=time.perf_counter() - start, node=socket.gethostname())


def _artifacts(built: BuiltCandidate, target: Target, scratch: Path) -> list[Artifact]:
    """The artifacts to load, their files written under ``scratch`` (this node's disk)."""
    if built.how == "export":
        for name, data in built.files.items():
            (scratch / name).write_bytes(data)
        library = scratch / next(iter(built.files))
        return [Artifact(target.name, kernel.name, path=library, meta=dict(source.meta))
                for kernel, source in zip(built.kernels, built.sources)]
    if built.how == "artifact":
        found = []
        for number, (artifact, data) in enumerate(zip(built.artifacts, built.artifact_files)):
            if data is not None and artifact.path is not None:
                local = scratch / f"{number}_{Path(artifact.path).name}"
                local.write_bytes(data)
                artifact = dataclasses.replace(artifact, path=local)
            found.append(artifact)
        return found
    ROLE_COUNTS["device-build"] += 1
    return [target.build(source) for source in built.sources]


def _prepared(built: BuiltCandidate, target: Target, scratch: Path) -> PreparedCandidate:
    instance = _step(Stage.WORKLOAD, lambda s: None, built.candidate.workload.instantiate)
    artifacts = _step(Stage.BUILD, lambda s: None, lambda: _artifacts(built, target, scratch))
    functions = [_step(Stage.LOAD, lambda s: None, lambda a=a: target.load(a))
                 for a in artifacts]
    # as prepare_candidate does: a copy of the inputs, the other buffers allocated, each
    # kernel's view of them
    arrays = {name: np.array(array, order="C", copy=True)
              for name, array in instance.inputs.items()}
    tensors = {t.name: t for t in instance.graph.computes}
    for kernel in built.kernels:
        for buffer in kernel.params:
            if buffer.name not in arrays:
                tensor = tensors.get(buffer.name)
                shape = tensor.shape if tensor is not None else buffer.shape
                arrays[buffer.name] = np.empty(shape, buffer.dtype.numpy)
    views = [{p.name: arrays[p.name].reshape(p.shape) for p in kernel.params}
             for kernel in built.kernels]
    return PreparedCandidate(instance, list(built.kernels), functions, arrays,
                             built.build_seconds, views)


def measure_built(built: BuiltCandidate, settings: MeasureSettings) -> MeasureResult:
    """Load ``built`` on this machine, check it against the reference and time it (the
    building was done elsewhere; see the module docstring)."""
    ROLE_COUNTS["measure"] += 1
    start = time.perf_counter()
    extra = {"flops": built.flops, "estimate_seconds": built.estimate_seconds}
    with tempfile.TemporaryDirectory(prefix="tilecraft_measure_") as scratch:
        try:
            target = _step(Stage.WORKLOAD, lambda s: None,
                           lambda: resolve_target(built.candidate.target))
            prepared = _prepared(built, target, Path(scratch))
            error = check_candidate(prepared) if settings.check else None
            costs = time_candidate(prepared, settings)
        except CandidateFailure as err:
            return failure(err.kind, err.message, err.stage, max_abs_error=err.max_abs_error,
                           total_seconds=built.build_seconds + time.perf_counter() - start,
                           **extra)
    return MeasureResult(costs=costs, build_seconds=built.build_seconds, max_abs_error=error,
                         total_seconds=built.build_seconds + time.perf_counter() - start,
                         **extra)
