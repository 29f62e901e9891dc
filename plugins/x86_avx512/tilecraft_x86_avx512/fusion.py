"""Fused contraction chains on x86 (thesis ch. 3): which chains, which tiles, fused kernels.

For every chain :func:`~tilecraft.microkernel.chain.as_chain` finds (intermediates used only
inside it, not graph outputs), the block of ``MC`` rows is sized so that the ``L x MC``
intermediate tile (and any extra full-size buffers of the computes between) fits half of L2,
and ``MC`` is a multiple of both register tiles; a chain whose smallest block does not fit is
left unfused, and the report says so. Register tiles come from Eq. 3.4
(:func:`.microkernels.register_blocking_candidates`), restricted to column counts that suit the
problem.
"""

from __future__ import annotations

import math

from tilecraft.graph import Graph
from tilecraft.lower.options import LoweringOptions
from tilecraft.microkernel.chain import Chain, ChainBlocking, as_chain, lower_chain
from tilecraft.target.base import FusedGroup
from tilecraft_x86_avx512.microkernels import OUTER_PRODUCT_F32, register_blocking_candidates

#: one core's fp32 FMA peak and its L3 read bandwidth (TOOLCHAINS.md), for the block-size model
PEAK_FLOPS_PER_CORE = 262e9
L3_BYTES_PER_SECOND = 40e9
#: chains below this many flops run unfused (packing would not pay)
MIN_CHAIN_FLOPS = 2 * 64 * 64 * 64


def _tiles() -> list[tuple[int, int, float]]:
    """Feasible Eq. 3.4 register tiles ``(MI, NR, intensity)`` the template can render."""
    tiles = []
    for cand in register_blocking_candidates(32, 256):
        nr = cand.ni * 16
        if nr in OUTER_PRODUCT_F32.parameters["NR"].choices:
            tiles.append((cand.mi, nr, cand.intensity))
    return tiles


def chain_blocking(chain: Chain, l2_bytes: int, threads: int) -> tuple[ChainBlocking | None, str]:
    """Tiles for ``chain``, or ``None`` and the reason it does not fit.

    Every pair of register tiles (``T^T``'s and ``E``'s) and every block size ``MC`` (a
    multiple of both, the ``L x MC`` tile within half of L2) is scored by the register tiles'
    Eq. 3.4 intensities times the fraction of useful work left after padding ``M`` to blocks,
    ``L`` to strips and ``N`` to panels, by how evenly the blocks spread over the cores, and by
    the share of a block's time spent computing rather than re-reading the packed ``B1`` and
    ``D`` (larger blocks reuse them more); the best wins.
    """
    batch, m_total, l_total, k_total = chain.first.extents()
    _, _, n_total, _ = chain.second.extents()
    budget = l2_bytes // 2
    best: tuple[float, ChainBlocking] | None = None
    smallest = None
    for mi1, nr1, ai1 in _tiles():
        l_padded = math.ceil(l_total / mi1) * mi1
        for mi2, nr2, ai2 in _tiles():
            step = math.lcm(nr1, mi2)
            need = 4 * l_padded * step
            smallest = need if smallest is None else min(smallest, need)
            mc = step
            while 4 * l_padded * mc <= budget and mc <= max(step, m_total):
                blocks = batch * math.ceil(m_total / mc)
                use = (m_total / (math.ceil(m_total / mc) * mc)) * (l_total / l_padded) * \
                    (n_total / (math.ceil(n_total / nr2) * nr2))
                balance = blocks / (math.ceil(blocks / threads) * threads)
                # each block re-reads the packed B1 and D from L3: compute vs reload time
                compute = 2 * mc * l_total * (k_total + n_total) / PEAK_FLOPS_PER_CORE
                reload = 4 * l_total * (k_total + n_total) / L3_BYTES_PER_SECOND
                score = min(ai1, ai2) * use * balance * compute / (compute + reload)
                if best is None or score > best[0] + 1e-9:
                    best = (score, ChainBlocking(mi1=mi1, nr1=nr1, mi2=mi2, nr2=nr2, mc=mc))
                mc += step
    if best is None:
        return None, (f"the smallest intermediate tile ({l_total} x a block of rows) needs "
                      f"{(smallest or 0) // 1024} KB, more than half of L2 ({budget // 1024} KB)")
    return best[1], ""


def fuse_chains(graph: Graph, options: LoweringOptions, l2_bytes: int,
                threads: int) -> list[FusedGroup]:
    consumers = {t: list(graph.consumers(t)) for t in graph.computes}
    outputs = set(graph.outputs)
    groups: list[FusedGroup] = []
    taken: set[str] = set()
    for tensor in reversed(graph.computes):
        if tensor.name in taken:
            continue
        chain = as_chain(tensor, consumers)
        if chain is None or any(t in outputs for t in chain.computes[:-1]):
            continue
        names = tuple(t.name for t in chain.computes)
        if any(name in taken for name in names):
            continue
        label = " -> ".join(names)
        if chain.flops < MIN_CHAIN_FLOPS:
            continue
        blocking, reason = chain_blocking(chain, l2_bytes, threads)
        if blocking is None:
            groups.append(FusedGroup((), (), (f"chain {label} not fused: {reason}",)))
            continue
        kernels = lower_chain(chain, OUTER_PRODUCT_F32.name, blocking, options)
        taken.update(names)
        groups.append(FusedGroup(names, tuple(kernels), (
            f"fused {label} into one kernel: {kernels[-1].attrs['schedule']}",)))
    return [g for g in groups if g.computes] + [g for g in groups if not g.computes]


__all__ = ["chain_blocking", "fuse_chains"]
