"""Lowering strategies: FlexTensor's schedule templates per kind of hardware (thesis §4.5,
Fig. 4.4), each built with the schedule primitives and chosen from the target spec.

A target that lowers a compute its own way overrides ``Target.lower_compute``; every other
compute gets the strategy its spec selects (:func:`strategy_for`), through
:func:`tilecraft.lower.lower_compute`. See :mod:`.base` for the selection rules.

>>> [strategy.name for strategy in STRATEGIES]
['fpga', 'npu', 'gpu', 'cpu']
"""

from tilecraft.schedule.strategies.base import (
    LoweringStrategy,
    lower_with_strategy,
    schedule_with_strategy,
    strategy_for,
)
from tilecraft.schedule.strategies.cpu import CpuStrategy
from tilecraft.schedule.strategies.fpga import FpgaStrategy
from tilecraft.schedule.strategies.gpu import GpuStrategy
from tilecraft.schedule.strategies.npu import NpuStrategy

#: every strategy, most specific first; the CPU's, which selects every target, comes last
STRATEGIES: tuple[LoweringStrategy, ...] = (FpgaStrategy(), NpuStrategy(), GpuStrategy(),
                                            CpuStrategy())

__all__ = ["STRATEGIES", "CpuStrategy", "FpgaStrategy", "GpuStrategy", "LoweringStrategy",
           "NpuStrategy", "lower_with_strategy", "schedule_with_strategy", "strategy_for"]
