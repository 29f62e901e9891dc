"""Algorithm 1 (thesis §3.4.1.1): data movement DV and memory usage MU of a chain for a loop
order and a tile vector.

For each operator, producer first, and each tensor of its block: the footprint DF of one tile
(bounding box of the affine index over the tile, so a window ``h + rh`` is ``T_h + T_rh - 1``
wide) adds to the operator's memory usage; a tensor that moves between the chip and the outer
memory (an input or output of the chain; intermediates stay on chip) is reloaded for every
iteration of the loops at and outside the innermost loop that indexes it. Walking the order from
the innermost loop outwards, ``keep_reuse`` turns false at the first loop indexing the tensor,
and from then on every loop multiplies the movement by its trip count. Before the next operator,
the loops private to this one are erased from the order, so a producer's private reduction
loop never moves a consumer's data. MU is the largest per-operator usage.

A loop that runs once indexes nothing: the tensor's slice is the same at each of its (one)
steps, so Eq. 3.9's set difference is empty. Algorithm 1 as printed flips ``keep_reuse`` at
such a loop and reloads the tensor at every step of the loops around it; here the walk skips
it. Loops that run once whatever the tiles (extent 1, kept whole) are skipped in the symbolic
formula; a loop whose tile covers its extent is skipped when the tiles are known
(:meth:`DataMovement.evaluate`): the formula stands for tiles that split every loop it names,
and its relaxed form, which the solver minimises, keeps it.

The loops consulted for an operator are those still in the order, including loops only a later
operator uses: the thesis's second insight says that in order ``mnlk`` the loop ``n`` moves A
(the producer runs inside it), and the erasure step would be void if the check only looked at
the operator's own loops.

Movement is counted exactly at partial boundary tiles: a loop that indexes the tensor sweeps
its whole extent (``M`` rather than ``T_M * ceil(M/T_M)``), which is how Table 3.4 writes it;
with tiles that divide the extents this equals the algorithm's ``DF * prod ceil(L/T)``.

>>> from tilecraft.fusion.examples import gemm_chain
>>> chain = gemm_chain(512, 256, 384, 128)
>>> movement = analyze(chain, "mlkn")
>>> for name in "ABCDE":
...     print(name, movement.movement(name), "|", movement.footprint(name))
A M*K*ceil(L/T_L) | T_M*T_K
B K*L*ceil(M/T_M) | T_K*T_L
C 0 | T_M*T_L
D L*N*ceil(M/T_M) | T_L*T_N
E M*N*ceil(L/T_L) | T_M*T_N
>>> values = movement.evaluate({"m": 64, "n": 32, "k": 32, "l": 64})
>>> values.volume, values.usage
(1310720, 8192)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from tilecraft.fusion.chain import (
    Chain,
    FusionError,
    IndexExpr,
    TensorAccess,
    TensorRole,
    loop_order,
)
from tilecraft.fusion.polynomial import Extent, Number, Polynomial, Trips


@dataclass(frozen=True)
class TensorMovement:
    """One tensor in one operator's block: its tile footprint and its movement."""

    op: str
    tensor: str
    role: TensorRole
    itemsize: int
    footprint: Polynomial
    movement: Polynomial
    reloaded_by: tuple[str, ...]
    on_chip: bool = True
    footprint_text: str = ""
    indexing: tuple[str, ...] = ()
    swept: Polynomial | None = None

    @property
    def io(self) -> bool:
        return self.role is not TensorRole.INTERMEDIATE

    def moved(self, extents: Mapping[str, int], tiles: Mapping[str, Number]) -> Number:
        """The movement for concrete ``tiles`` (numbers or equal-shaped arrays), a loop that
        runs once indexing nothing: a loop outside the innermost indexing one reloads the
        tensor only where some indexing loop inside it runs more than once."""
        if self.swept is None or self.movement.is_zero():
            return self.movement.evaluate(extents, tiles)
        value: Number = self.swept.evaluate(extents, tiles)
        trips = {lp: _trips(extents[lp], tiles[lp]) for lp in self.reloaded_by}
        splits: Number = False  # some indexing loop inside runs more than once
        for loop in reversed(self.reloaded_by):
            if loop in self.indexing:
                splits = np.logical_or(splits, trips[loop] > 1)
            elif isinstance(splits, np.ndarray):
                value = value * np.where(splits, trips[loop], 1)
            elif splits:
                value = value * trips[loop]
        return value


@dataclass(frozen=True)
class MovementValues:
    """Numbers of one :class:`DataMovement` for concrete tiles (elements and bytes)."""

    volume: Number
    volume_bytes: Number
    usage: Number
    usage_bytes: Number
    per_tensor: Mapping[str, Number]
    per_op_usage_bytes: tuple[Number, ...]


@dataclass(frozen=True)
class DataMovement:
    """Algorithm 1's result for one chain and loop order, symbolic in the tile sizes."""

    chain: Chain
    order: tuple[str, ...]
    entries: tuple[TensorMovement, ...]

    def movement(self, tensor: str) -> Polynomial:
        """DM of ``tensor`` in elements (summed over the blocks that touch it)."""
        return _sum(e.movement for e in self._of(tensor))

    def footprint(self, tensor: str) -> Polynomial:
        """DF of one tile of ``tensor`` in elements."""
        return self._of(tensor)[0].footprint

    def _of(self, tensor: str) -> list[TensorMovement]:
        found = [e for e in self.entries if e.tensor == tensor]
        if not found:
            names = ", ".join(dict.fromkeys(e.tensor for e in self.entries))
            raise FusionError(f"tensor {tensor!r} is not part of chain {self.chain.names}; its "
                              f"tensors are {names}")
        return found

    def volume(self, in_bytes: bool = False) -> Polynomial:
        """DV: the total movement of the chain's input and output tensors."""
        return _sum(e.movement * (e.itemsize if in_bytes else 1) for e in self.entries)

    def usage(self, op: int, in_bytes: bool = False) -> Polynomial:
        """Memory usage of operator ``op``'s block: the footprints of all its tiles."""
        name = self.chain.ops[op].name
        return _sum(e.footprint * (e.itemsize if in_bytes else 1)
                    for e in self.entries if e.op == name and e.on_chip)

    def evaluate(self, tiles: Mapping[str, Number], relaxed: bool = False) -> MovementValues:
        """DV and MU (max over operators) for ``tiles`` (numbers or equal-shaped arrays)."""
        extents = self.chain.extents
        full = _with_defaults(self.chain, tiles)
        per_tensor: dict[str, Number] = {}
        volume: Number = 0
        volume_bytes: Number = 0
        for entry in self.entries:
            if entry.movement.is_zero():
                per_tensor.setdefault(entry.tensor, 0)
                continue
            value = (entry.movement.evaluate(extents, full, True) if relaxed
                     else entry.moved(extents, full))
            per_tensor[entry.tensor] = per_tensor.get(entry.tensor, 0) + value
            volume = volume + value
            volume_bytes = volume_bytes + value * entry.itemsize
        usages = [self.usage(i).evaluate(extents, full, relaxed)
                  for i in range(len(self.chain.ops))]
        usages_bytes = tuple(self.usage(i, True).evaluate(extents, full, relaxed)
                             for i in range(len(self.chain.ops)))
        return MovementValues(volume, volume_bytes, _maximum(usages), _maximum(usages_bytes),
                              per_tensor, usages_bytes)

    def __str__(self) -> str:
        lines = [f"data movement of {self.chain.names} in order {' '.join(self.order)}:"]
        width = max(len(e.tensor) for e in self.entries)
        for entry in self.entries:
            lines.append(f"  {entry.op}: {entry.tensor:<{width}}  DM = {entry.movement}"
                         f"   DF = {entry.footprint_text or entry.footprint}")
        lines.append(f"  DV = {self.volume()}")
        return "\n".join(lines)


def analyze(chain: Chain, order: Iterable[str] | str) -> DataMovement:
    """Run Algorithm 1 for ``order`` (outermost loop first, e.g. ``"mlkn"``); loops that run
    once whatever the tiles index nothing (see the module doc)."""
    once = set(chain.fixed_loops())
    perm = [loop for loop in check_order(chain, order) if loop not in once]
    entries: list[TensorMovement] = []
    for index, op in enumerate(chain.ops):
        for access in op.accesses:
            reloaded = reload_loops(access, perm) if access.io else ()
            movement = exact_movement(access, reloaded) if access.io else Polynomial.constant(0)
            swept = exact_movement(access, ()) if access.io else None
            entries.append(TensorMovement(op.name, access.tensor, access.role,
                                          access.dtype.bytes, access.footprint(), movement,
                                          reloaded, access.on_chip, _footprint_text(access),
                                          tuple(access.loops), swept))
        private = set(chain.private_loops(index))
        perm = [loop for loop in perm if loop not in private]
    return DataMovement(chain, tuple(check_order(chain, order)), tuple(entries))


def check_order(chain: Chain, order: Iterable[str] | str) -> tuple[str, ...]:
    """``order`` as a tuple, checked to be a permutation of the chain's loops."""
    result = loop_order(order)
    if sorted(result) != sorted(chain.loop_names):
        raise FusionError(f"order {' '.join(result)} is not a permutation of the chain's loops "
                          f"{' '.join(chain.loop_names)}; name every loop exactly once, "
                          "outermost first")
    return result


def reload_loops(access: TensorAccess, perm: Sequence[str]) -> tuple[str, ...]:
    """Loops (outermost first) whose iterations reload ``access``'s tile: those at and outside
    the innermost loop of ``perm`` that indexes it (Algorithm 1's ``keep_reuse``)."""
    indexing = set(access.loops)
    for position in range(len(perm) - 1, -1, -1):
        if perm[position] in indexing:
            return tuple(perm[:position + 1])
    return ()


def exact_movement(access: TensorAccess, reloaded: Sequence[str]) -> Polynomial:
    """Elements moved for ``access`` reloaded by the loops ``reloaded``, counting partial
    tiles at the boundaries exactly where a loop indexes a single dimension."""
    indexing = set(access.loops)
    factors = [Polynomial.symbol(Trips(loop)) for loop in reloaded if loop not in indexing]
    for dims in _components(access.indices):
        if len(dims) == 1:
            factors.append(_swept_dimension(access.indices[dims[0]]))
        else:  # loops shared by several dimensions: footprint times trip counts
            factors.append(Polynomial.product(access.indices[d].footprint() for d in dims))
            loops = dict.fromkeys(lp for d in dims for lp in access.indices[d].loops)
            factors.extend(Polynomial.symbol(Trips(lp)) for lp in loops)
    return Polynomial.product(factors)


def _swept_dimension(index: IndexExpr) -> Polynomial:
    """Sum over all tiles of the loops in ``index`` of the dimension's tile extent:
    ``sum_x a_x * X * prod_{y != x} n_y + (1 - sum_x a_x) * prod_y n_y``."""
    loops = [loop for loop, _ in index.terms]
    if not loops:
        return Polynomial.constant(1)
    trips = {loop: Polynomial.symbol(Trips(loop)) for loop in loops}
    total = Polynomial.constant(0)
    weight = 0
    for loop, coef in index.terms:
        others = Polynomial.product(trips[y] for y in loops if y != loop)
        total = total + abs(coef) * Polynomial.symbol(Extent(loop)) * others
        weight += abs(coef)
    return total + (1 - weight) * Polynomial.product(trips.values())


def _components(indices: Sequence[IndexExpr]) -> list[list[int]]:
    """Dimensions grouped so that no loop indexes two groups."""
    groups: list[tuple[set[str], list[int]]] = []
    for dim, index in enumerate(indices):
        loops = set(index.loops)
        merged_loops, merged_dims = set(loops), [dim]
        rest = []
        for group_loops, group_dims in groups:
            if group_loops & loops:
                merged_loops |= group_loops
                merged_dims = group_dims + merged_dims
            else:
                rest.append((group_loops, group_dims))
        groups = [*rest, (merged_loops, sorted(merged_dims))]
    return [dims for _, dims in sorted(groups, key=lambda g: g[1][0])]


def _footprint_text(access: TensorAccess) -> str:
    """The footprint as a product of per-dimension factors: ``T_N*(T_H + T_RH - 1)``."""
    factors = []
    for index in access.indices:
        text = str(index.footprint())
        if text != "1":
            factors.append(text if len(index.terms) <= 1 else f"({text})")
    return "*".join(factors) or "1"


def _trips(extent: int, tile: Number) -> Number:
    if isinstance(tile, np.ndarray):
        return np.ceil(extent / tile)
    return math.ceil(extent / tile)


def _sum(items: Iterable[Polynomial]) -> Polynomial:
    total = Polynomial.constant(0)
    for item in items:
        total = total + item
    return total


def _maximum(values: Sequence[Number]) -> Number:
    if not values:
        return 0
    if any(isinstance(v, np.ndarray) for v in values):
        return np.maximum.reduce([np.asarray(v, dtype=float) for v in values])
    return max(values)


def _with_defaults(chain: Chain, tiles: Mapping[str, Number]) -> dict[str, Number]:
    """Tiles of every loop: given ones checked, fixed loops at their extent."""
    full: dict[str, Number] = {}
    for loop in chain.loops:
        if loop.name in tiles:
            tile = tiles[loop.name]
            if not isinstance(tile, np.ndarray) and not 0 < tile <= loop.extent:
                raise FusionError(f"tile size {tile} of loop {loop.name} must lie in "
                                  f"[1, {loop.extent}] (the loop's extent)")
            full[loop.name] = tile
        elif loop.full_extent or loop.extent == 1:
            full[loop.name] = loop.extent
        else:
            raise FusionError(f"no tile size for loop {loop.name} of chain {chain.names}; give "
                              f"one for each of {', '.join(chain.loop_names)}")
    unknown = set(tiles) - set(chain.loop_names)
    if unknown:
        raise FusionError(f"tile sizes for unknown loops {', '.join(sorted(unknown))}; the "
                          f"chain's loops are {', '.join(chain.loop_names)}")
    return full
