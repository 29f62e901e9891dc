"""Mapping verification (thesis §5.5, Algorithm 4) and forcing a mapping by hand.

Algorithm 4 takes three boolean matrices: the software access matrix ``X`` (rows: the software
tensors playing the intrinsic's operands, columns: software loops), the mapping matrix ``Y``
(rows: intrinsic loops, columns: software loops) and the intrinsic access matrix ``Z`` (rows:
operands, columns: intrinsic loops). With ``*`` the boolean matrix product it accepts iff

    Z * Y == X      (each software loop touches the operands its intrinsic loop touches)
    X * Y^T == Z    (each intrinsic loop touches the tensors its software loops touch)

Software loops no intrinsic loop takes run around the intrinsic and intrinsic loops that take
no software loop are padded, so the equalities are checked on the mapped columns. A verified
mapping must also be a mapping in the sense of :mod:`.matching` (a union of basic matches):
each software loop on at most one intrinsic loop, no loop with a negative or non-affine index,
each software loop pairable with loops on the other intrinsic loops without two of them
indexing one dimension of a tensor, and no intrinsic loop left empty that a free candidate
could fill. Every broken rule is reported as a :class:`~tilecraft.intrin.mapping.Reason`.

The thesis's wrong mapping of a convolution, ``n`` and ``k`` both on ``i1``:

>>> from tilecraft import te, ops
>>> from tilecraft.intrin.examples import wmma
>>> x = te.placeholder((1, 4, 6, 6), "float16", name="x")
>>> w = te.placeholder((8, 4, 3, 3), "float16", name="w")
>>> y = ops.conv2d(x, w, out_dtype="float32", name="y")
>>> try:
...     force_mapping(y, wmma(), {"i1": ["n", "k", "h", "w"], "r1": ["rc", "rh", "rw"]})
... except MappingError as err:
...     print(err.reasons[0])
...     print([(r.matrix, r.entry, r.expected, r.got) for r in err.reasons])
software loop k does not index x (Src1) but is mapped to i1, which indexes Src1 \
(entry X[x, k]: expected 0, got 1)
[('X', ('x', 'k'), False, True), ('X', ('w', 'k'), True, False), ('Z', ('Src2', 'i1'), False, True)]
"""

from __future__ import annotations

from collections.abc import Mapping as MappingType
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from tilecraft.intrin.access import IntrinsicAccess, ProductSum, analyse_compute, intrinsic_access
from tilecraft.intrin.mapping import IntrinsicMapping, MappingError, Reason, ReasonKind
from tilecraft.intrin.matching import Correspondence, correspondences, unions
from tilecraft.target.intrinsic import IntrinsicDecl
from tilecraft.te.expr import IterVar
from tilecraft.te.tensor import Tensor


@dataclass(frozen=True)
class BooleanMatrix:
    """A labelled boolean matrix of Algorithm 4."""

    rows: tuple[str, ...]
    columns: tuple[str, ...]
    values: np.ndarray

    def __str__(self) -> str:
        width = max(len(r) for r in self.rows)
        lines = [" " * width + "  " + " ".join(self.columns)]
        for name, row in zip(self.rows, self.values):
            cells = " ".join(str(int(v)).rjust(len(c)) for v, c in zip(row, self.columns))
            lines.append(f"{name.rjust(width)}  {cells}")
        return "\n".join(lines)


@dataclass(frozen=True)
class VerificationResult:
    """``ok`` iff ``reasons`` is empty; ``x``, ``y``, ``z`` are Algorithm 4's inputs (absent
    when the mapping could not even be read)."""

    ok: bool
    reasons: tuple[Reason, ...]
    x: BooleanMatrix | None = None
    y: BooleanMatrix | None = None
    z: BooleanMatrix | None = None

    def raise_if_rejected(self, mapping: IntrinsicMapping | str) -> None:
        if not self.ok:
            raise MappingError(f"mapping {mapping} fails verification; fix what these reasons "
                               "name or pick one of match(...).mappings", self.reasons)


def boolean_product(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a * b`` over the booleans (or, and).

    >>> boolean_product(np.array([[1, 0], [1, 1]], bool), np.array([[0, 1], [1, 0]], bool))
    array([[False,  True],
           [ True,  True]])
    """
    return (a.astype(np.int64) @ b.astype(np.int64)) > 0


def algorithm4(x: np.ndarray, y: np.ndarray, z: np.ndarray) -> bool:
    """Algorithm 4 as the thesis writes it: ``Z*Y == X and X*Y^T == Z``."""
    return bool(np.array_equal(boolean_product(z, y), x)
                and np.array_equal(boolean_product(x, y.T), z))


def _read(correspondence: Correspondence, mapping: IntrinsicMapping) -> list[Reason]:
    """Names, loop kinds, loops mapped twice, index forms."""
    access, product = correspondence.access, correspondence.product
    reasons: list[Reason] = []
    seen: dict[IterVar, str] = {}
    excluded = correspondence.excluded()
    for name, loops in mapping.loops:
        kind = access.kinds[access.loop_index(name)]
        for loop in loops:
            if loop in seen:
                reasons.append(Reason(
                    ReasonKind.LOOP_MAPPED_TWICE, f"software loop {loop.name} is mapped to both "
                    f"{seen[loop]} and {name}; each software loop maps to one intrinsic loop "
                    "(Def. 5)", software_loop=loop.name, intrinsic_loop=name))
            seen[loop] = name
            if loop.kind is not kind:
                reasons.append(Reason(
                    ReasonKind.LOOP_KIND, f"software loop {loop.name} is a {loop.kind.value} "
                    f"loop but intrinsic loop {name} is a {kind.value} loop",
                    software_loop=loop.name, intrinsic_loop=name))
            if loop in excluded:
                reasons.append(replace(excluded[loop], intrinsic_loop=name))
    if not seen:
        reasons.append(Reason(ReasonKind.EMPTY_MAPPING, f"the mapping of {product.compute.name} "
                              "maps no software loop; map at least one"))
    return reasons


def _matrices(correspondence: Correspondence,
              mapping: IntrinsicMapping) -> tuple[BooleanMatrix, BooleanMatrix, BooleanMatrix]:
    access, product = correspondence.access, correspondence.product
    loops = product.loops
    x = np.array([[correspondence.uses(operand, loop) for loop in loops]
                  for operand in access.operands], dtype=bool)
    y = np.array([[loop in software for loop in loops] for _, software in mapping.loops],
                 dtype=bool)
    rows = tuple(correspondence.tensor_name(o) for o in access.operands)
    columns = tuple(loop.name for loop in loops)
    return (BooleanMatrix(rows, columns, x), BooleanMatrix(access.loops, columns, y),
            BooleanMatrix(access.operands, access.loops, access.matrix.copy()))


def _algorithm4_reasons(correspondence: Correspondence, mapping: IntrinsicMapping,
                        x: BooleanMatrix, y: BooleanMatrix, z: BooleanMatrix) -> list[Reason]:
    access, loops = correspondence.access, correspondence.product.loops
    mapped = y.values.any(axis=0)
    filled = y.values.any(axis=1)
    reasons = []
    x_got = boolean_product(z.values, y.values)
    for row, operand in enumerate(access.operands):
        tensor = x.rows[row]
        for col in np.flatnonzero(mapped & (x_got[row] != x.values[row])):
            loop = loops[col]
            targets = [name for name, software in mapping.loops if loop in software]
            where = ", ".join(targets)
            expected = bool(x.values[row, col])
            if expected:
                text = (f"software loop {loop.name} indexes {tensor} ({operand}) but is mapped "
                        f"to {where}, which does not index {operand}")
            else:
                text = (f"software loop {loop.name} does not index {tensor} ({operand}) but is "
                        f"mapped to {where}, which indexes {operand}")
            reasons.append(Reason(
                ReasonKind.ACCESS_MATRIX, f"{text} (entry X[{tensor}, {loop.name}]: expected "
                f"{int(expected)}, got {int(not expected)})", tensor=tensor, operand=operand,
                software_loop=loop.name, intrinsic_loop=targets[0], matrix="X",
                entry=(tensor, loop.name), expected=expected, got=not expected))
    z_got = boolean_product(x.values, y.values.T)
    for row, operand in enumerate(access.operands):
        tensor = x.rows[row]
        for col in np.flatnonzero(filled & (z_got[row] != z.values[row])):
            name = access.loops[col]
            software = ", ".join(loop.name for loop in mapping.software_loops(name))
            expected = bool(z.values[row, col])
            if expected:
                text = (f"intrinsic loop {name} indexes {operand}, but none of its software "
                        f"loops ({software}) indexes {tensor}")
            else:
                text = (f"intrinsic loop {name} does not index {operand}, but its software "
                        f"loops ({software}) index {tensor}")
            reasons.append(Reason(
                ReasonKind.ACCESS_MATRIX, f"{text} (entry Z[{operand}, {name}]: expected "
                f"{int(expected)}, got {int(not expected)})", tensor=tensor, operand=operand,
                intrinsic_loop=name, matrix="Z", entry=(operand, name), expected=expected,
                got=not expected))
    return reasons


def _structure_reasons(correspondence: Correspondence,
                       mapping: IntrinsicMapping) -> list[Reason]:
    """Why ``mapping`` (which passed Algorithm 4) is no union of basic matches."""
    sets = {name: frozenset(software) for name, software in mapping.loops}
    candidates = correspondence.candidates()
    inside = [{name: frozenset({loop} if loop is not None else ()) for name, loop in b.items()}
              for b in correspondence.basic_matches(candidates)
              if all(loop is None or loop in sets[name] for name, loop in b.items())]
    covered = unions(inside)
    if any(union == sets for union in covered):
        return []
    mapped = mapping.mapped
    reasons = []
    for name, software in mapping.loops:
        free = [loop for loop in candidates[name] if loop not in mapped]
        if not software and free:
            reasons.append(Reason(
                ReasonKind.EMPTY_INTRINSIC_LOOP, f"intrinsic loop {name} takes no software loop "
                f"although {', '.join(loop.name for loop in free)} could fill it; every basic "
                f"match fills each intrinsic loop that has a free candidate: add one to {name}",
                intrinsic_loop=name, software_loop=free[0].name))
    union_all: set[IterVar] = set()
    for basic in inside:
        for loops in basic.values():
            union_all |= loops
    for name, software in mapping.loops:
        for loop in software:
            if loop in union_all:
                continue
            reason = _dimension_reason(correspondence, mapping, name, loop)
            if reason is not None:
                reasons.append(reason)
    if not reasons:
        reasons.append(Reason(ReasonKind.EMPTY_MAPPING, f"mapping {mapping} is not a union of "
                              "basic matches; pick one of match(...).mappings"))
    return reasons


def _dimension_reason(correspondence: Correspondence, mapping: IntrinsicMapping, name: str,
                      loop: IterVar) -> Reason | None:
    """The dimension clash that keeps ``loop`` (on ``name``) out of every basic match."""
    for other_name, others in mapping.loops:
        if other_name == name or not others:
            continue
        clashes = [correspondence.conflict({other_name: other}, name, loop) for other in others]
        first = clashes[0]
        if first is not None and all(clash is not None for clash in clashes):
            operand, other, _, dim = first
            tensor = correspondence.tensor_name(operand)
            return Reason(
                ReasonKind.DIMENSION_CONFLICT, f"software loop {loop.name} (on {name}) and "
                f"{other.name} (on {other_name}) both index dimension {dim} of {tensor} "
                f"({operand}), and {other_name} has no loop that indexes another dimension "
                f"to pair {loop.name} with; within an operand the picked loops must index "
                f"different dimensions of its tensor", tensor=tensor, operand=operand,
                software_loop=loop.name, intrinsic_loop=name)
    return None


def _correspondence_of(product: ProductSum, access: IntrinsicAccess,
                       mapping: IntrinsicMapping) -> Correspondence | Reason:
    """Check the mapping's names and operand bindings against the compute and intrinsic."""
    if mapping.intrinsic != access.decl.name:
        return Reason(ReasonKind.UNKNOWN_NAME, f"the mapping is for intrinsic "
                      f"{mapping.intrinsic}, not {access.decl.name}")
    if [name for name, _ in mapping.loops] != list(access.loops):
        return Reason(ReasonKind.UNKNOWN_NAME, f"the mapping lists intrinsic loops "
                      f"{[n for n, _ in mapping.loops]}; {access.decl.name} has "
                      f"{list(access.loops)} (in this order)")
    stray = [loop.name for loop in mapping.mapped if loop not in product.loops]
    if stray:
        return Reason(ReasonKind.UNKNOWN_NAME, f"software loop(s) {', '.join(stray)} are not "
                      f"loops of {product.compute.name}", software_loop=stray[0])
    factors = []
    for source in access.sources:
        try:
            position = mapping.binding(source).factor
        except KeyError:
            position = None
        if position is None or not 0 <= position < len(product.factors):
            return Reason(ReasonKind.UNKNOWN_NAME, f"operand {source} is bound to no factor of "
                          f"{product.compute.name}", operand=source)
        factors.append((source, position))
    if len({p for _, p in factors}) != len(factors):
        return Reason(ReasonKind.UNKNOWN_NAME, "two source operands are bound to the same "
                      "factor; bind each factor once")
    return Correspondence(product, access, tuple(factors))


def verify(compute: Tensor, intrinsic: IntrinsicDecl,
           mapping: IntrinsicMapping) -> VerificationResult:
    """Verify ``mapping`` of ``compute`` onto ``intrinsic`` (see the module docstring)."""
    try:
        access = intrinsic_access(intrinsic)
        product = analyse_compute(compute)
    except MappingError as err:
        return VerificationResult(False, err.reasons)
    correspondence = _correspondence_of(product, access, mapping)
    if isinstance(correspondence, Reason):
        return VerificationResult(False, (correspondence,))
    reasons = correspondence.dtype_reasons() + _read(correspondence, mapping)
    x, y, z = _matrices(correspondence, mapping)
    reasons += _algorithm4_reasons(correspondence, mapping, x, y, z)
    if not reasons:
        reasons = _structure_reasons(correspondence, mapping)
    return VerificationResult(not reasons, tuple(reasons), x, y, z)


def mapping_from_names(compute: Tensor, intrinsic: IntrinsicDecl,
                       loops: MappingType[str, Sequence[str]],
                       operands: MappingType[str, str] | None = None) -> list[IntrinsicMapping]:
    """The mapping(s) a user names: ``loops`` maps intrinsic loop names to software loop
    names (missing intrinsic loops take none); ``operands`` maps source operand names to
    tensor names. Without ``operands``, one mapping per correspondence (product order first).
    Unknown names raise :class:`MappingError`."""
    access = intrinsic_access(intrinsic)
    product = analyse_compute(compute)
    unknown = sorted(set(loops) - set(access.loops))
    if unknown:
        raise MappingError(
            f"{intrinsic.name} has no loop {unknown[0]!r}; its loops are "
            f"{', '.join(access.loops)}",
            [Reason(ReasonKind.UNKNOWN_NAME, f"unknown intrinsic loop {unknown[0]!r}",
                    intrinsic_loop=unknown[0])])
    resolved = {name: tuple(product.loop(n) for n in loops.get(name, ()))
                for name in access.loops}
    order = product.loops
    table = tuple((name, tuple(sorted(resolved[name], key=order.index)))
                  for name in access.loops)
    pairs = correspondences(product, access)
    if operands is not None:
        pairs = [pair for pair in pairs
                 if all(pair.tensor_name(o) == t for o, t in operands.items())]
        if not pairs:
            names = ", ".join(f.tensor.name for f in product.factors)
            raise MappingError(
                f"no factor assignment of {compute.name} gives operands {dict(operands)}; "
                f"its factors are {names} and the source operands of {intrinsic.name} are "
                f"{', '.join(access.sources)}",
                [Reason(ReasonKind.UNKNOWN_NAME, f"operands {dict(operands)} name no "
                        f"assignment of {names} to {', '.join(access.sources)}")])
    return [IntrinsicMapping(intrinsic.name, pair.bindings(), table) for pair in pairs]


def force_mapping(compute: Tensor, intrinsic: IntrinsicDecl,
                  loops: MappingType[str, Sequence[str]],
                  operands: MappingType[str, str] | None = None) -> IntrinsicMapping:
    """The mapping a user asks for, verified; a :class:`MappingError` carrying the structured
    reasons when it fails verification (under every correspondence tried, the reasons of the
    first)."""
    candidates = mapping_from_names(compute, intrinsic, loops, operands)
    if not candidates:
        product = analyse_compute(compute)
        raise MappingError(f"{compute.name} multiplies {len(product.factors)} factor(s); "
                           f"{intrinsic.name} needs {len(intrinsic.compute.sources)}")
    first: VerificationResult | None = None
    for mapping in candidates:
        result = verify(compute, intrinsic, mapping)
        if result.ok:
            return mapping
        first = first or result
    assert first is not None
    first.raise_if_rejected(candidates[0])
    raise AssertionError("unreachable")
