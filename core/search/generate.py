"""Schedule-space generation for one operator on one target (thesis §4.3.2).

From the static analysis (:mod:`tilecraft.search.analysis`) and the target spec, the space is
built in the thesis's order — split, reorder, fuse, then unroll, vectorize, inline, cache —
and pruned three ways:

1. depth limits: every spatial axis is split into ``levels.spatial`` loops and every reduce
   axis into ``levels.reduce`` (no recursive split/fuse); the split loops follow one fixed
   band template (:func:`band_template`, Ansor's "SSRSRS" for 4 and 2 levels) and only the
   order of the axes *within* the bands is searched (one order for the spatial axes, one for
   the reduce axes); axes of extent 1 are not split and stay out of every order;
2. parameters: split factors divide the extent (``divisible_only``, the thesis's choice);
3. the target: only primitives in ``spec.primitives`` whose loop kinds are in
   ``spec.loop_kinds`` appear, and ``spec.fixed_decisions`` remove their dimension.

Fixed decisions understood here (others, such as ``layout``, are listed in the space's notes):

=======================  ======================================================================
``vector_lanes: int``    vectorise (fixed true) and fix the innermost split factor of the
                         vectorised axis to that many 32-bit lanes (scaled by ``32 / bits`` of
                         the operator's element type; the extent when that is smaller)
``vectorize: bool``      fix the vectorize flag
``fuse_parallel: int``   fix how many outer loops are fused into the parallel loop
``unroll: int``          fix the unroll limit
``inline: bool``         fix the inline flag of every inlineable node
``cache_write: str``     fix the cache-write level (``"none"``: no cache write); searched
                         only where the target offers ``cache`` and ``compute_at``
``spatial_split_parts``  default split depth of spatial axes (int)
``reduce_split_parts``   default split depth of reduce axes (int)
=======================  ======================================================================

The vectorised axis is the node's contiguous axis (without reorder: its last axis); when
vectorisation is possible its innermost loop is pinned innermost, so the vector flag always
applies to it.

A point decodes (``space.decode(point)``) into the schedule configuration that
``tilecraft.schedule.apply_config`` turns into primitives::

    {"split": {"<axis name>": [f_outer, ..., f_inner]},  # every spatial and reduce axis;
                                                          # product >= extent; [1] for extent 1
     "reorder": ["<axis>.<level>", ...],                  # every split loop, outer to inner
     "fuse_parallel": int,        # outermost loops fused into the parallel loop (0 = none)
     "unroll": int,               # unroll the innermost loops up to this total extent (0 = none)
     "vectorize": bool,           # the innermost loop is vectorised
     "inline": {"<compute name>": bool},   # every other compute of the operator
     "cache_write": "<level name>" | None}

>>> from tilecraft import te
>>> from tilecraft.target.spec import load_spec
>>> spec = load_spec({
...     "name": "toy", "api_version": 1, "version": "0",
...     "memory": {"levels": [{"name": "DRAM", "size_bytes": None,
...                            "bandwidth_bytes_per_cycle": 8, "kind": "dram"}]},
...     "compute": {"cores": 2, "frequency_hz": 1e9, "vector_bits": 512},
...     "primitives": ["split", "reorder", "fuse", "parallel", "vectorize"],
...     "fixed_decisions": {"vector_lanes": 16},
...     "loop_kinds": ["serial", "parallel", "vector"], "evaluation": "estimate",
...     "capabilities": {"models_performance": True}})
>>> A = te.placeholder((64, 32), name="A")
>>> B = te.placeholder((32, 48), name="B")
>>> k = te.reduce_axis(32, name="k")
>>> C = te.compute((64, 48), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
>>> space = generate_space(C, spec, levels=(3, 2))
>>> space.sizes
{'split.i': 28, 'split.j': 2, 'split.k': 6, 'reorder.spatial': 2, 'fuse_parallel': 3}
>>> config = space.decode((0, 0, 0, 0, 2))
>>> config["split"]
{'i': [1, 1, 64], 'j': [1, 3, 16], 'k': [1, 32]}
>>> config["reorder"]
['i.0', 'j.0', 'k.0', 'i.1', 'j.1', 'k.1', 'i.2', 'j.2']
>>> config["fuse_parallel"], config["vectorize"], config["unroll"], config["cache_write"]
(2, True, 0, None)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tilecraft.dtypes import DType
from tilecraft.graph import Graph
from tilecraft.kernel_ir.nodes import LoopKind
from tilecraft.search.analysis import NodeAnalysis, OperatorAnalysis, analyze
from tilecraft.search.errors import SearchError
from tilecraft.search.space import Space
from tilecraft.search.subspaces import (
    ChoiceSpace,
    FuseSpace,
    InlineSpace,
    ReorderSpace,
    SplitSpace,
    SubSpace,
    UnrollSpace,
)
from tilecraft.target.memory import MemoryKind
from tilecraft.target.spec import SchedulePrimitive, TargetSpec
from tilecraft.te.expr import AxisKind
from tilecraft.te.tensor import Tensor

__all__ = ["CONFIG_KEYS", "DEFAULT_UNROLL_STEPS", "FIXED_DECISION_KEYS",
           "ScheduleConfigDecoder", "SplitLevels", "band_template", "generate_space"]

#: unroll limits offered when the target unrolls (thesis Table 4.1 "unroll": the length)
DEFAULT_UNROLL_STEPS = (0, 4, 16, 64)
#: the ``spec.fixed_decisions`` keys that shape the space (see the module docstring)
FIXED_DECISION_KEYS = ("vector_lanes", "vectorize", "fuse_parallel", "unroll", "inline",
                       "cache_write", "spatial_split_parts", "reduce_split_parts")

#: the keys of a decoded configuration
CONFIG_KEYS = ("split", "reorder", "fuse_parallel", "unroll", "vectorize", "inline",
               "cache_write")

Band = tuple[AxisKind, int]


@dataclass(frozen=True)
class SplitLevels:
    """How many loops each spatial and each reduce axis is split into (thesis: the depth
    limit of split; FlexTensor's CPU template uses 4 and 3)."""

    spatial: int = 4
    reduce: int = 3

    def __post_init__(self) -> None:
        for what in ("spatial", "reduce"):
            value = getattr(self, what)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise SearchError(f"SplitLevels: {what}={value!r} must be an int >= 1")

    @classmethod
    def of(cls, levels: int | Sequence[int] | SplitLevels) -> SplitLevels:
        if isinstance(levels, SplitLevels):
            return levels
        if isinstance(levels, int) and not isinstance(levels, bool):
            return cls(levels, levels)
        if isinstance(levels, Sequence) and len(levels) == 2:
            return cls(*levels)
        raise SearchError(f"levels={levels!r}: give an int (both kinds), a (spatial, reduce) "
                          "pair or a SplitLevels")


def band_template(spatial: int, reduce: int) -> tuple[Band, ...]:
    """The fixed interleaving of split levels, outer to inner: spatial level 0 first (the
    loops fused into the parallel loop), then spatial and reduce levels alternating from the
    inside out, so the innermost band is spatial (the register tile).

    >>> [f"{kind.value[0].upper()}{level}" for kind, level in band_template(4, 2)]
    ['S0', 'S1', 'R0', 'S2', 'R1', 'S3']
    >>> [f"{kind.value[0].upper()}{level}" for kind, level in band_template(2, 3)]
    ['S0', 'R0', 'R1', 'R2', 'S1']
    """
    inner: list[Band] = []
    s, r = spatial - 1, reduce - 1
    while s >= 1 or r >= 0:
        if s >= 1:
            inner.insert(0, (AxisKind.SPATIAL, s))
            s -= 1
        if r >= 0:
            inner.insert(0, (AxisKind.REDUCE, r))
            r -= 1
    return ((AxisKind.SPATIAL, 0), *inner)


@dataclass(frozen=True)
class ScheduleConfigDecoder:
    """Turns the sub-space values of a generated space into a schedule configuration (the
    format in the module docstring). Plain data, so a space pickles."""

    axes: tuple[tuple[str, AxisKind, int], ...]          # (name, kind, parts), original order
    fixed_splits: dict[str, tuple[int, ...]]            # axes whose split is not searched
    fixed_inner: dict[str, int]                          # axes whose innermost factor is fixed
    bands: tuple[Band, ...]
    reorder: bool                                        # False: loops stay nested per axis
    spatial_order: tuple[str, ...]                       # defaults when no reorder sub-space
    reduce_order: tuple[str, ...]
    trivial: tuple[str, ...]                             # axes of extent 1
    pinned: str | None                                   # loop pinned innermost
    others: tuple[str, ...]                              # computes the inline dict covers
    fixed: dict[str, Any] = field(default_factory=dict)  # fuse_parallel, unroll, ...

    def __call__(self, values: dict[str, Any]) -> dict[str, Any]:
        split: dict[str, list[int]] = {}
        for name, _, _ in self.axes:
            if name in self.fixed_splits:
                split[name] = list(self.fixed_splits[name])
            else:
                factors = list(values[f"split.{name}"])
                if name in self.fixed_inner:
                    factors.append(self.fixed_inner[name])
                split[name] = factors
        inline = {node: False for node in self.others}
        inline.update(self._get(values, "inline", {}))
        return {
            "split": split,
            "reorder": self._order(values),
            "fuse_parallel": int(self._get(values, "fuse_parallel", 0)),
            "unroll": int(self._get(values, "unroll", 0)),
            "vectorize": bool(self._get(values, "vectorize", False)),
            "inline": inline,
            "cache_write": self._get(values, "cache_write", None),
        }

    def _get(self, values: dict[str, Any], key: str, default: Any) -> Any:
        if key in values:
            return values[key]
        return self.fixed.get(key, default)

    def _order(self, values: dict[str, Any]) -> list[str]:
        parts = {name: count for name, _, count in self.axes}
        if not self.reorder:
            return [f"{name}.{level}" for name, _, count in self.axes for level in range(count)]
        spatial = values.get("reorder.spatial", self.spatial_order)
        reduce = values.get("reorder.reduce", self.reduce_order)
        order: list[str] = []
        for kind, level in self.bands:
            names = spatial if kind is AxisKind.SPATIAL else reduce
            order.extend(f"{name}.{level}" for name in names if level < parts[name])
            if (kind, level) == (AxisKind.SPATIAL, 0):
                order.extend(f"{name}.0" for name in self.trivial)
        if self.pinned is not None:
            order.remove(self.pinned)
            order.append(self.pinned)
        return order


def _fixed_int(spec: TargetSpec, key: str, minimum: int) -> int | None:
    value = spec.fixed_decisions.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise SearchError(f"target {spec.name}: fixed_decisions.{key} = {value!r} must be an "
                          f"int >= {minimum}; fix the target spec")
    return value


def _fixed_bool(spec: TargetSpec, key: str) -> bool | None:
    value = spec.fixed_decisions.get(key)
    if value is not None and not isinstance(value, bool):
        raise SearchError(f"target {spec.name}: fixed_decisions.{key} = {value!r} must be true "
                          "or false; fix the target spec")
    return value


class _Builder:
    """Collects sub-spaces (dropping those with one choice) and fixed values."""

    def __init__(self) -> None:
        self.subspaces: list[tuple[str, SubSpace]] = []
        self.fixed: dict[str, Any] = {}
        self.notes: list[str] = []

    def add(self, name: str, subspace: SubSpace) -> None:
        if subspace.size > 1:
            self.subspaces.append((name, subspace))
        else:
            self.fixed[name] = subspace.value(0)


def generate_space(program: OperatorAnalysis | Graph | Tensor, spec: TargetSpec,
                   levels: int | Sequence[int] | SplitLevels | None = None, *,
                   node: str | None = None, divisible_only: bool = True,
                   max_inner: int | None = None,
                   unroll_steps: Sequence[int] = DEFAULT_UNROLL_STEPS) -> Space:
    """The pruned, re-organised schedule space of ``program``'s anchor node (or ``node``) on
    the target ``spec``; see the module docstring for the order, the pruning and the decoded
    configuration."""
    if not isinstance(spec, TargetSpec):
        raise SearchError(f"generate_space() needs a TargetSpec, got {type(spec).__name__}; "
                          "pass target.spec")
    analysis = analyze(program)
    target = analysis.node(node)
    names = target.order
    if len(set(names)) != len(names):
        raise SearchError(f"compute {target.name}: axis names {list(names)} repeat; give every "
                          "spatial and reduce axis its own name so a schedule can refer to it")
    offers, expresses = spec.offers, spec.expresses
    build = _Builder()
    known = set(FIXED_DECISION_KEYS)
    build.notes.extend(f"fixed decision {key}={value!r} does not shape the schedule space"
                       for key, value in spec.fixed_decisions.items() if key not in known)

    if levels is None:
        levels = SplitLevels(_fixed_int(spec, "spatial_split_parts", 1) or SplitLevels.spatial,
                             _fixed_int(spec, "reduce_split_parts", 1) or SplitLevels.reduce)
    levels = SplitLevels.of(levels)
    if not (offers(SchedulePrimitive.SPLIT) or offers(SchedulePrimitive.TILE)):
        levels = SplitLevels(1, 1)
        build.notes.append(f"target {spec.name} offers no split: every axis stays one loop")

    # vectorisation decides the pinned loop and the fixed innermost factor, so it comes first;
    # the vectorised axis is the contiguous one, or without reorder the last (innermost) axis
    reorder = offers(SchedulePrimitive.REORDER)
    vector_axis = target.contiguous_axis if reorder else target.loops[-1].name \
        if target.loops and target.loops[-1].extent > 1 else None
    can_vectorize = (offers(SchedulePrimitive.VECTORIZE) and expresses(LoopKind.VECTOR)
                     and vector_axis is not None)
    fixed_lanes = _fixed_int(spec, "vector_lanes", 1)
    fixed_vectorize = _fixed_bool(spec, "vectorize")
    if not can_vectorize:
        vectorize: bool | None = False
        if fixed_vectorize:
            build.notes.append(f"fixed decision vectorize=True ignored: {target.name} has no "
                               "loop the target can vectorise")
    elif fixed_vectorize is not None:
        vectorize = fixed_vectorize
    elif fixed_lanes is not None:
        vectorize = True
    else:
        vectorize = None  # searched
    if vectorize is False:
        vector_axis = None

    # 1. split -------------------------------------------------------------------------------
    parts_of: dict[str, int] = {}
    fixed_splits: dict[str, tuple[int, ...]] = {}
    fixed_inner: dict[str, int] = {}
    for loop in target.loops:
        parts = 1 if loop.extent == 1 else (levels.reduce if loop.is_reduce else levels.spatial)
        parts_of[loop.name] = parts
        key = f"split.{loop.name}"
        if parts == 1:
            fixed_splits[loop.name] = (loop.extent,)
            continue
        if loop.name == vector_axis and fixed_lanes is not None:
            inner = min(loop.extent, max(1, fixed_lanes * 4 // DType(target.dtype).bytes))
            fixed_inner[loop.name] = inner
            build.fixed[f"vector_lanes({loop.name})"] = inner
            outer = SplitSpace(-(-loop.extent // inner), parts - 1, divisible_only)
            if outer.size == 1:
                fixed_splits[loop.name] = (*outer.value(0), inner)
            build.add(key, outer)
            continue
        subspace = SplitSpace(loop.extent, parts, divisible_only, max_inner)
        if subspace.size == 1:
            fixed_splits[loop.name] = subspace.value(0)
        build.add(key, subspace)

    # 2. reorder ------------------------------------------------------------------------------
    spatial = tuple(loop.name for loop in target.spatial if loop.extent > 1)
    reduce = tuple(loop.name for loop in target.reduce if loop.extent > 1)
    trivial = tuple(loop.name for loop in target.loops if loop.extent == 1)
    pinned = None
    if reorder:
        if vector_axis is not None:
            pinned = f"{vector_axis}.{parts_of[vector_axis] - 1}"
        build.add("reorder.spatial", ReorderSpace(spatial))
        build.add("reorder.reduce", ReorderSpace(reduce))
    else:
        build.notes.append(f"target {spec.name} offers no reorder: split loops stay nested "
                           "per axis")
    decoder_order = _loop_order(target, parts_of, reorder, spatial, reduce, trivial, pinned,
                                levels)

    # 3. fuse (into the parallel loop) -------------------------------------------------------
    leading = _fusable_loops(decoder_order, spatial, trivial, reorder, vectorize is not False)
    if not (offers(SchedulePrimitive.PARALLEL) and expresses(LoopKind.PARALLEL)):
        build.fixed["fuse_parallel"] = 0
    else:
        most = leading if offers(SchedulePrimitive.FUSE) else min(1, leading)
        fixed_fuse = _fixed_int(spec, "fuse_parallel", 0)
        if fixed_fuse is not None:
            build.fixed["fuse_parallel"] = min(fixed_fuse, most)
        else:
            build.add("fuse_parallel", FuseSpace(most))

    # 4. unroll -------------------------------------------------------------------------------
    fixed_unroll = _fixed_int(spec, "unroll", 0)
    if not (offers(SchedulePrimitive.UNROLL) and expresses(LoopKind.UNROLLED)):
        build.fixed["unroll"] = 0
    elif fixed_unroll is not None:
        build.fixed["unroll"] = fixed_unroll
    else:
        steps = [s for s in unroll_steps if s <= target.iterations] or [0]
        build.add("unroll", UnrollSpace(steps))

    # 5. vectorize ----------------------------------------------------------------------------
    if vectorize is None:
        build.add("vectorize", ChoiceSpace((False, True)))
    else:
        build.fixed["vectorize"] = vectorize

    # 6. inline -------------------------------------------------------------------------------
    others = tuple(n.name for n in analysis.nodes if n.name != target.name)
    inlineable = tuple(name for name in analysis.inlineable if name != target.name)
    fixed_inline = _fixed_bool(spec, "inline")
    if not offers(SchedulePrimitive.INLINE) or not inlineable:
        build.fixed["inline"] = {}
    elif fixed_inline is not None:
        build.fixed["inline"] = {name: fixed_inline for name in inlineable}
    else:
        build.add("inline", InlineSpace(inlineable))

    # 7. cache write --------------------------------------------------------------------------
    _add_cache_write(spec, target, build)

    decoder = ScheduleConfigDecoder(
        axes=tuple((loop.name, loop.kind, parts_of[loop.name]) for loop in target.loops),
        fixed_splits=fixed_splits, fixed_inner=fixed_inner,
        bands=band_template(levels.spatial, levels.reduce), reorder=reorder,
        spatial_order=spatial, reduce_order=reduce, trivial=trivial, pinned=pinned,
        others=others, fixed={k: v for k, v in build.fixed.items() if k in CONFIG_KEYS})
    return Space(build.subspaces, decoder=decoder, name=f"{target.name}@{spec.name}",
                 fixed=build.fixed, notes=tuple(build.notes))


def _loop_order(target: NodeAnalysis, parts_of: dict[str, int], reorder: bool,
                spatial: tuple[str, ...], reduce: tuple[str, ...], trivial: tuple[str, ...],
                pinned: str | None, levels: SplitLevels) -> list[str]:
    """The loop order of the space's default point (only its outer loops matter here)."""
    decoder = ScheduleConfigDecoder(
        axes=tuple((loop.name, loop.kind, parts_of[loop.name]) for loop in target.loops),
        fixed_splits={}, fixed_inner={}, bands=band_template(levels.spatial, levels.reduce),
        reorder=reorder, spatial_order=spatial, reduce_order=reduce, trivial=trivial,
        pinned=pinned, others=())
    return decoder._order({})


def _fusable_loops(order: list[str], spatial: tuple[str, ...], trivial: tuple[str, ...],
                   reorder: bool, may_vectorize: bool) -> int:
    """How many outermost loops may be fused into the parallel loop: the spatial level-0 band
    (with reorder) or the spatial loops before the first reduce loop (without), never the
    innermost loop when it may be vectorised."""
    allowed = {f"{name}.0" for name in spatial} if reorder else \
        {loop for loop in order if loop.rsplit(".", 1)[0] in spatial + trivial}
    count = 0
    for loop in order:
        if loop not in allowed:
            break
        count += 1
    if may_vectorize and order and count == len(order):
        count -= 1
    return count


def _add_cache_write(spec: TargetSpec, target: NodeAnalysis, build: _Builder) -> None:
    """The cache-write decision: searched over the levels the compiler allocates buffers in
    (scratchpads and registers, never DRAM or hardware caches) for nodes with a reduction,
    when the target offers ``cache`` and ``compute_at`` (the cache stage is computed inside the
    consumer's loop nest); fixed otherwise."""
    fixed = spec.fixed_decisions.get("cache_write")
    if fixed is not None:
        if fixed != "none" and (not isinstance(fixed, str) or fixed not in spec.memory.names):
            raise SearchError(f"target {spec.name}: fixed_decisions.cache_write = {fixed!r} is "
                              f"not a memory level ({', '.join(spec.memory.names)}) or 'none'; "
                              "fix the target spec")
        build.fixed["cache_write"] = None if fixed == "none" else fixed
        return
    levels = [level.name for level in spec.memory.levels[1:]
              if level.kind in (MemoryKind.SCRATCHPAD, MemoryKind.REGISTERS)]
    if spec.offers(SchedulePrimitive.CACHE) and spec.offers(SchedulePrimitive.COMPUTE_AT) \
            and target.reduce and levels:
        build.add("cache_write", ChoiceSpace((None, *levels)))
    else:
        build.fixed["cache_write"] = None
