"""The error of the schedule layer.

Every :class:`ScheduleError` names the primitive, the stage and the loop it is about, and says
what to do instead. It is a :class:`~tilecraft.errors.LoweringError`, so code that lowers
with the default schedules and catches lowering errors catches it too.

>>> from tilecraft.errors import LoweringError, TilecraftError
>>> issubclass(ScheduleError, LoweringError) and issubclass(ScheduleError, TilecraftError)
True
>>> str(schedule_error("split", "C", "i", "factor 0 must be at least 1"))
'split on stage C, loop i: factor 0 must be at least 1'
"""

from __future__ import annotations

from tilecraft.errors import LoweringError


class ScheduleError(LoweringError):
    """An invalid schedule: a primitive misapplied, or one the target does not offer."""


def schedule_error(primitive: str, stage: str | None, loop: str | None,
                   problem: str) -> ScheduleError:
    """A :class:`ScheduleError` whose message starts with the primitive, stage and loop."""
    where = primitive
    if stage is not None:
        where += f" on stage {stage}"
    if loop is not None:
        where += f", loop {loop}"
    return ScheduleError(f"{where}: {problem}")


__all__ = ["ScheduleError", "schedule_error"]
