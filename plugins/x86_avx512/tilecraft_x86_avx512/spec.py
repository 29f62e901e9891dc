"""The x86_avx512 target spec, built from this machine's facts (:mod:`.host`).

Memory levels, outer to inner: ``DRAM`` (kernel parameters live here), ``L3`` (shared by the
cores), ``L2``, ``L1`` (data caches as /sys reports them), and ``register`` — the 32 zmm
registers of 64 bytes, where lowering puts small local accumulators. Caches are filled by
hardware: tiles are sized to fit them, buffers are never allocated in them.

Bandwidths are per instance in bytes per cycle, figures for a Zen 4/5-class core: two 64-byte
loads per cycle from L1, 64 B/cycle L2 to L1, 32 B/cycle L3 to L2; DRAM's is the measured
~38 GB/s of one thread divided by the clock.

>>> from tilecraft_x86_avx512.host import CacheLevel, HostInfo
>>> host = HostInfo("test CPU", 2, 4.0e9, "test", (CacheLevel("L1", 49152, False),
...                 CacheLevel("L2", 1048576, False), CacheLevel("L3", 33554432, True)),
...                 frozenset({"avx512f"}))
>>> spec = build_spec(host)
>>> spec.memory.names
('DRAM', 'L3', 'L2', 'L1', 'register')
>>> spec.compute.lanes("float32"), spec.compute.peak_flops("float32") / 1e9
(16, 512.0)
"""

from __future__ import annotations

from tilecraft.kernel_ir.nodes import LoopKind
from tilecraft.target.memory import MemoryHierarchy, MemoryKind, MemoryLevel
from tilecraft.target.spec import (
    TARGET_API_VERSION,
    ComputeUnits,
    EvaluationMode,
    SchedulePrimitive,
    TargetCapabilities,
    TargetSpec,
)
from tilecraft_x86_avx512.host import HostInfo, host_info
from tilecraft_x86_avx512.intrinsics import declared_intrinsics
from tilecraft_x86_avx512.microkernels import MICRO_KERNELS

TARGET_NAME = "x86_avx512"
PLUGIN_VERSION = "0.1.0"
VECTOR_BITS = 512
ZMM_REGISTERS = 32
DRAM_BYTES_PER_SECOND = 38e9
LINE_BYTES = 64

#: (bandwidth to the next inner level in bytes/cycle, latency in cycles) per cache level
_CACHE_FIGURES = {"L3": (32.0, 50.0), "L2": (64.0, 14.0), "L1": (128.0, 5.0)}

LOOP_KINDS = (LoopKind.SERIAL, LoopKind.PARALLEL, LoopKind.VECTOR, LoopKind.UNROLLED)
PRIMITIVES = (SchedulePrimitive.SPLIT, SchedulePrimitive.FUSE, SchedulePrimitive.REORDER,
              SchedulePrimitive.TILE, SchedulePrimitive.UNROLL, SchedulePrimitive.VECTORIZE,
              SchedulePrimitive.INLINE, SchedulePrimitive.COMPUTE_AT,
              SchedulePrimitive.PARALLEL, SchedulePrimitive.CACHE)


def memory_hierarchy(host: HostInfo) -> MemoryHierarchy:
    levels = [MemoryLevel(
        name="DRAM", size_bytes=None, kind=MemoryKind.DRAM, line_bytes=LINE_BYTES,
        bandwidth_bytes_per_cycle=round(DRAM_BYTES_PER_SECOND / host.frequency_hz, 2),
        latency_cycles=round(90e-9 * host.frequency_hz))]
    for name in ("L3", "L2", "L1"):
        cache = host.cache(name)
        if cache is None:
            continue
        bandwidth, latency = _CACHE_FIGURES[name]
        levels.append(MemoryLevel(
            name=name, size_bytes=cache.size_bytes, kind=MemoryKind.CACHE,
            bandwidth_bytes_per_cycle=bandwidth, latency_cycles=latency, line_bytes=LINE_BYTES,
            shared_by_cores=cache.shared_by_cores,
            fan_out=host.cores if cache.shared_by_cores else 1))
    levels.append(MemoryLevel(
        name="register", size_bytes=ZMM_REGISTERS * VECTOR_BITS // 8, kind=MemoryKind.REGISTERS,
        bandwidth_bytes_per_cycle=3 * 2 * VECTOR_BITS // 8, latency_cycles=0))
    return MemoryHierarchy(levels=levels)


def build_spec(host: HostInfo | None = None) -> TargetSpec:
    """The spec for ``host`` (this machine by default)."""
    host = host or host_info()
    return TargetSpec(
        name=TARGET_NAME,
        api_version=TARGET_API_VERSION,
        version=PLUGIN_VERSION,
        description=(f"x86-64 CPU with AVX-512 ({host.model_name}, {host.cores} cores, "
                     f"{host.frequency_hz / 1e9:.2f} GHz from {host.frequency_source}): LLVM IR "
                     "through llvmlite, JIT-compiled or linked into a shared library"),
        memory=memory_hierarchy(host),
        compute=ComputeUnits(cores=host.cores, frequency_hz=float(host.frequency_hz),
                             vector_bits=VECTOR_BITS, fma_units_per_core=2),
        primitives=PRIMITIVES,
        fixed_decisions={"vector_lanes": VECTOR_BITS // 32, "layout": "row_major"},
        loop_kinds=LOOP_KINDS,
        intrinsics=declared_intrinsics(),
        micro_kernels=tuple(MICRO_KERNELS.values()),
        evaluation=EvaluationMode.MEASURE,
        capabilities=TargetCapabilities(executes_natively=True, emulates=True, compiles=True,
                                        models_performance=False),
    )
