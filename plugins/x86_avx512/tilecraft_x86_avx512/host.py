"""Facts about this machine: cores, caches, ISA flags, clock frequency, measured rates.

Caches come from ``/sys/devices/system/cpu/cpu0/cache/index*/{level,type,size,
ways_of_associativity,coherency_line_size}`` (:data:`DEFAULT_CACHES` only where /sys describes
none, and the spec's description then says so); cores from the process's CPU affinity; ISA
flags from ``/proc/cpuinfo``; one core's fp32 FMA rate and its read bandwidths from each
level from micro-benchmarks (:mod:`.probe`), cached on disk per CPU model and flags
(:mod:`.figures_cache`; ``tilecraft targets --probe`` measures again). The clock is harder:
the MHz in ``/proc/cpuinfo`` can be a VM's base clock (2.6 GHz while the core runs ~4.1 GHz
under load), so the frequency is, in order of preference:

1. ``TILECRAFT_X86_FREQ_GHZ`` (an override, e.g. ``4.1``);
2. ``/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq`` where the kernel exposes it;
3. a measurement: a JIT-compiled chain of dependent 1-cycle integer adds, timed (best of a
   few runs of ~0.5 ms), rounded to 0.1 GHz;
4. 3.0 GHz.

>>> parse_size("32K"), parse_size("32768K"), parse_size("1M"), parse_size("512")
(32768, 33554432, 1048576, 512)
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tilecraft.errors import TargetError

if TYPE_CHECKING:
    from tilecraft_x86_avx512.figures_cache import HostFigures

CACHE_ROOT = Path("/sys/devices/system/cpu/cpu0/cache")
CPUFREQ_MAX = Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")
CPUINFO = Path("/proc/cpuinfo")
FREQUENCY_ENV = "TILECRAFT_X86_FREQ_GHZ"
DEFAULT_FREQUENCY_HZ = 3.0e9
#: assumed only when /sys describes no cache at all (a container hiding it): sizes most x86
#: cores with AVX-512 have or exceed, ways unknown; the spec's description says so
DEFAULT_CACHES = {"L1": 32 * 1024, "L2": 1024 * 1024, "L3": 16 * 1024 * 1024}
CACHES_FROM_SYS = "/sys"
CACHES_ASSUMED = "assumed (/sys describes no cache)"


@dataclass(frozen=True)
class CacheLevel:
    """One data (or unified) cache of a core; ``ways`` is None when unknown."""

    name: str
    size_bytes: int
    shared_by_cores: bool
    ways: int | None = None
    line_bytes: int = 64


@dataclass(frozen=True)
class HostInfo:
    """What the x86 target plans with: this machine's facts, or a named CPU's from data.

    The measured figures are per core: ``fma_flops_per_core`` (fp32 operations per second, a
    fused multiply-add counting two), ``dram_bytes_per_second``, ``l3_bytes_per_second``,
    ``l2_bytes_per_second`` and ``l1_bytes_per_second`` (what one core reads),
    ``amx_bf16_flops_per_core`` (the AMX tile unit's bfloat16 rate); None means not
    known, and :func:`~.spec.build_spec` then derives a documented estimate from the clock and
    the ISA. ``figures_source`` says where they come
    from (``measured``, ``cached <file>``, a named CPU's data, ``estimated``...).
    """

    model_name: str
    cores: int
    frequency_hz: float
    frequency_source: str
    caches: tuple[CacheLevel, ...]
    flags: frozenset[str]
    fma_flops_per_core: float | None = None
    dram_bytes_per_second: float | None = None
    l3_bytes_per_second: float | None = None
    figures_source: str = "measured"
    l2_bytes_per_second: float | None = None
    l1_bytes_per_second: float | None = None
    caches_source: str = CACHES_FROM_SYS
    amx_bf16_flops_per_core: float | None = None

    @property
    def has_avx512f(self) -> bool:
        return "avx512f" in self.flags

    def cache(self, name: str) -> CacheLevel | None:
        return next((c for c in self.caches if c.name == name), None)


def parse_size(text: str) -> int:
    """A /sys cache size such as ``48K`` in bytes."""
    text = text.strip().upper()
    units = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}
    if text and text[-1] in units:
        return int(text[:-1]) * units[text[-1]]
    return int(text)


def _read_int(path: Path) -> int | None:
    """A positive integer from a /sys file; None when absent, empty, 0 or garbled (the
    kernel writes 0 ways for a fully associative cache or one it cannot describe)."""
    try:
        value = int(path.read_text().strip())
    except (OSError, ValueError):
        return None
    return value if value > 0 else None


def read_caches(root: Path = CACHE_ROOT) -> tuple[CacheLevel, ...]:
    """Data and unified caches of cpu0, innermost first (L1 data, L2, L3); the assumed
    :data:`DEFAULT_CACHES` when /sys describes none (see :func:`caches_source`).

    Ways and line size are kept only when they divide the size into a whole number of sets.
    """
    found: dict[int, CacheLevel] = {}
    for index in sorted(root.glob("index*")):
        try:
            level = int((index / "level").read_text())
            kind = (index / "type").read_text().strip()
            size = parse_size((index / "size").read_text())
            shared = (index / "shared_cpu_list").read_text().strip() \
                if (index / "shared_cpu_list").exists() else "0"
        except (OSError, ValueError):
            continue
        if kind == "Instruction" or size <= 0:
            continue
        ways = _read_int(index / "ways_of_associativity")
        line = _read_int(index / "coherency_line_size") or 64
        if ways is not None and size % (ways * line):
            ways = None
        found[level] = CacheLevel(f"L{level}", size, "," in shared or "-" in shared,
                                  ways=ways, line_bytes=line)
    if not found:
        return tuple(CacheLevel(name, size, name == "L3") for name, size in DEFAULT_CACHES.items())
    return tuple(found[level] for level in sorted(found))


def caches_source(root: Path = CACHE_ROOT) -> str:
    """Where :func:`read_caches` finds the caches: /sys, or assumed."""
    described = any((index / "size").exists() for index in root.glob("index*"))
    return CACHES_FROM_SYS if described else CACHES_ASSUMED


def read_cpuinfo(path: Path = CPUINFO) -> tuple[str, frozenset[str]]:
    """(model name, ISA flags) of the first processor in /proc/cpuinfo."""
    model, flags = "unknown x86 CPU", frozenset()
    try:
        text = path.read_text()
    except OSError:
        return model, flags
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and model == "unknown x86 CPU":
            model = value.strip()
        elif key == "flags" and not flags:
            flags = frozenset(value.split())
    return model, flags


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def frequency_override() -> float | None:
    value = os.environ.get(FREQUENCY_ENV)
    if not value:
        return None
    try:
        ghz = float(value)
    except ValueError:
        raise TargetError(f"{FREQUENCY_ENV}={value!r} is not a number; set it to the clock in "
                          "GHz, e.g. 4.1") from None
    if not 0.1 <= ghz <= 10:
        raise TargetError(f"{FREQUENCY_ENV}={value} GHz is not a plausible clock; set it to "
                          "the clock in GHz, e.g. 4.1")
    return ghz * 1e9


# The adds change the flags: the asm must say so, or LLVM keeps the loop condition in the
# flags across the block (and the loop never ends).
_CLOBBERS = "~{dirflag},~{fpsr},~{flags}"
_CHAIN_IR = r"""
define i64 @chain(i64 %n) nounwind {
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i.next, %loop ]
  %x = phi i64 [ 0, %entry ], [ %x.next, %loop ]
  %x.next = call i64 asm sideeffect ".rept 1000\0Aadd $0, $0\0A.endr", "=r,0,CLOBBERS"(i64 %x)
  %i.next = add i64 %i, 1
  %more = icmp ult i64 %i.next, %n
  br i1 %more, label %loop, label %done
done:
  ret i64 %x.next
}
"""


def measure_frequency_hz(blocks: int = 2000, runs: int = 5) -> float:
    """Cycles per second of one core: ``blocks * 1000`` dependent register-register adds
    (1 cycle each) timed, the fastest of ``runs`` runs. Not ``add $1, reg``: Golden Cove cores
    (Sapphire Rapids) execute small immediate adds at rename, several per cycle (that chain
    read 20 GHz on a Xeon)."""
    from tilecraft_x86_avx512.build import jit_compile

    module = jit_compile(_CHAIN_IR.replace("CLOBBERS", _CLOBBERS), "the frequency probe")
    chain = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64)(module.address("chain"))
    chain(blocks // 10)  # warm up the clock and the caches
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        chain(blocks)
        best = min(best, time.perf_counter() - start)
    return blocks * 1000 / best


def estimate_frequency() -> tuple[float, str]:
    """(Hz, where the figure came from); see the module docstring for the order."""
    override = frequency_override()
    if override is not None:
        return override, FREQUENCY_ENV
    try:
        return int(CPUFREQ_MAX.read_text()) * 1e3, str(CPUFREQ_MAX)
    except (OSError, ValueError):
        pass
    try:
        measured = measure_frequency_hz()
    except Exception:  # noqa: BLE001 - any failure of the probe falls back to the default
        return DEFAULT_FREQUENCY_HZ, "default"
    if 0.5e9 <= measured <= 7e9:
        # rounded to 0.1 GHz so that the spec stays the same from run to run
        return round(measured / 1e8) * 1e8, "measured"
    return DEFAULT_FREQUENCY_HZ, "default"


def read_host(figures: HostFigures | None = None) -> HostInfo:
    """This machine's facts, with ``figures`` (measured rates) or none (estimates)."""
    model, flags = read_cpuinfo()
    frequency, source = estimate_frequency()
    info = HostInfo(model_name=model, cores=usable_cores(), frequency_hz=frequency,
                    frequency_source=source, caches=read_caches(), flags=flags,
                    figures_source="estimated", caches_source=caches_source())
    if figures is None:
        return info
    return dataclasses.replace(
        info, fma_flops_per_core=figures.fma_flops_per_core,
        dram_bytes_per_second=figures.dram_bytes_per_second,
        l3_bytes_per_second=figures.l3_bytes_per_second,
        l2_bytes_per_second=figures.l2_bytes_per_second,
        l1_bytes_per_second=figures.l1_bytes_per_second, figures_source=figures.source,
        amx_bf16_flops_per_core=figures.amx_bf16_flops_per_core)


@functools.cache
def host_info() -> HostInfo:
    """This machine, read once per process; its measured figures come from the on-disk cache,
    or are measured (and cached) at first use (:func:`.figures_cache.host_figures`)."""
    from tilecraft_x86_avx512.figures_cache import host_figures

    model, flags = read_cpuinfo()
    return read_host(host_figures(model, flags, read_caches()))


def figures_report(host: HostInfo) -> dict[str, str]:
    """``host``'s figures as name -> value with its unit (``tilecraft targets --probe``).

    >>> host = HostInfo("test CPU", 2, 4.0e9, "test", (), frozenset(), fma_flops_per_core=1.2e11,
    ...                 l3_bytes_per_second=8e10, figures_source="measured")
    >>> report = figures_report(host)
    >>> report["fp32 FMA peak per core"], report["L3 read per core"], report["DRAM read per core"]
    ('120.0 GFLOP/s', '80.0 GB/s', 'not measured')
    >>> "AMX bf16 peak per core" in report   # only where the CPU has a tile unit
    False
    """
    def rate(value: float | None, unit: str) -> str:
        return "not measured" if value is None else f"{value / 1e9:.1f} {unit}"

    report = {"CPU": host.model_name,
              "clock": f"{host.frequency_hz / 1e9:.2f} GHz ({host.frequency_source})",
              "fp32 FMA peak per core": rate(host.fma_flops_per_core, "GFLOP/s")}
    if host.amx_bf16_flops_per_core is not None:
        report["AMX bf16 peak per core"] = rate(host.amx_bf16_flops_per_core, "GFLOP/s")
    for name, value in (("L1", host.l1_bytes_per_second), ("L2", host.l2_bytes_per_second),
                        ("L3", host.l3_bytes_per_second), ("DRAM", host.dram_bytes_per_second)):
        report[f"{name} read per core"] = rate(value, "GB/s")
    for cache in host.caches:
        ways = f"{cache.ways}-way" if cache.ways else "ways unknown"
        report[f"{cache.name} cache"] = (f"{cache.size_bytes // 1024} KiB, {ways}, "
                                         f"{cache.line_bytes}-byte lines")
    report["figures from"] = host.figures_source
    return report


def refresh_host_info() -> HostInfo:
    """Measure this machine's figures again, replace the cached ones and return the facts."""
    from tilecraft_x86_avx512.figures_cache import host_figures

    model, flags = read_cpuinfo()
    host_info.cache_clear()  # the next host_info() reads the new figures from the cache file
    return read_host(host_figures(model, flags, read_caches(), refresh=True))
