"""A tiny symbolic algebra for data-movement formulas (sympy is not a dependency).

A :class:`Polynomial` is a sum of integer-coefficient monomials over three kinds of symbols,
one of each kind per chain loop ``x``:

- ``X``: the loop's extent (``Extent("x")``), printed in upper case;
- ``T_X``: its tile size (``Tile("x")``);
- ``ceil(X/T_X)``: its trip count, the number of tiles (``Trips("x")``).

That is enough for Algorithm 1's results (Table 3.4 writes ``M*K*ceil(L/T_L)``). A polynomial
evaluates exactly (integer tiles, ``ceil``) or relaxed (real tiles, ``X/T_X``), and exports its
relaxed form as coefficient and exponent arrays for the real-valued solver.

>>> m, k, l = (Polynomial.symbol(Extent(n)) for n in "mkl")
>>> dm = m * k * Polynomial.symbol(Trips("l"))
>>> print(dm)
M*K*ceil(L/T_L)
>>> dm.evaluate({"m": 64, "k": 32, "l": 100}, {"l": 30})
8192
>>> dm.evaluate({"m": 64, "k": 32, "l": 100}, {"l": 30}, relaxed=True)
6826.66...
>>> print(Polynomial.symbol(Tile("h")) + Polynomial.symbol(Tile("r")) - 1)
T_H + T_R - 1
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np


class SymbolKind(enum.IntEnum):
    """Kinds of symbol, in the order they print inside a monomial."""

    EXTENT = 0
    TILE = 1
    TRIPS = 2


@dataclass(frozen=True, order=True)
class Symbol:
    kind: SymbolKind
    loop: str

    def __str__(self) -> str:
        upper = self.loop.upper()
        if self.kind is SymbolKind.EXTENT:
            return upper
        if self.kind is SymbolKind.TILE:
            return f"T_{upper}"
        return f"ceil({upper}/T_{upper})"


def Extent(loop: str) -> Symbol:  # noqa: N802 - reads like a symbol constructor
    """The extent symbol of ``loop``."""
    return Symbol(SymbolKind.EXTENT, loop)


def Tile(loop: str) -> Symbol:  # noqa: N802
    """The tile-size symbol of ``loop``."""
    return Symbol(SymbolKind.TILE, loop)


def Trips(loop: str) -> Symbol:  # noqa: N802
    """The trip-count symbol ``ceil(X / T_X)`` of ``loop``."""
    return Symbol(SymbolKind.TRIPS, loop)


Powers = tuple[tuple[Symbol, int], ...]
Number = int | float | np.ndarray


class Polynomial:
    """An immutable sum of ``coefficient * prod(symbol ** power)`` terms.

    Symbols print in the order they were first multiplied in (so ``A[m, k]``'s movement reads
    ``M*K*...`` as in the thesis), extents before tiles before trip counts.
    """

    __slots__ = ("_terms", "_order")

    def __init__(self, terms: Mapping[Powers, int] | None = None,
                 order: Sequence[Symbol] = ()) -> None:
        self._terms: dict[Powers, int] = {p: c for p, c in (terms or {}).items() if c != 0}
        self._order: tuple[Symbol, ...] = tuple(dict.fromkeys(order))

    # construction -----------------------------------------------------------------------------
    @staticmethod
    def constant(value: int) -> Polynomial:
        return Polynomial({(): int(value)})

    @staticmethod
    def symbol(symbol: Symbol) -> Polynomial:
        return Polynomial({((symbol, 1),): 1}, (symbol,))

    @staticmethod
    def product(factors: Iterable[Polynomial]) -> Polynomial:
        result = Polynomial.constant(1)
        for factor in factors:
            result = result * factor
        return result

    @staticmethod
    def _coerce(value: Polynomial | int) -> Polynomial:
        return value if isinstance(value, Polynomial) else Polynomial.constant(value)

    # arithmetic -------------------------------------------------------------------------------
    def __add__(self, other: Polynomial | int) -> Polynomial:
        other = self._coerce(other)
        terms = dict(self._terms)
        for powers, coef in other._terms.items():
            terms[powers] = terms.get(powers, 0) + coef
        return Polynomial(terms, self._order + other._order)

    __radd__ = __add__

    def __neg__(self) -> Polynomial:
        return Polynomial({p: -c for p, c in self._terms.items()}, self._order)

    def __sub__(self, other: Polynomial | int) -> Polynomial:
        return self + (-self._coerce(other))

    def __rsub__(self, other: int) -> Polynomial:
        return self._coerce(other) - self

    def __mul__(self, other: Polynomial | int) -> Polynomial:
        other = self._coerce(other)
        terms: dict[Powers, int] = {}
        for pa, ca in self._terms.items():
            for pb, cb in other._terms.items():
                merged = dict(pa)
                for sym, power in pb:
                    merged[sym] = merged.get(sym, 0) + power
                key = tuple(sorted((s, p) for s, p in merged.items() if p != 0))
                terms[key] = terms.get(key, 0) + ca * cb
        return Polynomial(terms, self._order + other._order)

    __rmul__ = __mul__

    def __eq__(self, other: object) -> bool:
        if isinstance(other, int):
            other = Polynomial.constant(other)
        return isinstance(other, Polynomial) and self._terms == other._terms

    def __hash__(self) -> int:
        return hash(frozenset(self._terms.items()))

    # inspection -------------------------------------------------------------------------------
    @property
    def terms(self) -> dict[Powers, int]:
        """Monomial powers (sorted ``(symbol, power)`` pairs) -> integer coefficient."""
        return dict(self._terms)

    def symbols(self) -> set[Symbol]:
        return {sym for powers in self._terms for sym, _ in powers}

    def loops(self, kind: SymbolKind | None = None) -> set[str]:
        """Loops whose symbols (of ``kind``, or any kind) occur."""
        return {sym.loop for sym in self.symbols() if kind is None or sym.kind is kind}

    def is_zero(self) -> bool:
        return not self._terms

    def __str__(self) -> str:
        if not self._terms:
            return "0"
        rank = {sym: i for i, sym in enumerate(self._order)}

        def key(sym: Symbol) -> tuple[int, int, str]:
            return (int(sym.kind), rank.get(sym, len(rank)), sym.loop)

        def monomial_rank(item: tuple[Powers, int]) -> tuple[int, list[tuple[int, int, str]]]:
            powers, _ = item
            return (-sum(p for _, p in powers), sorted(key(s) for s, _ in powers))

        parts: list[str] = []
        for powers, coef in sorted(self._terms.items(), key=monomial_rank):
            factors = [str(s) if p == 1 else f"{s}^{p}"
                       for s, p in sorted(powers, key=lambda sp: key(sp[0]))]
            magnitude = abs(coef)
            if not factors:
                body = str(magnitude)
            elif magnitude == 1:
                body = "*".join(factors)
            else:
                body = "*".join([str(magnitude), *factors])
            if not parts:
                parts.append(f"-{body}" if coef < 0 else body)
            else:
                parts.append(f"- {body}" if coef < 0 else f"+ {body}")
        return " ".join(parts)

    def __repr__(self) -> str:
        return f"Polynomial({self})"

    # evaluation -------------------------------------------------------------------------------
    def evaluate(self, extents: Mapping[str, int], tiles: Mapping[str, Number],
                 relaxed: bool = False) -> Number:
        """The value for loop ``extents`` and ``tiles`` (numbers or equal-shaped arrays).

        Exact evaluation uses ``ceil(X / T)`` trip counts; ``relaxed=True`` uses ``X / T``
        (the real-valued relaxation the solver optimises).
        """
        total: Number = 0
        for powers, coef in self._terms.items():
            value: Number = coef
            for sym, power in powers:
                value = value * _symbol_value(sym, extents, tiles, relaxed) ** power
            total = total + value
        return total

    def relaxed_arrays(self, extents: Mapping[str, int], variables: Sequence[str],
                       fixed: Mapping[str, int]) -> tuple[np.ndarray, np.ndarray]:
        """``(coefficients, exponents)`` of the relaxed form as a function of the tiles of
        ``variables``: the value is ``sum_j c_j * prod_i T_i ** E[j, i]``. Tiles in ``fixed``
        are substituted (trip counts of fixed loops stay exact)."""
        position = {name: i for i, name in enumerate(variables)}
        merged: dict[tuple[int, ...], float] = {}
        for powers, coef in self._terms.items():
            value = float(coef)
            exponent = [0] * len(variables)
            for sym, power in powers:
                if sym.kind is SymbolKind.EXTENT:
                    value *= float(extents[sym.loop]) ** power
                elif sym.loop in fixed:
                    value *= float(_symbol_value(sym, extents, fixed, False)) ** power
                elif sym.kind is SymbolKind.TILE:
                    exponent[position[sym.loop]] += power
                else:  # relaxed trip count X / T
                    value *= float(extents[sym.loop]) ** power
                    exponent[position[sym.loop]] -= power
            key = tuple(exponent)
            merged[key] = merged.get(key, 0.0) + value
        items = [(k, v) for k, v in merged.items() if v != 0.0]
        if not items:
            return np.zeros(0), np.zeros((0, len(variables)))
        coefs = np.array([v for _, v in items])
        exps = np.array([k for k, _ in items], dtype=float).reshape(len(items), len(variables))
        return coefs, exps


def _symbol_value(sym: Symbol, extents: Mapping[str, int], tiles: Mapping[str, Number],
                  relaxed: bool) -> Number:
    extent = extents[sym.loop]
    if sym.kind is SymbolKind.EXTENT:
        return extent
    tile = tiles[sym.loop]
    if sym.kind is SymbolKind.TILE:
        return tile
    if relaxed:
        return extent / tile
    if isinstance(tile, np.ndarray):
        return np.ceil(extent / tile)
    return math.ceil(extent / tile)
