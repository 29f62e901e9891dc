"""The x86_avx512 target spec, built from a machine's facts (:class:`.host.HostInfo`).

Memory levels, outer to inner: ``DRAM`` (kernel parameters live here), ``L3`` (shared by the
cores), ``L2``, ``L1`` (data caches with their ways and line size, as /sys reports them), and
``register`` — the 32 zmm registers of 64 bytes, where lowering puts small local accumulators.
Caches are filled by hardware: tiles are sized to fit them, buffers are never allocated in them.

Bandwidths are what one core reads from each level, in bytes per cycle: the host's measured
figures (:mod:`.probe`) divided by its clock. Where nothing was measured (a named CPU without
figures, ``TILECRAFT_X86_PROBE=0``, a failed probe) they are estimates from the ISA
(:data:`ESTIMATED_BYTES_PER_CYCLE`), and the fp32 peak is the formula of
:class:`~tilecraft.target.spec.ComputeUnits` — which overstates a core that executes 512-bit
operations as two halves; the spec's description says which. Latencies are typical figures
of AVX-512 cores (:data:`TYPICAL_LATENCY_CYCLES`): nothing plans with them.

>>> from tilecraft_x86_avx512.host import CacheLevel, HostInfo
>>> caches = (CacheLevel("L1", 32768, False, ways=8), CacheLevel("L2", 1048576, False, ways=8),
...           CacheLevel("L3", 33554432, True, ways=16))
>>> host = HostInfo("test CPU", 2, 4.0e9, "test", caches, frozenset({"avx512f"}),
...                 fma_flops_per_core=128e9, dram_bytes_per_second=32e9,
...                 l3_bytes_per_second=80e9)
>>> spec = build_spec(host)
>>> spec.memory.names, spec.memory.level("L1").associativity
(('DRAM', 'L3', 'L2', 'L1', 'register'), 8)
>>> spec.compute.lanes("float32"), spec.compute.peak_flops("float32") / 1e9
(16, 256.0)
>>> [spec.memory.level(name).bandwidth_bytes_per_cycle for name in ("DRAM", "L3", "L2")]
[8.0, 20.0, 64.0]
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
from tilecraft_x86_avx512.amx import amx_split_pays
from tilecraft_x86_avx512.host import HostInfo, host_info
from tilecraft_x86_avx512.intrinsics import declared_intrinsics
from tilecraft_x86_avx512.microkernels import AMX_SPLIT_F32, AMX_SPLIT_F32_ACC, MICRO_KERNELS

TARGET_NAME = "x86_avx512"
PLUGIN_VERSION = "0.1.0"
VECTOR_BITS = 512
ZMM_REGISTERS = 32
LINE_BYTES = 64

#: bytes per cycle one core reads from each level when nothing was measured: an AVX-512 core's
#: two 64-byte load ports, a 64-byte line per cycle from L2, and modest L3 and DRAM shares
ESTIMATED_BYTES_PER_CYCLE = {"L1": 128.0, "L2": 64.0, "L3": 16.0, "DRAM": 8.0}
#: typical load-to-use latencies of AVX-512 cores, in cycles (DRAM in seconds); informative only
TYPICAL_LATENCY_CYCLES = {"L1": 5.0, "L2": 14.0, "L3": 50.0}
DRAM_LATENCY_SECONDS = 90e-9

LOOP_KINDS = (LoopKind.SERIAL, LoopKind.PARALLEL, LoopKind.VECTOR, LoopKind.UNROLLED)
PRIMITIVES = (SchedulePrimitive.SPLIT, SchedulePrimitive.FUSE, SchedulePrimitive.REORDER,
              SchedulePrimitive.TILE, SchedulePrimitive.UNROLL, SchedulePrimitive.VECTORIZE,
              SchedulePrimitive.INLINE, SchedulePrimitive.COMPUTE_AT,
              SchedulePrimitive.PARALLEL, SchedulePrimitive.CACHE)


def _measured_bytes_per_second(host: HostInfo, level: str) -> float | None:
    return {"DRAM": host.dram_bytes_per_second, "L3": host.l3_bytes_per_second,
            "L2": host.l2_bytes_per_second, "L1": host.l1_bytes_per_second}[level]


def bytes_per_cycle(host: HostInfo, level: str) -> float:
    """What one core reads from ``level`` per cycle: measured, else the ISA estimate."""
    measured = _measured_bytes_per_second(host, level)
    if measured is None:
        return ESTIMATED_BYTES_PER_CYCLE[level]
    return round(measured / host.frequency_hz, 2)


def memory_hierarchy(host: HostInfo) -> MemoryHierarchy:
    levels = [MemoryLevel(
        name="DRAM", size_bytes=None, kind=MemoryKind.DRAM, line_bytes=LINE_BYTES,
        bandwidth_bytes_per_cycle=bytes_per_cycle(host, "DRAM"),
        latency_cycles=round(DRAM_LATENCY_SECONDS * host.frequency_hz))]
    for name in ("L3", "L2", "L1"):
        cache = host.cache(name)
        if cache is None:
            continue
        levels.append(MemoryLevel(
            name=name, size_bytes=cache.size_bytes, kind=MemoryKind.CACHE,
            bandwidth_bytes_per_cycle=bytes_per_cycle(host, name),
            latency_cycles=TYPICAL_LATENCY_CYCLES[name], line_bytes=cache.line_bytes,
            associativity=cache.ways, shared_by_cores=cache.shared_by_cores,
            fan_out=host.cores if cache.shared_by_cores else 1))
    levels.append(MemoryLevel(
        name="register", size_bytes=ZMM_REGISTERS * VECTOR_BITS // 8, kind=MemoryKind.REGISTERS,
        bandwidth_bytes_per_cycle=3 * 2 * VECTOR_BITS // 8, latency_cycles=0))
    return MemoryHierarchy(levels=levels)


def figures_note(host: HostInfo) -> str:
    """Where the spec's figures come from, for its description."""
    measured = [name for name in ("fp32 FMA rate", "DRAM", "L3", "L2", "L1")
                if (host.fma_flops_per_core if name == "fp32 FMA rate"
                    else _measured_bytes_per_second(host, name)) is not None]
    if not measured:
        figures = ("figures estimated from the clock and the ISA (nothing measured; "
                   "`tilecraft targets --probe` measures them)")
    elif len(measured) < 5:
        figures = f"{', '.join(measured)} {host.figures_source}, the rest estimated"
    else:
        figures = f"figures {host.figures_source}"
    if host.fma_flops_per_core is not None:
        figures += f"; fp32 peak {host.fma_flops_per_core / 1e9:.0f} GFLOP/s per core"
    if host.amx_bf16_flops_per_core is not None:
        figures += (f"; AMX bf16 {host.amx_bf16_flops_per_core / 1e12:.2f} TFLOP/s per core, "
                    "float32 products " + ("on AMX tiles" if _amx_split_pays(host)
                                           else "on FMA (the split path would not pay)"))
    return f"caches from {host.caches_source}; {figures}"


#: the micro-kernels of float32 products on AMX tiles (blocking/amx_split.py)
AMX_SPLIT = frozenset({AMX_SPLIT_F32.name, AMX_SPLIT_F32_ACC.name})


def _amx_split_pays(host: HostInfo) -> bool:
    return amx_split_pays(host.amx_bf16_flops_per_core, host.fma_flops_per_core)


#: channels-last convolutions (blocking/direct_nhwc.py: the activation's pixels are the rows
#: a micro-kernel reads in place, window row by window row; 1x1 ones plain GEMMs read in
#: place); grouped and depthwise ones keep NCHW (blocking/depthwise.py), and with them their
#: graph. Same process, Xeon family 6 model 167, NCHW -> NHWC: ResNet-50 62.42 -> 60.23 ms
#: (1 thread), 33.77 -> 32.74 (2); ResNet-18 26.97 -> 26.42, 14.30 -> 13.92; MobileNet-V2 all
#: in NHWC (its depthwise convolutions as loop nests) 7.21 -> 7.94, 4.21 -> 4.36
PREFERRED_LAYOUTS = {"conv2d": "NHWC", "grouped_conv2d": "NCHW"}
#: graphs of fewer convolutions stay NCHW: an isolated convolution gains about what the two
#: boundary transposes cost (32 -> 64 5x5 at 30x30: 0.585 -> 0.600 ms), and Chimera's fused
#: conv -> ReLU -> conv chains (blocking/column_chain.py) are NCHW only (Table 3.6's C7 ran
#: 1.29x slower unfused in NHWC, C5's stride 4 1.38x)
LAYOUT_MIN_CONVOLUTIONS = 8
#: convolutions with fewer output pixels keep NCHW: ResNet's 7x7 stage, where each strip of 6
#: pixels would stream a panel's weights (9.4 MB a 3x3 layer, from memory in a network) while
#: the channels-first template reads each weight once. Same process, 1 thread, Xeon family 6
#: model 167, stage 4 NHWC -> NCHW (inside an NHWC network, transposes included): ResNet-50
#: 59.89 -> 57.89 ms, ResNet-18 26.03 -> 25.42
LAYOUT_MIN_PIXELS = 100


def build_spec(host: HostInfo | None = None) -> TargetSpec:
    """The spec for ``host`` (this machine by default)."""
    host = host or host_info()
    measured_peak = {} if host.fma_flops_per_core is None \
        else {"float32": float(host.fma_flops_per_core)}
    return TargetSpec(
        name=TARGET_NAME,
        api_version=TARGET_API_VERSION,
        version=PLUGIN_VERSION,
        description=(f"x86-64 CPU with AVX-512 ({host.model_name}, {host.cores} cores, "
                     f"{host.frequency_hz / 1e9:.2f} GHz from {host.frequency_source}; "
                     f"{figures_note(host)}): LLVM IR through llvmlite, JIT-compiled or linked "
                     "into a shared library"),
        memory=memory_hierarchy(host),
        compute=ComputeUnits(cores=host.cores, frequency_hz=float(host.frequency_hz),
                             vector_bits=VECTOR_BITS, fma_units_per_core=2,
                             peak_flops_per_core=measured_peak),
        primitives=PRIMITIVES,
        fixed_decisions={"vector_lanes": VECTOR_BITS // 32, "layout": "row_major"},
        loop_kinds=LOOP_KINDS,
        intrinsics=declared_intrinsics(),
        # float32 products on AMX tiles only where the measured tile unit makes them pay
        micro_kernels=tuple(decl for decl in MICRO_KERNELS.values()
                            if decl.name not in AMX_SPLIT or _amx_split_pays(host)),
        evaluation=EvaluationMode.MEASURE,
        capabilities=TargetCapabilities(executes_natively=True, emulates=True, compiles=True,
                                        models_performance=False),
        preferred_layouts=PREFERRED_LAYOUTS,
        layout_min_convolutions=LAYOUT_MIN_CONVOLUTIONS,
        layout_min_pixels=LAYOUT_MIN_PIXELS,
    )
