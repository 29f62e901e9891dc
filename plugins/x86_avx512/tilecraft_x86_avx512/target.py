"""The x86_avx512 target: Kernel IR -> LLVM IR -> machine code (JIT or shared library) -> ctypes.

Stages (the :class:`~tilecraft.target.base.Target` contract):

- ``codegen(kernel) -> Source(language="llvm-ir")``: see :mod:`.codegen`;
- ``build(source) -> Artifact``: MCJIT machine code in memory (the artifact's ``handle`` keeps
  the engine alive; engines are cached by the source's hash);
- ``load(artifact) -> KernelFunction``: a :class:`~.runtime.CompiledKernel` calling the entry
  through ctypes, splitting the PARALLEL loop across threads;
- ``export_shared_library(kernels, path)`` / ``load_shared_library(path)``: ahead of time, an
  object file linked by ``gcc -shared``, carrying a JSON manifest of its kernels so that it
  can be loaded back (validated) without the Kernel IR.
"""

from __future__ import annotations

import ctypes
import functools
import json
import os
import platform
from collections.abc import Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

from tilecraft.errors import CodegenError, TargetError
from tilecraft.graph import Graph
from tilecraft.kernel_ir.nodes import Kernel
from tilecraft.lower.options import LoweringOptions
from tilecraft.target.base import (
    Artifact,
    Availability,
    FusedGroup,
    Source,
    Target,
    TemplateSpace,
)
from tilecraft.target.spec import TargetSpec
from tilecraft.te.tensor import Tensor
from tilecraft_x86_avx512 import build as builder
from tilecraft_x86_avx512.codegen import ABI_VERSION, CodegenOptions, generate_llvm_ir
from tilecraft_x86_avx512.conv_variants import lower_conv_variant, template_view
from tilecraft_x86_avx512.fusion import BlockingMachine, fuse_chains
from tilecraft_x86_avx512.gemm_template import template_space
from tilecraft_x86_avx512.host import HostInfo, read_cpuinfo
from tilecraft_x86_avx512.runtime import ENTRY_PROTOTYPE, CompiledKernel, default_threads
from tilecraft_x86_avx512.spec import TARGET_NAME, build_spec

LANGUAGE = "llvm-ir"


class X86Avx512Target(Target):
    """x86-64 with AVX-512, compiled through LLVM (llvmlite) and run natively.

    ``options`` tune the code generator, ``threads`` the parallel chunks (default:
    ``TILECRAFT_X86_THREADS`` or the usable cores), ``host`` replaces this machine's facts in
    the spec (tests, planning for another machine).
    """

    def __init__(self, options: CodegenOptions | None = None, threads: int | None = None,
                 host: HostInfo | None = None) -> None:
        self.options = options or CodegenOptions()
        self._threads = threads
        self._host = host

    @cached_property
    def spec(self) -> TargetSpec:
        return build_spec(self._host)

    @property
    def name(self) -> str:
        return TARGET_NAME

    @property
    def threads(self) -> int:
        return self._threads if self._threads is not None else default_threads()

    # schedule template -----------------------------------------------------------------------
    def fuse(self, graph: Graph, options: LoweringOptions) -> list[FusedGroup]:
        """Contraction chains fuse into one kernel each (:mod:`.fusion`)."""
        return fuse_chains(graph, options, BlockingMachine.from_spec(self.spec, self.threads))

    def template_space(self, tensor: Tensor) -> TemplateSpace | None:
        """The micro-kernel template's tunable parameters (see :mod:`.gemm_template`)."""
        machine = BlockingMachine.from_spec(self.spec, self.threads)
        return template_space(template_view(tensor), machine.l1_bytes, machine.l2_bytes,
                              self.threads)

    def lower_compute(self, tensor: Tensor, options: LoweringOptions,
                      config: Mapping[str, Any] | None = None) -> list[Kernel] | None:
        """Contractions go through the micro-kernel template (:mod:`.gemm_template`); grouped,
        depthwise and transposed convolutions are first rewritten (:mod:`.conv_variants`)."""
        machine = BlockingMachine.from_spec(self.spec, self.threads)
        return lower_conv_variant(tensor, options, machine.l1_bytes, machine.l2_bytes,
                                  self.threads, config)

    # availability ----------------------------------------------------------------------------
    def available(self) -> Availability:
        return _availability()

    # stages ----------------------------------------------------------------------------------
    def codegen(self, kernel: Kernel) -> Source:
        generated = generate_llvm_ir(kernel, self.options)
        return Source(target=self.name, kernel_name=kernel.name, language=LANGUAGE,
                      text=generated.text, entry=generated.entry, meta=generated.meta)

    def build(self, source: Source) -> Artifact:
        self._check_source(source)
        self._require("build")
        compiled = builder.jit_compile(source.text, f"kernel {source.kernel_name!r}")
        meta = dict(source.meta)
        meta["source_hash"] = compiled.text_hash
        return Artifact(target=self.name, kernel_name=source.kernel_name, handle=compiled,
                        meta=meta)

    def load(self, artifact: Artifact) -> CompiledKernel:
        if artifact.target != self.name:
            raise TargetError(f"artifact of kernel {artifact.kernel_name!r} was built for "
                              f"target {artifact.target}, not {self.name}; build it with "
                              f"{self.name}")
        self._require("execute")
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
        return CompiledKernel(meta, entry, self.threads, keepalive=artifact.handle)

    def compile_kernel(self, kernel: Kernel) -> CompiledKernel:
        """codegen, build and load in one call."""
        return self.load(self.build(self.codegen(kernel)))

    def assembly(self, source: Source) -> str:
        """The optimised x86 assembly of a Source (what ``build`` turns into machine code)."""
        self._check_source(source)
        self._require("build")
        return builder.emit_assembly(source.text, f"kernel {source.kernel_name!r}")

    # ahead of time ---------------------------------------------------------------------------
    def export_shared_library(self, items: Sequence[Kernel | Source],
                              path: str | os.PathLike[str]) -> Path:
        """Compile kernels (or their Sources) into one shared library at ``path``."""
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
            entries[source.entry] = source.kernel_name
        manifest = {"abi_version": ABI_VERSION, "target": self.name,
                    "kernels": [dict(source.meta) for source in sources]}
        texts = [source.text for source in sources]
        texts.append(builder.manifest_ir(json.dumps(manifest)))
        names = ", ".join(source.kernel_name for source in sources)
        object_code = builder.compile_object(texts, f"the kernels {names}")
        return builder.link_shared_library(object_code, path)

    def load_shared_library(self, path: str | os.PathLike[str]) -> dict[str, CompiledKernel]:
        """The kernels of a library written by :meth:`export_shared_library`, by name."""
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
        if manifest.get("abi_version") != ABI_VERSION:
            raise TargetError(f"{location} was written for kernel ABI version "
                              f"{manifest.get('abi_version')}, this plugin uses {ABI_VERSION}; "
                              "export it again")
        kernels = {}
        for meta in manifest["kernels"]:
            entry = ENTRY_PROTOTYPE((meta["entry"], library))
            kernels[meta["kernel"]] = CompiledKernel(meta, entry, self.threads,
                                                     keepalive=library)
        return kernels

    # helpers ---------------------------------------------------------------------------------
    def _check_source(self, source: Source) -> None:
        if source.target != self.name or source.language != LANGUAGE:
            raise TargetError(f"source of kernel {source.kernel_name!r} is {source.language} "
                              f"for target {source.target}; {self.name} builds {LANGUAGE} it "
                              "generated itself (Target.codegen)")

    def _require(self, stage: str) -> None:
        availability = self.available()
        if not getattr(availability, stage):
            raise TargetError(f"target {self.name} cannot {stage} on this machine: "
                              f"{availability.reasons.get(stage, 'unknown reason')}")


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
