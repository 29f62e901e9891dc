"""How many blocks of a kernel one SM holds at once (its occupancy), from the kernel's
registers per thread and shared memory per block and the SM's :class:`CoreResidency` limits,
as the CUDA Occupancy Calculator computes it (``cuda_occupancy.h``):

- threads: resident warps of the SM // warps of a block;
- registers: a warp takes ``registers x 32`` rounded up to the allocation unit (256); each of
  the 4 sub-partitions holds ``registers of the SM / 4 // that`` warps; blocks = warps // warps
  of a block (none when a block needs more than the registers of a block or 255 per thread);
- shared memory: a block takes its static + dynamic bytes plus the 1 KB the system reserves,
  rounded up to 128; blocks = shared memory of the SM // that (none over the per-block limit);
- the SM's limit on resident blocks.

The shared-memory carve-out is taken at its largest (what ``cudaFuncAttributePreferred
SharedMemoryCarveout`` allows and what the occupancy API assumes for kernels that need it).

>>> from tilecraft.target.hierarchy import CoreResidency
>>> sm80 = CoreResidency(architecture="sm_80", max_threads=2048, max_blocks=32,
...     registers=65536, register_allocation_unit=256, register_partitions=4,
...     shared_bytes=167936, shared_allocation_unit=128, shared_bytes_reserved_per_block=1024,
...     max_shared_bytes_per_block=166912)
>>> occ = occupancy(sm80, threads_per_block=256, registers_per_thread=64, shared_bytes=0)
>>> occ.blocks_per_core, occ.limited_by, occ.occupancy
(4, 'registers', 0.5)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from tilecraft.target.hierarchy import CoreResidency

#: the ceiling on registers per thread the hardware enforces (sm_70 and newer allocate 256
#: per thread but ptxas never uses more than 255)
MAX_REGISTERS_PER_THREAD = 255


@dataclass(frozen=True)
class Occupancy:
    """Resident blocks of one kernel on one SM, what limits them, and the fraction of the
    SM's warps they fill. ``limits`` gives the blocks each resource alone would allow."""

    architecture: str
    blocks_per_core: int
    subgroups_per_core: int
    occupancy: float
    limited_by: str
    limits: dict[str, int]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _ceil_div(value: int, divisor: int) -> int:
    return -(-value // divisor)


def occupancy(limits: CoreResidency, *, threads_per_block: int, registers_per_thread: int,
              shared_bytes: int, subgroup_size: int = 32,
              registers_per_block: int | None = None) -> Occupancy:
    """The occupancy of a kernel launched with ``threads_per_block`` threads using
    ``registers_per_thread`` registers and ``shared_bytes`` shared memory (static + dynamic)
    per block on a core with ``limits`` (module docstring). A kernel that cannot run at all
    gets 0 blocks, limited by the resource it exceeds."""
    if threads_per_block < 1:
        raise ValueError(f"threads_per_block must be at least 1, not {threads_per_block}")
    subgroups_per_block = _ceil_div(threads_per_block, subgroup_size)
    block_registers_cap = registers_per_block or limits.registers
    found: dict[str, int] = {
        "threads": limits.max_subgroups(subgroup_size) // subgroups_per_block,
        "blocks": limits.max_blocks,
    }
    # registers
    per_subgroup = limits.allocated_registers_per_subgroup(registers_per_thread, subgroup_size)
    partitions = limits.register_partitions
    assumed_per_block = per_subgroup * _ceil_div(subgroups_per_block, partitions) * partitions
    if (registers_per_thread > MAX_REGISTERS_PER_THREAD
            or assumed_per_block > block_registers_cap
            or per_subgroup * subgroups_per_block > block_registers_cap):
        found["registers"] = 0
    elif per_subgroup == 0:
        found["registers"] = limits.max_blocks
    else:
        subgroups = (limits.registers // partitions // per_subgroup) * partitions
        found["registers"] = subgroups // subgroups_per_block
    # shared memory
    allocated = limits.allocated_shared_bytes(shared_bytes)
    cap = limits.max_shared_bytes_per_block
    if cap is not None and shared_bytes > cap:
        found["shared_memory"] = 0
    else:
        found["shared_memory"] = (limits.shared_bytes // allocated if allocated
                                  else limits.max_blocks)
    limited_by = min(found, key=lambda name: found[name])
    blocks = found[limited_by]
    subgroups = blocks * subgroups_per_block
    return Occupancy(
        architecture=limits.architecture, blocks_per_core=blocks, subgroups_per_core=subgroups,
        occupancy=subgroups / limits.max_subgroups(subgroup_size), limited_by=limited_by,
        limits=found)


__all__ = ["MAX_REGISTERS_PER_THREAD", "Occupancy", "occupancy"]
