"""The error of the schedule-search package.

>>> issubclass(SearchError, TilecraftError)
True
"""

from __future__ import annotations

from tilecraft.errors import TilecraftError


class SearchError(TilecraftError):
    """A search space, a point, an engine or a cost function was used wrongly: the message
    names the space, sub-space, point or engine at fault and what to do about it."""


__all__ = ["SearchError"]
