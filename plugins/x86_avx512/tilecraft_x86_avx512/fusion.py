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

#: chains below this many flops run unfused (packing would not pay)
MIN_CHAIN_FLOPS = 2 * 64 * 64 * 64


def _tile(columns: int) -> tuple[int, int]:
    """The Eq. 3.4 register tile ``(MI, NR)`` wasting the fewest columns of ``columns``."""
    best = None
    for cand in register_blocking_candidates(32, 256):
        nr = cand.ni * 16
        if nr not in OUTER_PRODUCT_F32.parameters["NR"].choices:
            continue
        use = columns / (math.ceil(columns / nr) * nr)
        score = (cand.intensity * use, cand.mi * cand.ni)
        if best is None or score > best[0]:
            best = (score, cand.mi, nr)
    assert best is not None
    return best[1], best[2]


def chain_blocking(chain: Chain, l2_bytes: int, threads: int) -> tuple[ChainBlocking | None, str]:
    """Tiles for ``chain``, or ``None`` and the reason it does not fit."""
    batch, m_total, l_total, _ = chain.first.extents()
    _, _, n_total, _ = chain.second.extents()
    mi1, nr1 = _tile(min(m_total, 64))
    mi2, nr2 = _tile(n_total)
    full_buffers = 1  # computes between reuse the tile in place where they can
    l_padded = math.ceil(l_total / mi1) * mi1
    step = math.lcm(nr1, mi2)
    budget = l2_bytes // 2
    need = 4 * l_padded * step * full_buffers
    if need > budget:
        return None, (f"the {l_padded} x {step} intermediate tile needs {need // 1024} KB, more "
                      f"than half of L2 ({budget // 1024} KB)")
    mc = step
    while (mc + step) * 4 * l_padded * full_buffers <= budget and mc + step <= m_total \
            and batch * math.ceil(m_total / (mc + step)) >= 2 * threads:
        mc += step
    return ChainBlocking(mi1=mi1, nr1=nr1, mi2=mi2, nr2=nr2, mc=mc), ""


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
