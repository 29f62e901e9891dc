"""AMOS's hierarchical performance model (thesis §5.6, Eq. 5.6-5.8, Table 5.2), and the
ranking of mappings by it.

The nest a mapping leaves around the intrinsic, the model's levels and the schedules that
split the nest over them are :mod:`tilecraft.intrin.nest`. The model is Eq. 5.6-5.8::

    Perf = L[L-1]
    L[l] = prod(S[l]) * max(L[l-1], R[l-1], W[l-1])      l > 0
    L[0] = prod(S[0]) * latency_of_intrinsic
    R[l] = DataIn[l] / in_bw[l]     W[l] = DataOut[l] / out_bw[l]

``S[l]`` are the loops of level ``l`` that are not parallel: at a level whose memory feeds
several units (SMs, cores, sub-partitions: the spec's fan-out) the spatial loops are bound to
the units, so ``prod(S[l])`` is the reduce trips times the rounds of spatial trips. ``DataIn``
/ ``DataOut`` are the bytes moved into / out of the level ``l-1`` memories during one
iteration (the level's total divided by ``prod(S[l])``, so ``L[l]`` is the larger of compute
and traffic: a roofline per level). A tile is reloaded only when a loop that indexes its
operand advances (reuse by loop order); partial sums of the destination are stored, and
reloaded, when a reduce loop lies outside the destination's loops. Reads and writes of one
level overlap (the ``max``); links out of different memories run in parallel, links out of
one memory share its bandwidth (``bandwidth_bytes_per_cycle`` of the outer memory, per
instance, shared by the units it feeds). Every memory must hold its level's tiles, or the
schedule is infeasible (``problems``).

Three readings are ours, because the thesis does not spell them out: ``latency_of_intrinsic``
is the time one call occupies its unit, ``max(issue interval, latency / independent
accumulators of the register tile)`` — with one accumulator it is the latency, with enough it
is the issue interval (``units per core / throughput_per_cycle``); where the target measured
its arithmetic peak, a vector-unit intrinsic issues no faster than that peak allows
(:func:`~tilecraft.intrin.nest.issue_cycles`: declared rates are the ISA's, a core may run
wide vectors as two halves); and ``W`` uses the bandwidth of the link it writes through
(Eq. 5.8 repeats ``in_bw``).

>>> from tilecraft import te, ops
>>> from tilecraft.intrin import match
>>> from tilecraft.intrin.examples import wmma
>>> spec = gpu_spec_example()
>>> A = te.placeholder((256, 256), "float16", name="A")
>>> B = te.placeholder((256, 256), "float16", name="B")
>>> C = ops.matmul(A, B, out_dtype="float32", name="C")
>>> mma = wmma(16, 16, 16)
>>> nest = mapped_nest(C, mma, match(C, mma).mappings[0])
>>> [(d.name, d.extent) for d in nest.dims]
[('i1', 16), ('i2', 16), ('r1', 16), ('outer_spatial', 1), ('outer_reduce', 1)]
>>> hierarchy = model_hierarchy(spec, mma)
>>> [level.memories for level in hierarchy.levels], [level.units for level in hierarchy.levels]
([('fragment',), ('shared',), ('global',)], [1, 4, 8])
>>> cost = estimate(nest, hierarchy)
>>> cost.feasible, cost.levels[-1].cycles == cost.cycles
(True, True)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from tilecraft.errors import InputError
from tilecraft.intrin.access import ProductSum, analyse_compute
from tilecraft.intrin.generation import PhysicalMapping
from tilecraft.intrin.mapping import IntrinsicMapping
from tilecraft.intrin.nest import (
    OUTER_REDUCE,
    OUTER_SPATIAL,
    MappedNest,
    ModelHierarchy,
    ModelLevel,
    NestDim,
    ScheduleParams,
    TileSchedule,
    check_schedule,
    default_order,
    mapped_nest,
    model_hierarchy,
    nest_of,
)
from tilecraft.intrin.verify import VerificationResult
from tilecraft.target.intrinsic import IntrinsicDecl
from tilecraft.target.spec import TargetSpec, load_spec
from tilecraft.te.tensor import Tensor

__all__ = ["OUTER_REDUCE", "OUTER_SPATIAL", "CostBreakdown", "LevelCost", "MappedNest",
           "ModelHierarchy", "ModelLevel", "NestDim", "RankedMapping", "ScheduleParams",
           "TileSchedule", "check_schedule", "default_order", "default_schedule", "estimate",
           "footprint", "gpu_spec_example", "mapped_nest", "model_hierarchy", "nest_of",
           "algorithm4_check", "rank_mappings"]


# --- the model -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class LevelCost:
    """One level of Eq. 5.7. ``below`` is ``L[l-1]`` (at level 0: one call's time),
    ``read_cycles`` / ``write_cycles`` the whole level's traffic into / out of the memories
    of level ``l-1`` (so ``R[l-1] = read_cycles / serial_iterations``), ``usage`` the bytes
    each memory of this level holds."""

    level: int
    memories: tuple[str, ...]
    serial_iterations: int
    units: int
    active_units: int
    below: float
    read_bytes: tuple[tuple[str, float], ...]
    write_bytes: tuple[tuple[str, float], ...]
    read_cycles: float
    write_cycles: float
    cycles: float
    usage: tuple[tuple[str, int], ...]

    @property
    def read(self) -> float:
        """``R[l-1]`` of Eq. 5.8: read time per serial iteration."""
        return self.read_cycles / self.serial_iterations

    @property
    def write(self) -> float:
        return self.write_cycles / self.serial_iterations

    @property
    def bound(self) -> str:
        terms = {"compute": self.below, "read": self.read, "write": self.write}
        return max(terms, key=terms.__getitem__)


@dataclass(frozen=True)
class CostBreakdown:
    """The model's prediction for one mapped nest and schedule: the levels (0 first), the
    total in cycles and seconds, and ``problems`` (empty when every memory holds its tiles)."""

    nest: MappedNest
    schedule: TileSchedule
    levels: tuple[LevelCost, ...]
    cycles: float
    seconds: float
    problems: tuple[str, ...]

    @property
    def feasible(self) -> bool:
        return not self.problems

    @property
    def bound(self) -> str:
        """What bounds the prediction: the outermost level whose traffic outweighs the time of
        the level below (``"read (DRAM -> L3)"``), else ``"compute"``."""
        for level in reversed(self.levels[1:]):
            if level.bound != "compute":
                outer = "/".join(level.memories)
                inner = "/".join(self.levels[level.level - 1].memories)
                link = f"{outer} -> {inner}" if level.bound == "read" else f"{inner} -> {outer}"
                return f"{level.bound} ({link})"
        return "compute"

    def describe(self) -> str:
        lines = [f"{self.nest.mapping}: {self.cycles:.4g} cycles = {self.seconds:.4g} s, "
                 f"utilisation {self.nest.utilisation:.1%}, schedule {self.schedule}"]
        for lv in self.levels:
            lines.append(f"  L{lv.level} {'/'.join(lv.memories)}: {lv.serial_iterations} serial "
                         f"x max(L={lv.below:.4g}, R={lv.read:.4g}, W={lv.write:.4g}) = "
                         f"{lv.cycles:.4g} cycles, {lv.active_units}/{lv.units} units")
        lines += [f"  infeasible: {problem}" for problem in self.problems]
        return "\n".join(lines)


def _product(values: Iterable[int]) -> int:
    return math.prod(values)


def footprint(nest: MappedNest, schedule: TileSchedule, operand: str, level: int) -> int:
    """Bytes of ``operand``'s tile at ``level``: the intrinsic tile times the level's tiles
    (clamped to the extent) of every loop that indexes it."""
    size = nest.operand_tile_bytes(operand)
    for dim in nest.dims:
        if operand in dim.operands:
            size *= min(dim.extent, _product(schedule.of(dim.name)[:level + 1]))
    return size


def _usage(nest: MappedNest, hierarchy: ModelHierarchy, schedule: TileSchedule, level: int,
           active: Sequence[int]) -> dict[str, int]:
    """Bytes per instance of each memory holding level-``level`` tiles (a held tile counts
    its share per unit on top of what the memory holds at its own level)."""
    usage: dict[str, int] = dict.fromkeys(hierarchy.levels[level].memories, 0)
    for operand, path in hierarchy.paths:
        memory, held = hierarchy.residence(operand, level)
        if memory is None:
            continue
        if not held:
            usage[memory] = usage.get(memory, 0) + footprint(nest, schedule, operand, level)
            continue
        home = max(k for k in range(level) if path[k] == memory)
        spread = _product(active[k] for k in range(home + 1, level + 1))
        others = sum(footprint(nest, schedule, other, home)
                     for other, other_path in hierarchy.paths
                     if other != operand and other_path[home] == memory)
        need = -(-footprint(nest, schedule, operand, level) // spread) + others
        usage[memory] = max(usage.get(memory, 0), need)
    return usage


def estimate(nest: MappedNest, hierarchy: ModelHierarchy,
             schedule: TileSchedule | None = None) -> CostBreakdown:
    """Eq. 5.6-5.8 for ``nest`` under ``schedule`` (:func:`default_schedule` when none)."""
    if hierarchy.intrinsic != nest.intrinsic.name:
        raise InputError(f"the hierarchy is for intrinsic {hierarchy.intrinsic}, the nest for "
                         f"{nest.intrinsic.name}; build it with model_hierarchy(spec, intrinsic)")
    schedule = default_schedule(nest, hierarchy) if schedule is None else schedule
    check_schedule(nest, hierarchy, schedule)
    depth, dims = hierarchy.depth, nest.dims
    trips = {dim.name: schedule.of(dim.name) for dim in dims}
    serial, active = [], []
    for model_level in hierarchy.levels:
        spatial = _product(trips[d.name][model_level.index] for d in dims if d.spatial)
        reduce = _product(trips[d.name][model_level.index] for d in dims if not d.spatial)
        units = model_level.units
        serial.append(reduce * -(-spatial // units) if units > 1 else spatial * reduce)
        active.append(min(units, spatial) if units > 1 else 1)
    problems = []
    usages = []
    for index in range(depth):
        usage = _usage(nest, hierarchy, schedule, index, active)
        usages.append(tuple(usage.items()))
        for memory, used in usage.items():
            capacity = hierarchy.capacity(memory)
            if capacity is not None and used > capacity:
                problems.append(f"level {index}: the tiles need {used} bytes in {memory}, which "
                                f"holds {capacity}; use smaller tiles at level {index}")
    chains = _product(trips[d.name][0] for d in dims if d.spatial)
    call = max(hierarchy.issue_cycles, hierarchy.latency_cycles / chains)
    cycles = serial[0] * call
    levels = [LevelCost(0, hierarchy.levels[0].memories, serial[0], 1, 1, call, (), (), 0.0,
                        0.0, cycles, usages[0])]
    destination = hierarchy.destination
    for index in range(1, depth):
        units = hierarchy.levels[index].units
        order = [name for name in schedule.order if units > 1 and nest.dim(name).spatial]
        order += [name for name in schedule.order if name not in order]
        reads: dict[str, float] = {}
        writes: dict[str, float] = {}
        read_link: dict[str, float] = {}
        write_link: dict[str, float] = {}
        for operand, _ in hierarchy.paths:
            inner, _ = hierarchy.residence(operand, index - 1)
            outer, held = hierarchy.residence(operand, index)
            if inner is None or outer is None or held:
                continue  # not there yet, or held in the same registers: nothing moves
            positions = [p for p, name in enumerate(order)
                         if operand in nest.dim(name).operands and trips[name][index] > 1]
            visits = _product(trips[name][index] for name in order[:positions[-1] + 1]) \
                if positions else 1
            size = footprint(nest, schedule, operand, index - 1)
            cost = 1.0 / hierarchy.bandwidth_of(outer)
            if operand == destination:
                distinct = _product(trips[d.name][index] for d in dims if operand in d.operands)
                repeats = _product(trips[d.name][k] for k in range(index + 1, depth)
                                   for d in dims if not d.spatial)
                loads = visits - distinct / repeats if hierarchy.fills_destination else visits
                reads[operand], writes[operand] = loads * size, float(visits * size)
                write_link[outer] = write_link.get(outer, 0.0) + writes[operand] * cost
            else:
                reads[operand] = float(visits * size)
            read_link[outer] = read_link.get(outer, 0.0) + reads[operand] * cost
        read_cycles = max(read_link.values(), default=0.0)
        write_cycles = max(write_link.values(), default=0.0)
        below = cycles
        cycles = serial[index] * max(below, read_cycles / serial[index],
                                     write_cycles / serial[index])
        levels.append(LevelCost(index, hierarchy.levels[index].memories, serial[index], units,
                                active[index], below, tuple(reads.items()),
                                tuple(writes.items()), read_cycles, write_cycles, cycles,
                                usages[index]))
    return CostBreakdown(nest, schedule, tuple(levels), cycles, cycles / hierarchy.frequency_hz,
                         tuple(problems))


# --- a default schedule, and ranking ------------------------------------------------------------
#: fraction of a memory above level 0 that the default schedule fills (the rest is for
#: double buffering)
FILL_FRACTION = 0.5


def _step(left: int) -> int:
    return next((p for p in (2, 3, 5, 7) if left % p == 0), 2)


def default_schedule(nest: MappedNest, hierarchy: ModelHierarchy) -> TileSchedule:
    """A schedule found without search, good enough to rank mappings: at level 0 as many
    independent accumulators as hide the intrinsic's latency; at every level above, first
    enough spatial trips for its units, then tiles grown (smallest first, spatial loops
    first) while the level's memories stay half empty; each level keeps enough spatial
    trips for the parallel levels above it; the top level takes the rest."""
    depth = hierarchy.depth
    factors = {dim.name: [1] * depth for dim in nest.dims}
    left = {dim.name: dim.extent for dim in nest.dims}
    tile = {loop.name: loop.extent for loop in nest.intrinsic.compute.loops}
    spatial = [dim.name for dim in nest.dims if dim.spatial]
    units = [level.units for level in hierarchy.levels]

    def current() -> TileSchedule:
        return TileSchedule(tuple((name, (*trips[:-1], left[name]))
                                  for name, trips in factors.items()), default_order(nest))

    def fits(level: int) -> bool:
        share = 1.0 if level == 0 else FILL_FRACTION
        active = [min(u, _product(factors[n][k] for n in spatial)) for k, u in enumerate(units)]
        usage = _usage(nest, hierarchy, current(), level, active)
        return all(hierarchy.capacity(m) is None or used <= share * hierarchy.capacity(m)
                   for m, used in usage.items())

    def grow(level: int, names: Sequence[str], enough: Callable[[], bool]) -> None:
        reserve = _product(units[level + 1:])
        stuck: set[str] = set()
        while not enough():
            live = [n for n in names if n not in stuck and left[n] > 1]
            if not live:
                return
            name = min(live, key=lambda n: (_product(factors[n][:level + 1]) * tile.get(n, 1),
                                             names.index(n)))
            step, before = _step(left[name]), left[name]
            factors[name][level] *= step
            left[name] = -(-before // step)
            if not fits(level) or (name in spatial
                                   and _product(left[n] for n in spatial) < reserve):
                factors[name][level] //= step
                left[name] = before
                stuck.add(name)

    chains = math.ceil(hierarchy.latency_cycles / hierarchy.issue_cycles)
    grow(0, spatial, lambda: _product(factors[n][0] for n in spatial) >= chains)
    ordered = spatial + [dim.name for dim in nest.dims if not dim.spatial]
    for level in range(1, depth - 1):
        if units[level] > 1:
            grow(level, spatial, lambda lv=level: _product(factors[n][lv] for n in spatial)
                 >= units[lv])
        grow(level, ordered, lambda: False)
    return current()


@dataclass(frozen=True)
class RankedMapping:
    """One mapping with its verification (Algorithm 4), its physical mapping (``None`` with
    ``generation_error`` when step 2 refuses it) and the model's cost."""

    mapping: IntrinsicMapping
    nest: MappedNest
    verification: VerificationResult
    physical: PhysicalMapping | None
    generation_error: str | None
    cost: CostBreakdown

    @property
    def verified(self) -> bool:
        return self.verification.ok

    @property
    def feasible(self) -> bool:
        return self.cost.feasible

    @property
    def usable(self) -> bool:
        return self.verified and self.feasible

    @property
    def seconds(self) -> float:
        return self.cost.seconds


def algorithm4_check(compute: Tensor, intrinsic: IntrinsicDecl, mapping: IntrinsicMapping,
                     product: ProductSum | None = None) -> VerificationResult:
    """Algorithm 4 alone (``Z*Y == X and X*Y^T == Z``) on the mapping's matrices, restricted
    to the loops the mapping relates: what the thesis counts as verification, without
    :func:`~tilecraft.intrin.verify.verify`'s reasons and structural rules (cheap enough for
    every compile)."""
    import numpy as np

    from tilecraft.intrin.mapping import Reason, ReasonKind
    from tilecraft.intrin.verify import BooleanMatrix, algorithm4

    product = analyse_compute(compute) if product is None else product
    operands, loop_names, z = intrinsic.compute.access_matrix()
    loops = product.loops
    bindings = {binding.operand: binding for binding in mapping.operands}
    rows, used = [], []
    for operand in operands:
        binding = bindings.get(operand)
        factor = None if binding is None else binding.factor
        tensor_loops = set(product.axes) if factor is None else product.factors[factor].loops
        rows.append(compute.name if factor is None else product.factors[factor].tensor.name)
        used.append([loop in tensor_loops for loop in loops])
    x = np.array(used, dtype=bool)
    y = np.array([[loop in mapping.software_loops(name) for loop in loops]
                  for name in loop_names], dtype=bool)
    # software loops left outside the intrinsic and intrinsic loops left empty (padded) are
    # outside the mapping: the check is on the loops it relates (as verify does)
    mapped, filled = y.any(axis=0), y.any(axis=1)
    ok = bool(mapped.any()) and algorithm4(x[:, mapped], y[filled][:, mapped], z[:, filled])
    reasons = () if ok else (Reason(ReasonKind.ACCESS_MATRIX, f"mapping {mapping} fails "
                                    "Algorithm 4 (Z*Y != X or X*Y^T != Z)"),)
    columns = tuple(loop.name for loop in loops)
    return VerificationResult(ok, reasons, BooleanMatrix(tuple(rows), columns, x),
                              BooleanMatrix(loop_names, columns, y),
                              BooleanMatrix(operands, loop_names, z))


def rank_mappings(compute: Tensor, intrinsic: IntrinsicDecl, spec: TargetSpec,
                  schedule_params: ScheduleParams | None = None,
                  mappings: Sequence[IntrinsicMapping] | None = None, *,
                  thorough: bool = True) -> list[RankedMapping]:
    """Every mapping of ``compute`` onto ``intrinsic`` (``match``'s, unless ``mappings`` are
    given), verified, generated and costed on ``spec`` under ``schedule_params`` (the
    :func:`default_schedule` of each mapping when ``None``), best first: verified and
    feasible mappings by predicted time, then the others; ties go to fewer intrinsic calls
    (less padding), then to ``match``'s order.
    ``thorough=False`` verifies with :func:`algorithm4_check` instead of
    :func:`~tilecraft.intrin.verify.verify`."""
    from tilecraft.intrin.generation import generate
    from tilecraft.intrin.mapping import MappingError
    from tilecraft.intrin.matching import match
    from tilecraft.intrin.verify import verify

    if mappings is None:
        mappings = match(compute, intrinsic).mappings
    if not mappings:
        return []
    hierarchy = model_hierarchy(spec, intrinsic)
    product = analyse_compute(compute)
    ranked = []
    for mapping in mappings:
        verification = verify(compute, intrinsic, mapping) if thorough \
            else algorithm4_check(compute, intrinsic, mapping, product)
        if not verification.ok and not thorough:
            verification = verify(compute, intrinsic, mapping)  # the reasons, for the report
        try:
            nest = mapped_nest(compute, intrinsic, mapping, product)
        except (MappingError, KeyError):
            verification.raise_if_rejected(mapping)  # a mapping that cannot even be read
            raise
        schedule = None if schedule_params is None \
            else schedule_params.apply(nest, hierarchy.depth)
        physical, error = None, None
        if verification.ok:
            try:
                physical = generate(compute, intrinsic, mapping, check=False)
            except MappingError as err:
                error = str(err).splitlines()[0]
        ranked.append(RankedMapping(mapping, nest, verification, physical, error,
                                    estimate(nest, hierarchy, schedule)))
    order = sorted(range(len(ranked)), key=lambda i: (not ranked[i].usable, ranked[i].seconds,
                                                      ranked[i].nest.intrinsic_calls, i))
    return [ranked[i] for i in order]


def gpu_spec_example() -> TargetSpec:
    """A small GPU-like spec for examples and tests: 8 SMs of 4 sub-partitions, global
    memory, 48 KB of shared memory and 64 KB of registers per sub-partition."""
    return load_spec({
        "name": "toy_gpu", "api_version": 1, "version": "0.1",
        "memory": {"levels": [
            {"name": "global", "size_bytes": None, "bandwidth_bytes_per_cycle": 256,
             "kind": "dram", "fan_out": 8},
            {"name": "shared", "size_bytes": 49152, "bandwidth_bytes_per_cycle": 128,
             "fan_out": 4},
            {"name": "fragment", "size_bytes": 65536, "bandwidth_bytes_per_cycle": 256,
             "kind": "registers", "allow_larger_than_outer": True}]},
        "compute": {"cores": 8, "frequency_hz": 1e9, "vector_bits": 128},
        "primitives": ["split", "reorder", "bind"], "loop_kinds": ["serial", "bound"],
        "evaluation": "estimate", "capabilities": {"models_performance": True}})
