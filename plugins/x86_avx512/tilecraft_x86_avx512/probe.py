"""Micro-benchmarks of one core: its fp32 FMA rate and its streaming read bandwidths.

Each kernel is LLVM IR JIT-compiled through llvmlite (as the frequency probe in :mod:`.host`)
and timed with ``perf_counter``; the machine may be shared, so every figure is the best of
several short runs. The whole probe takes a few tenths of a second.

- **FMA rate**: ``CHAINS`` independent chains of ``acc = fma(acc, a, b)`` on 16-lane zmm
  vectors. 16 chains cover the latency (4 cycles) times the throughput (2 per cycle) of every
  AVX-512 core with room to spare, so the loop runs at the FMA units' throughput: 64 flops per
  cycle where two 512-bit units exist (Zen 5, Intel server cores), 32 where 512-bit operations
  execute as two 256-bit halves (Zen 4) — the double pumping the formula cannot see.
- **AMX rate** (where the CPU has AMX-BF16 and Linux grants the tile state): ``tdpbf16ps``
  on four independent accumulator tiles, its operands in tile registers — the tile unit's
  throughput, which :func:`~.amx.amx_split_pays` weighs against the FMA rate (a virtual
  machine's tile unit measured 2.95-3.15 TFLOP/s on one host, 1.1-1.2 on another).
- **Bandwidths**: a sum over a buffer with 512-bit loads (eight independent loads per block,
  added in a tree: the additions never limit it), from a buffer sized for each level
  (:func:`buffer_sizes`): half of L1, half of L2, one that fits L3 but not L2, and 4x the L3
  for DRAM. Zen 4 loads one 512-bit vector per cycle from L1, Intel's server cores two.

>>> plausible_figures(ProbeResult(1.17e11, 3.0e10, 9.0e10, 1.1e11, 2.1e11))
True
"""

from __future__ import annotations

import ctypes
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from tilecraft.errors import TargetError

#: independent accumulator chains of the FMA kernel (latency x throughput is 8 on AVX-512 cores)
CHAINS = 16
#: FMAs per chain per loop iteration (unrolled, so that the loop overhead is negligible)
UNROLL = 2
LANES = 16
#: plausibility ranges of one core's figures; outside them a measurement is discarded
FMA_RANGE = (1e9, 5e12)
BANDWIDTH_RANGE = (1e8, 5e12)
AMX_RANGE = (1e10, 1e14)
MIB = 1 << 20


@dataclass(frozen=True)
class ProbeResult:
    """One core's measured figures: fp32 operations/s; DRAM, L3, L2 and L1 read bytes/s."""

    fma_flops_per_core: float
    dram_bytes_per_second: float
    l3_bytes_per_second: float
    l2_bytes_per_second: float
    l1_bytes_per_second: float
    #: bfloat16 operations/s of the AMX tile unit (None: no AMX, or not measured)
    amx_bf16_flops_per_core: float | None = None


def plausible_figures(result: ProbeResult) -> bool:
    """Whether every figure is finite and within a range some x86 core can have."""
    checks = ((result.fma_flops_per_core, FMA_RANGE),
              (result.dram_bytes_per_second, BANDWIDTH_RANGE),
              (result.l3_bytes_per_second, BANDWIDTH_RANGE),
              (result.l2_bytes_per_second, BANDWIDTH_RANGE),
              (result.l1_bytes_per_second, BANDWIDTH_RANGE))
    if result.amx_bf16_flops_per_core is not None:
        checks += ((result.amx_bf16_flops_per_core, AMX_RANGE),)
    return all(isinstance(value, float) and math.isfinite(value) and low <= value <= high
               for value, (low, high) in checks)


def _fma_ir() -> str:
    vector = f"<{LANES} x float>"
    phis, body, sums = [], [], []
    for chain in range(CHAINS):
        phis.append(f"  %acc{chain}.0 = phi {vector} [ %vb, %entry ], "
                    f"[ %acc{chain}.{UNROLL}, %loop ]")
        for step in range(UNROLL):
            body.append(f"  %acc{chain}.{step + 1} = call {vector} @llvm.fma.v16f32("
                        f"{vector} %acc{chain}.{step}, {vector} %va, {vector} %vb)")
    total = f"%acc0.{UNROLL}"
    for chain in range(1, CHAINS):
        sums.append(f"  %sum{chain} = fadd {vector} {total}, %acc{chain}.{UNROLL}")
        total = f"%sum{chain}"
    newline = "\n"
    return f"""
declare {vector} @llvm.fma.v16f32({vector}, {vector}, {vector})

define void @fma_chains(i64 %n, float %a, float %b, ptr %out) nounwind {{
entry:
  %va.0 = insertelement {vector} undef, float %a, i32 0
  %va = shufflevector {vector} %va.0, {vector} undef, <{LANES} x i32> zeroinitializer
  %vb.0 = insertelement {vector} undef, float %b, i32 0
  %vb = shufflevector {vector} %vb.0, {vector} undef, <{LANES} x i32> zeroinitializer
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i.next, %loop ]
{newline.join(phis)}
{newline.join(body)}
  %i.next = add i64 %i, 1
  %more = icmp ult i64 %i.next, %n
  br i1 %more, label %loop, label %done
done:
{newline.join(sums)}
  store {vector} {total}, ptr %out, align 4
  ret void
}}
"""


_READ_IR = """
define float @read_sum(ptr %data, i64 %blocks, i64 %passes) nounwind {
entry:
  br label %pass
pass:
  %p = phi i64 [ 0, %entry ], [ %p.next, %pass.end ]
  %s.in = phi <16 x float> [ zeroinitializer, %entry ], [ %s.out, %pass.end ]
  br label %loop
loop:
  %i = phi i64 [ 0, %pass ], [ %i.next, %loop ]
  %s = phi <16 x float> [ %s.in, %pass ], [ %s.next, %loop ]
ACCUMULATE
  %i.next = add i64 %i, 1
  %more = icmp ult i64 %i.next, %blocks
  br i1 %more, label %loop, label %pass.end
pass.end:
  %s.out = phi <16 x float> [ %s.next, %loop ]
  %p.next = add i64 %p, 1
  %again = icmp ult i64 %p.next, %passes
  br i1 %again, label %pass, label %done
done:
  %r = call float @llvm.vector.reduce.fadd.v16f32(float 0.0, <16 x float> %s.out)
  ret float %r
}
declare float @llvm.vector.reduce.fadd.v16f32(float, <16 x float>)
"""
#: 512-bit loads per block of the read kernel (one block = 512 bytes)
READ_VECTORS = 8


def _read_ir() -> str:
    lines = [f"  %base = mul i64 %i, {READ_VECTORS * LANES}"]
    for v in range(READ_VECTORS):
        lines.append(f"  %off{v} = add i64 %base, {v * LANES}")
        lines.append(f"  %ptr{v} = getelementptr float, ptr %data, i64 %off{v}")
        lines.append(f"  %x{v} = load <16 x float>, ptr %ptr{v}, align 64")
    # a tree of adds: 8 independent loads per block, one dependent add into the running sum
    level = [f"%x{v}" for v in range(READ_VECTORS)]
    step = 0
    while len(level) > 1:
        nxt = []
        for a, b in zip(level[::2], level[1::2], strict=True):
            lines.append(f"  %t{step} = fadd <16 x float> {a}, {b}")
            nxt.append(f"%t{step}")
            step += 1
        level = nxt
    lines.append(f"  %s.next = fadd <16 x float> %s, {level[0]}")
    return _READ_IR.replace("ACCUMULATE", "\n".join(lines))


def _best_seconds(run: Callable[[], object], runs: int) -> float:
    run()  # warm up: clock, caches, page tables
    best = math.inf
    for _ in range(runs):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def measure_fma_flops(iterations: int = 20000, runs: int = 7) -> float:
    """fp32 operations per second of one core through 512-bit FMAs (see the module doc)."""
    from tilecraft_x86_avx512.build import jit_compile

    module = jit_compile(_fma_ir(), "the FMA-rate probe")
    kernel = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_float, ctypes.c_float,
                              ctypes.c_void_p)(module.address("fma_chains"))
    out = np.zeros(LANES, dtype=np.float32)
    seconds = _best_seconds(lambda: kernel(iterations, 0.5, 1.0, out.ctypes.data), runs)
    return iterations * CHAINS * UNROLL * LANES * 2 / seconds


#: tile multiplies per loop iteration of the AMX probe: 4 accumulators x 4 (unrolled)
AMX_MULTIPLIES = 16
#: operations of one ``tdpbf16ps`` on 16 x 16 float32 accumulators and 32 k: 2 * 16 * 16 * 32
AMX_TILE_FLOPS = 16384


def _amx_ir() -> str:
    """A loop of ``tdpbf16ps`` on 4 independent 16 x 16 accumulators (tmm0-3) from two A and
    two B tiles loaded once (tmm4-7): the tile unit's throughput, its operands in registers."""
    multiplies = "\n".join(
        f"  call void @llvm.x86.tdpbf16ps(i8 {acc}, i8 {4 + acc // 2}, i8 {6 + acc % 2})"
        for _ in range(AMX_MULTIPLIES // 4) for acc in range(4))
    config = "\n".join(
        f"  %colsb{t} = getelementptr i8, ptr %cfg, i64 {16 + 2 * t}\n"
        f"  store i16 64, ptr %colsb{t}, align 2\n"
        f"  %rows{t} = getelementptr i8, ptr %cfg, i64 {48 + t}\n"
        f"  store i8 16, ptr %rows{t}, align 1" for t in range(8))
    loads = "\n".join(
        f"  %src{t} = getelementptr i8, ptr %data, i64 {1024 * t}\n"
        f"  call void @llvm.x86.tileloadd64(i8 {t}, ptr %src{t}, i64 64)" for t in range(8))
    return f"""
declare void @llvm.x86.ldtilecfg(ptr)
declare void @llvm.x86.tileloadd64(i8, ptr, i64)
declare void @llvm.x86.tilestored64(i8, ptr, i64)
declare void @llvm.x86.tdpbf16ps(i8, i8, i8)
declare void @llvm.x86.tilerelease()
declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)

define void @amx_tiles(i64 %n, ptr %data) nounwind "target-features"="+amx-tile,+amx-bf16" {{
entry:
  %cfg = alloca [64 x i8], align 64
  call void @llvm.memset.p0.i64(ptr align 64 %cfg, i8 0, i64 64, i1 false)
  store i8 1, ptr %cfg, align 64
{config}
  call void @llvm.x86.ldtilecfg(ptr %cfg)
{loads}
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i.next, %loop ]
{multiplies}
  %i.next = add i64 %i, 1
  %more = icmp ult i64 %i.next, %n
  br i1 %more, label %loop, label %done
done:
  call void @llvm.x86.tilestored64(i8 0, ptr %data, i64 64)
  call void @llvm.x86.tilerelease()
  ret void
}}
"""


def measure_amx_bf16_flops(iterations: int = 4000, runs: int = 7) -> float | None:
    """bfloat16 operations per second of one core's AMX tile unit (``tdpbf16ps``, operands in
    tile registers: its peak), or ``None`` where the CPU has no AMX-BF16 or this process may not
    use AMX tiles."""
    from tilecraft_x86_avx512.amx import amx_permitted
    from tilecraft_x86_avx512.build import jit_compile
    from tilecraft_x86_avx512.host import read_cpuinfo

    if not {"amx_tile", "amx_bf16"} <= read_cpuinfo()[1] or not amx_permitted():
        return None
    module = jit_compile(_amx_ir(), "the AMX-rate probe")
    kernel = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_void_p)(
        module.address("amx_tiles"))
    data = _aligned_buffer(8 * 1024)
    data[:] = 0.0   # bfloat16 zeros, whatever the pairs: no denormal or nan slows a multiply
    seconds = _best_seconds(lambda: kernel(iterations, data.ctypes.data), runs)
    return iterations * AMX_MULTIPLIES * AMX_TILE_FLOPS / seconds


def _aligned_buffer(nbytes: int) -> np.ndarray:
    raw = np.ones(nbytes // 4 + 16, dtype=np.float32)  # ones: every page touched
    skip = (-raw.ctypes.data % 64) // 4
    return raw[skip:skip + nbytes // 4]


def measure_read_bandwidth(nbytes: int, passes: int = 1, runs: int = 5) -> float:
    """Bytes per second one core reads from a buffer of ``nbytes`` (512-bit loads)."""
    from tilecraft_x86_avx512.build import jit_compile

    block = READ_VECTORS * LANES * 4
    nbytes = max(block, nbytes // block * block)
    module = jit_compile(_read_ir(), "the bandwidth probe")
    kernel = ctypes.CFUNCTYPE(ctypes.c_float, ctypes.c_void_p, ctypes.c_int64,
                              ctypes.c_int64)(module.address("read_sum"))
    buffer = _aligned_buffer(nbytes)
    seconds = _best_seconds(lambda: kernel(buffer.ctypes.data, nbytes // block, passes), runs)
    return nbytes * passes / seconds


def buffer_sizes(l1_bytes: int, l2_bytes: int, l3_bytes: int) -> dict[str, int]:
    """The buffer each level's bandwidth is read from: half of L1 and of L2 (the rest holds
    the stack, the code and the neighbours' lines), one that fits L3 but not L2 (the
    geometric mean of the two, within [2 x L2, L3 / 2]) and one 4x the L3 for DRAM.

    >>> {name: size >> 10 for name, size in buffer_sizes(32768, 1 << 20, 32 << 20).items()}
    {'L1': 16, 'L2': 512, 'L3': 5792, 'DRAM': 131072}
    """
    l3 = max(2 * l2_bytes, min(l3_bytes // 2, int(math.sqrt(l2_bytes * l3_bytes))))
    return {"L1": l1_bytes // 2, "L2": l2_bytes // 2, "L3": l3,
            "DRAM": min(1024 * MIB, max(64 * MIB, 4 * l3_bytes))}


def measure(cache_sizes: Sequence[tuple[str, int]]) -> ProbeResult:
    """Measure this core's figures; ``cache_sizes`` are ``(name, bytes)`` of its caches (they
    size the bandwidth buffers). A :class:`TargetError` when a figure is not plausible (the
    machine too busy, or the probe broken)."""
    sizes = dict(cache_sizes)
    l1 = sizes.get("L1", 32 * 1024)
    l2 = sizes.get("L2", max(MIB, 8 * l1))
    buffers = buffer_sizes(l1, l2, sizes.get("L3", 8 * l2))
    # the cache levels are read in enough passes that one run reads ~32 MiB: long enough to
    # time, short enough to fall between the neighbours' bursts
    rates = {name: measure_read_bandwidth(size, passes=max(1, 32 * MIB // size),
                                          runs=3 if name == "DRAM" else 5)
             for name, size in buffers.items()}
    result = ProbeResult(
        fma_flops_per_core=measure_fma_flops(), dram_bytes_per_second=rates["DRAM"],
        l3_bytes_per_second=rates["L3"], l2_bytes_per_second=rates["L2"],
        l1_bytes_per_second=rates["L1"], amx_bf16_flops_per_core=measure_amx_bf16_flops())
    if not plausible_figures(result):
        raise TargetError(f"the x86 probe measured implausible figures ({result}); run "
                          "`tilecraft targets --probe` again on a quieter machine")
    return result


__all__ = ["ProbeResult", "buffer_sizes", "measure", "measure_amx_bf16_flops",
           "measure_fma_flops", "measure_read_bandwidth", "plausible_figures"]
