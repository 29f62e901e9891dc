"""The micro-kernel's fragment grid of a fused chain, chosen by the performance model: for each
grid (2x2, 2x4, 4x2, 4x4 fragments per warp, §3.4.1.2: a larger grid feeds each loaded
fragment to more ``mma_sync`` but holds more accumulator registers and pads ``M``, ``L`` and
``N`` to larger multiples) Chimera's solver picks the tiles
(:func:`~tilecraft_nvidia_tc.fusion.tiles.plan_chain_tiles`), and the grid whose kernel the
model predicts fastest wins. Each of the SM's sub-partitions (the spec's shared-level
``fan_out``, 4) has its own Tensor Core fed by its own warps: the model scales its Tensor Core
term up when fewer warps issuing ``mma_sync`` are resident on an SM (the profile's
``tensor_warps_per_block``, the warps with a micro-kernel tile, times the blocks on the SM),
and grids whose block has a warp per sub-partition issuing ``mma_sync`` come first (fewer
warps leave the latency of shared memory and of the softmax's shuffles exposed, which the
model does not see).

Occupancy: each grid's tiles are planned for 1 and for 2 blocks per SM (:data:`BLOCKS_PER_SM`:
the solver's budgets are the SM's shared memory and registers shared out, its blocks spread
over twice the units at half the rate). The model sees what a second resident block buys: a
wave holds ``SMs x blocks/SM`` blocks, so the global round trips' latency (one per wave,
not per block) is paid half as often, and more warps feed the four sub-partitions' Tensor
Cores; smaller tiles cost shared-memory and L2 traffic. The faster
prediction wins.

>>> from tilecraft import ops, te
>>> from tilecraft_nvidia_tc.fusion.chain import match_chain
>>> from tilecraft_nvidia_tc.target import load_target_spec
>>> A = te.placeholder((8, 512, 64), name="A", dtype="float16")
>>> B = te.placeholder((8, 64, 512), name="B", dtype="float16")
>>> D = te.placeholder((8, 512, 64), name="D", dtype="float16")
>>> chain = match_chain(ops.batch_matmul(ops.batch_matmul(A, B, name="T"), D, name="E"))
>>> tiles, why = choose_chain_tiles(chain, load_target_spec())
>>> tiles.tm % (16 * tiles.fm), tiles.tl % (16 * tiles.fn), "predicted" in why
(0, 0, True)
"""

from __future__ import annotations

from tilecraft.target.spec import TargetSpec
from tilecraft_nvidia_tc.fusion.chain import FusedChain
from tilecraft_nvidia_tc.fusion.kernel import fused_profile, lower_fused_chain
from tilecraft_nvidia_tc.fusion.tiles import ChainTiles, plan_chain_tiles

__all__ = ["FRAGMENT_GRIDS", "choose_chain_tiles"]

#: the micro-kernel's fragment grids per warp (rows x columns of 16x16 fragments)
FRAGMENT_GRIDS = ((2, 2), (2, 4), (4, 2), (4, 4))
#: the blocks per SM the tiles are planned for (each gets the SM's shared memory and
#: registers divided by it)
BLOCKS_PER_SM = (1, 2)


def _partitions(spec: TargetSpec) -> int:
    """The sub-partitions of an SM: the spec's shared level's fan-out (4 if not given)."""
    shared = spec.memory.level(spec.threads.shared_level or "shared") if spec.threads else None
    return (shared.fan_out if shared is not None else None) or 4


def _s_tiles(tiles: ChainTiles) -> int:
    return (tiles.tm // (16 * tiles.fm)) * (tiles.tl // (16 * tiles.fn))


def choose_chain_tiles(chain: FusedChain, spec: TargetSpec) -> tuple[ChainTiles | None, str]:
    """The tiles with the fastest predicted kernel over :data:`FRAGMENT_GRIDS` (module
    docstring), and why; ``None`` and why when no grid's tiles fit."""
    from tilecraft.errors import TargetError
    from tilecraft_nvidia_tc.model import estimate_profile

    best: tuple[bool, float, ChainTiles, str] | None = None
    partitions = _partitions(spec)
    reasons = []
    for fm, fn in FRAGMENT_GRIDS:
        for resident in BLOCKS_PER_SM:
            tiles, reason = plan_chain_tiles(chain, spec, fm, fn, blocks_per_sm=resident)
            label = f"{fm}x{fn}/{resident}"
            if tiles is None:
                reasons.append(f"{label}: {reason}")
                continue
            try:
                estimate = estimate_profile(fused_profile(lower_fused_chain(chain, tiles, spec)),
                                            spec)
            except TargetError as err:
                reasons.append(f"{label}: {err}")
                continue
            seconds = estimate.seconds
            few_warps = min(tiles.warps, _s_tiles(tiles)) < partitions
            reasons.append(f"{label}: {seconds * 1e6:.3g} us, "
                           f"{estimate.occupancy.blocks_per_core} block(s)/SM"
                           + (f" ({min(tiles.warps, _s_tiles(tiles))} mma warps)" if few_warps
                              else ""))
            if best is None or (few_warps, seconds) < best[:2]:
                best = (few_warps, seconds, tiles, reason)
    if best is None:
        return None, "; ".join(reasons)
    return best[2], (f"{best[3]}; fragment grids / blocks per SM planned for, predicted "
                     f"{', '.join(reasons)}")
