"""The target spec: the validated, versioned description of a chip that a plugin hands the core.

A spec is data: memory hierarchy, compute units, the schedule primitives the target offers and
the decisions it fixes (thesis §4.3.2), the loop kinds its code generator can express, its
intrinsics (§5.3) and micro-kernels (§3.4.1.2), how it evaluates cost, and capability flags
for the conformance suite. Write it in YAML (``TargetSpec.from_yaml``) or Python; either way
an invalid field raises one :class:`~tilecraft.errors.PluginError` naming the plugin, the file
and the field.

>>> spec = load_spec({
...     "name": "toy", "api_version": 1, "version": "0.1",
...     "memory": {"levels": [
...         {"name": "DRAM", "size_bytes": None, "bandwidth_bytes_per_cycle": 8, "kind": "dram"},
...         {"name": "SRAM", "size_bytes": 65536, "bandwidth_bytes_per_cycle": 64}]},
...     "compute": {"cores": 2, "frequency_hz": 1e9, "vector_bits": 256},
...     "primitives": ["split", "reorder", "vectorize"],
...     "loop_kinds": ["serial", "vector"],
...     "evaluation": "estimate",
...     "capabilities": {"models_performance": True}})
>>> spec.compute.lanes("float32"), spec.compute.peak_flops("float32")
(8, 32000000000.0)
>>> spec.memory.innermost.name
'SRAM'
>>> try:
...     load_spec({"name": "toy", "api_version": 1}, source="toy/spec.yaml")
... except PluginError as err:
...     print(str(err).splitlines()[0])
invalid target spec of plugin 'toy' in toy/spec.yaml:
"""

from __future__ import annotations

import enum
import os
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol

import yaml
from pydantic import Field, ValidationError, ValidationInfo, field_validator

from tilecraft.dtypes import DType
from tilecraft.errors import PluginError, TargetError
from tilecraft.kernel_ir.nodes import LoopKind
from tilecraft.target.hierarchy import SpatialArchitecture, ThreadHierarchy
from tilecraft.target.intrinsic import (
    LEVELS_CONTEXT,
    TARGET_CONTEXT,
    IntrinsicDecl,
    IntrinsicSet,
)
from tilecraft.target.memory import MemoryHierarchy, MemoryKind, MemoryLevel
from tilecraft.target.microkernel import MicroKernelDecl
from tilecraft.target.specmodel import (
    Lax,
    Seq,
    SpecModel,
    check_identifier,
    check_unique,
    validation_message,
)

__all__ = [
    "TARGET_API_VERSION", "ComputeUnits", "EvaluationMode", "MemoryHierarchy", "MemoryKind",
    "MemoryLevel", "SchedulePrimitive", "SpatialArchitecture", "TargetCapabilities",
    "TargetSpec", "ThreadHierarchy", "load_intrinsics", "load_spec",
]

#: the version of the plugin contract this tilecraft implements; a spec must declare it
TARGET_API_VERSION = 1


class SchedulePrimitive(str, enum.Enum):
    """Loop-schedule primitives (thesis Table 4.1); a target declares which it offers."""

    SPLIT = "split"
    FUSE = "fuse"
    REORDER = "reorder"
    TILE = "tile"
    UNROLL = "unroll"
    VECTORIZE = "vectorize"
    INLINE = "inline"
    COMPUTE_AT = "compute_at"
    PARALLEL = "parallel"
    CACHE = "cache"
    BIND = "bind"
    BUFFER = "buffer"
    PIPELINE = "pipeline"
    PARTITION = "partition"


class EvaluationMode(str, enum.Enum):
    """How the target costs a candidate: run it, model it, or model to prune then run."""

    MEASURE = "measure"
    ESTIMATE = "estimate"
    BOTH = "both"


class ComputeUnits(SpecModel):
    """Cores, clock and the width of the arithmetic units.

    Peak arithmetic is ``2 * cores * fma_units_per_core * processing_elements * lanes(dtype)
    * frequency_hz`` (a fused multiply-add counts as two operations), unless the target
    measured one core's rate (``peak_flops_per_core``): the formula overstates cores that
    execute wide vectors as two halves (AVX-512 on Zen 4 reaches half of it).

    >>> units = ComputeUnits(cores=2, frequency_hz=4e9, vector_bits=512, fma_units_per_core=2)
    >>> units.peak_flops("float32") / 1e9, units.peak_flops("bfloat16") / 1e9
    (512.0, 1024.0)
    >>> measured = units.model_copy(update={"peak_flops_per_core": {"float32": 128e9}})
    >>> measured.peak_flops("float32") / 1e9, measured.peak_flops("bfloat16") / 1e9
    (256.0, 512.0)
    """

    cores: int = Field(ge=1)
    frequency_hz: float = Field(gt=0)
    vector_bits: int = Field(ge=0, description="SIMD register width; 0 means no SIMD")
    fma_units_per_core: int = Field(default=1, ge=1)
    processing_elements: int = Field(default=1, ge=1, description=(
        "multiply-accumulate elements per unit (e.g. 4096 for a 16x16x16 cube)"))
    peak_flops_per_core: dict[str, float] = Field(default_factory=dict, description=(
        "measured peak arithmetic operations per second of one core, by dtype (e.g. float32: "
        "1.17e11); preferred over the formula, and for other dtypes the formula is scaled by "
        "the measured fraction of it"))
    mac_energy_pj: float = Field(default=0.0, ge=0, description=(
        "energy of one multiply-accumulate in picojoules (TileFlow's energy model, §3.5.1)"))

    @field_validator("vector_bits")
    @classmethod
    def _whole_bytes(cls, value: int) -> int:
        if value % 8:
            raise ValueError(f"vector_bits {value} is not a whole number of bytes")
        return value

    def lanes(self, dtype: DType | str) -> int:
        """Elements of ``dtype`` per vector register (at least 1)."""
        return max(1, self.vector_bits // DType.parse(dtype).bits)

    @field_validator("peak_flops_per_core")
    @classmethod
    def _measured_rates(cls, value: dict[str, float]) -> dict[str, float]:
        known = {d.value for d in DType}
        for dtype, rate in value.items():
            if dtype not in known:
                raise ValueError(f"peak_flops_per_core: {dtype!r} is not a dtype; use one of "
                                 f"{', '.join(sorted(known))}")
            if not rate > 0:
                raise ValueError(f"peak_flops_per_core[{dtype}] = {rate} must be > 0")
        return value

    def formula_flops_per_core(self, dtype: DType | str) -> float:
        """One core's peak in ``dtype`` from the unit counts, widths and clock."""
        return (2.0 * self.fma_units_per_core * self.processing_elements
                * self.lanes(dtype) * self.frequency_hz)

    def flops_per_core(self, dtype: DType | str) -> float:
        """One core's peak arithmetic operations per second in ``dtype``: the measured rate,
        else the formula scaled by the fraction of it measured for another dtype, else the
        formula."""
        name = DType.parse(dtype).value
        if name in self.peak_flops_per_core:
            return self.peak_flops_per_core[name]
        formula = self.formula_flops_per_core(dtype)
        for measured_dtype, rate in sorted(self.peak_flops_per_core.items()):
            return formula * rate / self.formula_flops_per_core(measured_dtype)
        return formula

    def peak_flops(self, dtype: DType | str) -> float:
        """Peak arithmetic operations per second in ``dtype`` of all cores."""
        return self.cores * self.flops_per_core(dtype)


class TargetCapabilities(SpecModel):
    """What the target's implementation can do in principle (``Target.available()`` says what
    this machine can do); the conformance suite picks its checks from these flags."""

    executes_natively: bool = False
    emulates: bool = False
    compiles: bool = False
    models_performance: bool = False


class TargetSpec(SpecModel):
    """The description of one target."""

    name: str
    api_version: int = Field(ge=1)
    version: str
    description: str = ""
    memory: MemoryHierarchy
    compute: ComputeUnits
    threads: ThreadHierarchy | None = Field(default=None, description=(
        "bindable hardware axes and per-block limits of a chip that launches threads"))
    spatial: SpatialArchitecture | None = Field(default=None, description=(
        "fixed-shape compute arrays and fabric budget of an NPU or FPGA"))
    primitives: Seq[Lax[SchedulePrimitive]]
    fixed_decisions: dict[str, str | int | bool] = Field(default_factory=dict, description=(
        "schedule decisions the target fixes (thesis §4.3.2), e.g. vector_lanes: 16"))
    loop_kinds: Seq[Lax[LoopKind]] = Field(min_length=1, description=(
        "Kernel IR loop kinds the code generator can express"))
    intrinsics: Seq[IntrinsicDecl] = ()
    micro_kernels: Seq[MicroKernelDecl] = ()
    evaluation: Lax[EvaluationMode]
    capabilities: TargetCapabilities = Field(default_factory=TargetCapabilities,
                                             validate_default=True)
    preferred_layouts: dict[Literal["conv2d", "grouped_conv2d"], Literal["NCHW", "NHWC"]] = \
        Field(default_factory=dict, description=(
            "data layout the target's kernels prefer per operator, e.g. conv2d: NHWC "
            "(grouped_conv2d: grouped and depthwise convolutions, conv2d's layout when "
            "unset); the graph pass choose_layout rewrites a graph's convolutions into NHWC "
            "when every one of them prefers it, with transposes at the graph's boundaries "
            "(unset: graphs keep the layout they were written in)"))
    layout_min_convolutions: int = Field(default=1, ge=1, description=(
        "choose_layout rewrites a graph into the preferred layout only when it has at least "
        "this many convolutions: a few pay more for the transposes at the graph's boundary "
        "than the layout saves them"))
    layout_min_pixels: int = Field(default=0, ge=0, description=(
        "a convolution whose output has fewer pixels (height x width) keeps NCHW when "
        "choose_layout rewrites its graph: where the weights outweigh the activations the "
        "channels-first kernels may read each weight once (a transpose at each boundary)"))

    @field_validator("name")
    @classmethod
    def _valid_name(cls, value: str) -> str:
        return check_identifier(value, "target name")

    @field_validator("threads", "spatial")
    @classmethod
    def _parallelism_uses_known_levels(cls, value: ThreadHierarchy | SpatialArchitecture | None,
                                       info: ValidationInfo
                                       ) -> ThreadHierarchy | SpatialArchitecture | None:
        memory = info.data.get("memory")
        if value is None or memory is None:
            return value
        if isinstance(value, ThreadHierarchy):
            named = [("shared_level", value.shared_level)]
        else:
            named = [(f"units ({unit.name}).operand_levels.{role}", level)
                     for unit in value.units for role, level in unit.operand_levels.items()]
        for where, level in named:
            if level is not None and level not in memory.names:
                raise ValueError(f"{where} {level!r} is not a memory level of this target; the "
                                 f"levels are {', '.join(memory.names)}")
        return value

    @field_validator("primitives")
    @classmethod
    def _unique_primitives(cls, value: tuple[SchedulePrimitive, ...]
                           ) -> tuple[SchedulePrimitive, ...]:
        check_unique([primitive.value for primitive in value], "primitive")
        return value

    @field_validator("loop_kinds")
    @classmethod
    def _unique_loop_kinds(cls, value: tuple[LoopKind, ...]) -> tuple[LoopKind, ...]:
        check_unique([kind.value for kind in value], "loop kind")
        return value

    @field_validator("intrinsics")
    @classmethod
    def _intrinsics_use_known_levels(cls, value: tuple[IntrinsicDecl, ...],
                                     info: ValidationInfo) -> tuple[IntrinsicDecl, ...]:
        check_unique([intrinsic.name for intrinsic in value], "intrinsic")
        memory = info.data.get("memory")
        if memory is None:
            return value
        target = info.data.get("name")
        owner = f"target {target}: " if target else ""
        for intrinsic in value:
            named = [(f"memory.moves[{position}].{side}", getattr(move, side))
                     for position, move in enumerate(intrinsic.memory.moves)
                     for side in ("from_level", "to_level")]
            named += [(f"memory.fills[{position}].level", fill.level)
                      for position, fill in enumerate(intrinsic.memory.fills)]
            for field, level in named:
                if level not in memory.names:
                    raise ValueError(
                        f"{owner}intrinsic {intrinsic.name}: {field} {level!r} is not a memory "
                        f"level of this target; the levels are {', '.join(memory.names)}")
        return value

    @field_validator("micro_kernels")
    @classmethod
    def _unique_micro_kernels(cls, value: tuple[MicroKernelDecl, ...]
                              ) -> tuple[MicroKernelDecl, ...]:
        check_unique([kernel.name for kernel in value], "micro-kernel")
        return value

    @field_validator("capabilities")
    @classmethod
    def _evaluation_possible(cls, value: TargetCapabilities,
                             info: ValidationInfo) -> TargetCapabilities:
        mode = info.data.get("evaluation")
        if mode in (EvaluationMode.MEASURE, EvaluationMode.BOTH) and not value.executes_natively:
            raise ValueError(f"evaluation {mode.value!r} measures on the device, but "
                             "capabilities.executes_natively is false; set it or evaluate "
                             "with 'estimate'")
        if mode in (EvaluationMode.ESTIMATE, EvaluationMode.BOTH) and \
                not value.models_performance:
            raise ValueError(f"evaluation {mode.value!r} needs a performance model, but "
                             "capabilities.models_performance is false; set it (and implement "
                             "Target.estimate) or evaluate with 'measure'")
        return value

    # lookups --------------------------------------------------------------------------------

    def intrinsic(self, name: str) -> IntrinsicDecl:
        for intrinsic in self.intrinsics:
            if intrinsic.name == name:
                return intrinsic
        raise TargetError(f"target {self.name} declares no intrinsic {name!r}; it declares "
                          f"{', '.join(i.name for i in self.intrinsics) or 'none'}")

    def micro_kernel(self, name: str) -> MicroKernelDecl:
        for kernel in self.micro_kernels:
            if kernel.name == name:
                return kernel
        raise TargetError(f"target {self.name} declares no micro-kernel {name!r}; it declares "
                          f"{', '.join(k.name for k in self.micro_kernels) or 'none'}")

    def reference_semantics(self) -> dict[str, Callable[..., None]]:
        """Name -> numpy implementation of every intrinsic and micro-kernel, from their
        declared semantics: what the Kernel IR interpreter needs to emulate calls of them."""
        semantics: dict[str, Callable[..., None]] = {}
        for intrinsic in self.intrinsics:
            semantics[intrinsic.name] = intrinsic.reference
        for kernel in self.micro_kernels:
            semantics[kernel.name] = kernel.reference
        return semantics

    @property
    def bindable_axes(self) -> tuple[str, ...]:
        """Names of the hardware axes a BOUND loop may be bound to (none without threads)."""
        return self.threads.axis_names if self.threads is not None else ()

    @property
    def barrier_scopes(self) -> tuple[str, ...]:
        """Scopes a barrier may synchronise: the thread hierarchy's, then the spatial ones."""
        scopes = list(self.threads.barrier_scopes) if self.threads is not None else []
        if self.spatial is not None:
            scopes += [s for s in self.spatial.barrier_scopes if s not in scopes]
        return tuple(scopes)

    def offers(self, primitive: SchedulePrimitive | str) -> bool:
        """Whether the target offers schedule primitive ``primitive``."""
        return SchedulePrimitive(primitive) in self.primitives

    def expresses(self, kind: LoopKind | str) -> bool:
        """Whether the target's code generator can express loops of ``kind``."""
        return LoopKind(kind) in self.loop_kinds

    @classmethod
    def from_yaml(cls, path: str | os.PathLike[str] | _Readable, plugin: str | None = None,
                  intrinsic_files: Sequence[str | os.PathLike[str] | _Readable] = ()
                  ) -> TargetSpec:
        """Load and validate a YAML spec file (a path, or an ``importlib.resources`` file),
        adding the intrinsics declared in ``intrinsic_files`` (see :func:`load_intrinsics`),
        each checked against the spec's memory levels."""
        data, text, source = _read_yaml(path, plugin, "target spec")
        spec = load_spec(data, source=source, plugin=plugin, yaml_text=text)
        if not intrinsic_files:
            return spec
        owner = plugin or spec.name
        declared = {intrinsic.name: source for intrinsic in spec.intrinsics}
        added: list[IntrinsicDecl] = []
        for file in intrinsic_files:
            for intrinsic in load_intrinsics(file, plugin=owner, levels=spec.memory.names,
                                             target=spec.name):
                if intrinsic.name in declared:
                    raise PluginError(f"plugin {owner}: intrinsic {intrinsic.name!r} is declared "
                                      f"in {declared[intrinsic.name]} and in {file}; names must "
                                      "be unique")
                declared[intrinsic.name] = str(file)
                added.append(intrinsic)
        merged = dict(data)
        merged["intrinsics"] = [*spec.intrinsics, *added]
        return load_spec(merged, source=source, plugin=plugin)


def _read_yaml(path: str | os.PathLike[str] | _Readable, plugin: str | None,
               what: str) -> tuple[Any, str, str]:
    """(parsed data, text, source name) of a YAML file; a PluginError naming the plugin and the
    file (and line) when it cannot be read or parsed."""
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8") if hasattr(path, "read_text") \
            else Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise PluginError(f"plugin {plugin or '?'}: cannot read {what} {source}: "
                          f"{err.strerror or err}") from err
    except UnicodeDecodeError as err:
        raise PluginError(f"plugin {plugin or '?'}: {what} {source} is not UTF-8 text (byte "
                          f"{err.start}: {err.reason}); save it as UTF-8 YAML") from err
    try:
        data = yaml.load(text, Loader=SpecLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark is not None else source
        problem = getattr(err, "problem", None) or str(err)
        raise PluginError(f"plugin {plugin or '?'}: {what} {where} is not valid YAML: "
                          f"{problem}") from err
    return data, text, source


def load_intrinsics(source: str | os.PathLike[str] | _Readable | Mapping[str, Any], *,
                    plugin: str | None = None, levels: Sequence[str] | None = None,
                    target: str | None = None) -> tuple[IntrinsicDecl, ...]:
    """The intrinsics of a declaration file: YAML (a path or an ``importlib.resources`` file)
    or an already parsed mapping, ``{description: ..., intrinsics: [...]}``.

    Every declaration is validated (:class:`~tilecraft.target.intrinsic.IntrinsicSet`); with
    ``levels`` (the target's memory levels) every level a move or fill names must be one of
    them. One :class:`PluginError` names the plugin, the file, and each bad intrinsic and field
    (with its line).

    >>> family = {"intrinsics": [{
    ...     "name": "fma4", "latency_cycles": 4, "throughput_per_cycle": 1,
    ...     "compute": {"loops": [{"name": "i1", "extent": 4, "kind": "spatial"}],
    ...                 "operands": [
    ...                     {"name": "Src1", "role": "src", "dtype": "float32", "shape": [4],
    ...                      "index": ["i1"]},
    ...                     {"name": "Dst", "role": "dst", "dtype": "float32", "shape": [4],
    ...                      "index": ["i1"]}],
    ...                 "semantics": "Dst[i1] += Src1[i1] * Src1[i1]"},
    ...     "memory": {"moves": [
    ...         {"operand": "Src1", "from_level": "DRAM", "to_level": "regs",
    ...          "address": {"strides": [1]}},
    ...         {"operand": "Dst", "from_level": "regs", "to_level": "DRAM",
    ...          "address": {"strides": [1]}}]}}]}
    >>> [i.name for i in load_intrinsics(family, plugin="toy", levels=["DRAM", "regs"])]
    ['fma4']
    >>> try:
    ...     load_intrinsics(family, plugin="toy", levels=["DRAM", "SRAM"], target="toy")
    ... except PluginError as err:
    ...     print(err)
    invalid intrinsic declarations of plugin 'toy':
      intrinsics[0] (fma4).memory.moves[0].to_level: 'regs' is not a memory level of
        target toy; the levels are DRAM, SRAM
      intrinsics[0] (fma4).memory.moves[1].from_level: 'regs' is not a memory level of
        target toy; the levels are DRAM, SRAM
    """
    text: str | None = None
    where: str | None = None
    if isinstance(source, Mapping):
        data: Any = source
    else:
        data, text, where = _read_yaml(source, plugin, "intrinsic declarations")
    if not isinstance(data, Mapping):
        raise PluginError(f"plugin {plugin or '?'}: intrinsic declarations"
                          f"{' in ' + where if where else ''} must be a mapping with an "
                          f"'intrinsics' list, got {type(data).__name__}")
    context = {LEVELS_CONTEXT: tuple(levels) if levels is not None else None,
               TARGET_CONTEXT: target}
    try:
        declared = IntrinsicSet.model_validate(data, context=context)
    except ValidationError as err:
        raise PluginError(validation_message(
            err, what=f"intrinsic declarations of plugin {plugin or '?'!r}", data=data,
            source=where, yaml_text=text)) from err
    return declared.intrinsics


class SpecLoader(yaml.SafeLoader):
    """PyYAML's safe loader, also reading ``1e9`` and ``1.0e9`` as floats (YAML 1.2; PyYAML
    follows YAML 1.1, which reads them as strings).

    >>> yaml.load("f: 1.0e9", Loader=SpecLoader)
    {'f': 1000000000.0}
    """


SpecLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)?(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789."))


class _Readable(Protocol):
    def read_text(self, encoding: str = ...) -> str: ...


def load_spec(data: Mapping[str, Any] | TargetSpec, source: str | None = None,
              plugin: str | None = None, yaml_text: str | None = None) -> TargetSpec:
    """Validate ``data`` (a dict, e.g. parsed YAML) into a :class:`TargetSpec`.

    ``source`` (the file) and ``plugin`` (defaults to the spec's name) appear in the error
    message; ``yaml_text`` lets it give line numbers.
    """
    if isinstance(data, TargetSpec):
        return data
    if not isinstance(data, Mapping):
        raise PluginError(f"plugin {plugin or '?'}: target spec{' ' + source if source else ''} "
                          f"must be a mapping of fields, got {type(data).__name__}")
    if plugin is None and isinstance(data.get("name"), str):
        plugin = data["name"]
    try:
        return TargetSpec.model_validate(data)
    except ValidationError as err:
        raise PluginError(validation_message(
            err, what=f"target spec of plugin {plugin or '?'!r}", data=data, source=source,
            yaml_text=yaml_text)) from err

