"""A schedule: one stage per compute of a program, the cache primitives, the trace, lowering.

``create_schedule(program, spec=None)`` gives a :class:`Schedule` with one
:class:`~tilecraft.schedule.stage.Stage` per compute (``s[C]`` by tensor or name). Every
primitive applied is appended to ``s.trace`` as a JSON-serialisable step, so that
:func:`~tilecraft.schedule.trace.replay` rebuilds the same schedule elsewhere (the tuning
database, worker processes). ``s.lower(target)`` gives the Kernel IR kernels: one per stage
computed at the root, with the stages computed inside it.

>>> from tilecraft import te
>>> A = te.placeholder((8, 8), name="A")
>>> B = te.placeholder((8, 8), name="B")
>>> k = te.reduce_axis(8, name="k")
>>> C = te.compute((8, 8), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
>>> s = create_schedule(C)
>>> CL = s.cache_write(C, "register")
>>> i, j = s[C].axes
>>> s[CL].compute_at(s[C], i)
>>> [step["primitive"] for step in s.trace]
['cache_write', 'compute_at']
>>> print(s.lower()[0])
kernel C(A: float32[8, 8], B: float32[8, 8], C: float32[8, 8]) -> (C):
  for i in serial(8):
    alloc C_register: float32[1, 8] in register
    for j1 in serial(8):
      C_register[0, j1] = 0.0
      for k in serial(8):
        C_register[0, j1] sum= A[i, k] * B[k, j1]
    for j in serial(8):
      C[i, j] = C_register[0, j]
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from typing import Any

from tilecraft.dtypes import DType
from tilecraft.graph import Graph
from tilecraft.kernel_ir.nodes import Kernel
from tilecraft.schedule.errors import ScheduleError, schedule_error
from tilecraft.schedule.stage import Stage
from tilecraft.schedule.stage_base import Attach, AttachKind
from tilecraft.schedule.target import TargetView
from tilecraft.target.spec import SchedulePrimitive
from tilecraft.te.expr import AxisKind, Cast, Expr, IterVar, Load, Reduce
from tilecraft.te.tensor import ComputeOp, Tensor
from tilecraft.te.visit import loads_in, substitute, transform

_HALF = (DType.FLOAT16, DType.BFLOAT16)


class Schedule:
    """The stages of a program and the primitives applied to them (see the module doc)."""

    def __init__(self, graph: Graph, spec: Any = None) -> None:
        self.graph = graph
        self.target = TargetView.of(spec)
        self.outputs: tuple[Tensor, ...] = tuple(graph.outputs)
        self.stages: list[Stage] = [Stage(self, t, t.op.body) for t in graph.computes]
        self._tensors: dict[str, Tensor] = {t.name: t for t in graph.topological_order()}
        self._trace: list[dict[str, Any]] = []

    # lookups -----------------------------------------------------------------------------
    def __getitem__(self, key: Any) -> Stage:
        return self.stage(key)

    def __iter__(self) -> Iterator[Stage]:
        return iter(list(self.stages))

    def stage(self, key: Any, verb: str = "lookup") -> Stage:
        """The stage of ``key``: a Stage, a compute Tensor, or a compute's name."""
        if isinstance(key, Stage):
            if key.schedule is not self:
                raise schedule_error(verb, key.name, None, "the stage belongs to another "
                                     "schedule")
            return key
        name = key.name if isinstance(key, Tensor) else key
        for stage in self.stages:
            if stage.name == name and (not isinstance(key, Tensor) or stage.tensor is key):
                return stage
        if isinstance(name, str) and name in self._tensors:
            raise schedule_error(verb, name, None, f"{name} is an input of the program, not a "
                                 "compute: it has no stage (cache it with cache_read)")
        known = ", ".join(stage.name for stage in self.stages)
        raise schedule_error(verb, None, None, f"{key!r} is not a stage of this schedule (its "
                             f"stages: {known}); pass a compute Tensor, its name, or a Stage")

    def stage_of(self, tensor: Tensor) -> Stage | None:
        for stage in self.stages:
            if stage.tensor is tensor:
                return stage
        return None

    def tensor(self, key: Any, verb: str) -> Tensor:
        """A tensor of the program (input, compute or cache) by Tensor or name."""
        if isinstance(key, Tensor):
            if self._tensors.get(key.name) is key:
                return key
        elif isinstance(key, str) and key in self._tensors:
            return self._tensors[key]
        raise schedule_error(verb, None, None, f"{key!r} is not a tensor of the program (its "
                             f"tensors: {', '.join(self._tensors)})")

    # trace -------------------------------------------------------------------------------
    @property
    def trace(self) -> list[dict[str, Any]]:
        """The primitive steps applied so far, in order, as JSON-serialisable dicts."""
        return copy.deepcopy(self._trace)

    def record(self, step: dict[str, Any]) -> None:
        self._trace.append(step)

    # effective bodies (after inlining) ---------------------------------------------------
    def effective_body(self, stage: Stage) -> Expr:
        """The stage's body with every inlined producer substituted (rounded to its dtype
        where that is a half type, as storing it would have)."""

        def expand(node: Expr) -> Expr | None:
            if not isinstance(node, Load):
                return None
            indices = tuple(transform(index, expand) for index in node.indices)
            producer = self.stage_of(node.tensor)
            if producer is None or producer.attach.kind is not AttachKind.INLINE:
                return Load(node.tensor, indices) if indices != node.indices else node
            value = self.effective_body(producer)
            value = substitute(value, dict(zip(producer.tensor.axes, indices)))
            if producer.tensor.dtype in _HALF:
                value = Cast(producer.tensor.dtype, Cast(DType.FLOAT32, value))
            return value

        return transform(stage.body, expand)

    def reads_of(self, stage: Stage) -> list[Tensor]:
        """The tensors the stage reads once inlined producers are substituted, in order of
        first use."""
        seen: dict[int, Tensor] = {}
        for load in loads_in(self.effective_body(stage)):
            seen.setdefault(id(load.tensor), load.tensor)
        return list(seen.values())

    # cache primitives --------------------------------------------------------------------
    def cache_read(self, tensor: Any, level: str, readers: Sequence[Any] | None = None
                   ) -> Tensor:
        """A copy of ``tensor`` in memory ``level`` that ``readers`` (default: every stage
        reading it; a cache serves one reader) read instead (thesis Table 4.1 "cache";
        TVM ``cache_read``). The copy is a new stage, computed at the top of its reader's
        kernel until placed with ``compute_at`` — typically at a reduce loop, so that it
        holds the tile one iteration reads.

        >>> from tilecraft import te
        >>> A = te.placeholder((2, 3), name="A")
        >>> B = te.compute((2, 3), lambda i, j: A[i, j] * 2.0, name="B")
        >>> s = create_schedule(B)
        >>> print(s.lower()[0])
        kernel B(A: float32[2, 3], B: float32[2, 3]) -> (B):
          for i in serial(2):
            for j in serial(3):
              B[i, j] = A[i, j] * 2.0
        >>> AL = s.cache_read(A, "L1")
        >>> s[AL].compute_at(s[B], s[B].axes[0])
        >>> print(s.lower()[0])
        kernel B(A: float32[2, 3], B: float32[2, 3]) -> (B):
          for i in serial(2):
            alloc A_L1: float32[1, 3] in L1
            for i1 in serial(3):
              A_L1[0, i1] = A[i, i1]
            for j in serial(3):
              B[i, j] = A_L1[0, j] * 2.0
        """
        self.target.require(SchedulePrimitive.CACHE, "cache_read", None, None)
        source = self.tensor(tensor, "cache_read")
        self.target.require_level("cache_read", source.name, level)
        direct = [s for s in self.stages if any(load.tensor is source
                                                for load in loads_in(s.body))]
        chosen = direct if readers is None else [self.stage(r, "cache_read") for r in readers]
        chosen = list(dict.fromkeys(chosen))
        if not chosen:
            raise schedule_error("cache_read", source.name, None, f"no stage reads "
                                 f"{source.name}; there is nothing to cache")
        for reader in chosen:
            if reader not in direct:
                raise schedule_error("cache_read", reader.name, None, f"the stage does not "
                                     f"read {source.name} (stages reading it: "
                                     f"{', '.join(s.name for s in direct) or 'none'})")
        if len(chosen) > 1:
            raise schedule_error("cache_read", source.name, None, f"{source.name} is read by "
                                 f"{', '.join(s.name for s in chosen)}; a cache lives inside "
                                 "one reader's kernel: call cache_read once per reader")
        reader = chosen[0]
        name = self._fresh_name(f"{source.name}_{level}")
        names = [a.name for a in source.axes] or [f"i{d}" for d in range(source.ndim)]
        axes = tuple(IterVar(n, e, AxisKind.SPATIAL) for n, e in zip(names, source.shape))
        body: Expr = Load(source, axes)
        cached = Tensor(name, source.shape, source.dtype, ComputeOp(axes, body))
        stage = Stage(self, cached, body, cache="read")
        stage.level = level
        stage.attach = Attach(AttachKind.AT, reader.name, None, explicit=False)
        reader.body = _redirect(reader.body, source, cached)
        self._insert_before(stage, reader)
        self.record({"primitive": "cache_read", "tensor": source.name, "level": level,
                     "readers": [reader.name], "result": name})
        return cached

    def cache_write(self, tensor: Any, level: str) -> Tensor:
        """Compute ``tensor`` into a buffer in memory ``level`` and copy it out (thesis Table
        4.1 "cache"; TVM ``cache_write``). Returns the new stage's tensor, which now holds the
        computation — its reductions accumulate in ``level`` (in float32 for half-precision
        outputs); the original stage becomes the copy. Call it before any other primitive on
        the stage; place the new stage with ``compute_at``.

        >>> from tilecraft import te
        >>> A = te.placeholder((2, 3), name="A")
        >>> k = te.reduce_axis(3, name="k")
        >>> S = te.compute((2,), lambda i: te.sum(A[i, k], axis=k), name="S")
        >>> s = create_schedule(S)
        >>> print(s.lower()[0])
        kernel S(A: float32[2, 3], S: float32[2]) -> (S):
          for i in serial(2):
            S[i] = 0.0
            for k in serial(3):
              S[i] sum= A[i, k]
        >>> SL = s.cache_write(S, "register")
        >>> s[SL].compute_at(s[S], s[S].axes[0])
        >>> print(s.lower()[0])
        kernel S(A: float32[2, 3], S: float32[2]) -> (S):
          for i in serial(2):
            alloc S_register: float32[1] in register
            S_register[0] = 0.0
            for k in serial(3):
              S_register[0] sum= A[i, k]
            S[i] = S_register[0]
        """
        self.target.require(SchedulePrimitive.CACHE, "cache_write", None, None)
        stage = self.stage(tensor, "cache_write")
        self.target.require_level("cache_write", stage.name, level)
        if stage.relations or stage.annotations or stage.cache is not None:
            raise schedule_error("cache_write", stage.name, None, "the stage already has "
                                 "transformed loops or is a cache itself; call cache_write "
                                 "first and schedule the stages it returns")
        original = stage.tensor
        name = self._fresh_name(f"{stage.name}_{level}")
        axes = tuple(IterVar(a.name, a.extent, AxisKind.SPATIAL) for a in original.axes)
        body = substitute(stage.body, dict(zip(original.axes, axes)))
        if isinstance(body, Reduce) and original.dtype in _HALF:
            body = Reduce(body.op, body.body.astype(DType.FLOAT32), body.axes)
        cached = Tensor(name, original.shape, body.dtype, ComputeOp(axes, body))
        cache_stage = Stage(self, cached, body, cache="write")
        cache_stage.level = level
        cache_stage.attach = Attach(AttachKind.AT, stage.name, None, explicit=False)
        stage.body = Load(cached, original.axes).astype(original.dtype)
        stage.drop_reduce_axes()
        self._insert_before(cache_stage, stage)
        self.record({"primitive": "cache_write", "tensor": stage.name, "level": level,
                     "result": name})
        return cached

    # lowering ----------------------------------------------------------------------------
    def lower(self, target: Any = None, computes: Sequence[str] | None = None
              ) -> list[Kernel]:
        """The Kernel IR kernels of this schedule, verified, producers first.

        ``target`` is a TargetSpec, a Target, LoweringOptions, or None (the spec the
        schedule was created with, else default options). Every primitive of the trace is
        checked against it; an invalid schedule raises a
        :class:`~tilecraft.schedule.errors.ScheduleError`. ``computes`` (names of stages
        computed in their own kernel) lowers only those kernels: the others' tensors are
        their parameters.
        """
        from tilecraft.schedule.kernels import lower_schedule

        view = TargetView.of(target) if target is not None else self.target
        return lower_schedule(self, view, computes)

    # helpers -----------------------------------------------------------------------------
    def _fresh_name(self, base: str) -> str:
        taken = set(self._tensors) | {stage.name for stage in self.stages}
        name, count = base, 0
        while name in taken:
            count += 1
            name = f"{base}_{count}"
        return name

    def _insert_before(self, stage: Stage, anchor: Stage) -> None:
        self.stages.insert(self.stages.index(anchor), stage)
        self._tensors[stage.name] = stage.tensor


def _redirect(body: Expr, source: Tensor, target: Tensor) -> Expr:
    def swap(node: Expr) -> Expr | None:
        if isinstance(node, Load) and node.tensor is source:
            return Load(target, tuple(transform(i, swap) for i in node.indices))
        return None

    return transform(body, swap)


def create_schedule(program: Graph | Tensor | Sequence[Tensor], spec: Any = None) -> Schedule:
    """A schedule of ``program`` (a Graph, an output Tensor or a list of them) with one
    untransformed stage per compute. ``spec`` (a TargetSpec, Target or LoweringOptions) makes
    every primitive check at once that the target offers it."""
    if isinstance(program, Graph):
        graph = program
    elif isinstance(program, Tensor):
        graph = Graph.from_outputs([program])
    elif isinstance(program, (list, tuple)) and program and \
            all(isinstance(t, Tensor) for t in program):
        graph = Graph.from_outputs(list(program))
    else:
        raise ScheduleError(f"create_schedule needs a Graph, an output Tensor or a list of "
                            f"Tensors, got {type(program).__name__}")
    return Schedule(graph, spec)


__all__ = ["Schedule", "create_schedule"]
