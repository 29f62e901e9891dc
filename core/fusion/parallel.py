"""How a fused chain's blocks run on a chip with several compute units (cores, SMs, AI cores).

Chimera's model (thesis §3.4.2-3.4.3) minimises the data one compute unit moves. On a chip
with ``P`` units the outermost tiles of the chain's *parallel loops* are blocks dealt out to the
units, so the time of the chain is the time of the most loaded unit: with ``B`` blocks of
(about) equal work, ``ceil(B / P)`` blocks' worth of the whole chain's time on one unit —
``T_1 * ceil(B / P) / B``, where one unit's time is its arithmetic plus the bytes the chain
moves into the tile's memory level over that level's bandwidth (Eq. 3.20):

``T_1 = sum_op flops_op / flops_per_cycle_op + DV / bw``.

A kernel that computes its last, partial block whole (zero-padded, as a GPU block of masked
threads or a packed CPU panel does) sets ``whole_blocks``: its arithmetic counts the padded
extents, ``ceil(E / t) * t`` instead of ``E`` along each parallel loop.

Small tiles balance the units but move more (each block re-reads the operands it shares with
the others); large tiles move less but may leave units idle: 7 blocks on 2 cores run as 4.
:func:`~tilecraft.fusion.solver.solve_chain` scores its integer tiles at the outermost level by
this time when given a :class:`ParallelExecution`, and offers every trip count of the parallel
loops as a candidate, so balanced splits are reachable.

>>> from tilecraft.fusion.examples import gemm_chain
>>> chain = gemm_chain(1024, 64, 512, 64)
>>> run = ParallelExecution(loops=("m",), units=2, flops_per_cycle=32.0)
>>> run.blocks(chain, {"m": 150}), run.blocks(chain, {"m": 174})
(7, 6)
>>> round(run.makespan_fraction(chain, {"m": 150}), 3), run.makespan_fraction(chain, {"m": 174})
(0.571, 0.5)
>>> run.compute_cycles(chain) == chain.flops() / 32.0
True
>>> padded = ParallelExecution(loops=("m",), units=2, flops_per_cycle=32.0, whole_blocks=True)
>>> round(padded.padding(chain, {"m": 150}), 3)    # 7 blocks of 150 rows for 1024
1.025
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from tilecraft.fusion.chain import Chain, FusionError


@dataclass(frozen=True)
class ParallelExecution:
    """The chain's outermost tiles of ``loops`` are blocks spread over ``units`` compute units,
    each doing ``flops_per_cycle`` (one figure, or one per operator name of the chain — a
    micro-kernel's achieved rate differs between the chain's products)."""

    loops: tuple[str, ...]
    units: int
    flops_per_cycle: float | Mapping[str, float] = field(default=1.0)
    whole_blocks: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.units, bool) or not isinstance(self.units, int) or self.units < 1:
            raise FusionError(f"ParallelExecution.units = {self.units!r} must be a positive int")
        rates = (self.flops_per_cycle.values() if isinstance(self.flops_per_cycle, Mapping)
                 else [self.flops_per_cycle])
        if any(not rate > 0 for rate in rates):
            raise FusionError(f"ParallelExecution.flops_per_cycle = {self.flops_per_cycle!r} "
                              "must be positive")

    def check(self, chain: Chain) -> None:
        """Raise :class:`FusionError` when a loop or operator named here is not ``chain``'s."""
        unknown = sorted(set(self.loops) - set(chain.loop_names))
        if unknown:
            raise FusionError(f"parallel loops {', '.join(unknown)} are not loops of chain "
                              f"{chain.names} ({', '.join(chain.loop_names)})")
        if isinstance(self.flops_per_cycle, Mapping):
            missing = sorted({op.name for op in chain.ops} - set(self.flops_per_cycle))
            if missing:
                raise FusionError(f"flops_per_cycle gives no rate for operators "
                                  f"{', '.join(missing)} of chain {chain.names}")

    def compute_cycles(self, chain: Chain) -> float:
        """One unit's arithmetic time for the whole chain."""
        total = 0.0
        for index, op in enumerate(chain.ops):
            flops = 2.0 * math.prod(chain.extents[lp] for lp in chain.op_loops(index))
            rate = (self.flops_per_cycle[op.name] if isinstance(self.flops_per_cycle, Mapping)
                    else self.flops_per_cycle)
            total += flops / rate
        return total

    def padding(self, chain: Chain, tiles: Mapping[str, int]) -> float:
        """How much more arithmetic the blocks do than the chain (1 unless ``whole_blocks``)."""
        if not self.whole_blocks:
            return 1.0
        extents = chain.extents
        return math.prod(math.ceil(extents[lp] / tiles[lp]) * tiles[lp] / extents[lp]
                         for lp in self.loops)

    def paddings(self, chain: Chain, tiles: Mapping[str, np.ndarray], count: int) -> np.ndarray:
        """:meth:`padding` of ``count`` candidate tilings at once."""
        factor = np.ones(count)
        if self.whole_blocks:
            extents = chain.extents
            for lp in self.loops:
                tile = np.asarray(tiles[lp], dtype=np.int64)
                factor = factor * (-(-extents[lp] // tile) * tile / extents[lp])
        return factor

    def blocks(self, chain: Chain, tiles: Mapping[str, int]) -> int:
        """How many blocks the tiles of the parallel loops make."""
        extents = chain.extents
        return math.prod(math.ceil(extents[lp] / tiles[lp]) for lp in self.loops)

    def makespan_fraction(self, chain: Chain, tiles: Mapping[str, int]) -> float:
        """The share of the one-unit time the most loaded unit spends: ``ceil(B/P) / B``."""
        blocks = self.blocks(chain, tiles)
        return math.ceil(blocks / self.units) / blocks

    def makespan_fractions(self, chain: Chain, tiles: Mapping[str, np.ndarray],
                           count: int) -> np.ndarray:
        """:meth:`makespan_fraction` of ``count`` candidate tilings at once (arrays of tiles)."""
        extents = chain.extents
        blocks = np.ones(count, dtype=np.int64)
        for lp in self.loops:
            blocks = blocks * -(-extents[lp] // np.asarray(tiles[lp], dtype=np.int64))
        return -(-blocks // self.units) / blocks


__all__ = ["ParallelExecution"]
