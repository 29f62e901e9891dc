"""Matching (thesis Fig. 5.2 b-d, Fig. 5.4): which loops of a compute can map onto which loops
of an intrinsic, the basic matches, and the mappings.

For one *correspondence* (which software factor plays each source operand; the compute's
output plays the destination):

1. **Candidates.** A software loop is a candidate for an intrinsic loop when it has the same
   kind and indexes exactly the software tensors whose operands the intrinsic loop indexes.
   For ``Dst[i1, i2] += Src1[i1, r1] * Src2[r1, i2]``: ``i1``'s candidates index Src1's tensor
   and the output but not Src2's. A loop used with a negative coefficient or in a non-affine
   term of any index is no candidate.
2. **Basic matches.** One candidate per intrinsic loop, all different, such that within each
   operand the picked loops index different dimensions of its tensor (conv2d: ``p`` with
   ``r`` is no basic match, both index the input's height). An intrinsic loop stays empty
   (padded) only when each of its candidates is picked by another intrinsic loop (so, for
   the usual intrinsics, when it has no candidate at all: N of a GEMV).
3. **Mappings.** The union of a non-empty set of basic matches (per intrinsic loop, the set of
   software loops it takes), as long as no software loop lands on two intrinsic loops; two
   mappings are the same when their sets are.

Correspondences are tried in every order the dtypes allow (the product's order first), and
mappings equal up to a symmetry of the intrinsic (:mod:`.symmetry`) are counted once.

>>> from tilecraft import te, ops
>>> from tilecraft.intrin.examples import wmma
>>> x = te.placeholder((1, 4, 6, 6), "float16", name="x")
>>> w = te.placeholder((8, 4, 3, 3), "float16", name="w")
>>> y = ops.conv2d(x, w, out_dtype="float32", name="y")
>>> result = match(y, wmma(16, 16, 16))
>>> {name: [loop.name for loop in loops] for name, loops in result.candidates.items()}
{'i1': ['n', 'h', 'w'], 'i2': ['k'], 'r1': ['rc', 'rh', 'rw']}
>>> len(result.basic_matches), len(result.mappings)
(7, 35)
>>> print(result.mappings[0])
wmma_16x16x16: i1 <- (n), i2 <- (k), r1 <- (rc) [Src1=x, Src2=w, Dst=y]
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tilecraft.graph import Graph
from tilecraft.intrin.access import (
    IntrinsicAccess,
    ProductSum,
    SoftwareOperand,
    accumulation_compatible,
    analyse_compute,
    intrinsic_access,
)
from tilecraft.intrin.mapping import (
    IntrinsicMapping,
    MappingError,
    OperandBinding,
    Reason,
    ReasonKind,
)
from tilecraft.intrin.symmetry import Symmetry, intrinsic_symmetries
from tilecraft.target.intrinsic import IntrinsicDecl
from tilecraft.te.expr import IterVar
from tilecraft.te.tensor import Tensor

Assignment = dict[str, IterVar | None]


@dataclass(frozen=True)
class Correspondence:
    """Which software factor plays each source operand (the output plays the destination)."""

    product: ProductSum
    access: IntrinsicAccess
    factors: tuple[tuple[str, int], ...]

    def factor(self, operand: str) -> SoftwareOperand | None:
        """The factor playing ``operand``; ``None`` for the destination."""
        position = dict(self.factors).get(operand)
        return None if position is None else self.product.factors[position]

    def tensor_name(self, operand: str) -> str:
        factor = self.factor(operand)
        return self.product.compute.name if factor is None else factor.tensor.name

    def label(self, operand: str) -> str:
        return f"{self.tensor_name(operand)} ({operand})"

    def uses(self, operand: str, loop: IterVar) -> bool:
        factor = self.factor(operand)
        return loop in self.product.axes if factor is None else loop in factor.loops

    def dims(self, operand: str, loop: IterVar) -> frozenset[int]:
        """The dimensions of ``operand``'s software tensor whose index uses ``loop``."""
        factor = self.factor(operand)
        if factor is None:
            axes = self.product.axes
            return frozenset({axes.index(loop)}) if loop in axes else frozenset()
        return factor.dims_of(loop)

    def row(self, loop: IterVar) -> frozenset[str]:
        """The operands whose software tensor ``loop`` indexes (a column of ``X``)."""
        return frozenset(o for o in self.access.operands if self.uses(o, loop))

    def bindings(self) -> tuple[OperandBinding, ...]:
        return tuple(OperandBinding(o, self.tensor_name(o), dict(self.factors).get(o))
                     for o in self.access.operands)

    def dtype_reasons(self) -> list[Reason]:
        """Operands whose software tensor has the wrong element type."""
        reasons = []
        for operand in self.access.sources:
            factor = self.factor(operand)
            assert factor is not None
            want = self.access.dtype(operand)
            if factor.tensor.dtype != want:
                reasons.append(Reason(
                    ReasonKind.DTYPE, f"{factor.tensor.name} is {factor.tensor.dtype.value} but "
                    f"operand {operand} of {self.access.decl.name} takes {want.value}; cast the "
                    "tensor or pick an intrinsic of its dtype",
                    tensor=factor.tensor.name, operand=operand))
        destination = self.access.destination
        want = self.access.dtype(destination)
        have = self.product.product_dtype
        if not accumulation_compatible(have, want):
            reasons.append(Reason(
                ReasonKind.DTYPE, f"{self.product.compute.name} sums {have.value} products but "
                f"{destination} of {self.access.decl.name} accumulates {want.value}; build the "
                f"compute with out_dtype={want.value!r} or pick another intrinsic",
                tensor=self.product.compute.name, operand=destination))
        return reasons

    def excluded(self) -> dict[IterVar, Reason]:
        """Loops that are no candidate anywhere because of their index form."""
        result: dict[IterVar, Reason] = {}
        for factor in self.product.factors:
            for d, dim in enumerate(factor.dims):
                for loop in dim.loops:
                    if loop in result:
                        continue
                    if loop in dim.opaque:
                        why = f"is used in a non-affine index ({dim.index})"
                    elif dim.coef(loop) < 0:
                        why = f"has a negative coefficient ({dim.index})"
                    else:
                        continue
                    result[loop] = Reason(
                        ReasonKind.INDEX_FORM, f"loop {loop.name} {why} in dimension {d} of "
                        f"{factor.tensor.name}; such a loop cannot be fused onto an intrinsic "
                        "loop and stays outside the intrinsic",
                        tensor=factor.tensor.name, software_loop=loop.name)
        return result

    def candidates(self) -> dict[str, tuple[IterVar, ...]]:
        excluded = self.excluded()
        access = self.access
        return {name: tuple(loop for loop in self.product.loops
                            if loop not in excluded and loop.kind is kind
                            and self.row(loop) == access.row(name))
                for name, kind in zip(access.loops, access.kinds)}

    def conflict(self, picks: Assignment, name: str, loop: IterVar) -> tuple[str, IterVar,
                                                                          str, int] | None:
        """The first (operand, loop, intrinsic loop, dimension) whose software dimension
        ``loop`` on intrinsic loop ``name`` would share with another pick."""
        for operand in self.access.row(name):
            mine = self.dims(operand, loop)
            for other_name, other in picks.items():
                if other is None or other_name == name or \
                        operand not in self.access.row(other_name):
                    continue
                shared = mine & self.dims(operand, other)
                if shared:
                    return operand, other, other_name, min(shared)
        return None

    def basic_matches(self, candidates: dict[str, tuple[IterVar, ...]]) -> list[Assignment]:
        """Step 2 of the module docstring, by backtracking over the intrinsic loops."""
        names = self.access.loops
        found: list[Assignment] = []
        picks: Assignment = {}

        def extend(position: int) -> None:
            if position == len(names):
                used = {loop for loop in picks.values() if loop is not None}
                if used and all(loop is not None or set(candidates[name]) <= used
                                for name, loop in picks.items()):
                    found.append(dict(picks))
                return
            name = names[position]
            used = {loop for loop in picks.values() if loop is not None}
            for loop in candidates[name]:
                if loop not in used and self.conflict(picks, name, loop) is None:
                    picks[name] = loop
                    extend(position + 1)
            picks[name] = None
            extend(position + 1)
            del picks[name]

        extend(0)
        return found

    def to_mapping(self, sets: dict[str, frozenset[IterVar]]) -> IntrinsicMapping:
        order = self.product.loops
        loops = tuple((name, tuple(loop for loop in order if loop in sets.get(name, ())))
                      for name in self.access.loops)
        return IntrinsicMapping(self.access.decl.name, self.bindings(), loops)


def unions(basics: Sequence[dict[str, frozenset[IterVar]]]) -> list[dict[str, frozenset[
        IterVar]]]:
    """Step 3: every distinct union of a non-empty set of ``basics`` in which no software
    loop lands on two intrinsic loops, in order of discovery."""
    found: dict[tuple, dict[str, frozenset[IterVar]]] = {}
    for basic in basics:
        new = [basic] + [{name: sets[name] | basic[name] for name in sets}
                         for sets in found.values()]
        for sets in new:
            members = [loop for loops in sets.values() for loop in loops]
            if len(members) != len(set(members)):
                continue
            found.setdefault(tuple(sorted((n, tuple(sorted(lp.uid for lp in s)))
                                          for n, s in sets.items())), sets)
    return list(found.values())


def correspondences(product: ProductSum, access: IntrinsicAccess) -> list[Correspondence]:
    """Every assignment of the product's factors to the source operands (product order
    first); empty when the numbers differ."""
    if len(product.factors) != len(access.sources):
        return []
    return [Correspondence(product, access, tuple(zip(access.sources, order)))
            for order in itertools.permutations(range(len(product.factors)))]


@dataclass(frozen=True)
class CorrespondenceMatch:
    """Matching under one correspondence: its candidates, basic matches and mappings, or
    ``rejected`` (the reasons it is impossible, e.g. dtypes)."""

    operands: tuple[OperandBinding, ...]
    candidates: tuple[tuple[str, tuple[IterVar, ...]], ...]
    excluded: tuple[Reason, ...]
    basic_matches: tuple[IntrinsicMapping, ...]
    mappings: tuple[IntrinsicMapping, ...]
    rejected: tuple[Reason, ...] = ()


@dataclass(frozen=True)
class MatchResult:
    """What ``match`` found: the distinct ``mappings`` and ``basic_matches`` (over every
    correspondence, up to the intrinsic's symmetries), the per-correspondence details, and
    when nothing matched the ``reasons``."""

    compute: Tensor
    intrinsic: IntrinsicDecl
    correspondences: tuple[CorrespondenceMatch, ...]
    basic_matches: tuple[IntrinsicMapping, ...]
    mappings: tuple[IntrinsicMapping, ...]
    reasons: tuple[Reason, ...]
    symmetries: tuple[Symmetry, ...] = ()

    @property
    def ok(self) -> bool:
        return bool(self.mappings)

    @property
    def candidates(self) -> dict[str, tuple[IterVar, ...]]:
        """Candidates per intrinsic loop under the first correspondence that has mappings
        (else the first the dtypes allow)."""
        usable = [c for c in self.correspondences if c.mappings] or \
            [c for c in self.correspondences if not c.rejected]
        return dict(usable[0].candidates) if usable else {}


def _distinct(mappings: Iterable[IntrinsicMapping], symmetries: Sequence[Symmetry],
              access: IntrinsicAccess) -> tuple[IntrinsicMapping, ...]:
    seen: set[tuple] = set()
    kept = []
    for mapping in mappings:
        if mapping.key() in seen:
            continue
        kept.append(mapping)
        seen.update(symmetry.apply(mapping, access).key() for symmetry in symmetries)
        seen.add(mapping.key())
    return tuple(kept)


def match_correspondence(correspondence: Correspondence) -> CorrespondenceMatch:
    """Candidates, basic matches and mappings under one correspondence."""
    rejected = correspondence.dtype_reasons()
    bindings = correspondence.bindings()
    if rejected:
        return CorrespondenceMatch(bindings, (), (), (), (), tuple(rejected))
    candidates = correspondence.candidates()
    basics = correspondence.basic_matches(candidates)
    basic_sets = [{name: frozenset({loop} if loop is not None else ())
                   for name, loop in basic.items()} for basic in basics]
    mappings = [correspondence.to_mapping(sets) for sets in unions(basic_sets)]
    return CorrespondenceMatch(
        bindings, tuple(candidates.items()), tuple(correspondence.excluded().values()),
        tuple(correspondence.to_mapping(sets) for sets in basic_sets), tuple(mappings))


def match(compute: Tensor, intrinsic: IntrinsicDecl) -> MatchResult:
    """Every mapping of ``compute`` onto ``intrinsic`` (see the module docstring). Never
    raises for a compute that does not match: ``reasons`` say why it does not."""
    try:
        access = intrinsic_access(intrinsic)
        product = analyse_compute(compute)
    except MappingError as err:
        return MatchResult(compute, intrinsic, (), (), (), err.reasons)
    pairs = correspondences(product, access)
    if not pairs:
        message = (f"{compute.name} multiplies {len(product.factors)} factor(s) but "
                   f"{intrinsic.name} multiplies {len(access.sources)} source operand(s)")
        return MatchResult(compute, intrinsic, (), (), (),
                           (Reason(ReasonKind.NOT_PRODUCT_SUM, message, tensor=compute.name),))
    symmetries = intrinsic_symmetries(access)
    details = tuple(match_correspondence(pair) for pair in pairs)
    basic = _distinct((m for d in details for m in d.basic_matches), symmetries, access)
    mappings = _distinct((m for d in details for m in d.mappings), symmetries, access)
    reasons: tuple[Reason, ...] = ()
    if not mappings:
        rejected = [r for d in details for r in d.rejected]
        if rejected and all(d.rejected for d in details):
            reasons = tuple(dict.fromkeys(rejected))
        else:
            reasons = (Reason(ReasonKind.EMPTY_MAPPING,
                              f"no loop of {compute.name} indexes its tensors the way a loop "
                              f"of {intrinsic.name} indexes its operands, so no basic match "
                              "exists", tensor=compute.name),
                       *dict.fromkeys(r for d in details for r in d.excluded))
    return MatchResult(compute, intrinsic, details, basic, mappings, reasons, symmetries)


def match_graph(program: Graph | Tensor | Sequence[Tensor],
                intrinsic: IntrinsicDecl) -> dict[str, MatchResult]:
    """``match`` for every compute of a graph, by compute name (topological order)."""
    from tilecraft.reference import as_graph

    graph = as_graph(program)
    return {tensor.name: match(tensor, intrinsic) for tensor in graph.computes}
