"""The chain description Chimera's analysis works on (thesis §3.4.1.1).

A :class:`Chain` is a sequence of compute-intensive operators in producer -> consumer order
(GEMM -> GEMM, batch GEMM -> batch GEMM, conv -> conv), with the memory-bound operators between
them attached to the producer's block. Its *independent loops* are the loops of all operators
after identifying the loops two operators share (a GEMM chain has four, m k l n, not six); every
tensor access is an affine index over those loops, so one can read off which loops index which
tensor, which loops are reduce loops of which operator, and which loops are private.

Chains are derived from te expressions by :func:`tilecraft.fusion.derive.chain_from_computes`;
this module only holds the (frozen) description.

>>> gemm1 = ChainOp("C", loops=("m", "l", "k"), reduce_loops=("k",), accesses=(
...     TensorAccess.of("A", (("m",), ("k",)), TensorRole.INPUT),
...     TensorAccess.of("B", (("k",), ("l",)), TensorRole.INPUT),
...     TensorAccess.of("C", (("m",), ("l",)), TensorRole.INTERMEDIATE)))
>>> gemm2 = ChainOp("E", loops=("m", "n", "l"), reduce_loops=("l",), accesses=(
...     TensorAccess.of("C", (("m",), ("l",)), TensorRole.INTERMEDIATE),
...     TensorAccess.of("D", (("l",), ("n",)), TensorRole.INPUT),
...     TensorAccess.of("E", (("m",), ("n",)), TensorRole.OUTPUT)))
>>> chain = Chain((gemm1, gemm2), tuple(ChainLoop(n, 64) for n in "mnlk"))
>>> chain.private_loops(0), chain.shared_loops(0)
(('k',), ('m', 'l'))
>>> print(chain)
chain C -> E over loops m=64 n=64 l=64 k=64
  C[m, l] = sum_k A[m, k] * B[k, l]
  E[m, n] = sum_l C[m, l] * D[l, n]
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from tilecraft.dtypes import DType
from tilecraft.errors import TilecraftError
from tilecraft.fusion.polynomial import Polynomial, Tile


class FusionError(TilecraftError):
    """Computes do not form an analysable chain, or a fusion request is malformed."""


class TensorRole(str, enum.Enum):
    """Where a tensor of a chain lives: read from outside, written out, or kept on chip."""

    INPUT = "input"
    OUTPUT = "output"
    INTERMEDIATE = "intermediate"


@dataclass(frozen=True)
class IndexExpr:
    """``sum(coef * loop) + constant`` over chain loops: one dimension of a tensor access."""

    terms: tuple[tuple[str, int], ...]
    constant: int = 0

    @staticmethod
    def of(terms: Mapping[str, int], constant: int = 0) -> IndexExpr:
        return IndexExpr(tuple((loop, c) for loop, c in terms.items() if c != 0), constant)

    @property
    def loops(self) -> tuple[str, ...]:
        return tuple(loop for loop, _ in self.terms)

    def coefficient(self, loop: str) -> int:
        return dict(self.terms).get(loop, 0)

    def substitute(self, mapping: Mapping[str, IndexExpr]) -> IndexExpr:
        """Replace loops by index expressions (loops not in ``mapping`` stay)."""
        terms: dict[str, int] = {}
        constant = self.constant
        for loop, coef in self.terms:
            image = mapping.get(loop)
            if image is None:
                terms[loop] = terms.get(loop, 0) + coef
                continue
            constant += coef * image.constant
            for inner, inner_coef in image.terms:
                terms[inner] = terms.get(inner, 0) + coef * inner_coef
        return IndexExpr.of(terms, constant)

    def span(self) -> Polynomial:
        """Largest minus smallest index over one tile: ``sum |coef| * (T - 1)``."""
        total = Polynomial.constant(0)
        for loop, coef in self.terms:
            total = total + abs(coef) * (Polynomial.symbol(Tile(loop)) - 1)
        return total

    def footprint(self) -> Polynomial:
        """Elements of this dimension one tile touches (bounding box): ``span + 1``."""
        return self.span() + 1

    def __str__(self) -> str:
        parts = []
        for loop, coef in self.terms:
            parts.append(loop if coef == 1 else f"{coef}*{loop}")
        if self.constant or not parts:
            parts.append(str(self.constant))
        return " + ".join(parts).replace("+ -", "- ")


@dataclass(frozen=True)
class TensorAccess:
    """One tensor touched by an operator's block and its index over the chain loops."""

    tensor: str
    indices: tuple[IndexExpr, ...]
    role: TensorRole
    dtype: DType = DType.FLOAT32
    shares_buffer_with: str = ""

    @staticmethod
    def of(tensor: str, dims: Sequence[Sequence[str]], role: TensorRole,
           dtype: DType = DType.FLOAT32) -> TensorAccess:
        """An access whose dimension ``d`` is the sum of the loops ``dims[d]``."""
        return TensorAccess(tensor, tuple(IndexExpr.of({loop: 1 for loop in dim})
                                          for dim in dims), role, dtype)

    @property
    def io(self) -> bool:
        """Whether the tensor moves between the chip and the outer memory (Algorithm 1's
        ``IOTensors``); intermediates stay on chip."""
        return self.role is not TensorRole.INTERMEDIATE

    @property
    def loops(self) -> tuple[str, ...]:
        """Loops that index the tensor, in order of first appearance."""
        return tuple(dict.fromkeys(loop for index in self.indices for loop in index.loops))

    @property
    def on_chip(self) -> bool:
        """Whether the tile needs its own buffer (an elementwise step computed in place into
        its input's buffer, e.g. softmax's exp, needs none)."""
        return not self.shares_buffer_with

    def footprint(self) -> Polynomial:
        """Elements of one tile of the tensor (Algorithm 1's ``getFootprint``)."""
        return Polynomial.product(index.footprint() for index in self.indices)

    def __str__(self) -> str:
        return f"{self.tensor}[{', '.join(str(i) for i in self.indices)}]"


@dataclass(frozen=True)
class ChainLoop:
    """An independent loop of a chain.

    ``full_extent`` marks a loop that must not be tiled (a memory-bound reduction between two
    operators, e.g. softmax's row sum, needs the whole extent in one tile); ``reason`` says why.
    """

    name: str
    extent: int
    reduce: bool = False
    op: str = ""
    full_extent: bool = False
    reason: str = ""


@dataclass(frozen=True)
class ChainOp:
    """A compute-intensive operator of a chain and everything its block touches."""

    name: str
    loops: tuple[str, ...]
    reduce_loops: tuple[str, ...]
    accesses: tuple[TensorAccess, ...]
    attached: tuple[str, ...] = ()
    flops: int = 0

    def access(self, tensor: str) -> TensorAccess:
        for item in self.accesses:
            if item.tensor == tensor:
                return item
        raise FusionError(f"operator {self.name} of the chain does not touch tensor {tensor!r}; "
                          f"it touches {', '.join(a.tensor for a in self.accesses)}")

    @property
    def output(self) -> TensorAccess:
        return self.access(self.name)


@dataclass(frozen=True)
class Chain:
    """Compute-intensive operators in producer -> consumer order and their loops."""

    ops: tuple[ChainOp, ...]
    loops: tuple[ChainLoop, ...]

    def __post_init__(self) -> None:
        if not self.ops:
            raise FusionError("a chain needs at least one operator")
        names = [loop.name for loop in self.loops]
        if len(set(names)) != len(names):
            raise FusionError(f"chain loops must have distinct names, got {names}")
        known = set(names)
        for op in self.ops:
            for loop in (*op.loops, *(lp for a in op.accesses for lp in a.loops)):
                if loop not in known:
                    raise FusionError(f"operator {op.name} uses loop {loop!r}, which is not a "
                                      f"loop of the chain ({', '.join(names)})")

    # lookups ----------------------------------------------------------------------------------
    @property
    def loop_names(self) -> tuple[str, ...]:
        return tuple(loop.name for loop in self.loops)

    @property
    def extents(self) -> dict[str, int]:
        return {loop.name: loop.extent for loop in self.loops}

    def loop(self, name: str) -> ChainLoop:
        for loop in self.loops:
            if loop.name == name:
                return loop
        raise FusionError(f"the chain has no loop {name!r}; its loops are "
                          f"{', '.join(self.loop_names)}")

    def op(self, name: str) -> ChainOp:
        for op in self.ops:
            if op.name == name:
                return op
        raise FusionError(f"the chain has no operator {name!r}; its operators are "
                          f"{', '.join(o.name for o in self.ops)}")

    @property
    def names(self) -> str:
        return " -> ".join(op.name for op in self.ops)

    def op_loops(self, index: int) -> set[str]:
        """Loops used by operator ``index``: its own loops and every loop indexing its tensors."""
        op = self.ops[index]
        return set(op.loops) | {loop for a in op.accesses for loop in a.loops}

    def private_loops(self, index: int) -> tuple[str, ...]:
        """Loops of operator ``index`` that no later operator uses (Algorithm 1 erases them
        from the permutation before the next operator)."""
        later = set().union(*(self.op_loops(j) for j in range(index + 1, len(self.ops))))
        mine = self.op_loops(index)
        return tuple(loop for loop in self.loop_names if loop in mine and loop not in later)

    def shared_loops(self, index: int) -> tuple[str, ...]:
        """Loops of operator ``index`` that a later operator uses too."""
        later = set().union(*(self.op_loops(j) for j in range(index + 1, len(self.ops))))
        mine = self.op_loops(index)
        return tuple(loop for loop in self.loop_names if loop in mine and loop in later)

    def fixed_loops(self) -> tuple[str, ...]:
        """Loops that run once per tile whatever the tiling: extent 1 or marked full-extent."""
        return tuple(loop.name for loop in self.loops if loop.full_extent or loop.extent == 1)

    def tensors(self) -> dict[str, TensorAccess]:
        """Every tensor of the chain (first access wins), by name."""
        result: dict[str, TensorAccess] = {}
        for op in self.ops:
            for access in op.accesses:
                result.setdefault(access.tensor, access)
        return result

    def intermediates(self) -> tuple[str, ...]:
        return tuple(name for name, a in self.tensors().items()
                     if a.role is TensorRole.INTERMEDIATE)

    def flops(self) -> int:
        return sum(op.flops for op in self.ops)

    def design_space_size(self) -> int:
        """Orders of the independent loops: ``I!`` (24 for a GEMM chain, not (3+3)! = 720)."""
        return math.factorial(len(self.loops))

    def renamed(self, mapping: Mapping[str, str]) -> Chain:
        """The same chain with loops renamed (``{"i": "m", ...}``; others keep their name)."""
        def name(loop: str) -> str:
            return mapping.get(loop, loop)

        def index(expr: IndexExpr) -> IndexExpr:
            return IndexExpr(tuple((name(lp), c) for lp, c in expr.terms), expr.constant)

        ops = tuple(replace(
            op, loops=tuple(name(lp) for lp in op.loops),
            reduce_loops=tuple(name(lp) for lp in op.reduce_loops),
            accesses=tuple(replace(a, indices=tuple(index(i) for i in a.indices))
                           for a in op.accesses)) for op in self.ops)
        loops = tuple(replace(loop, name=name(loop.name)) for loop in self.loops)
        return Chain(ops, loops)

    # printing ---------------------------------------------------------------------------------
    def __str__(self) -> str:
        loops = " ".join(f"{lp.name}={lp.extent}{'!' if lp.full_extent else ''}"
                         for lp in self.loops)
        lines = [f"chain {self.names} over loops {loops}"]
        for op in self.ops:
            inputs = [a for a in op.accesses if a.tensor != op.name
                      and a.tensor not in op.attached and a.role is not TensorRole.OUTPUT]
            reduce = ",".join(op.reduce_loops)
            body = " * ".join(str(a) for a in inputs[:2]) if len(inputs) >= 2 else \
                ", ".join(str(a) for a in inputs)
            line = f"  {op.output} = sum_{reduce} {body}" if reduce else f"  {op.output} = {body}"
            if op.attached:
                line += f"  then {', '.join(op.attached)}"
            lines.append(line)
        return "\n".join(lines)


def loop_order(order: Iterable[str] | str) -> tuple[str, ...]:
    """An order given as a sequence of loop names, or as a string of one-letter names
    (``"mlkn"``), outermost first."""
    if isinstance(order, str):
        return tuple(order.split()) if " " in order else tuple(order)
    return tuple(order)
