"""The programmatic compile API.

>>> import numpy as np
>>> import tilecraft as tc
>>> from tilecraft import te
>>> A = te.placeholder((5, 7), name="A")
>>> B = te.compute((5, 7), lambda i, j: te.max(A[i, j], 0.0), name="B")
>>> exe = tc.compile(tc.Graph.from_outputs([B]), target="x86_avx512")  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tilecraft.errors import GraphError, TargetError
from tilecraft.graph import Graph
from tilecraft.runtime.executable import Executable
from tilecraft.target.base import Capability, Target
from tilecraft.te.tensor import Tensor


def as_graph(program: Graph | Tensor | Sequence[Tensor]) -> Graph:
    """What :func:`compile` accepts as a program, as a Graph: a Graph as it is, a Tensor or a
    list of Tensors as the graph computing them; a GraphError for anything else.

    >>> from tilecraft import te
    >>> X = te.placeholder((4,), name="X")
    >>> [t.name for t in as_graph(te.compute((4,), lambda i: X[i] * 2.0, name="Y")).computes]
    ['Y']
    """
    graph = Graph.of(program)
    if graph is not None:
        return graph
    raise GraphError(f"compile expects a Graph, a Tensor or a list of Tensors, got "
                     f"{type(program).__name__}")


def _resolve_target(target: str | Target) -> Target:
    if isinstance(target, Target):
        return target
    if not isinstance(target, str):
        raise TargetError(f"target={target!r}: give an installed target's name (`tilecraft "
                          "targets` lists them) or a Target instance")
    from tilecraft.target.registry import get_target

    return get_target(target)


def compile(program: Graph | Tensor | Sequence[Tensor],  # noqa: A001
            target: str | Target, tuning: Any = None,
            database: str | None = None, tensorize: Any = None,
            dump_stages: str | Path | None = None,
            passes: dict[str, bool] | None = None, overlap: bool | str = False) -> Executable:
    """Compile every compute of ``program`` for ``target`` (an installed target's name, or a
    :class:`~tilecraft.target.base.Target`; there is no default: ``tilecraft targets`` lists
    what is installed and what this machine can do with each) through the stages of
    :mod:`tilecraft.pipeline` — graph passes, fusion planning, AMOS mapping, schedule, the
    target's lowering to Kernel IR, codegen, build/load/emulate — and, where this machine can,
    build and load it (or emulate it).

    ``tuning`` (a :class:`~tilecraft.tuning.TuningOptions`, a preset name such as ``"quick"``,
    a mapping of its fields, or ``True``) first tunes the target's schedule templates of the
    computes that are not fused (:func:`tilecraft.tuning.tuner.tune`); ``database`` (a tuning
    database file, also taken from the tuning options) supplies the best known parameters when
    no tuning is asked for. The mapping stage lowers a compute through its best AMOS mapping
    when the cost model predicts it clearly faster than the target's own lowering;
    ``tensorize`` overrides that (:mod:`tilecraft.intrin.tensorize`): ``None`` or ``"auto"``
    (the default) leaves it to the model, ``False`` or ``"off"`` turns tensorization off,
    ``True`` or a mapping naming computes forces them through a mapping. ``dump_stages`` (a
    folder) receives each stage's output. ``passes`` turns graph passes off by name
    (``{"fold_batch_norm": False}``; :mod:`tilecraft.passes` lists the core's). A target
    this machine can only compile for still yields an Executable with the generated sources
    (``exe.sources``); calling it raises a TargetError that says why.

    ``overlap`` (with ``tuning``; thesis §4.6.3) returns at once an
    :class:`~tilecraft.runtime.overlap.OverlappedExecutable` running the best recorded (else
    default) kernels while tuning goes on in the background, each compute's kernels swapped
    atomically for better ones as they are measured: ``True`` or ``"async"`` (calls never
    wait), ``"sync"`` (each call waits for the next search stage); ``exe.wait()``,
    ``exe.close()``.
    """
    from tilecraft.pipeline import run_pipeline

    graph = as_graph(program)
    tgt = _resolve_target(target)
    if overlap is not False and overlap is not None:
        from tilecraft.runtime.overlap import compile_overlapped

        return compile_overlapped(graph, tgt, tuning, overlap, database=database,
                                  tensorize=tensorize, dump_stages=dump_stages, passes=passes)
    state = run_pipeline(graph, tgt, tuning=tuning, database=database, tensorize=tensorize,
                         dump_stages=dump_stages, passes=passes)
    assert state.report is not None
    reason = None
    if state.availability.capability not in (Capability.EXECUTE, Capability.EMULATE):
        reason = state.availability.explain()
    return Executable(state.graph, tgt.name, state.compiled, state.report,
                      unavailable_reason=reason)
