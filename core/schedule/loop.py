"""The loop IR of a stage (thesis Eq. 4.1-4.3): loops, the relations between them, annotations.

Every loop is ``l: <0, extent, 1>`` (the thesis normalises begin to 0 and step to 1). A stage
starts with one *root* loop per axis of its compute (spatial axes, then reduce axes); the
primitives replace loops by others and record how they relate:

- :class:`Split` (Eq. 4.2): ``l -> (outer, inner)`` with ``l = outer * factor + inner``, the
  outer loop running ``ceil(extent / factor)`` times (``nparts`` fixes the outer extent
  instead). When ``outer * inner`` overshoots the extent, the iterations past it are cut off
  by a guard ``l < extent``;
- :class:`Fuse` (Eq. 4.3): ``(l1, l2, ...) -> f`` with ``f`` running over the product of the
  extents, ``l1 = f // (e2 * ...)``, the last one ``f % e_last``.

The *leaf* loops are those no relation has replaced; lowering emits one Kernel IR ``For`` per
leaf, and recomputes every root loop (every axis) from the leaves through the relations.

>>> from tilecraft.te import Var
>>> i = Loop("i", 10, "C")
>>> split = Split(i, Loop("i.outer", 3, "C"), Loop("i.inner", 4, "C"), factor=4)
>>> extents = derive_extents({i: 10}, [split])
>>> extents[split.outer], extents[split.inner]
(3, 4)
>>> o, n = Var("io"), Var("ii")
>>> values, guards = derive_values({split.outer: o, split.inner: n}, extents, [split])
>>> print(values[i]), print(guards[0].cond)
((io * 4) + ii)
(((io * 4) + ii) < 10)
(None, None)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tilecraft.kernel_ir.nodes import LoopKind
from tilecraft.kernel_ir.simplify import simplify
from tilecraft.te.bounds import interval
from tilecraft.te.expr import AxisKind, Expr, Var, const
from tilecraft.te.visit import vars_in


@dataclass(frozen=True, eq=False)
class Loop:
    """A loop handle of one stage: its name (unique in the stage), its extent as the stage
    computes its whole tensor, the stage's name and whether it runs over spatial or reduce
    axes. Compared by identity.

    A stage computed inside another (``compute_at``) runs its loops over the region the
    consumer needs; the extents are then derived from that region when lowering.
    """

    name: str
    extent: int
    stage: str
    kind: AxisKind = AxisKind.SPATIAL

    @property
    def is_reduce(self) -> bool:
        return self.kind is AxisKind.REDUCE

    def __repr__(self) -> str:
        return f"Loop({self.stage}.{self.name}, {self.extent}, {self.kind.value})"


@dataclass(frozen=True)
class Split:
    """``parent -> (outer, inner)``: ``parent = outer * inner_extent + inner``."""

    parent: Loop
    outer: Loop
    inner: Loop
    factor: int | None = None
    nparts: int | None = None

    def extents(self, parent_extent: int) -> tuple[int, int]:
        """(outer, inner) extents for a parent of ``parent_extent`` iterations."""
        if self.factor is not None:
            return -(-parent_extent // self.factor), self.factor
        assert self.nparts is not None
        return self.nparts, -(-parent_extent // self.nparts)


@dataclass(frozen=True)
class Fuse:
    """``loops -> fused`` (outer first): ``fused`` runs over the product of their extents."""

    loops: tuple[Loop, ...]
    fused: Loop


Relation = Split | Fuse


@dataclass(frozen=True)
class LoopAnnotation:
    """How a leaf loop runs: its Kernel IR kind, with the ``lanes`` of a VECTOR loop (``None``:
    the target's lanes for the stage's dtype), the unroll ``factor`` of an UNROLLED one
    (``None``: all iterations), the hardware ``axis`` of a BOUND one and the
    ``initiation_interval`` of a PIPELINED one."""

    kind: LoopKind = LoopKind.SERIAL
    lanes: int | None = None
    factor: int | None = None
    axis: str | None = None
    initiation_interval: int | None = None

    def describe(self, extent: int | None = None) -> str:
        """The kind with its details, and the loop's ``extent`` first when given.

        >>> LoopAnnotation(LoopKind.VECTOR, lanes=16).describe(48)
        'vector(48, lanes=16)'
        >>> LoopAnnotation(LoopKind.BOUND, axis="threadIdx.x").describe()
        'bound(axis=threadIdx.x)'
        >>> LoopAnnotation().describe(7)
        'serial(7)'
        """
        details = [] if extent is None else [str(extent)]
        if self.kind is LoopKind.VECTOR and self.lanes:
            details.append(f"lanes={self.lanes}")
        elif self.kind is LoopKind.UNROLLED and self.factor:
            details.append(f"factor={self.factor}")
        elif self.kind is LoopKind.BOUND:
            details.append(f"axis={self.axis}")
        elif self.kind is LoopKind.PIPELINED:
            details.append(f"II={self.initiation_interval}")
        return f"{self.kind.value}({', '.join(details)})" if details else self.kind.value


SERIAL = LoopAnnotation()


@dataclass(frozen=True)
class Guard:
    """A condition that keeps the iterations a non-divisible split adds (or a region's tail)
    from computing anything; ``loop`` names what it guards, for messages."""

    cond: Expr
    kind: AxisKind
    what: str

    @property
    def variables(self) -> frozenset[Var]:
        return frozenset(v for v in vars_in(self.cond) if isinstance(v, Var))


def derive_extents(root_extents: Mapping[Loop, int],
                   relations: Sequence[Relation]) -> dict[Loop, int]:
    """The extent of every loop, from the extents of the root loops."""
    extents = dict(root_extents)
    for relation in relations:
        if isinstance(relation, Split):
            outer, inner = relation.extents(extents[relation.parent])
            extents[relation.outer], extents[relation.inner] = outer, inner
        else:
            total = 1
            for loop in relation.loops:
                total *= extents[loop]
            extents[relation.fused] = total
    return extents


def derive_values(leaf_values: Mapping[Loop, Expr], extents: Mapping[Loop, int],
                  relations: Sequence[Relation]) -> tuple[dict[Loop, Expr], list[Guard]]:
    """The value of every loop as an expression of the leaf values, and the guards that cut
    off the iterations non-divisible splits add (only where a split can overshoot)."""
    values = dict(leaf_values)
    guards: list[Guard] = []
    for relation in reversed(relations):
        if isinstance(relation, Split):
            inner_extent = extents[relation.inner]
            value = simplify(values[relation.outer] * inner_extent + values[relation.inner])
            values[relation.parent] = value
            parent_extent = extents[relation.parent]
            if extents[relation.outer] * inner_extent > parent_extent:
                rng = interval(value, _leaf_ranges(value, leaf_values, extents))
                if rng is None or rng[1] >= parent_extent:
                    guards.append(Guard(simplify(value < parent_extent), relation.parent.kind,
                                        relation.parent.name))
        else:
            fused = values[relation.fused]
            stride = 1
            for position in range(len(relation.loops) - 1, -1, -1):
                loop = relation.loops[position]
                value = fused if stride == 1 else fused // stride
                if position > 0:
                    value = value % extents[loop]
                values[loop] = simplify(value)
                stride *= extents[loop]
    return values, guards


def _leaf_ranges(value: Expr, leaf_values: Mapping[Loop, Expr],
                 extents: Mapping[Loop, int]) -> dict[Var, tuple[int, int]]:
    ranges = {}
    for loop, leaf in leaf_values.items():
        if isinstance(leaf, Var):
            ranges[leaf] = (0, max(extents[loop] - 1, 0))
    return ranges


def zero() -> Expr:
    """The value of a leaf loop with one iteration (no ``For`` is emitted for it)."""
    return const(0)


__all__ = ["SERIAL", "Fuse", "Guard", "Loop", "LoopAnnotation", "Relation", "Split",
           "derive_extents", "derive_values", "zero"]
