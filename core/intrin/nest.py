"""The loop nest a mapping leaves around an intrinsic, the levels of AMOS's performance model
for one intrinsic on one target, and the schedules that split the nest over those levels
(thesis §5.6; the model itself is :mod:`tilecraft.intrin.perfmodel`).

A mapping leaves one loop per intrinsic loop over its tiles (``ceil(fused extent / intrinsic
extent)``, padding included) and the software loops no intrinsic loop takes, fused into
``outer_spatial`` and ``outer_reduce``. The model's level 0 is the intrinsic with its operands
in registers; the levels above are the memories the operands pass through on their way from
the outermost level, read from the intrinsic's memory abstraction (cache levels between two
memories of a path are on it too: hardware fills them).

>>> from tilecraft import te, ops
>>> from tilecraft.intrin import match
>>> from tilecraft.intrin.examples import wmma
>>> from tilecraft.intrin.perfmodel import gpu_spec_example
>>> x = te.placeholder((1, 8, 14, 14), "float16", name="x")
>>> w = te.placeholder((32, 8, 3, 3), "float16", name="w")
>>> y = ops.conv2d(x, w, out_dtype="float32", name="y")
>>> mma = wmma(16, 16, 16)
>>> mapping = match(y, mma).mappings[0]
>>> print(mapping)
wmma_16x16x16: i1 <- (n), i2 <- (k), r1 <- (rc) [Src1=x, Src2=w, Dst=y]
>>> nest = mapped_nest(y, mma, mapping)
>>> [(d.name, d.extent, d.software) for d in nest.dims][3:]
[('outer_spatial', 144, ('h', 'w')), ('outer_reduce', 9, ('rh', 'rw'))]
>>> round(nest.utilisation, 4)
0.0312
>>> hierarchy = model_hierarchy(gpu_spec_example(), mma)
>>> hierarchy.paths[2]
('Dst', ('fragment', None, 'global'))
>>> ScheduleParams.of({"i1": [1, 2]}).apply(nest, hierarchy.depth).of("outer_spatial")
(1, 1, 144)
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tilecraft.dtypes import DType
from tilecraft.errors import InputError, TargetError
from tilecraft.intrin.access import ProductSum, analyse_compute
from tilecraft.intrin.generation import PhysicalMapping
from tilecraft.intrin.mapping import IntrinsicMapping
from tilecraft.target.intrinsic import IntrinsicDecl, OperandRole
from tilecraft.target.memory import MemoryKind
from tilecraft.target.spec import TargetSpec
from tilecraft.te.expr import AxisKind
from tilecraft.te.tensor import Tensor

#: names of the two nest loops that carry the software loops no intrinsic loop takes
OUTER_SPATIAL, OUTER_REDUCE = "outer_spatial", "outer_reduce"


# --- the loop nest a mapping leaves ------------------------------------------------------------
@dataclass(frozen=True)
class NestDim:
    """One loop of the nest around the intrinsic: ``extent`` trips, the intrinsic operands
    whose tile changes when it advances, and the software loops it stands for."""

    name: str
    extent: int
    kind: AxisKind
    operands: frozenset[str]
    software: tuple[str, ...]

    @property
    def spatial(self) -> bool:
        return self.kind is AxisKind.SPATIAL


@dataclass(frozen=True)
class MappedNest:
    """A compute mapped onto an intrinsic, as the model sees it (no layouts needed: a
    broadcast operand indexed ``[0]`` is modelled like any other)."""

    compute: str
    intrinsic: IntrinsicDecl
    mapping: IntrinsicMapping
    dims: tuple[NestDim, ...]
    tile_bytes: tuple[tuple[str, int], ...]
    useful_iterations: int

    def dim(self, name: str) -> NestDim:
        if name in self._dims:
            return self._dims[name]
        raise InputError(f"the nest of {self.compute} on {self.intrinsic.name} has no loop "
                         f"{name!r}; its loops are {', '.join(d.name for d in self.dims)}")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(dim.name for dim in self.dims)

    def operand_tile_bytes(self, operand: str) -> int:
        return self._tile_bytes[operand]

    @functools.cached_property
    def _tile_bytes(self) -> dict[str, int]:
        return dict(self.tile_bytes)

    @functools.cached_property
    def _dims(self) -> dict[str, NestDim]:
        return {dim.name: dim for dim in self.dims}

    @property
    def intrinsic_calls(self) -> int:
        return math.prod(dim.extent for dim in self.dims)

    @property
    def executed_iterations(self) -> int:
        return self.intrinsic_calls * self.intrinsic.compute.iterations

    @property
    def utilisation(self) -> float:
        """Useful multiply-adds over executed ones (1 without padding)."""
        return self.useful_iterations / self.executed_iterations


def mapped_nest(compute: Tensor, intrinsic: IntrinsicDecl, mapping: IntrinsicMapping,
                product: ProductSum | None = None) -> MappedNest:
    """The nest ``mapping`` of ``compute`` onto ``intrinsic`` leaves (not verified here);
    ``product`` is ``analyse_compute(compute)`` when the caller has it already."""
    product = analyse_compute(compute) if product is None else product
    _, loop_names, matrix = intrinsic.compute.access_matrix()
    operand_names = [op.name for op in intrinsic.compute.operands]
    dims = []
    for position, loop in enumerate(intrinsic.compute.loops):
        software = mapping.software_loops(loop.name)
        fused = math.prod(s.extent for s in software)
        users = frozenset(name for name, used in zip(operand_names, matrix[:, position]) if used)
        dims.append(NestDim(loop.name, -(-fused // loop.extent), loop.kind, users,
                            tuple(s.name for s in software)))
    outer = [loop for loop in product.loops if loop not in mapping.mapped]
    for name, kind in ((OUTER_SPATIAL, AxisKind.SPATIAL), (OUTER_REDUCE, AxisKind.REDUCE)):
        loops = [loop for loop in outer if loop.kind is kind]
        users = set()
        for binding in mapping.operands:
            if binding.factor is None:
                loops_of = set(product.axes)
            else:
                loops_of = product.factors[binding.factor].loops
            if any(loop in loops_of for loop in loops):
                users.add(binding.operand)
        dims.append(NestDim(name, math.prod(loop.extent for loop in loops), kind,
                            frozenset(users), tuple(loop.name for loop in loops)))
    tile_bytes = tuple((op.name, math.prod(op.shape) * op.dtype.bytes)
                       for op in intrinsic.compute.operands)
    useful = math.prod(loop.extent for loop in product.loops)
    return MappedNest(compute.name, intrinsic, mapping, tuple(dims), tile_bytes, useful)


def nest_of(physical: PhysicalMapping) -> MappedNest:
    """The nest of a generated (physical) mapping."""
    virtual = physical.virtual
    return mapped_nest(virtual.product.compute, virtual.intrinsic, virtual.mapping)


# --- the levels of the model -------------------------------------------------------------------
@dataclass(frozen=True)
class ModelLevel:
    """Level ``index`` of Eq. 5.7 (0: the intrinsic and its registers): the memories where
    operands reside at this level, and ``units``, how many units of the level below one
    instance of it feeds (its loops' spatial trips run on them in parallel)."""

    index: int
    memories: tuple[str, ...]
    units: int


@dataclass(frozen=True)
class ModelHierarchy:
    """The model's levels for one intrinsic on one target, each operand's memory per level
    (``None`` where its path skips the level), and the figures the model needs."""

    target: str
    intrinsic: str
    levels: tuple[ModelLevel, ...]
    paths: tuple[tuple[str, tuple[str | None, ...]], ...]
    capacity_bytes: tuple[tuple[str, int | None], ...]
    bandwidth: tuple[tuple[str, float], ...]
    latency_cycles: float
    issue_cycles: float
    frequency_hz: float
    destination: str
    fills_destination: bool

    @property
    def depth(self) -> int:
        return len(self.levels)

    @functools.cached_property
    def _paths(self) -> dict[str, tuple[str | None, ...]]:
        return dict(self.paths)

    @functools.cached_property
    def _figures(self) -> tuple[dict[str, int | None], dict[str, float]]:
        return dict(self.capacity_bytes), dict(self.bandwidth)

    def memory(self, operand: str, level: int) -> str | None:
        return self._paths[operand][level]

    def residence(self, operand: str, level: int) -> tuple[str | None, bool]:
        """Where ``operand``'s level-``level`` tile lives, and whether it is *held*: a level
        the operand's path skips keeps its tile in the memory of the level below, spread over
        that level's units (GPU accumulators stay in the warps' registers while a thread
        block iterates over shared-memory tiles)."""
        path = self._paths[operand]
        if path[level] is not None:
            return path[level], False
        inner = next((path[k] for k in range(level - 1, -1, -1) if path[k] is not None), None)
        return inner, inner is not None

    def capacity(self, memory: str) -> int | None:
        return self._figures[0][memory]

    def bandwidth_of(self, memory: str) -> float:
        return self._figures[1][memory]


def _inbound_chain(moves: Sequence[tuple[str, str]], start: str) -> list[str]:
    """Levels from ``start`` outward, following moves backwards (``to -> from``)."""
    chain, current = [start], start
    while True:
        sources = [a for a, b in moves if b == current and a not in chain]
        if not sources:
            return chain
        current = sources[0]
        chain.append(current)


def _operand_path(spec: TargetSpec, intrinsic: IntrinsicDecl, operand: str) -> list[str]:
    """The memories ``operand`` passes through, inner (where the intrinsic reads or writes
    it) to outer (the outermost level, where kernel parameters live)."""
    memory = spec.memory
    moves = [(m.from_level, m.to_level) for m in intrinsic.memory.moves_of(operand)]
    for level in dict.fromkeys(name for move in moves for name in move):
        if level not in memory:
            raise TargetError(f"intrinsic {intrinsic.name} moves {operand} through {level!r}, "
                              f"which is not a memory level of target {spec.name} "
                              f"({', '.join(memory.names)}); model it on its own target")
    outermost = memory.outermost.name
    role = intrinsic.compute.operand(operand).role
    if role is OperandRole.SRC:
        froms = {a for a, _ in moves}
        inner = next(b for _, b in moves if b not in froms)
        path = _inbound_chain(moves, inner)
    else:
        fills = [fill.level for fill in intrinsic.memory.fills_of(operand)]
        stores = _inbound_chain(moves, outermost) \
            if any(b == outermost for _, b in moves) else []
        if fills and fills[0] in stores:
            stores = stores[:stores.index(fills[0]) + 1]
        if len(stores) > 1:
            path = stores[::-1]
        else:
            path = [fills[0] if fills else moves[0][1]]
    if path[-1] != outermost:
        path.append(outermost)
    full = [path[0]]
    for inner_level, outer_level in zip(path, path[1:]):
        low, high = memory.index(outer_level), memory.index(inner_level)
        full += [lv.name for lv in memory.levels[low + 1:high]
                 if lv.kind is MemoryKind.CACHE and lv.name not in full][::-1]
        full.append(outer_level)
    return full


def vector_unit_dtype(spec: TargetSpec, intrinsic: IntrinsicDecl) -> DType | None:
    """The dtype whose vector peak bounds ``intrinsic`` on ``spec``: its narrowest source's,
    when one call does no more multiply-adds than a vector of that dtype has lanes (an
    instruction of the vector unit: AVX-512's FMA, VNNI and BF16 dot products); ``None`` for
    an intrinsic wider than the vector unit (a Tensor Core's or a Cube's matrix product), which
    runs on a unit of its own."""
    narrowest = min((op.dtype for op in intrinsic.compute.sources), key=lambda d: d.bits)
    multiply_adds = math.prod(loop.extent for loop in intrinsic.compute.loops)
    lanes = spec.compute.lanes(narrowest) * spec.compute.processing_elements
    return narrowest if multiply_adds <= lanes else None


def issue_cycles(spec: TargetSpec, intrinsic: IntrinsicDecl, units_per_core: int = 1) -> float:
    """Cycles between two calls of ``intrinsic`` on one unit: ``units_per_core`` over its
    declared throughput — and, where the target measured its arithmetic peak
    (``compute.peak_flops_per_core``) and the intrinsic is a vector-unit instruction
    (:func:`vector_unit_dtype`), no fewer than that measured peak allows for the dtype (a core
    that executes 512-bit vectors as two halves issues half the declared rate)."""
    declared = units_per_core / intrinsic.throughput_per_cycle
    dtype = vector_unit_dtype(spec, intrinsic)
    if not spec.compute.peak_flops_per_core or dtype is None:
        return declared
    operations = 2 * math.prod(loop.extent for loop in intrinsic.compute.loops)
    per_cycle = spec.compute.flops_per_core(dtype) / spec.compute.frequency_hz
    return max(declared, units_per_core * operations / per_cycle)


def model_hierarchy(spec: TargetSpec, intrinsic: IntrinsicDecl) -> ModelHierarchy:
    """The model's levels for ``intrinsic`` on ``spec``: each memory an operand passes through
    gets the level of its longest distance from where the intrinsic uses the operands (so
    ``L0A``, ``L0B`` and ``L0C`` of an Ascend core are all level 0, ``L1`` and ``UB`` level
    1); cache levels between two memories of a path are on it too (hardware fills them)."""
    operands = [op.name for op in intrinsic.compute.operands]
    paths = {op: _operand_path(spec, intrinsic, op) for op in operands}
    level: dict[str, int] = {path[0]: 0 for path in paths.values()}
    for _ in range(len(spec.memory.levels) + 1):
        changed = False
        for path in paths.values():
            for inner, outer in zip(path, path[1:]):
                if level.get(outer, -1) < level.get(inner, 0) + 1:
                    level[outer] = level.get(inner, 0) + 1
                    changed = True
        if not changed:
            break
    else:
        raise TargetError(f"intrinsic {intrinsic.name} on target {spec.name}: its operands' "
                          "moves go both ways between two memories, so they do not form a "
                          "hierarchy; declare moves from outer to inner levels (and stores back)")
    depth = max(level.values()) + 1
    memories = [tuple(sorted((m for m, lv in level.items() if lv == index),
                             key=spec.memory.index)) for index in range(depth)]
    instances = [max(spec.memory.instances(m) for m in names) for names in memories]
    levels = tuple(ModelLevel(index, memories[index],
                              1 if index == 0 else max(1, instances[index - 1] // instances[index]))
                   for index in range(depth))
    operand_levels = []
    for op, path in paths.items():
        per_level: list[str | None] = [None] * depth
        for memory in path:
            per_level[level[memory]] = memory
        operand_levels.append((op, tuple(per_level)))
    used = sorted(level, key=spec.memory.index)
    units_per_core = max(1, round(instances[0] / spec.compute.cores))
    destination = intrinsic.compute.destination.name
    return ModelHierarchy(
        spec.name, intrinsic.name, levels, tuple(operand_levels),
        tuple((m, spec.memory.level(m).size_bytes) for m in used),
        tuple((m, spec.memory.level(m).bandwidth_bytes_per_cycle) for m in used),
        float(intrinsic.latency_cycles), issue_cycles(spec, intrinsic, units_per_core),
        spec.compute.frequency_hz, destination,
        bool(intrinsic.memory.fills_of(destination)) or not intrinsic.compute.accumulates)


# --- schedules -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class TileSchedule:
    """How the nest is split over the levels: per loop, its trips at each level (level 0
    first; their product covers the loop's extent, rounding up), and one loop order (outer to
    inner) used at every level (at a parallel level the spatial loops go outermost, bound to
    the units)."""

    factors: tuple[tuple[str, tuple[int, ...]], ...]
    order: tuple[str, ...]

    def of(self, name: str) -> tuple[int, ...]:
        return self._factors[name]

    @functools.cached_property
    def _factors(self) -> dict[str, tuple[int, ...]]:
        return dict(self.factors)

    def __str__(self) -> str:
        tiles = ", ".join(f"{name} {'x'.join(map(str, trips))}" for name, trips in self.factors
                          if math.prod(trips) > 1)
        return f"{tiles or 'one call'}; order {' '.join(self.order)}"


@dataclass(frozen=True)
class ScheduleParams:
    """A schedule independent of any one mapping: per nest loop the trips wanted at each
    level below the top (level 0 first), and the loop order (loops it leaves out go
    outermost). :meth:`apply` clamps every factor to what is left of the loop and gives the
    top level the rest (rounded up)."""

    tiles: tuple[tuple[str, tuple[int, ...]], ...] = ()
    order: tuple[str, ...] | None = None

    @classmethod
    def of(cls, tiles: Mapping[str, Sequence[int]] | None = None,
           order: Sequence[str] | None = None) -> ScheduleParams:
        return cls(tuple((name, tuple(values)) for name, values in (tiles or {}).items()),
                   None if order is None else tuple(order))

    def apply(self, nest: MappedNest, depth: int) -> TileSchedule:
        wanted = dict(self.tiles)
        unknown = sorted(set(wanted) - set(nest.names))
        if unknown:
            raise InputError(f"schedule parameters name loop {unknown[0]!r}, which the nest of "
                             f"{nest.compute} on {nest.intrinsic.name} does not have; its loops "
                             f"are {', '.join(nest.names)}")
        factors = []
        for dim in nest.dims:
            left, trips = dim.extent, []
            for level in range(depth - 1):
                values = wanted.get(dim.name, ())
                want = values[level] if level < len(values) else 1
                if isinstance(want, bool) or not isinstance(want, int) or want < 1:
                    raise InputError(f"schedule parameter {dim.name}[{level}] = {want!r}; give "
                                     "an int >= 1 trips per level")
                factor = min(want, left)
                trips.append(factor)
                left = -(-left // factor)
            factors.append((dim.name, (*trips, left)))
        order = default_order(nest) if self.order is None else self.order
        unknown = sorted(set(order) - set(nest.names))
        if unknown or len(set(order)) != len(order):
            raise InputError(f"schedule order {list(order)} names {unknown or 'a loop twice'}; "
                             f"name loops of the nest ({', '.join(nest.names)}) once each")
        rest = [name for name in default_order(nest) if name not in order]
        return TileSchedule(tuple(factors), (*rest, *order))


def default_order(nest: MappedNest) -> tuple[str, ...]:
    """Spatial loops outside, reduce loops inside (the destination stays where it is while it
    accumulates): outer spatial, intrinsic spatial, outer reduce, intrinsic reduce."""
    spatial = [d.name for d in nest.dims if d.spatial]
    reduce = [d.name for d in nest.dims if not d.spatial]
    return (*spatial[-1:], *spatial[:-1], *reduce[-1:], *reduce[:-1])


def check_schedule(nest: MappedNest, hierarchy: ModelHierarchy, schedule: TileSchedule) -> None:
    """An :class:`InputError` naming the loop when ``schedule`` does not fit ``nest``."""
    named = dict(schedule.factors)
    for dim in nest.dims:
        trips = named.get(dim.name)
        if trips is None:
            raise InputError(f"the schedule gives no trips for loop {dim.name} of {nest.compute} "
                             f"on {nest.intrinsic.name}; give one per level")
        if len(trips) != hierarchy.depth or any(
                isinstance(t, bool) or not isinstance(t, int) or t < 1 for t in trips):
            raise InputError(f"loop {dim.name}: trips {list(trips)} must be {hierarchy.depth} "
                             f"ints >= 1, one per level of {hierarchy.intrinsic} on "
                             f"{hierarchy.target}")
        if math.prod(trips) < dim.extent:
            raise InputError(f"loop {dim.name}: trips {list(trips)} cover "
                             f"{math.prod(trips)} of its {dim.extent} iterations; make their "
                             "product at least the extent")
    extra = sorted(set(named) - set(nest.names))
    if extra or sorted(schedule.order) != sorted(nest.names):
        raise InputError(f"the schedule's loops {sorted(named)} and order "
                         f"{list(schedule.order)} must both name exactly the nest's loops "
                         f"{list(nest.names)}")
