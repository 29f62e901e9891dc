"""Chimera on the GPU (thesis ch. 3, §3.4.1.2, Fig. 3.9): float16 GEMM chains and attention
fused into one CUDA kernel whose intermediate tile stays in shared memory and registers.

- :mod:`.chain`: the chains the kernel computes, recognised in a graph;
- :mod:`.tiles`: the tiles from Chimera's solver on the spec's shared memory, the block's
  resources checked against the spec's limits per block and per thread;
- :mod:`.choice`: the micro-kernel's fragment grid chosen by the performance model;
- :mod:`.kernel`: the Kernel IR, the CUDA C (Jinja templates of the plugin, the WMMA
  outer-product micro-kernel) and the performance model's counts.

:func:`fuse_chains` is :meth:`NvidiaTcTarget.fuse <tilecraft_nvidia_tc.target.NvidiaTcTarget.fuse>`.
"""

from __future__ import annotations

from typing import Any

from tilecraft.graph import Graph
from tilecraft.target.base import FusedGroup
from tilecraft.target.spec import TargetSpec
from tilecraft_nvidia_tc.fusion.chain import FusedChain, match_chain
from tilecraft_nvidia_tc.fusion.choice import FRAGMENT_GRIDS, choose_chain_tiles
from tilecraft_nvidia_tc.fusion.kernel import (
    FUSED_CHAIN,
    FusedKernelConfig,
    fused_config,
    fused_profile,
    fused_source,
    lower_fused_chain,
)
from tilecraft_nvidia_tc.fusion.tiles import (
    ChainTiles,
    FusedResourceError,
    SharedLayout,
    check_resources,
    plan_chain_tiles,
)

__all__ = ["FRAGMENT_GRIDS", "FUSED_CHAIN", "ChainTiles", "FusedChain", "FusedKernelConfig",
           "FusedResourceError", "SharedLayout", "check_resources", "choose_chain_tiles",
           "fuse_chains", "fused_config", "fused_profile", "fused_source", "lower_fused_chain",
           "match_chain", "plan_chain_tiles"]

EXPRESSIBLE = ("the fused CUDA kernel takes float16 chains of two (batch) matmuls, with nothing "
               "or a softmax over the last axis (optionally after ops.scale) between them")


def fuse_chains(graph: Graph, spec: TargetSpec, plan: Any) -> list[FusedGroup]:
    """One fused kernel for each chain Chimera's ``plan`` fuses that the kernel can express
    and whose tiles fit; a note-only group saying why for every other planned chain."""
    if plan is None:
        return []
    by_name = {t.name: t for t in graph.computes}
    outputs = {t.name for t in graph.outputs}
    groups: list[FusedGroup] = []
    for group in plan.chains:
        names = tuple(group.computes)
        last = by_name.get(names[-1]) if names else None
        chain = match_chain(last) if last is not None else None
        if chain is None or set(chain.names) != set(names):
            reason = EXPRESSIBLE
        elif any(name in outputs or any(c.name not in names for c in graph.consumers(
                by_name[name])) for name in names[:-1]):
            reason = "an intermediate is also a graph output or read outside the chain"
        else:
            tiles, reason = choose_chain_tiles(chain, spec)
            if tiles is not None:
                kernel = lower_fused_chain(chain, tiles, spec)
                groups.append(FusedGroup(names, (kernel,), (
                    f"fused {' -> '.join(chain.names)} into one kernel: "
                    f"{kernel.attrs['schedule']}; the intermediate stays in shared memory "
                    f"({reason})",)))
                continue
        groups.append(FusedGroup((), (), (
            f"chain {' -> '.join(names)} (planned by Chimera) not fused: {reason}",)))
    return groups
