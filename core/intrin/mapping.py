"""The software-to-intrinsic mapping of thesis Def. 5 (its compute part), and the structured
reasons a mapping is refused.

A mapping says which software tensor plays each intrinsic operand and which software loops
each intrinsic loop takes (fused, outer to inner in the compute's loop order). Software loops
that no intrinsic loop takes stay as loops around the intrinsic; an intrinsic loop that takes
no software loop is padded (extent 1 of its range is used).

>>> from tilecraft import te
>>> i, k = te.reduce_axis(4, "i"), te.reduce_axis(8, "k")
>>> m = IntrinsicMapping("mma", (OperandBinding("Src1", "A", 0), OperandBinding("Dst", "C", None)),
...                      (("i1", (i,)), ("r1", (k,))))
>>> print(m)
mma: i1 <- (i), r1 <- (k) [Src1=A, Dst=C]
>>> m.intrinsic_loop_of(k)
'r1'
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from tilecraft.errors import TilecraftError
from tilecraft.te.expr import IterVar


class ReasonKind(str, enum.Enum):
    """What kind of rule a rejected mapping (or an unmatchable compute) breaks."""

    NOT_PRODUCT_SUM = "not_product_sum"
    UNKNOWN_NAME = "unknown_name"
    DTYPE = "dtype"
    LOOP_MAPPED_TWICE = "loop_mapped_twice"
    LOOP_KIND = "loop_kind"
    INDEX_FORM = "index_form"
    ACCESS_MATRIX = "access_matrix"
    DIMENSION_CONFLICT = "dimension_conflict"
    EMPTY_INTRINSIC_LOOP = "empty_intrinsic_loop"
    EMPTY_MAPPING = "empty_mapping"
    LAYOUT = "layout"
    UNSUPPORTED = "unsupported"


@dataclass(frozen=True)
class Reason:
    """One broken rule, with the culprits named.

    ``matrix``/``entry``/``expected``/``got`` locate a failed entry of Algorithm 4: ``"X"``
    (software access, rows software tensors, columns software loops) or ``"Z"`` (intrinsic
    access, rows operands, columns intrinsic loops); ``entry`` is (row, column).
    """

    kind: ReasonKind
    message: str
    tensor: str | None = None
    operand: str | None = None
    software_loop: str | None = None
    intrinsic_loop: str | None = None
    matrix: str | None = None
    entry: tuple[str, str] | None = None
    expected: bool | None = None
    got: bool | None = None

    def __str__(self) -> str:
        return self.message


class MappingError(TilecraftError):
    """A mapping was asked for that the intrinsic cannot implement; ``reasons`` say why."""

    def __init__(self, message: str, reasons: Sequence[Reason] = ()):
        self.reasons: tuple[Reason, ...] = tuple(reasons)
        details = "".join(f"\n  - {reason.message}" for reason in self.reasons)
        super().__init__(message + details)


@dataclass(frozen=True)
class OperandBinding:
    """Intrinsic operand ``operand`` is played by software tensor ``tensor``: the factor at
    ``factor`` (its position in the product) for a source, ``None`` for the destination
    (the compute's output)."""

    operand: str
    tensor: str
    factor: int | None


@dataclass(frozen=True)
class IntrinsicMapping:
    """Def. 5's compute mapping plus the operand correspondence.

    ``loops`` has one entry per intrinsic loop in declaration order: the software loops it
    takes, outer to inner (the compute's loop order: spatial axes, then reduce axes).
    """

    intrinsic: str
    operands: tuple[OperandBinding, ...]
    loops: tuple[tuple[str, tuple[IterVar, ...]], ...]

    def software_loops(self, intrinsic_loop: str) -> tuple[IterVar, ...]:
        for name, software in self.loops:
            if name == intrinsic_loop:
                return software
        raise KeyError(intrinsic_loop)

    def intrinsic_loop_of(self, loop: IterVar) -> str | None:
        """The intrinsic loop that takes ``loop`` (the first one, if several wrongly do)."""
        for name, software in self.loops:
            if loop in software:
                return name
        return None

    def binding(self, operand: str) -> OperandBinding:
        for binding in self.operands:
            if binding.operand == operand:
                return binding
        raise KeyError(operand)

    @property
    def mapped(self) -> frozenset[IterVar]:
        """Every software loop some intrinsic loop takes."""
        return frozenset(loop for _, software in self.loops for loop in software)

    def key(self) -> tuple:
        """Identity of the mapping: the correspondence and, per intrinsic loop, the *set* of
        software loops (two mappings are the same when these are)."""
        return (tuple((b.operand, b.factor) for b in self.operands),
                tuple((name, frozenset(software)) for name, software in self.loops))

    def names(self) -> dict[str, list[str]]:
        """Intrinsic loop -> software loop names (for reports and ``force_mapping``)."""
        return {name: [loop.name for loop in software] for name, software in self.loops}

    def __str__(self) -> str:
        loops = ", ".join(f"{name} <- ({', '.join(loop.name for loop in software)})"
                          for name, software in self.loops)
        operands = ", ".join(f"{b.operand}={b.tensor}" for b in self.operands)
        return f"{self.intrinsic}: {loops} [{operands}]"
