"""Named x86 CPUs (``x86_avx512:<name>``): their facts as data (``cpus.yaml``, package data).

``target="x86_avx512"`` plans and compiles for this host; ``target="x86_avx512:znver4"`` for
the named CPU: its spec is built from the data (:func:`host_info_for`), its code by LLVM for
that CPU with exactly the features the data lists (:meth:`CpuData.llvm_features`), and it runs
here only when this host has every one of them (:func:`missing_features`).

Cores are not a property of a CPU but of the machine the code runs on: a named CPU is planned
for ``cores`` threads, by default those the host target would use (``TILECRAFT_X86_THREADS`` or
this machine's usable cores); pass ``X86Avx512Target(cpu=..., cores=N)`` to plan for another.

>>> known_cpus()
('icelake-server', 'sapphirerapids', 'skylake-avx512', 'znver4', 'znver5')
>>> zen4 = cpu_data("znver4")
>>> zen4.cache("L1").ways, zen4.fma_flops_per_core / 1e9  # 512-bit FMAs double-pumped
(8, 76.8)
>>> missing_features(cpu_data("sapphirerapids"), zen4.features)
('amx_bf16', 'amx_int8', 'amx_tile', 'avx512_fp16', 'avx_vnni')
>>> supports(cpu_data("skylake-avx512"), "intrinsics", "vpdpbusd")
False
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from importlib.resources import files
from typing import Any, Literal

import yaml
from pydantic import Field, field_validator, model_validator

from tilecraft.errors import PluginError, TargetError
from tilecraft.target.specmodel import Seq, SpecModel
from tilecraft_x86_avx512.host import CacheLevel, HostInfo

CPUS_FILE = "cpus.yaml"
#: 512-bit lanes of float32 and operations per FMA
_F32_LANES = 16
_FLOPS_PER_FMA = 2

#: ISA features as /proc/cpuinfo names them -> LLVM's name. A named CPU's code is generated with
#: ``+`` for each feature it lists and ``-`` for each other one here, so it uses no feature the
#: data does not list (the execution check compares exactly these names with the host's flags).
LLVM_FEATURES: Mapping[str, str] = {
    "avx2": "avx2", "fma": "fma", "f16c": "f16c", "bmi1": "bmi", "bmi2": "bmi2",
    "abm": "lzcnt", "movbe": "movbe", "popcnt": "popcnt", "gfni": "gfni", "vaes": "vaes",
    "vpclmulqdq": "vpclmulqdq", "avx_vnni": "avxvnni",
    "avx512f": "avx512f", "avx512cd": "avx512cd", "avx512bw": "avx512bw",
    "avx512dq": "avx512dq", "avx512vl": "avx512vl", "avx512ifma": "avx512ifma",
    "avx512vbmi": "avx512vbmi", "avx512_vbmi2": "avx512vbmi2", "avx512_vnni": "avx512vnni",
    "avx512_bitalg": "avx512bitalg", "avx512_vpopcntdq": "avx512vpopcntdq",
    "avx512_bf16": "avx512bf16", "avx512_fp16": "avx512fp16",
    "avx512_vp2intersect": "avx512vp2intersect",
    "amx_tile": "amx-tile", "amx_int8": "amx-int8", "amx_bf16": "amx-bf16",
}
CACHE_NAMES = ("L1", "L2", "L3")


class CacheData(SpecModel):
    """One data (or unified) cache level of one core."""

    name: Literal["L1", "L2", "L3"]
    size_bytes: int = Field(gt=0)
    ways: int = Field(gt=0)
    line_bytes: int = Field(default=64, gt=0)
    shared_by_cores: bool = False

    @model_validator(mode="after")
    def _whole_sets(self) -> CacheData:
        if self.size_bytes % (self.ways * self.line_bytes):
            raise ValueError(f"{self.name}: {self.size_bytes} bytes are not a whole number of "
                             f"sets of {self.ways} ways x {self.line_bytes}-byte lines")
        return self


class CpuData(SpecModel):
    """The facts of one named CPU (see ``cpus.yaml``)."""

    llvm_cpu: str
    description: str
    reference_part: str
    features: Seq[str] = Field(min_length=1)
    caches: Seq[CacheData] = Field(min_length=1)
    fma_units_per_core: int = Field(ge=1)
    double_pumped_512: bool
    nominal_clock_hz: float = Field(gt=0)
    dram_bytes_per_second: float = Field(gt=0)
    l3_bytes_per_second: float = Field(gt=0)

    @field_validator("features")
    @classmethod
    def _known_features(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        unknown = sorted(set(value) - set(LLVM_FEATURES))
        if unknown:
            raise ValueError(f"unknown features {unknown}; the known ones (as /proc/cpuinfo "
                             f"spells them) are {', '.join(sorted(LLVM_FEATURES))}")
        if "avx512f" not in value:
            raise ValueError("the CPU has no avx512f; the x86_avx512 plugin needs AVX-512F")
        return value

    @field_validator("caches")
    @classmethod
    def _ordered_caches(cls, value: tuple[CacheData, ...]) -> tuple[CacheData, ...]:
        names = tuple(cache.name for cache in value)
        if names != CACHE_NAMES[:len(names)]:
            raise ValueError(f"caches are {list(names)}; list them innermost first: "
                             f"{list(CACHE_NAMES)}")
        return value

    def cache(self, name: str) -> CacheData | None:
        return next((cache for cache in self.caches if cache.name == name), None)

    @property
    def fma_flops_per_core(self) -> float:
        """Peak float32 operations per second of one core in 512-bit FMAs (halved where a
        512-bit operation takes the 256-bit units twice)."""
        per_cycle = self.fma_units_per_core / (2 if self.double_pumped_512 else 1)
        return per_cycle * _F32_LANES * _FLOPS_PER_FMA * self.nominal_clock_hz

    def llvm_features(self) -> str:
        """The LLVM feature string: every known feature on or off as the data says.

        >>> "-avx512vnni" in cpu_data("skylake-avx512").llvm_features()
        True
        """
        listed = set(self.features)
        return ",".join(("+" if flag in listed else "-") + llvm
                        for flag, llvm in sorted(LLVM_FEATURES.items()))


class Requirements(SpecModel):
    """The features each of the plugin's intrinsics and micro-kernels needs."""

    intrinsics: dict[str, Seq[str]]
    micro_kernels: dict[str, Seq[str]]


class CpuCatalog(SpecModel):
    """The whole of ``cpus.yaml``."""

    format_version: Literal[1]
    requires: Requirements
    cpus: dict[str, CpuData] = Field(min_length=1)


@functools.cache
def load_catalog() -> CpuCatalog:
    """The validated ``cpus.yaml`` of this package (a PluginError naming the field if not)."""
    resource = files("tilecraft_x86_avx512") / CPUS_FILE
    try:
        data: Any = yaml.safe_load(resource.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise PluginError(f"cannot read the x86 CPU data {resource}: {err}; reinstall the "
                          "tilecraft-x86-avx512 package") from err
    if not isinstance(data, dict):
        raise PluginError(f"{resource} must hold a mapping with format_version, requires and "
                          "cpus")
    try:
        return CpuCatalog(**data)
    except PluginError as err:
        raise PluginError(f"{resource}: {err}") from err


def known_cpus() -> tuple[str, ...]:
    """The names accepted after ``x86_avx512:``, sorted."""
    return tuple(sorted(load_catalog().cpus))


def cpu_data(name: str) -> CpuData:
    """The data of the CPU called ``name``; a TargetError listing the known ones otherwise."""
    cpus = load_catalog().cpus
    if name not in cpus:
        raise TargetError(f"unknown x86 CPU {name!r} (target x86_avx512:{name}); the known CPUs "
                          f"are {', '.join(known_cpus())}; use one of them, or target "
                          "x86_avx512 for this machine")
    return cpus[name]


def missing_features(cpu: CpuData, flags: frozenset[str] | tuple[str, ...]) -> tuple[str, ...]:
    """The features ``cpu``'s code may use that ``flags`` (a host's) lack, sorted."""
    return tuple(sorted(set(cpu.features) - set(flags)))


def supports(flags: CpuData | frozenset[str] | tuple[str, ...], kind: str, name: str) -> bool:
    """Whether a CPU (its data or its flags) has every feature intrinsic or micro-kernel
    ``name`` needs (``kind``: ``"intrinsics"`` or ``"micro_kernels"``); an instruction the data
    says nothing about needs only AVX-512F."""
    have = set(flags.features if isinstance(flags, CpuData) else flags)
    table: dict[str, tuple[str, ...]] = getattr(load_catalog().requires, kind)
    return set(table.get(name, ("avx512f",))) <= have


def host_info_for(name: str, cores: int) -> HostInfo:
    """A :class:`HostInfo` of the named CPU with ``cores`` cores, built from the data
    (``figures_source="data"``), for :func:`~tilecraft_x86_avx512.spec.build_spec`."""
    if cores < 1:
        raise TargetError(f"x86_avx512:{name} planned for {cores} cores; pass cores >= 1")
    cpu = cpu_data(name)
    caches = tuple(CacheLevel(cache.name, cache.size_bytes, cache.shared_by_cores,
                              ways=cache.ways, line_bytes=cache.line_bytes)
                   for cache in cpu.caches)
    return HostInfo(model_name=f"{name}: {cpu.description}, as {cpu.reference_part}",
                    cores=cores, frequency_hz=cpu.nominal_clock_hz, frequency_source="data",
                    caches=caches, flags=frozenset(cpu.features),
                    fma_flops_per_core=cpu.fma_flops_per_core,
                    dram_bytes_per_second=cpu.dram_bytes_per_second,
                    l3_bytes_per_second=cpu.l3_bytes_per_second,
                    figures_source="data", caches_source=CPUS_FILE)
