"""A stage: one compute of the program and the schedule primitives that act on it.

``s[C]`` is the stage of compute ``C``. Its loop handles are ``s[C].axes`` (spatial) and
``s[C].reduce_axes``; ``s[C].leaf_loops`` are the loops it has now, outermost first.

>>> from tilecraft import te
>>> from tilecraft.schedule import create_schedule
>>> A = te.placeholder((16, 8), name="A")
>>> k = te.reduce_axis(8, name="k")
>>> S = te.compute((16,), lambda i: te.sum(A[i, k], axis=k), name="S")
>>> s = create_schedule(S)
>>> (i,), (k,) = s[S].axes, s[S].reduce_axes
>>> io, ii = s[S].split(i, factor=4)
>>> s[S].reorder(io, k, ii)
>>> s[S].vectorize(ii)
>>> s[S].describe()
'i.outer: serial(4) > k: serial(8) > i.inner: vector(4)'
"""

from __future__ import annotations

from tilecraft.schedule.annotations import LoopAnnotations
from tilecraft.schedule.placement import Placement
from tilecraft.schedule.transforms import LoopTransforms


class Stage(LoopTransforms, LoopAnnotations, Placement):
    """One compute of a schedule with its loops (see :mod:`tilecraft.schedule`)."""


__all__ = ["Stage"]
