"""From a point of a schedule space to primitives: :func:`apply_config`.

The schedule-space generator (:mod:`tilecraft.search`) describes a schedule of one compute as
a configuration (every key optional)::

    {"split": {"<axis>": [f_outer, ..., f_inner]},   # per axis; product >= extent
     "reorder": ["<axis>.<level>", ...],              # all split loops, outer to inner
     "fuse_parallel": int,       # outermost loops fused into one parallel loop (0: none)
     "unroll": int,              # unroll the innermost non-vector loops up to this extent
     "vectorize": bool,          # vectorise the innermost loop (the target's lanes)
     "inline": {"<compute>": bool},
     "cache_write": "<level>" | None}

Axis ``i`` split ``[f0, f1, f2]`` gives loops ``i.0``, ``i.1``, ``i.2`` with
``i = i.0 * (f1 * f2) + i.1 * f2 + i.2``; ``i.0`` runs ``ceil(extent / (f1 * f2))`` times (a
guard cuts off the overshoot). The default order is level by level: ``i.0, j.0, k.0, i.1,
...``.

With ``cache_write``, the compute moves to a cache stage in that memory level, computed at the
last loop before the first reduce loop of the order (for a compute without reduction: before
the first loop of level 1), over the tile of the loops inside; the compute's own stage copies
the tile out. The loops up to the attach point (spatial, outer levels of each axis) belong to
the copy stage, which is the one parallelised; the others, in the same order, to the cache
stage, which gets the unrolling and vectorisation (the copy's innermost loop is vectorised
too).

>>> from tilecraft import te
>>> from tilecraft.lower import LoweringOptions
>>> from tilecraft.schedule import create_schedule
>>> A = te.placeholder((6, 32), name="A")
>>> k = te.reduce_axis(32, name="k")
>>> S = te.compute((6,), lambda i: te.sum(A[i, k], axis=k), name="S")
>>> s = create_schedule(S)
>>> stage = apply_config(s, S, {"split": {"i": [3, 2], "k": [2, 16]},
...                             "reorder": ["i.0", "k.0", "i.1", "k.1"],
...                             "fuse_parallel": 1, "vectorize": True})
>>> print(s.lower(LoweringOptions(vector_lanes=16))[0])
kernel S(A: float32[6, 32], S: float32[6]) -> (S):
  for i_0 in parallel(3):
    for i_1 in serial(2):
      S[(i_0 * 2) + i_1] = 0.0
    for k_0 in serial(2):
      for i_1 in serial(2):
        for k_1 in vector(16, lanes=16):
          S[(i_0 * 2) + i_1] sum= A[((i_0 * 2) + i_1), ((k_0 * 16) + k_1)]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tilecraft.schedule.errors import schedule_error
from tilecraft.schedule.loop import Loop
from tilecraft.schedule.schedule import Schedule
from tilecraft.schedule.stage import Stage

KEYS = ("split", "reorder", "fuse_parallel", "unroll", "vectorize", "inline", "cache_write")


def apply_config(schedule: Schedule, tensor: Any, config: Mapping[str, Any]) -> Stage:
    """Apply ``config`` (module docstring) to the stage of ``tensor`` through the schedule's
    primitives (so they are checked against the target and recorded in the trace). Returns the
    stage that holds the computation: the cache stage with ``cache_write``, else the stage."""
    stage = schedule.stage(tensor, "apply_config")
    plan = _Plan(stage, config)
    for name, flag in plan.inline.items():
        if flag:
            schedule.stage(name, "apply_config").compute_inline()
    if plan.cache_write is None:
        loops = {}
        for axis in stage.root_loops:
            loops.update(_split_axis(stage, axis, plan.factors[axis.name], 0))
        order = [loops[name] for name in plan.order]
        if len(order) > 1:
            stage.reorder(*order)
        extents = {name: plan.level_extent(name, 0) for name in plan.order}
        _finish(stage, plan, plan.order, loops, extents, plan.fuse_parallel)
        return stage
    return _with_cache_write(schedule, stage, plan)


class _Plan:
    """The validated configuration of one stage."""

    def __init__(self, stage: Stage, config: Mapping[str, Any]) -> None:
        self.stage = stage
        if not isinstance(config, Mapping):
            self.fail(None, f"the configuration must be a dict, got {type(config).__name__}")
        unknown = sorted(set(config) - set(KEYS))
        if unknown:
            self.fail(None, f"unknown key(s) {', '.join(map(repr, unknown))}; the keys are "
                      f"{', '.join(KEYS)}")
        self.extents = {loop.name: loop.extent for loop in stage.root_loops}
        self.reduce = {loop.name for loop in stage.root_loops if loop.is_reduce}
        split = config.get("split") or {}
        if not isinstance(split, Mapping):
            self.fail(None, f"split must map axis names to factor lists, got {split!r}")
        for name in split:
            if name not in self.extents:
                self.fail(name, f"{stage.name} has no axis {name!r} (its axes: "
                          f"{', '.join(self.extents)})")
        self.factors: dict[str, list[int]] = {}
        for name, extent in self.extents.items():
            factors = list(split.get(name, [extent]))
            if not factors or any(isinstance(f, bool) or not isinstance(f, int) or f < 1
                                  for f in factors):
                self.fail(name, f"split factors {factors!r} must be a non-empty list of ints "
                          ">= 1")
            product = 1
            for factor in factors:
                product *= factor
            if product < extent:
                self.fail(name, f"split factors {factors} multiply to {product}, less than the "
                          f"extent {extent}; their product must cover it")
            self.factors[name] = factors
        names = [f"{axis}.{level}" for axis, factors in self.factors.items()
                 for level in range(len(factors))]
        self.order = list(config.get("reorder") or self._default_order())
        if sorted(self.order) != sorted(names):
            missing = sorted(set(names) - set(self.order))
            extra = sorted(set(self.order) - set(names))
            self.fail(None, f"reorder must list every split loop once ({', '.join(names)}); "
                      f"missing: {', '.join(missing) or 'none'}, unknown or repeated: "
                      f"{', '.join(extra) or 'none'}")
        self.fuse_parallel = self._count(config, "fuse_parallel")
        self.unroll = self._count(config, "unroll")
        self.vectorize = config.get("vectorize", False)
        if not isinstance(self.vectorize, bool):
            self.fail(None, f"vectorize must be true or false, got {self.vectorize!r}")
        self.inline = dict(config.get("inline") or {})
        self.cache_write = config.get("cache_write")
        if self.fuse_parallel > len(self.order):
            self.fail(None, f"fuse_parallel={self.fuse_parallel} exceeds the "
                      f"{len(self.order)} loops")

    def fail(self, loop: str | None, problem: str) -> None:
        raise schedule_error("apply_config", self.stage.name, loop, problem)

    def _count(self, config: Mapping[str, Any], key: str) -> int:
        value = config.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            self.fail(None, f"{key} must be an int >= 0, got {value!r}")
        return value

    def _default_order(self) -> list[str]:
        depth = max(len(factors) for factors in self.factors.values())
        return [f"{axis}.{level}" for level in range(depth)
                for axis, factors in self.factors.items() if level < len(factors)]

    @staticmethod
    def parse(name: str) -> tuple[str, int]:
        axis, _, level = name.rpartition(".")
        return axis, int(level)

    def level_extent(self, name: str, first_level: int, region: int | None = None) -> int:
        """Extent of loop ``name`` when the axis is split from ``first_level`` on over
        ``region`` elements (default: the whole axis)."""
        axis, level = self.parse(name)
        factors = self.factors[axis]
        if level > first_level:
            return factors[level]
        inner = 1
        for factor in factors[level + 1:]:
            inner *= factor
        total = self.extents[axis] if region is None else region
        return -(-total // inner)


def _split_axis(stage: Stage, axis: Loop, factors: Sequence[int], first: int
                ) -> dict[str, Loop]:
    """Split ``axis`` into one loop per level ``first..`` named ``<axis>.<level>``; the outer
    level's factor is implied by the extent."""
    levels = list(range(first, first + len(factors)))
    if len(factors) == 1:
        return {f"{axis.name}.{levels[0]}": axis}
    loops: dict[str, Loop] = {}
    rest = axis
    for position in range(len(factors) - 1):
        inner = 1
        for factor in factors[position + 1:]:
            inner *= factor
        level = levels[position]
        last = position == len(factors) - 2
        inner_name = f"{axis.name}.{level + 1}" if last else \
            f"{axis.name}.{level + 1}_{levels[-1]}"
        outer, rest = stage.split(rest, factor=inner, names=(f"{axis.name}.{level}",
                                                             inner_name))
        loops[outer.name] = outer
    loops[rest.name] = rest
    return loops


def _finish(stage: Stage, plan: _Plan, order: list[str], loops: dict[str, Loop],
            extents: dict[str, int], fuse: int) -> None:
    """Fuse and parallelise the first ``fuse`` loops of ``order``, vectorise the innermost,
    unroll the innermost others within the unroll budget."""
    if fuse:
        head = [loops[name] for name in order[:fuse]]
        target = stage.fuse(*head) if len(head) > 1 else head[0]
        stage.parallel(target)
    rest = order[fuse:]
    if plan.vectorize and rest:
        stage.vectorize(loops[rest[-1]])
        rest = rest[:-1]
    if plan.unroll:
        total = 1
        for name in reversed(rest):
            total *= extents[name]
            if total > plan.unroll:
                break
            stage.unroll(loops[name])


def _with_cache_write(schedule: Schedule, stage: Stage, plan: _Plan) -> Stage:
    order = plan.order
    reduce_at = [n for n, name in enumerate(order) if plan.parse(name)[0] in plan.reduce]
    if reduce_at:
        attach = reduce_at[0]
    else:
        attach = next((n for n, name in enumerate(order) if plan.parse(name)[1] > 0),
                      len(order))
    outside = order[:attach]
    if plan.fuse_parallel > attach:
        plan.fail(order[attach], f"fuse_parallel={plan.fuse_parallel} reaches past the "
                  f"cache stage's attach point (the first {attach} loops)")
    first_inner: dict[str, int] = {}
    for axis in plan.factors:
        levels = sorted(plan.parse(name)[1] for name in outside if plan.parse(name)[0] == axis)
        if levels != list(range(len(levels))):
            plan.fail(f"{axis}.{len(levels)}", "with cache_write the outer levels of each axis "
                      "must come before its inner levels in the order")
        first_inner[axis] = len(levels)
    cached = schedule[schedule.cache_write(stage.tensor, plan.cache_write)]
    # the copy stage: every spatial level, the outer ones first
    loops: dict[str, Loop] = {}
    for axis in stage.axes:
        loops.update(_split_axis(stage, axis, plan.factors[axis.name], 0))
    copy_order = outside + [name for name in order[attach:] if name in loops]
    if len(copy_order) > 1:
        stage.reorder(*(loops[name] for name in copy_order))
    if plan.fuse_parallel:
        head = [loops[name] for name in copy_order[:plan.fuse_parallel]]
        fused = stage.fuse(*head) if len(head) > 1 else head[0]
        stage.parallel(fused)
        loops = {**loops, **{name: fused for name in copy_order[:plan.fuse_parallel]}}
    if attach:
        cached.compute_at(stage, loops[outside[-1]])
    if plan.vectorize and len(copy_order) > attach:
        stage.vectorize(loops[copy_order[-1]])
    # the cache stage: the inner levels of each axis over the tile, in the order
    cache_loops: dict[str, Loop] = {}
    extents: dict[str, int] = {}
    for axis in cached.root_loops:
        first = first_inner[axis.name]
        factors = plan.factors[axis.name][first:]
        if not factors:
            continue
        cache_loops.update(_split_axis(cached, axis, factors, first))
        region = 1
        for factor in factors:
            region *= factor
        region = min(region, plan.extents[axis.name])
        for level in range(first, first + len(factors)):
            name = f"{axis.name}.{level}"
            extents[name] = plan.level_extent(name, first, region)
    cache_order = order[attach:]
    if len(cache_order) > 1:
        cached.reorder(*(cache_loops[name] for name in cache_order))
    _finish(cached, plan, cache_order, cache_loops, extents, 0)
    return cached


__all__ = ["KEYS", "apply_config"]
