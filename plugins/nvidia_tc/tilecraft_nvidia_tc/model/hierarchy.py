"""The time of a kernel on a GPU: a roofline per memory level composed as AMOS's hierarchical
model (thesis §5.6, Eq. 5.6-5.8), with occupancy deciding how many blocks share an SM.

Blocks run in waves: an SM holds ``r`` blocks at once (the occupancy, from the build's
registers and shared memory per architecture, else from the profile's estimate), so
``SMs x r`` blocks run together and the kernel takes ``ceil(blocks / (SMs x r))`` waves
(``S`` of the outermost level in Eq. 5.7). One wave of ``b`` blocks, ``k = ceil(b / SMs)`` of
them on the busiest SM, takes (Eq. 5.7, each level the max of the level below and its own
traffic, Eq. 5.8 ``R = DataIn / in_bw``)::

    L0 (registers: the SM's arithmetic) = k x max(FMA instructions / CUDA-core rate,
                                                   Tensor Core issues / their rate x idle)
    L1 (shared)  = max(L0, k x shared wavefronts / wavefronts per clock,
                       global round trips x global latency)      # latency hidden by the k blocks
    L2 (L2)      = max(L1, b x L2 sector bytes / L2 bytes per clock)
    L3 (DRAM)    = max(L2, b / blocks x compulsory bytes / DRAM bytes per clock)

(per block figures: the profile's totals over ``blocks``). The Tensor Core rate is the SM's,
its four sub-partitions' (the shared level's ``fan_out``) together; each sub-partition's
Tensor Core is fed by its own warps, so with ``w`` warps issuing Tensor Core instructions on
the busiest SM (``k`` times the profile's ``tensor_warps``) fewer than the ``P`` partitions,
``idle = P / w``: one warp alone on an SM issues at a quarter of the SM's rate. Eq. 5.7
divides each level's traffic over its serial iterations and multiplies back, so with traffic
spread evenly a level is the max of totals: a roofline per level. The bound named is the
term that sets the busiest wave's time: ``compute`` (CUDA cores or Tensor Cores),
``shared``, ``L2``, ``DRAM`` or ``latency``.

>>> from tilecraft_nvidia_tc.model.profile import KernelProfile
>>> from tilecraft_nvidia_tc.model.machine import GpuMachine
>>> from tilecraft_nvidia_tc.target import load_target_spec
>>> add = KernelProfile("add", blocks=4096, threads_per_block=256,
...     instructions={"float32": 1 << 20}, flops=1 << 20, l2_bytes=12 << 20,
...     dram_bytes=12 << 20, global_rounds=1, registers_per_thread=16)
>>> cost = predict(add, GpuMachine.from_spec(load_target_spec()))
>>> cost.bound, round(cost.seconds * 1e6, 2)     # 12 MiB at 1103 B/clock x 1.41 GHz
('DRAM', 8.09)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from tilecraft.errors import TargetError
from tilecraft_nvidia_tc.model.machine import GpuMachine
from tilecraft_nvidia_tc.model.profile import KernelProfile
from tilecraft_nvidia_tc.toolchain.occupancy import Occupancy, occupancy

__all__ = ["BOUNDS", "GpuEstimate", "WaveCost", "predict"]

#: what may bound a kernel, as the report names it
BOUNDS = ("compute", "tensor core", "shared", "latency", "L2", "DRAM")


@dataclass(frozen=True)
class WaveCost:
    """One wave of ``blocks`` blocks: each term in cycles (module docstring)."""

    blocks: int
    terms: dict[str, float]

    @property
    def cycles(self) -> float:
        return max(self.terms.values())

    @property
    def bound(self) -> str:
        return max(self.terms, key=lambda name: (self.terms[name], -BOUNDS.index(name)))


@dataclass(frozen=True)
class GpuEstimate:
    """The model's prediction for one kernel on one machine."""

    kernel: str
    machine: str
    architecture: str
    seconds: float
    cycles: float
    bound: str
    waves: int
    occupancy: Occupancy
    resources: str
    waves_detail: tuple[WaveCost, ...] = field(default_factory=tuple)

    def detail(self) -> dict[str, float]:
        """The figures as ``Estimate.detail`` carries them (seconds per term of the busiest
        wave times the waves, and the bound as ``bound_<name>`` = 1)."""
        top = max(self.waves_detail, key=lambda wave: wave.cycles)
        hz = self.cycles / self.seconds if self.seconds else 1.0
        detail = {f"{name.replace(' ', '_')}_seconds": value * self.waves / hz
                  for name, value in top.terms.items()}
        detail.update({"cycles": self.cycles, "waves": float(self.waves),
                       "blocks_per_sm": float(self.occupancy.blocks_per_core),
                       "occupancy": self.occupancy.occupancy,
                       f"bound_{self.bound.replace(' ', '_')}": 1.0})
        return detail

    def summary(self) -> str:
        """One line for the compile report."""
        return (f"model {self.architecture}: {_fmt(self.seconds)} predicted, {self.bound}-bound "
                f"({self.waves} wave(s) of {self.occupancy.blocks_per_core} block(s)/SM, "
                f"{self.resources})")


def _fmt(seconds: float) -> str:
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds * 1e6:.3g} us"


def _wave(profile: KernelProfile, machine: GpuMachine, blocks: int) -> WaveCost:
    per_block = 1.0 / profile.blocks
    busiest = math.ceil(blocks / machine.sms)
    cuda_cores = sum(count / machine.fma_per_clock(dtype)
                     for dtype, count in profile.instructions.items())
    tensor = sum(calls / machine.tensor_issue_rates.get(name, 0.25)
                 for name, calls in profile.tensor_issues.items())
    # sub-partitions without a warp issuing Tensor Core instructions (module docstring)
    partitions = max(1, machine.partitions)
    tensor *= partitions / min(partitions, max(1, busiest * profile.tensor_warps))
    terms = {
        "compute": busiest * cuda_cores * per_block,
        "tensor core": busiest * tensor * per_block,
        "shared": busiest * profile.shared_wavefronts * per_block
        / machine.shared_wavefronts_per_clock,
        "latency": profile.global_rounds * machine.global_latency_cycles,
        "L2": blocks * profile.l2_bytes * per_block / machine.l2_bytes_per_clock,
        "DRAM": blocks * profile.dram_bytes * per_block / machine.dram_bytes_per_clock,
    }
    return WaveCost(blocks, terms)


def predict(profile: KernelProfile, machine: GpuMachine, *, registers: int | None = None,
            shared_bytes: int | None = None) -> GpuEstimate:
    """The time of the kernel of ``profile`` on ``machine`` (module docstring); ``registers``
    per thread and ``shared_bytes`` per block are the build's where known (else the
    profile's estimate). A kernel no SM can hold is a TargetError naming the limit."""
    from_build = registers is not None
    if registers is None:
        # ptxas fits a block into the register file (spilling if it must): the IR's estimate
        # is capped at what one block of this size may use
        cap = (machine.registers_per_block or machine.residency.registers) \
            // max(1, -(-profile.threads_per_block // machine.subgroup_size)
                   * machine.subgroup_size)
        registers = min(profile.registers_per_thread, cap, 255)
    shared = profile.shared_bytes_per_block if shared_bytes is None else shared_bytes
    resident = occupancy(machine.residency, threads_per_block=profile.threads_per_block,
                         registers_per_thread=registers, shared_bytes=shared,
                         subgroup_size=machine.subgroup_size,
                         registers_per_block=machine.registers_per_block)
    if resident.blocks_per_core == 0:
        raise TargetError(
            f"kernel {profile.kernel}: no {machine.architecture} SM can hold one block "
            f"({profile.threads_per_block} threads, {registers} registers per thread, {shared} "
            f"bytes of shared memory): {resident.limited_by} is over the limit; use smaller "
            "tiles or fewer threads per block")
    together = machine.sms * resident.blocks_per_core
    full, rest = divmod(profile.blocks, together)
    waves = [_wave(profile, machine, together)] * min(full, 1)
    if rest:
        waves.append(_wave(profile, machine, rest))
    cycles = full * (waves[0].cycles if full else 0.0) + (waves[-1].cycles if rest else 0.0)
    top = max(waves, key=lambda wave: wave.cycles * (full if wave.blocks == together else 1))
    where = "build" if from_build else "estimated from the Kernel IR"
    resources = (f"{registers} registers/thread, {shared} B shared/block ({where}), "
                 f"{resident.occupancy:.0%} occupancy")
    return GpuEstimate(profile.kernel, machine.name, machine.architecture,
                       cycles / machine.frequency_hz, cycles, top.bound,
                       full + (1 if rest else 0), resident, resources, tuple(waves))
