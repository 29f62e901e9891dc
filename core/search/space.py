"""The schedule space: a named product of typed sub-spaces, with directions (thesis §4.3.2).

A point is a tuple of choice indices, one per sub-space in order: hashable, cheap, and the same
on every run. A :class:`Direction` names a sub-space and one of its moves; a point's neighbour
along a direction differs from it in that sub-space only. Search engines see nothing but this
interface: ``size``, ``random_point``, ``directions``, ``neighbour``, ``features`` and
``decode``.

>>> space = Space([("tile_i", SplitSpace(8, 2)), ("vectorize", ChoiceSpace([False, True]))])
>>> space.size, space.sizes
(8, {'tile_i': 4, 'vectorize': 2})
>>> [str(d) for d in space.directions]
['tile_i:(0, 1)', 'tile_i:(1, 0)', 'vectorize:-1', 'vectorize:1']
>>> point = (1, 0)
>>> space.decode(point)
{'tile_i': (2, 4), 'vectorize': False}
>>> space.decode(space.neighbour(point, space.directions[0]))
{'tile_i': (4, 2), 'vectorize': False}
>>> space.neighbour(point, space.directions[2]) is None
True
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tilecraft.search.errors import SearchError
from tilecraft.search.subspaces import (
    ChoiceSpace,
    FuseSpace,
    InlineSpace,
    ReorderSpace,
    SplitSpace,
    SubSpace,
    UnrollSpace,
)

__all__ = ["ChoiceSpace", "Direction", "FuseSpace", "InlineSpace", "Point", "ReorderSpace",
           "Space", "SplitSpace", "SubSpace", "UnrollSpace"]

#: a point of a space: one choice index per sub-space, in the space's order
Point = tuple[int, ...]


@dataclass(frozen=True)
class Direction:
    """A move within one sub-space of a space."""

    subspace: str
    move: Hashable

    def __str__(self) -> str:
        return f"{self.subspace}:{self.move}"


@dataclass(frozen=True, eq=False)
class Space:
    """A named product of sub-spaces (in order), optionally with a ``decoder`` turning the
    sub-spaces' values into a configuration (see :func:`tilecraft.search.generate_space`).

    ``fixed`` records decisions that are not searched (e.g. fixed by the target) and
    ``notes`` anything worth reporting about how the space was built; neither affects points.
    """

    subspaces: Mapping[str, SubSpace] | Sequence[tuple[str, SubSpace]]
    decoder: Callable[[dict[str, Any]], Any] | None = None
    name: str = "space"
    fixed: Mapping[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        items = list(self.subspaces.items()) if isinstance(self.subspaces, Mapping) \
            else list(self.subspaces)
        named: dict[str, SubSpace] = {}
        for entry in items:
            if not (isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[0], str)
                    and isinstance(entry[1], SubSpace)):
                raise SearchError(f"space {self.name}: {entry!r} is not a (name, SubSpace) "
                                  "pair")
            name, subspace = entry
            if name in named:
                raise SearchError(f"space {self.name}: two sub-spaces are named {name!r}; "
                                  "name each once")
            named[name] = subspace
        object.__setattr__(self, "subspaces", named)
        object.__setattr__(self, "fixed", dict(self.fixed))
        directions = tuple(Direction(name, move) for name, subspace in named.items()
                           for move in subspace.moves)
        object.__setattr__(self, "_directions", directions)
        object.__setattr__(self, "_names", tuple(named))

    # shape ---------------------------------------------------------------------------------

    @property
    def names(self) -> tuple[str, ...]:
        return self._names  # type: ignore[attr-defined]

    @property
    def sizes(self) -> dict[str, int]:
        """Choices per sub-space."""
        return {name: subspace.size for name, subspace in self.subspaces.items()}

    @property
    def size(self) -> int:
        """Number of points (the product of the sub-space sizes; a Python int, exact)."""
        return math.prod(self.sizes.values())

    @property
    def directions(self) -> tuple[Direction, ...]:
        """Every direction of every sub-space, in sub-space order."""
        return self._directions  # type: ignore[attr-defined]

    @property
    def feature_size(self) -> int:
        return sum(subspace.feature_size for subspace in self.subspaces.values())

    # points --------------------------------------------------------------------------------

    def check(self, point: Point) -> Point:
        """``point`` as a tuple of ints, or :class:`SearchError` naming what is wrong."""
        if not isinstance(point, (tuple, list)) or len(point) != len(self.names):
            raise SearchError(f"space {self.name}: {point!r} is not a point; a point is a tuple "
                              f"of {len(self.names)} choice indices ({', '.join(self.names)})")
        for name, index in zip(self.names, point):
            if isinstance(index, bool) or not isinstance(index, (int, np.integer)) \
                    or not 0 <= index < self.subspaces[name].size:
                raise SearchError(f"space {self.name}: point {tuple(point)} has index {index!r}"
                                  f" for sub-space {name}, which has {self.subspaces[name].size}"
                                  " choices")
        return tuple(int(index) for index in point)

    def random_point(self, rng: np.random.Generator) -> Point:
        """A uniformly random point."""
        return tuple(int(rng.integers(subspace.size)) for subspace in self.subspaces.values())

    def points(self) -> Iterator[Point]:
        """Every point, in lexicographic order (for small spaces and tests)."""
        return itertools.product(*(range(s.size) for s in self.subspaces.values()))

    def direction(self, direction: Direction | int) -> Direction:
        if isinstance(direction, Direction):
            if direction.subspace not in self.subspaces:
                raise SearchError(f"space {self.name}: direction {direction} names no sub-space"
                                  f" of it; sub-spaces: {', '.join(self.names)}")
            return direction
        if isinstance(direction, bool) or not isinstance(direction, (int, np.integer)) \
                or not 0 <= direction < len(self.directions):
            raise SearchError(f"space {self.name}: direction {direction!r} is not one of its "
                              f"{len(self.directions)} directions (an index or a Direction)")
        return self.directions[int(direction)]

    def neighbour(self, point: Point, direction: Direction | int) -> Point | None:
        """The point one step from ``point`` along ``direction``, or ``None``."""
        point = self.check(point)
        direction = self.direction(direction)
        position = self.names.index(direction.subspace)
        moved = self.subspaces[direction.subspace].neighbour(point[position], direction.move)
        if moved is None:
            return None
        return point[:position] + (moved,) + point[position + 1:]

    def neighbours(self, point: Point) -> list[tuple[int, Point]]:
        """``(direction index, neighbour)`` for every direction that leads somewhere."""
        found = []
        for position in range(len(self.directions)):
            moved = self.neighbour(point, position)
            if moved is not None:
                found.append((position, moved))
        return found

    def values(self, point: Point) -> dict[str, Any]:
        """Each sub-space's decoded value at ``point``."""
        point = self.check(point)
        return {name: self.subspaces[name].value(index)
                for name, index in zip(self.names, point)}

    def decode(self, point: Point) -> Any:
        """The configuration ``point`` stands for (the decoder's result, else
        :meth:`values`)."""
        values = self.values(point)
        return self.decoder(values) if self.decoder is not None else values

    def encode(self, values: Mapping[str, Any]) -> Point:
        """The point whose sub-space values are ``values`` (the inverse of :meth:`values`)."""
        missing = [name for name in self.names if name not in values]
        if missing:
            raise SearchError(f"space {self.name}: encode() needs a value for every sub-space; "
                              f"missing {', '.join(missing)}")
        return tuple(self.subspaces[name].index_of(values[name]) for name in self.names)

    def features(self, point: Point) -> np.ndarray:
        """The point as a vector of numbers in about ``[0, 1]``, for a learned model."""
        point = self.check(point)
        parts: list[float] = []
        for name, index in zip(self.names, point):
            parts.extend(self.subspaces[name].features(index))
        return np.asarray(parts, dtype=np.float64)

    # reporting -----------------------------------------------------------------------------

    def describe(self) -> str:
        lines = [f"space {self.name}: {self.size} points, {len(self.directions)} directions"]
        for name, subspace in self.subspaces.items():
            lines.append(f"  {name}: {subspace.describe()}")
        for name, value in self.fixed.items():
            lines.append(f"  {name}: fixed {value!r}")
        lines.extend(f"  note: {note}" for note in self.notes)
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.describe()
