"""Symmetries of an intrinsic: renamings of its source operands and loops that leave its
access structure unchanged, so that two mappings differing only by one are the same choice.

A square Tensor Core ``Dst[i1, i2] += Src1[i1, r1] * Src2[r1, i2]`` (16x16x16, both sources
float16) is symmetric under ``Src1 <-> Src2, i1 <-> i2``: mapping GEMM's ``A`` to ``Src1``
with ``i`` on ``i1``, or ``B`` to ``Src1`` with ``j`` on ``i1`` (computing the transposed
tile), is one mapping, and Table 5.3 counts it once. A 32x8x16 shape, or a u8 x s8 dot product,
has no such symmetry: there the two correspondences are different mappings.

A symmetry maps sources to sources of the same dtype and rank, loops to loops of the same kind
and extent, and the set of loops indexing each dimension of each operand onto the same sets
for its image (dimension order may change: layouts are the memory mapping's business).
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tilecraft.intrin.access import IntrinsicAccess
from tilecraft.intrin.mapping import IntrinsicMapping, OperandBinding

#: above this many candidate renamings only the identity is used (no intrinsic comes close)
MAX_RENAMINGS = 100_000


@dataclass(frozen=True)
class Symmetry:
    """``operands[name]`` and ``loops[name]`` are the images of each operand and loop."""

    operands: tuple[tuple[str, str], ...]
    loops: tuple[tuple[str, str], ...]

    def apply(self, mapping: IntrinsicMapping, access: IntrinsicAccess) -> IntrinsicMapping:
        """The same mapping seen through this renaming (declaration order kept)."""
        operand_image, loop_image = dict(self.operands), dict(self.loops)
        bindings = {operand_image[b.operand]: OperandBinding(operand_image[b.operand],
                                                              b.tensor, b.factor)
                    for b in mapping.operands}
        loops = {loop_image[name]: software for name, software in mapping.loops}
        return IntrinsicMapping(mapping.intrinsic,
                                tuple(bindings[name] for name in access.operands),
                                tuple((name, loops[name]) for name in access.loops))

    @property
    def is_identity(self) -> bool:
        return all(a == b for a, b in self.operands + self.loops)


def _groups(items: Sequence[str], key: Iterable[object]) -> list[list[str]]:
    grouped: dict[object, list[str]] = {}
    for item, k in zip(items, key):
        grouped.setdefault(k, []).append(item)
    return list(grouped.values())


def _permutations_of_groups(groups: list[list[str]]) -> Iterable[dict[str, str]]:
    for images in itertools.product(*(itertools.permutations(group) for group in groups)):
        mapping: dict[str, str] = {}
        for group, image in zip(groups, images):
            mapping.update(zip(group, image))
        yield mapping


def intrinsic_symmetries(access: IntrinsicAccess) -> tuple[Symmetry, ...]:
    """Every symmetry of ``access`` (the identity first).

    >>> from tilecraft.intrin.examples import wmma
    >>> from tilecraft.intrin.access import intrinsic_access
    >>> [dict(s.loops) for s in intrinsic_symmetries(intrinsic_access(wmma(16, 16, 16)))]
    [{'i1': 'i1', 'i2': 'i2', 'r1': 'r1'}, {'i1': 'i2', 'i2': 'i1', 'r1': 'r1'}]
    >>> len(intrinsic_symmetries(intrinsic_access(wmma(32, 8, 16))))
    1
    """
    decl = access.decl.compute
    sources = list(access.sources)
    source_groups = _groups(sources, [(decl.operand(s).dtype, decl.operand(s).ndim)
                                      for s in sources])
    loop_groups = _groups(list(access.loops), zip(access.kinds, access.extents))
    count = math.prod(math.factorial(len(g)) for g in source_groups + loop_groups)
    dims = {name: Counter(loops) for name, loops in zip(access.operands, access.dim_loops)}
    identity = Symmetry(tuple((o, o) for o in access.operands),
                        tuple((lp, lp) for lp in access.loops))
    if count > MAX_RENAMINGS:
        return (identity,)
    found = [identity]
    for operand_image in _permutations_of_groups(source_groups):
        operand_image[access.destination] = access.destination
        for loop_image in _permutations_of_groups(loop_groups):
            candidate = Symmetry(tuple((o, operand_image[o]) for o in access.operands),
                                 tuple((lp, loop_image[lp]) for lp in access.loops))
            if candidate.is_identity:
                continue
            if all(Counter(frozenset(loop_image[lp] for lp in dim_set)
                           for dim_set in dims[operand].elements())
                   == dims[operand_image[operand]] for operand in access.operands):
                found.append(candidate)
    return tuple(found)
