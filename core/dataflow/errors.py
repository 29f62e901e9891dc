"""The error of the dataflow tree package."""

from __future__ import annotations

from tilecraft.errors import TilecraftError


class DataflowError(TilecraftError):
    """A dataflow tree is malformed or infeasible on a target; the message names the node and
    the field."""
