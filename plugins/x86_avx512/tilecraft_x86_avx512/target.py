"""The x86_avx512 target: Kernel IR -> LLVM IR -> machine code (JIT or shared library) -> ctypes.

Stages (the :class:`~tilecraft.target.base.Target` contract):

- ``codegen(kernel) -> Source(language="llvm-ir")``: see :mod:`.codegen`;
- ``build(source) -> Artifact``: MCJIT machine code in memory (the artifact's ``handle`` keeps
  the engine alive; engines are cached by the source's hash);
- ``load(artifact) -> KernelFunction``: a :class:`~.runtime.NativeKernel` calling the entry
  through ctypes, splitting the PARALLEL loop across threads;
- ``export_shared_library(kernels, path)`` / ``load_shared_library(path)``: ahead of time, an
  object file linked by ``gcc -shared``, carrying a JSON manifest of its kernels so that it
  can be loaded back (validated) without the Kernel IR; ``export(...)`` writes it with a C
  header (:mod:`.header`) for ``tilecraft compile --output-dir``.

``X86Avx512Target()`` is this machine. ``X86Avx512Target(cpu="znver4")`` — or the target name
``x86_avx512:znver4`` — is a named CPU (:mod:`.cpus`): its spec comes from data, its code is
generated and assembled for that CPU, and it runs here only where this host has every feature
that CPU's code may use; otherwise ``available()`` names the missing features and the target
still generates code, object files and shared libraries (ahead of time).

>>> target = X86Avx512Target(cpu="skylake-avx512", cores=4)
>>> target.name, target.spec.compute.cores, [i.name for i in target.spec.intrinsics]
('x86_avx512:skylake-avx512', 4, ['fma_f32x16', 'fma_f32x16_bcast'])
"""

from __future__ import annotations

import ctypes
import functools
import json
import os
import platform
import typing
from collections.abc import Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import TypeAdapter, ValidationError

from tilecraft.errors import CodegenError, LoweringError, TargetError
from tilecraft.fusion import FusionPlan
from tilecraft.graph import Graph
from tilecraft.kernel_ir.nodes import Kernel
from tilecraft.lower.options import LoweringOptions
from tilecraft.passes.contraction import as_contraction, as_dot_product_contraction
from tilecraft.target.base import (
    Artifact,
    Availability,
    FusedGroup,
    LoweringEstimate,
    Source,
    Target,
    TemplateSpace,
)
from tilecraft.target.spec import TargetSpec
from tilecraft.te.tensor import Tensor
from tilecraft_x86_avx512 import build as builder
from tilecraft_x86_avx512 import cpus
from tilecraft_x86_avx512.amx import TILE_MULTIPLY, amx_permitted, permission_ir
from tilecraft_x86_avx512.blocking.depthwise import fuse_depthwise_pads
from tilecraft_x86_avx512.codegen import ABI_VERSION, CodegenOptions, generate_llvm_ir
from tilecraft_x86_avx512.conv_variants import lower_conv_variant, template_view
from tilecraft_x86_avx512.fusion import (
    BlockingMachine,
    fuse_chains,
    fuse_epilogues,
    fuse_row_groups,
)
from tilecraft_x86_avx512.gemm_template import template_space
from tilecraft_x86_avx512.header import c_header, c_identifier, constant_symbol
from tilecraft_x86_avx512.host import (
    HostInfo,
    figures_report,
    host_info,
    read_cpuinfo,
    refresh_host_info,
)
from tilecraft_x86_avx512.microkernels import (
    AMX_SPLIT_F32,
    DOT_BF16,
    VNNI_ROW_SUMS_S8,
    VNNI_ROW_SUMS_U8,
    VNNI_S8U8,
    VNNI_U8S8,
)
from tilecraft_x86_avx512.runtime import ENTRY_PROTOTYPE, NativeKernel, default_threads
from tilecraft_x86_avx512.spec import TARGET_NAME, build_spec
from tilecraft_x86_avx512.template_estimate import template_estimate

LANGUAGE = "llvm-ir"
#: the file suffix of the LLVM IR this target writes (dumps, --output-dir)
SOURCE_SUFFIX = "ll"
#: the micro-kernels of int8 and bfloat16 contractions (VNNI, BF16)
_DOT_PRODUCT_MICRO_KERNELS = frozenset(decl.name for decl in (
    DOT_BF16, VNNI_U8S8, VNNI_S8U8, VNNI_ROW_SUMS_S8, VNNI_ROW_SUMS_U8))


def _checked_layouts(layouts: Mapping[str, str]) -> dict[str, str]:
    """``layouts`` as the spec's ``preferred_layouts`` field validates them, or a
    :class:`TargetError` naming the operators and layouts the field takes."""
    field = TargetSpec.model_fields["preferred_layouts"].annotation
    try:
        return dict(TypeAdapter(field).validate_python(dict(layouts)))
    except ValidationError:
        operators, choices = (typing.get_args(arg) for arg in typing.get_args(field))
        raise TargetError(f"x86_avx512 layouts {dict(layouts)}: give each of the operators "
                          f"{' and '.join(operators)} the layout {' or '.join(choices)}") from None


class X86Avx512Target(Target):
    """x86-64 with AVX-512, compiled through LLVM (llvmlite) and run natively.

    ``options`` tune the code generator, ``threads`` the parallel chunks (default:
    ``TILECRAFT_X86_THREADS`` or the usable cores), ``host`` replaces this machine's facts in
    the spec (tests, planning for another machine). ``cpu`` names a CPU of :mod:`.cpus` to
    generate code for instead of this host, planned for ``cores`` cores (default: the
    threads). ``layouts`` replaces the spec's ``preferred_layouts``
    (:data:`~tilecraft_x86_avx512.spec.PREFERRED_LAYOUTS`: a network of at least
    :data:`~tilecraft_x86_avx512.spec.LAYOUT_MIN_CONVOLUTIONS` dense convolutions and no
    grouped ones is computed channels-last, blocking/direct_nhwc.py); ``{"conv2d": "NCHW"}``
    keeps every graph as written.

    >>> X86Avx512Target(threads=1, layouts={"conv2d": "NCHW"}).spec.preferred_layouts
    {'conv2d': 'NCHW'}
    """

    def __init__(self, options: CodegenOptions | None = None, threads: int | None = None,
                 host: HostInfo | None = None, cpu: str | None = None,
                 cores: int | None = None, layouts: Mapping[str, str] | None = None) -> None:
        self.layouts = _checked_layouts(layouts) if layouts is not None else None
        self.options = options or CodegenOptions()
        self._threads = threads
        self._host = host
        self.cpu = cpu
        #: the named CPU's data (None: this host); an unknown name fails here
        self.cpu_data = cpus.cpu_data(cpu) if cpu is not None else None
        self._cores = cores

    @cached_property
    def spec(self) -> TargetSpec:
        if self.cpu is not None and self._host is None:
            planned = cpus.host_info_for(self.cpu, self._cores or self.threads)
        else:
            planned = self._host or host_info()
        spec = _without_missing_instructions(build_spec(planned), planned.flags)
        if self.layouts is not None:
            spec = spec.model_copy(update={"preferred_layouts": self.layouts})
        return spec

    @property
    def name(self) -> str:
        return TARGET_NAME if self.cpu is None else f"{TARGET_NAME}:{self.cpu}"

    @property
    def threads(self) -> int:
        if self._threads is not None:
            return self._threads
        return self._cores if self._cores is not None else default_threads()

    @property
    def _llvm_cpu(self) -> builder.CpuChoice:
        """What LLVM generates code for: None (this host) or the named CPU's name and
        features."""
        if self.cpu_data is None:
            return None
        return self.cpu_data.llvm_cpu, self.cpu_data.llvm_features()

    # variants: named CPUs ----------------------------------------------------------------------
    def variants(self) -> dict[str, str]:
        """The named CPUs (``x86_avx512:<cpu>``), each with its description."""
        catalog = cpus.load_catalog().cpus
        return {name: catalog[name].description for name in cpus.known_cpus()}

    def with_variant(self, variant: str) -> X86Avx512Target:
        """This target for the named CPU ``variant`` (a TargetError listing the known ones)."""
        return X86Avx512Target(self.options, self._threads, cpu=variant, cores=self._cores)

    # schedule template -----------------------------------------------------------------------
    def fuse(self, graph: Graph, options: LoweringOptions,
             plan: FusionPlan | None = None) -> list[FusedGroup]:
        """The contraction chains Chimera's ``plan`` fuses become one kernel each
        (:mod:`.fusion`), then each row group left (softmax, layer norm) one kernel
        (:func:`.fusion.fuse_row_groups`), then each template contraction left with its
        elementwise consumer one kernel (:func:`.fusion.fuse_epilogues`), then each depthwise
        convolution left with the pad only it reads and its elementwise consumer one kernel
        (:func:`.blocking.depthwise.fuse_depthwise_pads`)."""
        machine = BlockingMachine.from_spec(self.spec, self.threads)
        groups = fuse_chains(graph, options, machine, plan)
        groups += fuse_row_groups(graph, options, machine,
                                  {name for group in groups for name in group.computes})
        groups += fuse_epilogues(graph, options, machine, plan,
                                 {name for group in groups for name in group.computes})
        return groups + fuse_depthwise_pads(graph, options,
                                            {name for group in groups for name in group.computes},
                                            self.threads)

    def native_lowering(self, tensor: Tensor,
                        options: LoweringOptions) -> LoweringEstimate | None:
        """The micro-kernel template's predicted time for ``tensor``
        (:mod:`.template_estimate`), which already uses the FMA / VNNI / BF16 instructions;
        ``None`` where :meth:`lower_compute` leaves ``tensor`` to the core's lowering."""
        if self._missing_micro_kernels(tensor):
            return None
        return template_estimate(tensor, self.spec, self.threads)

    def template_space(self, tensor: Tensor) -> TemplateSpace | None:
        """The micro-kernel template's tunable parameters (see :mod:`.gemm_template`)."""
        if self._missing_micro_kernels(tensor):
            return None
        machine = BlockingMachine.from_spec(self.spec, self.threads)
        return template_space(template_view(tensor), machine.l1_bytes, machine.l2_bytes,
                              self.threads)

    def lower_compute(self, tensor: Tensor, options: LoweringOptions,
                      config: Mapping[str, Any] | None = None) -> list[Kernel] | None:
        """Contractions go through the micro-kernel template (:mod:`.gemm_template`); grouped,
        depthwise and transposed convolutions are first rewritten (:mod:`.conv_variants`).
        Int8 and bfloat16 contractions on a CPU without VNNI / BF16 take the core's lowering."""
        missing = self._missing_micro_kernels(tensor)
        if missing:
            if config:
                raise LoweringError(
                    f"compute {tensor.name}: the micro-kernel template was asked for, but "
                    f"{self.name} lacks the micro-kernels {', '.join(missing)} (its CPU has no "
                    "AVX512-VNNI / AVX512-BF16); drop the template parameters or target a CPU "
                    "that has them")
            return None
        machine = BlockingMachine.from_spec(self.spec, self.threads)
        return lower_conv_variant(tensor, options, machine.l1_bytes, machine.l2_bytes,
                                  self.threads, config)

    # measured figures ------------------------------------------------------------------------
    def probe(self) -> dict[str, str]:
        """This host's figures measured again and cached (:func:`.host.refresh_host_info`);
        the spec is rebuilt with them. A named CPU's figures are data: nothing to measure."""
        if self.cpu is not None:
            return {}
        self.__dict__.pop("spec", None)
        return figures_report(refresh_host_info())

    # availability ----------------------------------------------------------------------------
    def available(self) -> Availability:
        return _availability() if self.cpu is None else _named_availability(self.cpu)

    def _missing_micro_kernels(self, tensor: Tensor) -> list[str]:
        """The dot-product micro-kernels an int8 / bfloat16 contraction ``tensor`` would take
        that the spec does not declare (its CPU lacks the instructions)."""
        declared = {decl.name for decl in self.spec.micro_kernels}
        if declared >= _DOT_PRODUCT_MICRO_KERNELS:
            return []  # the usual case: no need to look at the compute
        view = template_view(tensor)
        if as_contraction(view) is not None:
            return []
        grouped = as_dot_product_contraction(view)
        if grouped is None:
            return []
        needed = (DOT_BF16,) if grouped.group == 2 else (VNNI_U8S8, VNNI_S8U8,
                                                        VNNI_ROW_SUMS_S8, VNNI_ROW_SUMS_U8)
        return [decl.name for decl in needed if decl.name not in declared]

    # stages ----------------------------------------------------------------------------------
    def codegen(self, kernel: Kernel) -> Source:
        generated = generate_llvm_ir(kernel, self.options)
        return Source(target=self.name, kernel_name=kernel.name, language=LANGUAGE,
                      text=generated.text, entry=generated.entry, meta=generated.meta,
                      suffix=SOURCE_SUFFIX)

    def build(self, source: Source) -> Artifact:
        """Machine code in memory (JIT) where this host can run it; for a named CPU it cannot
        run, an object file's bytes (``meta["object_code"]``), assembled without running."""
        self._check_source(source)
        self._require("build")
        what = f"kernel {source.kernel_name!r}"
        meta = dict(source.meta)
        if not self.available().execute:
            meta["object_code"] = builder.compile_object([source.text], what, self._llvm_cpu)
            return Artifact(target=self.name, kernel_name=source.kernel_name, meta=meta)
        compiled = builder.jit_compile(source.text, what, self._llvm_cpu)
        meta["source_hash"] = compiled.text_hash
        return Artifact(target=self.name, kernel_name=source.kernel_name, handle=compiled,
                        meta=meta)

    def load(self, artifact: Artifact) -> NativeKernel:
        if artifact.target != self.name:
            raise TargetError(f"artifact of kernel {artifact.kernel_name!r} was built for "
                              f"target {artifact.target}, not {self.name}; build it with "
                              f"{self.name}")
        self._require("execute")
        self._allow_tiles()
        if artifact.handle is None:
            if artifact.path is None:
                raise TargetError(f"artifact of kernel {artifact.kernel_name!r} has neither "
                                  "machine code nor a shared library path; build it first")
            kernels = self.load_shared_library(artifact.path)
            if artifact.kernel_name not in kernels:
                raise TargetError(f"{artifact.path} has no kernel {artifact.kernel_name!r}; it "
                                  f"holds {', '.join(sorted(kernels))}")
            return kernels[artifact.kernel_name]
        meta = artifact.meta
        entry = ENTRY_PROTOTYPE(artifact.handle.address(meta["entry"]))
        return NativeKernel(meta, entry, self.threads, keepalive=artifact.handle)

    def compile_kernel(self, kernel: Kernel) -> NativeKernel:
        """codegen, build and load in one call."""
        return self.load(self.build(self.codegen(kernel)))

    def assembly(self, source: Source) -> str:
        """The optimised x86 assembly of a Source (what ``build`` turns into machine code)."""
        self._check_source(source)
        self._require("build")
        return builder.emit_assembly(source.text, f"kernel {source.kernel_name!r}",
                                     self._llvm_cpu)

    # ahead of time ---------------------------------------------------------------------------
    def export_shared_library(self, items: Sequence[Kernel | Source],
                              path: str | os.PathLike[str],
                              constants: Mapping[str, np.ndarray] | None = None) -> Path:
        """Compile kernels (or their Sources) into one shared library at ``path``, with the
        arrays of ``constants`` (a program's weights, by tensor name) stored in it as C arrays
        under :func:`~.header.constant_symbol`."""
        self._require("build")
        sources = [self.codegen(item) if isinstance(item, Kernel) else item for item in items]
        if not sources:
            raise CodegenError("export_shared_library needs at least one kernel")
        entries: dict[str, str] = {}
        for source in sources:
            self._check_source(source)
            if source.entry in entries:
                raise CodegenError(
                    f"kernels {entries[source.entry]!r} and {source.kernel_name!r} both have "
                    f"the symbol {source.entry!r}; give the kernels distinct names")
            if _taken_symbol(source.entry):
                raise CodegenError(
                    f"kernel {source.kernel_name!r} would export the symbol {source.entry!r}, "
                    "which C programs or the libraries they load (libc, libm) define: the "
                    "shared library would replace that function in every program linking it; "
                    "rename the compute")
            entries[source.entry] = source.kernel_name
        manifest = {"abi_version": ABI_VERSION, "target": self.name, "cpu": self.cpu,
                    "kernels": [dict(source.meta) for source in sources]}
        texts = [source.text for source in sources]
        texts.append(builder.manifest_ir(json.dumps(manifest)))
        if any(TILE_MULTIPLY in text for text in texts):   # for C programs loading it
            texts.append(permission_ir())
        names = ", ".join(source.kernel_name for source in sources)
        object_code = builder.compile_object(texts, f"the kernels {names}", self._llvm_cpu)
        data = {constant_symbol(name): np.ascontiguousarray(array).tobytes()
                for name, array in (constants or {}).items()}
        return builder.link_shared_library(object_code, path, data)

    def export(self, kernels: Sequence[tuple[Kernel, Source]], graph: Graph,
               directory: Path, name: str) -> list[Path]:
        """``lib<name>.so`` (:meth:`export_shared_library`) and ``<name>.h`` (prototypes,
        arguments, and ``<name>_run`` calling the kernels in order, see :mod:`.header`) in
        ``directory``; nothing is run."""
        stem = c_identifier(name)
        directory = Path(directory)
        library = self.export_shared_library([source for _, source in kernels],
                                             directory / f"lib{stem}.so",
                                             {t.name: t.constant_value for t in graph.constants})
        header = directory / f"{stem}.h"
        text = c_header(stem, self.name, [(kernel, source.entry) for kernel, source in kernels],
                        graph, self.spec.description)
        partial = header.with_name(header.name + ".partial")
        partial.write_text(text)
        partial.replace(header)  # never a half-written header
        return [library, header]

    def load_shared_library(self, path: str | os.PathLike[str]) -> dict[str, NativeKernel]:
        """The kernels of a library written by :meth:`export_shared_library`, by name."""
        self._allow_tiles()
        self._require("execute")
        location = Path(path).resolve()
        try:
            library = ctypes.CDLL(str(location))
        except OSError as err:
            raise TargetError(f"cannot load the shared library {location}: {err}") from err
        try:
            read_manifest = getattr(library, builder.MANIFEST_SYMBOL)
        except AttributeError:
            raise TargetError(f"{location} is not a tilecraft x86 kernel library (no "
                              f"{builder.MANIFEST_SYMBOL} symbol); write it with "
                              "export_shared_library") from None
        read_manifest.restype = ctypes.c_char_p
        manifest: dict[str, Any] = json.loads(read_manifest().decode())
        built_for = manifest.get("cpu")
        if built_for is not None:
            missing = cpus.missing_features(cpus.cpu_data(built_for), read_cpuinfo()[1])
            if missing:
                raise TargetError(f"{location} holds code for {built_for}, which may use "
                                  f"{', '.join(missing)} that this host lacks; run it on a "
                                  f"{built_for}, or export it again for this machine")
        if manifest.get("abi_version") != ABI_VERSION:
            raise TargetError(f"{location} was written for kernel ABI version "
                              f"{manifest.get('abi_version')}, this plugin uses {ABI_VERSION}; "
                              "export it again")
        kernels = {}
        for meta in manifest["kernels"]:
            entry = ENTRY_PROTOTYPE((meta["entry"], library))
            kernels[meta["kernel"]] = NativeKernel(meta, entry, self.threads,
                                                   keepalive=library)
        return kernels

    # helpers ---------------------------------------------------------------------------------
    def _check_source(self, source: Source) -> None:
        if source.target != self.name or source.language != LANGUAGE:
            raise TargetError(f"source of kernel {source.kernel_name!r} is {source.language} "
                              f"for target {source.target}; {self.name} builds {LANGUAGE} it "
                              "generated itself (Target.codegen)")

    def _allow_tiles(self) -> None:
        """Ask Linux for the AMX tile state where the spec declares the AMX micro-kernel: a
        kernel built elsewhere (a shared library) may use it (:mod:`.amx`)."""
        if AMX_SPLIT_F32.name in {decl.name for decl in self.spec.micro_kernels}:
            amx_permitted()

    def _require(self, stage: str) -> None:
        availability = self.available()
        if not getattr(availability, stage):
            raise TargetError(f"target {self.name} cannot {stage} on this machine: "
                              f"{availability.reasons.get(stage, 'unknown reason')}")


def _taken_symbol(symbol: str) -> bool:
    """Whether ``symbol`` is ``main``, the manifest's, or defined by a library loaded into
    this process (libc, libm...): an exported kernel of that name would interpose it."""
    if symbol in ("main", builder.MANIFEST_SYMBOL):
        return True
    return hasattr(_process_symbols(), symbol)


@functools.cache
def _process_symbols() -> ctypes.CDLL:
    return ctypes.CDLL(None)


def _without_missing_instructions(spec: TargetSpec, flags: frozenset[str]) -> TargetSpec:
    """``spec`` without the intrinsics and micro-kernels whose instructions ``flags`` (the
    CPU's) lack (``cpus.yaml``'s ``requires``), so that nothing is mapped onto them."""
    intrinsics = tuple(decl for decl in spec.intrinsics
                       if cpus.supports(flags, "intrinsics", decl.name))
    micro_kernels = tuple(decl for decl in spec.micro_kernels
                          if cpus.supports(flags, "micro_kernels", decl.name))
    if len(intrinsics) == len(spec.intrinsics) and \
            len(micro_kernels) == len(spec.micro_kernels):
        return spec
    return spec.model_copy(update={"intrinsics": intrinsics, "micro_kernels": micro_kernels})


@functools.cache
def _named_availability(cpu: str) -> Availability:
    """Code for a named CPU is generated and assembled on any host LLVM's x86 back end runs
    on; it runs only on an x86-64 host with every feature the CPU's code may use."""
    data = cpus.cpu_data(cpu)
    reasons: dict[str, str] = {}
    build_ok = True
    try:
        builder.target_machine(False, (data.llvm_cpu, data.llvm_features()))
    except Exception as err:  # noqa: BLE001 - reported as the reason
        build_ok = False
        reasons["build"] = f"llvmlite cannot make a target machine for {data.llvm_cpu}: {err}"
    machine = platform.machine().lower()
    model, flags = read_cpuinfo()
    missing = cpus.missing_features(data, flags)
    execute_ok = False
    if machine not in ("x86_64", "amd64"):
        reasons["execute"] = f"this machine is {machine}, not x86-64"
    elif missing:
        reasons["execute"] = (f"this host ({model}) lacks {', '.join(missing)}, which code for "
                              f"{cpu} may use; export it ahead of time (tilecraft compile "
                              f"--target {TARGET_NAME}:{cpu} --output-dir DIR) and run it on "
                              f"a {cpu}, or target {TARGET_NAME} for this machine")
    elif not build_ok:
        reasons["execute"] = "cannot build code here (see build)"
    else:
        execute_ok = True
    return Availability(codegen=True, build=build_ok, execute=execute_ok, emulate=True,
                        estimate=False, reasons=reasons)


@functools.cache
def _availability() -> Availability:
    reasons: dict[str, str] = {}
    build_ok = True
    machine = platform.machine().lower()
    if machine not in ("x86_64", "amd64"):
        build_ok = False
        reasons["build"] = f"this machine is {machine}, not x86-64"
    else:
        try:
            builder.target_machine(True)
        except Exception as err:  # noqa: BLE001 - reported as the reason
            build_ok = False
            reasons["build"] = f"llvmlite cannot initialise the native target: {err}"
    execute_ok = build_ok
    if build_ok:
        _, flags = read_cpuinfo()
        if "avx512f" not in flags:
            execute_ok = False
            reasons["execute"] = "this CPU has no AVX-512F (no avx512f in /proc/cpuinfo flags)"
    else:
        reasons["execute"] = "cannot build code here (see build)"
    return Availability(codegen=True, build=build_ok, execute=execute_ok, emulate=True,
                        estimate=False, reasons=reasons)
