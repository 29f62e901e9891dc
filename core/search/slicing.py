"""A slice of a schedule space: some sub-spaces searched, the others held at an anchor point.

FlexTensor's generic spaces (:func:`tilecraft.search.generate_space`) hold 10^4-10^9 points —
far too many to measure every one. A slice keeps a few sub-spaces free and fixes the rest at
the values of an ``anchor`` point. It is an ordinary :class:`~tilecraft.search.space.Space`:
the free sub-spaces are the same objects, so a point has the same neighbours along the same
directions (a random *sample* of the big space would have almost none), and it decodes to a
configuration of the full space. Small enough slices can be measured exhaustively.

>>> from tilecraft.search.space import ChoiceSpace, Space, SplitSpace
>>> full = Space([("a", SplitSpace(8, 2)), ("b", ChoiceSpace("xyz")), ("c", ChoiceSpace([0, 1]))])
>>> part = slice_space(full, ["a", "c"], anchor=(0, 2, 0))
>>> part.size, part.names, part.fixed
(8, ('a', 'c'), {'b': 'z'})
>>> full_point(full, part, (1, 1), anchor=(0, 2, 0))
(1, 2, 1)
>>> part.decode((1, 1)) == full.decode((1, 2, 1))
True
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tilecraft.search.errors import SearchError
from tilecraft.search.space import Point, Space

__all__ = ["full_point", "slice_space"]


def slice_space(space: Space, free: Sequence[str], anchor: Point,
                name: str | None = None) -> Space:
    """The slice of ``space`` in which only the sub-spaces ``free`` vary; the others keep
    their value at ``anchor``. Points of the slice decode like the full points they stand for."""
    anchor = space.check(anchor)
    unknown = [n for n in free if n not in space.subspaces]
    if unknown or not free or len(set(free)) != len(free):
        raise SearchError(f"slice of space {space.name}: free sub-spaces {list(free)} must be "
                          f"distinct names among {', '.join(space.names)}")
    ordered = [n for n in space.names if n in free]  # keep the full space's order
    fixed = {n: space.subspaces[n].value(i) for n, i in zip(space.names, anchor)
             if n not in free}

    def decode(values: dict[str, Any]) -> Any:
        return space.decode(_merge(space, ordered, anchor, tuple(
            space.subspaces[n].index_of(values[n]) for n in ordered)))

    return Space([(n, space.subspaces[n]) for n in ordered], decoder=decode,
                 name=name or f"{space.name}[{','.join(ordered)}]",
                 fixed={**dict(space.fixed), **fixed}, notes=space.notes)


def full_point(space: Space, part: Space, point: Point, anchor: Point) -> Point:
    """The point of the full ``space`` that ``point`` of its slice ``part`` stands for."""
    return _merge(space, list(part.names), space.check(anchor), part.check(point))


def _merge(space: Space, free: Sequence[str], anchor: Point, point: Point) -> Point:
    chosen = dict(zip(free, point))
    return tuple(chosen.get(n, i) for n, i in zip(space.names, anchor))
