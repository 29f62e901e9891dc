"""Shared pieces of the dataflow tests: a small target spec and a brute-force movement count."""

from __future__ import annotations

import math

from tilecraft.dataflow import DataflowTree, LoopKind
from tilecraft.target.spec import TargetSpec, load_spec


def toy_spec(l1_bytes: int | None = 1 << 20, l2_bytes: int | None = None, cores: int = 1,
             pes: int = 16) -> TargetSpec:
    levels = [{"name": "DRAM", "size_bytes": None, "bandwidth_bytes_per_cycle": 8,
               "kind": "dram", "access_energy_pj_per_byte": 100.0}]
    if l2_bytes is not None:
        levels.append({"name": "L2", "size_bytes": l2_bytes, "bandwidth_bytes_per_cycle": 32,
                       "access_energy_pj_per_byte": 10.0})
    levels.append({"name": "L1", "size_bytes": l1_bytes, "bandwidth_bytes_per_cycle": 64,
                   "access_energy_pj_per_byte": 1.0})
    return load_spec({
        "name": "toy", "api_version": 1, "version": "0.1", "memory": {"levels": levels},
        "compute": {"cores": cores, "frequency_hz": 1e9, "vector_bits": 0,
                    "processing_elements": pes, "mac_energy_pj": 0.5},
        "primitives": ["split"], "loop_kinds": ["serial"], "evaluation": "estimate",
        "capabilities": {"models_performance": True}})


def brute_force_loads(tree: DataflowTree, op: str, tensor: str, level: str,
                      levels: tuple[str, ...]) -> int:
    """Elements of ``tensor`` loaded into ``level`` by ``op``, by walking every time step of
    the loops at ``level`` and outside it and reloading the tile whenever it changes (tensors
    indexed by single loops per dimension)."""
    rank = {name: i for i, name in enumerate(levels)}
    chain = tree.workload
    access = chain.op(op).access(tensor)
    loops = [lp for lp in tree.path_loops(op) if rank[lp.level] < rank[level]
             or (lp.level == level and lp.kind is LoopKind.TEMPORAL)]
    extents = chain.extents
    total = 0
    previous = None

    def walk(depth: int, origin: dict[str, int], size: dict[str, int]) -> None:
        nonlocal total, previous
        if depth == len(loops):
            box = tuple((origin[v], origin[v] + size[v])
                        for index in access.indices for v in index.loops)
            if box != previous:
                total += math.prod(e - b for b, e in box)
                previous = box
            return
        loop = loops[depth]
        start, length = origin[loop.var], size[loop.var]
        for offset in range(start, start + length, loop.step):
            walk(depth + 1, {**origin, loop.var: offset},
                 {**size, loop.var: min(loop.step, start + length - offset)})

    walk(0, dict.fromkeys(extents, 0), dict(extents))
    return total


__all__ = ["brute_force_loads", "toy_spec"]
