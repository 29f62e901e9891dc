"""The figures of one NVIDIA GPU the model needs, read from the target spec (no chip is named
in code: the A100 of ``spec.yaml``, the H100 of ``variants/h100.yaml``).

Per SM and clock: CUDA-core multiply-adds by type (``ComputeUnits.flops_per_core / 2 /
frequency``: 64 fp32 on an A100, 128 on an H100; half types twice that), Tensor Core issues
of each intrinsic (its ``throughput_per_cycle``), shared-memory wavefronts (the shared level's
bandwidth over banks x bank width: 1). For the chip: the L2's and DRAM's bytes per clock, and
the global level's latency. The residency limits are those of the spec's own architecture
(the first of ``threads.residency``).

>>> from tilecraft_nvidia_tc.target import load_target_spec
>>> a100 = GpuMachine.from_spec(load_target_spec())
>>> a100.architecture, a100.sms, a100.fma_per_clock("float32"), a100.dram_bytes_per_clock
('sm_80', 108, 64.0, 1103.0)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tilecraft.errors import TargetError
from tilecraft.target.hierarchy import CoreResidency
from tilecraft.target.spec import TargetSpec

__all__ = ["GpuMachine"]


@dataclass(frozen=True)
class GpuMachine:
    """One GPU's rates and limits (module docstring)."""

    name: str
    architecture: str
    sms: int
    frequency_hz: float
    fma_rates: Mapping[str, float]
    tensor_issue_rates: Mapping[str, float]
    shared_wavefronts_per_clock: float
    l2_bytes_per_clock: float
    dram_bytes_per_clock: float
    global_latency_cycles: float
    residency: CoreResidency
    subgroup_size: int
    registers_per_block: int | None
    #: sub-partitions of an SM, each with its own Tensor Core fed by its own warps (the shared
    #: level's ``fan_out``)
    partitions: int = 4

    def fma_per_clock(self, dtype: str) -> float:
        """CUDA-core multiply-adds per clock and SM for arithmetic in ``dtype``."""
        return self.fma_rates.get(dtype, self.fma_rates["float32"])

    @classmethod
    def from_spec(cls, spec: TargetSpec, architecture: str | None = None) -> GpuMachine:
        """The machine of ``spec`` with the residency limits of ``architecture`` (default:
        the spec's own chip, the first architecture of ``threads.residency``)."""
        threads = spec.threads
        if threads is None or not threads.residency:
            raise TargetError(f"target {spec.name}: the performance model needs "
                              "threads.residency in the spec (resident threads, registers "
                              "and shared memory per SM)")
        limits = threads.residency_for(architecture or threads.architectures[0])
        compute = spec.compute
        frequency = compute.frequency_hz
        rates = {dtype: compute.flops_per_core(dtype) / 2.0 / frequency
                 for dtype in ("float32", "float16", "bfloat16", "int32", "int8")}
        rates["int8"] = rates["int32"]  # int8 arithmetic runs as int32 on the CUDA cores
        tensor = {intrinsic.name: intrinsic.throughput_per_cycle
                  for intrinsic in spec.intrinsics if intrinsic.compute is not None}
        levels = {level.name: level for level in spec.memory.levels}
        shared = levels[threads.shared_level or "shared"]
        bank_words = (shared.banks or 32) * (shared.bank_bytes or 4)
        dram = spec.memory.levels[0]
        l2 = next((level for level in spec.memory.levels[1:] if level.kind == "cache"), dram)
        return cls(
            name=f"{spec.name} {limits.architecture} ({compute.cores} SMs)",
            architecture=limits.architecture, sms=compute.cores, frequency_hz=frequency,
            fma_rates=rates, tensor_issue_rates=tensor,
            shared_wavefronts_per_clock=shared.bandwidth_bytes_per_cycle / bank_words,
            l2_bytes_per_clock=float(l2.bandwidth_bytes_per_cycle),
            dram_bytes_per_clock=float(dram.bandwidth_bytes_per_cycle),
            global_latency_cycles=float(dram.latency_cycles or 0.0),
            residency=limits, subgroup_size=threads.subgroup_size or 32,
            registers_per_block=threads.registers_per_block, partitions=shared.fan_out or 4)
