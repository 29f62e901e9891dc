"""The block abstraction of a fused group (thesis Eq. 3.1): ``T_n = {l_1, l_2, ...}(T_{n-1}^1,
T_{n-1}^2, ...)`` — a block at memory level n is a loop nest over tiles whose body is a list of
blocks one level further in.

:meth:`TileTree.from_solution` builds it from a solved chain: one block per solved memory level,
outermost first, each stepping through its level's tiles in that level's order inside the tile
of the block around it. The innermost level's block holds the loops the operators share (the
parent block, §3.3.2); below it each operator gets a leaf block with the loops only it uses,
and the intermediate tiles between the leaves stay in that level.

>>> from tilecraft.fusion.examples import gemm_chain
>>> from tilecraft.fusion.solver import solve_chain
>>> chain = gemm_chain(1024, 512, 768, 512)
>>> tree = solve_chain(chain, capacity_bytes=256 * 1024).tile_tree()
>>> print(tree)
tile tree of chain C -> E (intermediate C kept in on_chip)
on_chip: for m in 1024 step 205, l in 512 step 256    tiles A B C D E
  C: for k in 768 step 1    reads A B, keeps C
  E: for n in 512 step 1    reads C D, writes E
>>> print(tree.equation())
T_on_chip = {m, l}(T_C = {k}(C), T_E = {n}(E))
>>> tree.placement
{'C': 'on_chip'}
>>> [(loop.name, loop.tile, loop.trips) for loop in tree.leaf("E").loops]
[('n', 1, 512)]
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from tilecraft.fusion.chain import Chain, FusionError, TensorRole
from tilecraft.fusion.dataflow import check_order
from tilecraft.fusion.solver import ChainSolution


@dataclass(frozen=True)
class _Level:
    level: str
    order: tuple[str, ...]
    tiles: Mapping[str, int]


@dataclass(frozen=True)
class TileLoop:
    """A loop of a block: it sweeps ``extent`` (its extent inside the enclosing tile) in
    steps of ``tile``."""

    name: str
    extent: int
    tile: int

    @property
    def trips(self) -> int:
        return math.ceil(self.extent / self.tile)

    def __str__(self) -> str:
        return f"{self.name} in {self.extent} step {self.tile}"


@dataclass(frozen=True)
class TileBlock:
    """A block ``{loops}(children)`` whose tiles live in memory level ``level``.

    A leaf block runs one operator (``op``) on its tiles; ``resident`` lists the tensors whose
    tiles the block holds in ``level`` and ``kept`` the intermediates that never leave it.
    ``name`` is the level for a level's outermost block, the operator for a leaf, and the
    operators joined by ``+`` for a block nested inside a level (chains of three or more).
    """

    level: str
    loops: tuple[TileLoop, ...]
    children: tuple[TileBlock, ...] = ()
    op: str | None = None
    resident: tuple[str, ...] = ()
    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()
    kept: tuple[str, ...] = ()
    name: str = ""

    @property
    def tiles(self) -> dict[str, int]:
        return {loop.name: loop.tile for loop in self.loops}

    def walk(self) -> Iterator[TileBlock]:
        yield self
        for child in self.children:
            yield from child.walk()


@dataclass(frozen=True)
class TileTree:
    """The tile tree of a fused chain; ``placement`` maps each intermediate tensor to the
    memory level its tiles are kept in."""

    chain: Chain
    root: TileBlock
    placement: Mapping[str, str]

    @staticmethod
    def from_solution(solution: ChainSolution) -> TileTree:
        """The tree of a solved chain (one block per solved memory level)."""
        if not solution.fused:
            raise FusionError(f"chain {solution.chain.names} is not fused ({solution.reason}); "
                              "it has no tile tree")
        return TileTree.build(solution.chain, [(level.level, level.order, level.tiles)
                                               for level in solution.levels])

    @staticmethod
    def build(chain: Chain,
              levels: Sequence[tuple[str, Sequence[str] | str, Mapping[str, int]]]) -> TileTree:
        """The tree for orders and tiles chosen by hand: ``levels`` lists ``(memory level,
        order, tiles)`` outermost first; loops without a tile run whole."""
        if not levels:
            raise FusionError(f"the tile tree of chain {chain.names} needs at least one level")
        resolved = []
        for name, order, tiles in levels:
            unknown = sorted(set(tiles) - set(chain.loop_names))
            if unknown:
                raise FusionError(f"tiles given for loops {', '.join(unknown)} that chain "
                                  f"{chain.names} does not have")
            full = {lp: int(tiles.get(lp, extent)) for lp, extent in chain.extents.items()}
            small = [lp for lp, tile in full.items() if tile < 1]
            if small:
                raise FusionError(f"tile sizes of loops {', '.join(small)} in level {name} "
                                  "must be at least 1")
            resolved.append(_Level(name, check_order(chain, order), full))
        extents: dict[str, int] = chain.extents
        outer: list[tuple[_Level, tuple[TileLoop, ...]]] = []
        for level in resolved[:-1]:
            outer.append((level, _loops(level.order, extents, level.tiles)))
            extents = dict(level.tiles)
        node = _innermost_block(chain, resolved[-1], extents)
        for level, loops in reversed(outer):
            node = TileBlock(level.level, loops, (node,), resident=_io_tensors(chain),
                             name=level.level)
        placement = {name: resolved[-1].level for name in chain.intermediates()}
        return TileTree(chain, node, placement)

    # lookups ----------------------------------------------------------------------------------
    def blocks(self) -> Iterator[TileBlock]:
        return self.root.walk()

    def leaf(self, op: str) -> TileBlock:
        """The leaf block running operator ``op``."""
        for block in self.blocks():
            if block.op == op:
                return block
        raise FusionError(f"no leaf block runs {op!r}; the operators are "
                          f"{', '.join(o.name for o in self.chain.ops)}")

    def level_block(self, level: str) -> TileBlock:
        """The (non-leaf) block of memory level ``level``."""
        for block in self.blocks():
            if block.level == level and block.op is None:
                return block
        raise FusionError(f"the tile tree has no block in level {level!r}")

    # printing ---------------------------------------------------------------------------------
    def equation(self) -> str:
        """The tree in the notation of Eq. 3.1 (loops that run once are left out)."""
        return _equation(self.root)

    def __str__(self) -> str:
        kept = ", ".join(f"{name} kept in {level}" for name, level in self.placement.items())
        head = f"tile tree of chain {self.chain.names}"
        lines = [f"{head} (intermediate {kept})" if kept else head]
        _render(self.root, 0, lines)
        return "\n".join(lines)


def _loops(order: tuple[str, ...], extents: Mapping[str, int],
           tiles: Mapping[str, int]) -> tuple[TileLoop, ...]:
    return tuple(TileLoop(lp, extents[lp], min(tiles[lp], extents[lp])) for lp in order)


def _io_tensors(chain: Chain) -> tuple[str, ...]:
    return tuple(name for name, access in chain.tensors().items() if access.io)


def _innermost_block(chain: Chain, level: _Level, extents: Mapping[str, int]) -> TileBlock:
    """The innermost level's nest, split recursively: the last operator and the chain before
    it run as siblings inside the loops they share (and loops before those); the earlier part
    is split the same way, so a producer's reduction finishes before its consumer reads."""
    block = _split(chain, list(range(len(chain.ops))), level.order, level, extents)
    return TileBlock(block.level, block.loops, block.children, block.op, tuple(chain.tensors()),
                     block.reads, block.writes, chain.intermediates(), name=level.level)


def _split(chain: Chain, ops: list[int], order: tuple[str, ...], level: _Level,
           extents: Mapping[str, int]) -> TileBlock:
    if len(ops) == 1:
        return _leaf(chain, ops[0], order, level, extents)
    last, rest = ops[-1], ops[:-1]
    used_rest = set().union(*(chain.op_loops(i) for i in rest))
    used_last = chain.op_loops(last)
    both = used_rest & used_last
    # a shared loop that runs once does not split: it joins the shared loops wherever it sits
    # (placed by it, a producer's reduction ordered outside it would run above the consumer)
    split = max((i + 1 for i, lp in enumerate(order)
                 if lp in both and extents[lp] > level.tiles[lp]), default=0)
    shared = (*order[:split], *(lp for lp in order[split:] if lp in both))
    suffix = tuple(lp for lp in order[split:] if lp not in both)
    earlier = _split(chain, rest, tuple(lp for lp in suffix if lp in used_rest), level, extents)
    final = _leaf(chain, last, tuple(lp for lp in suffix if lp not in used_rest), level, extents)
    names = [chain.ops[i].name for i in ops]
    kept = tuple(t for i in rest for t in _leaf_kept(chain, i))
    return TileBlock(level.level, _loops(shared, extents, level.tiles), (earlier, final),
                     resident=tuple(dict.fromkeys(a.tensor for i in ops
                                                  for a in chain.ops[i].accesses)),
                     kept=kept, name="+".join(names))


def _leaf_kept(chain: Chain, index: int) -> tuple[str, ...]:
    op = chain.ops[index]
    reads = _reads(chain, index)
    return tuple(a.tensor for a in op.accesses
                 if a.role is TensorRole.INTERMEDIATE and a.tensor not in reads)


def _reads(chain: Chain, index: int) -> tuple[str, ...]:
    op = chain.ops[index]
    return tuple(dict.fromkeys(a.tensor for a in op.accesses
                               if a.role is not TensorRole.OUTPUT and a.tensor != op.name
                               and a.tensor not in op.attached))


def _leaf(chain: Chain, index: int, order: tuple[str, ...], level: _Level,
          extents: Mapping[str, int]) -> TileBlock:
    op = chain.ops[index]
    mine = chain.op_loops(index)
    loops = _loops(tuple(lp for lp in order if lp in mine), extents, level.tiles)
    writes = tuple(a.tensor for a in op.accesses if a.role is TensorRole.OUTPUT)
    return TileBlock(level.level, loops, op=op.name,
                     resident=tuple(dict.fromkeys(a.tensor for a in op.accesses)),
                     reads=_reads(chain, index), writes=writes,
                     kept=_leaf_kept(chain, index), name=op.name)


def _visible(loops: tuple[TileLoop, ...]) -> list[TileLoop]:
    return [loop for loop in loops if loop.trips > 1]


def _render(block: TileBlock, depth: int, lines: list[str]) -> None:
    pad = "  " * depth
    shown = _visible(block.loops)
    nest = "for " + ", ".join(str(loop) for loop in shown) if shown else "once"
    if block.op is None and block.name == block.level:
        lines.append(f"{pad}{block.level}: {nest}    tiles {' '.join(block.resident)}")
    elif block.op is None:
        lines.append(f"{pad}{block.name}: {nest}    keeps {' '.join(block.kept)}")
    else:
        parts = []
        if block.reads:
            parts.append("reads " + " ".join(block.reads))
        if block.kept:
            parts.append("keeps " + " ".join(block.kept))
        if block.writes:
            parts.append("writes " + " ".join(block.writes))
        lines.append(f"{pad}{block.op}: {nest}    {', '.join(parts)}")
    for child in block.children:
        _render(child, depth + 1, lines)


def _equation(block: TileBlock) -> str:
    loops = ", ".join(loop.name for loop in _visible(block.loops))
    name = f"T_{block.name or block.level}"
    if block.op is not None:
        return f"{name} = {{{loops}}}({block.op})"
    inner = ", ".join(_equation(child) for child in block.children)
    return f"{name} = {{{loops}}}({inner})"
