"""What a lowering strategy is, how the spec chooses one, and helpers the strategies share.

A strategy is FlexTensor's schedule template for one kind of hardware (thesis §4.5, Fig. 4.4):
it applies schedule primitives to the stage of one compute, on a
:class:`~tilecraft.schedule.Schedule`; ``Schedule.lower`` then gives the Kernel IR. Which one
a target gets is read from its spec (through the lowering options), never from its name:

=========  =============================================================================
strategy   chosen when the spec declares
=========  =============================================================================
``fpga``   a spatial architecture with a fabric budget (reconfigurable logic)
``npu``    a spatial architecture whose units name the memory levels of their operands
``gpu``    a thread hierarchy with an axis of block scope (threads within a block)
``cpu``    none of these: cores and vector lanes only
=========  =============================================================================

>>> from tilecraft.lower import LoweringOptions
>>> strategy_for(LoweringOptions(vector_lanes=16)).name
'cpu'
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Protocol

from tilecraft.kernel_ir.nodes import Kernel
from tilecraft.lower.options import LoweringOptions
from tilecraft.schedule.loop import Loop
from tilecraft.schedule.stage import Stage
from tilecraft.target.hierarchy import BindableAxis, LaunchScope
from tilecraft.te.bounds import affine
from tilecraft.te.expr import IterVar
from tilecraft.te.tensor import Tensor
from tilecraft.te.visit import loads_in

__all__ = ["LoweringStrategy", "bind_to_grid", "contiguous_loads", "fuse_all", "grid_axes",
           "is_row_reduction", "lower_with_strategy", "schedule_with_strategy",
           "strategy_for"]


class LoweringStrategy(Protocol):
    """A schedule template for one kind of hardware (module docstring)."""

    #: ``cpu``, ``gpu``, ``npu`` or ``fpga``
    name: str

    def selects(self, options: LoweringOptions) -> bool:
        """Whether the target described by ``options`` (and ``options.spec``) is of this
        strategy's kind."""

    def apply(self, schedule: Any, tensor: Tensor, options: LoweringOptions) -> None:
        """Schedule the (untransformed) stage of ``tensor`` in ``schedule`` with primitives;
        the stage stays computed in its own kernel."""


def strategy_for(options: LoweringOptions) -> LoweringStrategy:
    """The strategy the target of ``options`` selects (module docstring), the CPU's when
    nothing more specific is declared."""
    from tilecraft.schedule.strategies import STRATEGIES

    for strategy in STRATEGIES:
        if strategy.selects(options):
            return strategy
    return STRATEGIES[-1]


def schedule_with_strategy(tensor: Tensor, options: LoweringOptions,
                           strategy: LoweringStrategy | None = None) -> Any:
    """A schedule of ``tensor``'s program whose stage of ``tensor`` ``strategy`` (default: the
    one ``options`` selects) has scheduled; read its decisions from ``schedule[tensor]``
    (``leaf_loops``, ``annotation(loop)``) or its ``trace``.

    >>> from tilecraft import te
    >>> A = te.placeholder((8, 40), name="A")
    >>> B = te.compute((8, 40), lambda i, j: A[i, j] * 2.0, name="B")
    >>> stage = schedule_with_strategy(B, LoweringOptions(vector_lanes=16, cores=2))[B]
    >>> [(loop.name, stage.annotation(loop).kind.value) for loop in stage.leaf_loops]
    [('i', 'parallel'), ('j', 'vector')]
    """
    from tilecraft.schedule.schedule import create_schedule

    strategy = strategy or strategy_for(options)
    schedule = create_schedule(tensor, options)
    strategy.apply(schedule, tensor, options)
    return schedule


def lower_with_strategy(tensor: Tensor, options: LoweringOptions,
                        strategy: LoweringStrategy | None = None) -> Kernel:
    """The kernel computing ``tensor`` (its inputs are parameters, even computed ones) under
    ``strategy`` (default: the one ``options`` selects), verified against ``options.spec``;
    its ``attrs`` name the strategy and hold the schedule's trace."""
    strategy = strategy or strategy_for(options)
    schedule = schedule_with_strategy(tensor, options, strategy)
    (kernel,) = schedule.lower(options, computes=[tensor.name])
    return replace(kernel, attrs={**kernel.attrs, "strategy": strategy.name})


# helpers ------------------------------------------------------------------------------------
def fuse_all(stage: Stage, loops: list[Loop], name: str | None = None) -> Loop:
    """``loops`` (adjacent, outer first) fused into one, named by their names joined by
    ``_`` unless ``name`` says otherwise; one loop is returned as it is."""
    if len(loops) == 1:
        return loops[0]
    return stage.fuse(*loops, name=name or "_".join(loop.name for loop in loops))


def grid_axes(threads: Any) -> list[BindableAxis]:
    """The grid-scope axes of a thread hierarchy, by launch dimension (x first)."""
    return sorted((axis for axis in threads.axes if axis.scope is LaunchScope.GRID),
                  key=lambda axis: axis.dim)


def bind_to_grid(stage: Stage, loop: Loop, threads: Any) -> None:
    """Bind ``loop`` to the grid: to the x axis when it fits its largest extent, else split
    over x, then y, then z (x innermost); what no axis can take stays a serial loop outside."""
    remaining = loop
    for axis in grid_axes(threads):
        if remaining.extent <= axis.max_extent:
            stage.bind(remaining, axis.name)
            return
        outer, inner = stage.split(remaining, factor=axis.max_extent,
                                   names=(f"{remaining.name}_over", f"{remaining.name}_{axis.dim}"))
        stage.bind(inner, axis.name)
        remaining = outer


def contiguous_loads(tensor: Tensor, axis: IterVar) -> int:
    """How many loads of ``tensor``'s body step by one element along ``axis`` (coefficient 1
    in their last index)."""
    count = 0
    for load in loads_in(tensor.body):
        form = affine(load.indices[-1]) if load.indices else None
        if form is not None and form.terms().get(axis) == 1:
            count += 1
    return count


def is_row_reduction(tensor: Tensor) -> bool:
    """Whether ``tensor`` reduces along memory: its innermost reduce axis (of more than one
    iteration) is contiguous in some load and its innermost spatial axis in none — softmax's
    max and sum, a mean over the last axis."""
    reduce = [axis for axis in tensor.reduce_axes if axis.extent > 1]
    if not reduce or contiguous_loads(tensor, reduce[-1]) == 0:
        return False
    spatial = [axis for axis in tensor.axes if axis.extent > 1]
    return not spatial or contiguous_loads(tensor, spatial[-1]) == 0
