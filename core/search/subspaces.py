"""Typed sub-spaces of a schedule space, each a finite list of choices with neighbour moves.

FlexTensor (thesis §4.3.2) re-organises the flat list of schedules into a high-dimensional
space in which every point has neighbours of similar structure, so a search can walk along
*directions* instead of sampling at random. A sub-space is one coordinate of that space:

- :class:`SplitSpace` — the factors ``[f_1, ..., f_N]`` (outer to inner) a loop is split into;
  the move ``(i, j)`` goes to the thesis's neighbour ``g_i > f_i, g_j < f_j, g_k = f_k`` with the
  smallest ``g_i`` (for divisible splits ``g_i`` is the next divisor of ``f_i * f_j`` above
  ``f_i``: from ``(1, 12)`` along ``(0, 1)`` come ``(2, 6)``, ``(3, 4)``, ``(4, 3)`` ...);
- :class:`ReorderSpace` — orders of a few loops; the move ``("swap", k)`` exchanges positions
  ``k`` and ``k + 1``;
- :class:`InlineSpace` — one inline flag per node; the move ``("flip", node)`` toggles one;
- :class:`FuseSpace`, :class:`UnrollSpace`, :class:`ChoiceSpace` — ordered enumerations (how
  many loops to fuse, an unroll limit, any list of values); the moves ``-1`` / ``+1`` step to
  the previous / next value.

A choice is referred to by its index; ``value(index)`` decodes it, ``features(index)`` gives
numbers in ``[0, 1]`` for a learned model, ``neighbour(index, move)`` is the index one move
away or ``None`` where the move leaves the sub-space.

>>> split = SplitSpace(12, 3)
>>> split.size, split.value(0), split.value(split.size - 1)
(18, (1, 1, 12), (12, 1, 1))
>>> start = split.index_of((1, 4, 3))
>>> split.value(split.neighbour(start, (0, 1)))  # grow part 0, shrink part 1
(2, 2, 3)
>>> print(split.neighbour(start, (1, 0)))  # part 0 is already 1
None
>>> order = ReorderSpace(["i", "j", "k"])
>>> order.size, order.value(order.neighbour(0, ("swap", 1)))
(6, ('i', 'k', 'j'))
"""

from __future__ import annotations

import itertools
import math
from abc import ABC, abstractmethod
from collections.abc import Hashable, Iterable, Sequence
from typing import Any

from tilecraft.search.errors import SearchError

__all__ = ["ChoiceSpace", "FuseSpace", "InlineSpace", "ReorderSpace", "SplitSpace", "SubSpace",
           "UnrollSpace", "divisors"]

#: most loops a ReorderSpace permutes by default (8! = 40320 orders)
MAX_REORDER_LOOPS = 8
#: most nodes an InlineSpace has flags for (2**16 combinations)
MAX_INLINE_NODES = 16
#: most choices a SplitSpace enumerates
MAX_SPLIT_CHOICES = 500_000


def divisors(n: int) -> list[int]:
    """The positive divisors of ``n`` in increasing order.

    >>> divisors(12), divisors(1), divisors(13)
    ([1, 2, 3, 4, 6, 12], [1], [1, 13])
    """
    small, large = [], []
    for d in range(1, math.isqrt(n) + 1):
        if n % d == 0:
            small.append(d)
            if d != n // d:
                large.append(n // d)
    return small + large[::-1]


class SubSpace(ABC):
    """One coordinate of a schedule space: ``size`` choices, addressed by index."""

    #: what the sub-space decides ("split", "reorder", "fuse", "unroll", "inline", "choice")
    kind: str = "choice"

    @property
    @abstractmethod
    def size(self) -> int:
        """Number of choices."""

    @abstractmethod
    def value(self, index: int) -> Any:
        """The decoded choice at ``index``."""

    @property
    @abstractmethod
    def moves(self) -> tuple[Hashable, ...]:
        """The directions one can move along in this sub-space."""

    @abstractmethod
    def neighbour(self, index: int, move: Hashable) -> int | None:
        """The index one ``move`` away from ``index``, or ``None`` if there is none."""

    @abstractmethod
    def features(self, index: int) -> tuple[float, ...]:
        """The choice as numbers in about ``[0, 1]`` (input of a learned model)."""

    @property
    @abstractmethod
    def feature_size(self) -> int:
        """Length of :meth:`features`."""

    @abstractmethod
    def index_of(self, value: Any) -> int:
        """The index of the choice ``value`` (raises :class:`SearchError` if absent)."""

    def check_index(self, index: int) -> None:
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < self.size:
            raise SearchError(f"{self!r}: choice index {index!r} is out of range; it has "
                              f"{self.size} choices (0..{self.size - 1})")

    def check_move(self, move: Hashable) -> None:
        if move not in self.moves:
            raise SearchError(f"{self!r}: unknown move {move!r}; its moves are "
                              f"{', '.join(map(repr, self.moves)) or 'none'}")

    def describe(self) -> str:
        return f"{self.kind}, {self.size} choices"


class SplitSpace(SubSpace):
    """Ways to split a loop of ``extent`` iterations into ``parts`` nested loops (outer first).

    With ``divisible_only`` (the thesis's pruning) the factors multiply to ``extent`` exactly.
    Otherwise inner factors are also taken from the powers of two up to ``extent`` and the
    outermost factor is ``ceil(extent / product of the inner ones)``, so the product may
    exceed ``extent`` (a guarded tail). ``max_inner`` bounds the innermost factor.

    >>> SplitSpace(7, 2).choices
    ((1, 7), (7, 1))
    >>> SplitSpace(6, 2, divisible_only=False).choices
    ((1, 6), (2, 3), (2, 4), (3, 2), (6, 1))
    >>> SplitSpace(16, 2, max_inner=4).choices
    ((4, 4), (8, 2), (16, 1))
    """

    kind = "split"

    def __init__(self, extent: int, parts: int, divisible_only: bool = True,
                 max_inner: int | None = None):
        for what, number in (("extent", extent), ("parts", parts)):
            if isinstance(number, bool) or not isinstance(number, int) or number < 1:
                raise SearchError(f"SplitSpace: {what}={number!r} must be an int >= 1")
        if max_inner is not None and (not isinstance(max_inner, int) or max_inner < 1):
            raise SearchError(f"SplitSpace(extent={extent}): max_inner={max_inner!r} must be "
                              "an int >= 1 or None")
        self.extent = extent
        self.parts = parts
        self.divisible_only = divisible_only
        self.max_inner = max_inner
        choices = _divisible_splits(extent, parts) if divisible_only \
            else _ceil_splits(extent, parts)
        if max_inner is not None:
            choices = [c for c in choices if c[-1] <= max_inner]
        self.choices: tuple[tuple[int, ...], ...] = tuple(sorted(choices))
        self._index = {choice: position for position, choice in enumerate(self.choices)}
        self._moves = tuple((i, j) for i in range(parts) for j in range(parts) if i != j)
        self._groups: dict[tuple[int, int], dict[tuple[int, ...], list[int]]] = {}
        self._scale = math.log2(extent) if extent > 1 else 1.0

    def __repr__(self) -> str:
        return f"SplitSpace(extent={self.extent}, parts={self.parts})"

    @property
    def size(self) -> int:
        return len(self.choices)

    def value(self, index: int) -> tuple[int, ...]:
        self.check_index(index)
        return self.choices[index]

    @property
    def moves(self) -> tuple[tuple[int, int], ...]:
        return self._moves

    def _group(self, pair: tuple[int, int]) -> dict[tuple[int, ...], list[int]]:
        """Choices bucketed by their factors outside the two parts of ``pair``."""
        if pair not in self._groups:
            buckets: dict[tuple[int, ...], list[int]] = {}
            for position, choice in enumerate(self.choices):
                rest = tuple(f for p, f in enumerate(choice) if p not in pair)
                buckets.setdefault(rest, []).append(position)
            self._groups[pair] = buckets
        return self._groups[pair]

    def neighbour(self, index: int, move: Hashable) -> int | None:
        self.check_index(index)
        self.check_move(move)
        grow, shrink = move  # type: ignore[misc]
        current = self.choices[index]
        pair = (min(grow, shrink), max(grow, shrink))
        rest = tuple(f for p, f in enumerate(current) if p not in pair)
        best: int | None = None
        best_rank: tuple[int, int] | None = None
        for candidate in self._group(pair)[rest]:
            other = self.choices[candidate]
            if other[grow] > current[grow] and other[shrink] < current[shrink]:
                rank = (other[grow], -other[shrink])
                if best_rank is None or rank < best_rank:
                    best, best_rank = candidate, rank
        return best

    def features(self, index: int) -> tuple[float, ...]:
        return tuple(math.log2(f) / self._scale for f in self.value(index))

    @property
    def feature_size(self) -> int:
        return self.parts

    def index_of(self, value: Any) -> int:
        try:
            return self._index[tuple(value)]
        except (KeyError, TypeError):
            raise SearchError(f"{self!r} has no choice {value!r}; its factors must multiply "
                              f"to {self.extent}"
                              f"{'' if self.divisible_only else ' or just above'}") from None

    def describe(self) -> str:
        mode = "divisible" if self.divisible_only else "ceil"
        return f"split {self.extent} into {self.parts} ({mode}), {self.size} choices"


def _divisible_splits(extent: int, parts: int) -> list[tuple[int, ...]]:
    if parts == 1:
        return [(extent,)]
    found = []
    for factor in divisors(extent):
        for rest in _divisible_splits(extent // factor, parts - 1):
            found.append((factor, *rest))
            if len(found) > MAX_SPLIT_CHOICES:
                raise SearchError(f"SplitSpace(extent={extent}, parts={parts}) has more than "
                                  f"{MAX_SPLIT_CHOICES} choices; use fewer parts")
    return found


def _ceil_splits(extent: int, parts: int) -> list[tuple[int, ...]]:
    candidates = sorted(set(divisors(extent)) | {1 << k for k in range(extent.bit_length())
                                                  if 1 << k <= extent})
    found = []
    for inner in itertools.product(candidates, repeat=parts - 1):
        product = math.prod(inner)
        if product <= extent:
            found.append((-(-extent // product), *inner))
            if len(found) > MAX_SPLIT_CHOICES:
                raise SearchError(f"SplitSpace(extent={extent}, parts={parts}, "
                                  f"divisible_only=False) has more than {MAX_SPLIT_CHOICES} "
                                  "choices; use fewer parts or divisible splits")
    return found


class ReorderSpace(SubSpace):
    """Orders of ``loops`` (outer to inner): every permutation, or the explicit list
    ``permutations``. Neighbours differ by swapping two adjacent loops.

    >>> space = ReorderSpace(["i", "j", "k"], permutations=[("i", "j", "k"), ("j", "i", "k")])
    >>> space.value(space.neighbour(0, ("swap", 0)))
    ('j', 'i', 'k')
    >>> print(space.neighbour(0, ("swap", 1)))  # ("i", "k", "j") is not allowed
    None
    """

    kind = "reorder"

    def __init__(self, loops: Sequence[str],
                 permutations: Iterable[Sequence[str]] | None = None):
        loops = tuple(loops)
        if len(set(loops)) != len(loops):
            raise SearchError(f"ReorderSpace: loop names {list(loops)} repeat; name every loop "
                              "once")
        self.loops = loops
        if permutations is None:
            if len(loops) > MAX_REORDER_LOOPS:
                count = math.factorial(len(loops))
                raise SearchError(f"ReorderSpace: {len(loops)} loops have {count} orders, more "
                                  f"than the {MAX_REORDER_LOOPS}! allowed; pass the allowed "
                                  "orders as permutations=")
            orders = list(itertools.permutations(loops))
        else:
            orders = []
            for order in permutations:
                order = tuple(order)
                if sorted(order) != sorted(loops):
                    raise SearchError(f"ReorderSpace over {list(loops)}: {list(order)} is not a "
                                      "permutation of the loops; list each loop exactly once")
                if order not in orders:
                    orders.append(order)
            if not orders:
                raise SearchError(f"ReorderSpace over {list(loops)}: no permutation allowed; "
                                  "give at least one")
        self.choices: tuple[tuple[str, ...], ...] = tuple(orders)
        self._index = {order: position for position, order in enumerate(self.choices)}
        self._moves = tuple(("swap", k) for k in range(len(loops) - 1))

    def __repr__(self) -> str:
        return f"ReorderSpace({list(self.loops)})"

    @property
    def size(self) -> int:
        return len(self.choices)

    def value(self, index: int) -> tuple[str, ...]:
        self.check_index(index)
        return self.choices[index]

    @property
    def moves(self) -> tuple[tuple[str, int], ...]:
        return self._moves

    def neighbour(self, index: int, move: Hashable) -> int | None:
        self.check_index(index)
        self.check_move(move)
        k = move[1]  # type: ignore[index]
        order = list(self.choices[index])
        order[k], order[k + 1] = order[k + 1], order[k]
        return self._index.get(tuple(order))

    def features(self, index: int) -> tuple[float, ...]:
        order = self.value(index)
        scale = max(1, len(order) - 1)
        return tuple(order.index(loop) / scale for loop in self.loops)

    @property
    def feature_size(self) -> int:
        return len(self.loops)

    def index_of(self, value: Any) -> int:
        try:
            return self._index[tuple(value)]
        except (KeyError, TypeError):
            raise SearchError(f"{self!r} does not allow the order {value!r}") from None

    def describe(self) -> str:
        return f"reorder {' '.join(self.loops) or '-'}, {self.size} choices"


class InlineSpace(SubSpace):
    """One inline flag per node; a choice's value is ``{node: bool}``. Neighbours differ in
    one flag. The index is the flags as a binary number (first node = lowest bit).

    >>> space = InlineSpace(["pad", "relu"])
    >>> space.size, space.value(2), space.value(space.neighbour(2, ("flip", "pad")))
    (4, {'pad': False, 'relu': True}, {'pad': True, 'relu': True})
    """

    kind = "inline"

    def __init__(self, nodes: Sequence[str]):
        nodes = tuple(nodes)
        if len(set(nodes)) != len(nodes):
            raise SearchError(f"InlineSpace: node names {list(nodes)} repeat")
        if len(nodes) > MAX_INLINE_NODES:
            raise SearchError(f"InlineSpace: {len(nodes)} inlineable nodes give 2**{len(nodes)}"
                              f" combinations, more than 2**{MAX_INLINE_NODES}; fix some "
                              "inline decisions (spec fixed_decisions inline: true)")
        self.nodes = nodes
        self._moves = tuple(("flip", node) for node in nodes)

    def __repr__(self) -> str:
        return f"InlineSpace({list(self.nodes)})"

    @property
    def size(self) -> int:
        return 1 << len(self.nodes)

    def value(self, index: int) -> dict[str, bool]:
        self.check_index(index)
        return {node: bool(index >> bit & 1) for bit, node in enumerate(self.nodes)}

    @property
    def moves(self) -> tuple[tuple[str, str], ...]:
        return self._moves

    def neighbour(self, index: int, move: Hashable) -> int | None:
        self.check_index(index)
        self.check_move(move)
        return index ^ (1 << self.nodes.index(move[1]))  # type: ignore[index]

    def features(self, index: int) -> tuple[float, ...]:
        return tuple(float(flag) for flag in self.value(index).values())

    @property
    def feature_size(self) -> int:
        return len(self.nodes)

    def index_of(self, value: Any) -> int:
        if not isinstance(value, dict) or set(value) != set(self.nodes):
            raise SearchError(f"{self!r}: {value!r} must map every node "
                              f"({', '.join(self.nodes) or 'none'}) to a bool")
        return sum(1 << bit for bit, node in enumerate(self.nodes) if value[node])

    def describe(self) -> str:
        return f"inline {' '.join(self.nodes) or '-'}, {self.size} choices"


class ChoiceSpace(SubSpace):
    """An ordered enumeration of values (vectorise on/off, a cache level, ...); the moves
    ``-1`` and ``+1`` step to the previous and next value.

    >>> space = ChoiceSpace([None, "L1", "register"])
    >>> space.value(space.neighbour(0, +1)), space.neighbour(2, +1)
    ('L1', None)
    """

    kind = "choice"

    def __init__(self, values: Sequence[Any]):
        values = tuple(values)
        if not values:
            raise SearchError(f"{type(self).__name__}: needs at least one value")
        if len(set(map(_hashable, values))) != len(values):
            raise SearchError(f"{type(self).__name__}: values {list(values)} repeat")
        self.values = values

    def __repr__(self) -> str:
        return f"{type(self).__name__}({list(self.values)})"

    @property
    def size(self) -> int:
        return len(self.values)

    def value(self, index: int) -> Any:
        self.check_index(index)
        return self.values[index]

    @property
    def moves(self) -> tuple[int, ...]:
        return (-1, 1)

    def neighbour(self, index: int, move: Hashable) -> int | None:
        self.check_index(index)
        self.check_move(move)
        moved = index + move  # type: ignore[operator]
        return moved if 0 <= moved < self.size else None

    def features(self, index: int) -> tuple[float, ...]:
        self.check_index(index)
        return (index / max(1, self.size - 1),)

    @property
    def feature_size(self) -> int:
        return 1

    def index_of(self, value: Any) -> int:
        for position, candidate in enumerate(self.values):
            if candidate == value and type(candidate) is type(value):
                return position
        raise SearchError(f"{self!r} has no value {value!r}")

    def describe(self) -> str:
        return f"{self.kind} {', '.join(map(str, self.values))}"


def _hashable(value: Any) -> Hashable:
    return (type(value).__name__, value)


class FuseSpace(ChoiceSpace):
    """How many outermost loops to fuse (into the parallel loop): ``minimum..loops``.

    >>> FuseSpace(3).values, FuseSpace(3, minimum=1).values
    ((0, 1, 2, 3), (1, 2, 3))
    """

    kind = "fuse"

    def __init__(self, loops: int, minimum: int = 0):
        if not isinstance(loops, int) or not isinstance(minimum, int) \
                or not 0 <= minimum <= loops:
            raise SearchError(f"FuseSpace: loops={loops!r}, minimum={minimum!r}; need "
                              "0 <= minimum <= loops")
        super().__init__(tuple(range(minimum, loops + 1)))


class UnrollSpace(ChoiceSpace):
    """Unroll limits: unroll the innermost loops up to this total extent (0 = none).

    >>> UnrollSpace((16, 0, 4)).values
    (0, 4, 16)
    """

    kind = "unroll"

    def __init__(self, steps: Iterable[int] = (0, 4, 16, 64)):
        steps = tuple(sorted(set(steps)))
        if any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in steps):
            raise SearchError(f"UnrollSpace: steps {list(steps)} must be ints >= 0")
        super().__init__(steps)
