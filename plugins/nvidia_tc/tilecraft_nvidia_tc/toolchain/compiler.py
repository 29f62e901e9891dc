"""CUDA C text to PTX and cubin for each architecture the spec lists, with the resource report.

:func:`build_cuda` writes the source into the build cache (:mod:`.cache`), compiles it with
NVRTC (default) or nvcc (:mod:`.compilers`) once per architecture, reads the entry kernel's
resources from the cubin (``cuobjdump --dump-resource-usage``) merged with ptxas' verbose
report (spills), and computes the occupancy on that architecture's SM (:mod:`.occupancy`).
A build that is already in the cache is read back, not compiled again.

Failures are :class:`CudaBuildError` (a :class:`~tilecraft.errors.BuildError`) naming the
kernel, the architecture, the source file and the command that reproduces them, then the
compiler's log. A launch that exceeds the spec's threads per block or an architecture's
shared memory per block is refused the same way, naming the limit and the value.

The compiler is chosen by :class:`BuildOptions` (``compiler="nvrtc"`` or ``"nvcc"``); the
environment variable ``TILECRAFT_CUDA_COMPILER`` sets the default.

>>> BuildOptions(architectures=("sm_80",)).compiler
'nvrtc'
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tilecraft.errors import BuildError
from tilecraft.target.hierarchy import ThreadHierarchy
from tilecraft_nvidia_tc.toolchain import cache
from tilecraft_nvidia_tc.toolchain.compilers import (
    CompiledCode,
    CompileFailure,
    compile_with_nvcc,
    compile_with_nvrtc,
    nvcc_command,
    nvrtc_options,
)
from tilecraft_nvidia_tc.toolchain.occupancy import Occupancy, occupancy
from tilecraft_nvidia_tc.toolchain.resources import (
    KernelResources,
    dump_resource_usage,
    parse_ptxas_log,
)
from tilecraft_nvidia_tc.toolchain.tools import (
    ToolMissing,
    cuobjdump_path,
    include_dirs,
    nvcc_version,
    nvrtc_version,
    plugin_include_dir,
)

COMPILER_ENV = "TILECRAFT_CUDA_COMPILER"
COMPILERS = ("nvrtc", "nvcc")
DEFAULT_ARCHITECTURES = ("sm_80", "sm_90")


def default_compiler() -> str:
    """``$TILECRAFT_CUDA_COMPILER`` when it names a compiler, else ``nvrtc``."""
    chosen = os.environ.get(COMPILER_ENV, "").strip().lower()
    return chosen if chosen in COMPILERS else "nvrtc"


@dataclass(frozen=True)
class BuildOptions:
    """What a build targets and with which compiler."""

    architectures: tuple[str, ...] = DEFAULT_ARCHITECTURES
    compiler: str = field(default_factory=default_compiler)

    def __post_init__(self) -> None:
        if self.compiler not in COMPILERS:
            raise BuildError(f"unknown CUDA compiler {self.compiler!r}; choose one of "
                             f"{', '.join(COMPILERS)}")
        if not self.architectures:
            raise BuildError("a CUDA build needs at least one architecture, e.g. sm_80")


@dataclass(frozen=True)
class LaunchShape:
    """The launch configuration a build checks limits and computes occupancy with."""

    grid: tuple[int, int, int] = (1, 1, 1)
    block: tuple[int, int, int] = (1, 1, 1)
    dynamic_shared_bytes: int = 0

    @property
    def threads_per_block(self) -> int:
        x, y, z = self.block
        return x * y * z

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any]) -> LaunchShape:
        """The launch of a Source's ``meta`` (``grid``, ``block``, ``dynamic_shared_bytes``)."""
        def three(value: Any) -> tuple[int, int, int]:
            items = [int(v) for v in (value or [1])] + [1, 1, 1]
            return items[0], items[1], items[2]
        return cls(three(meta.get("grid")), three(meta.get("block")),
                   int(meta.get("dynamic_shared_bytes", 0) or 0))


class CudaBuildError(BuildError):
    """A CUDA build failed: ``kernel``, ``source_path``, ``command`` (repro) and ``log``."""

    def __init__(self, message: str, *, kernel: str, source_path: Path | None = None,
                 command: str = "", log: str = "") -> None:
        super().__init__(message)
        self.kernel = kernel
        self.source_path = source_path
        self.command = command
        self.log = log


@dataclass(frozen=True)
class ArchitectureBuild:
    """One architecture's PTX and cubin files, the entry kernel's resources and occupancy."""

    architecture: str
    ptx_path: Path
    cubin_path: Path
    resources: KernelResources
    occupancy: Occupancy | None
    log: str
    cached: bool

    def as_dict(self) -> dict[str, Any]:
        return {"ptx": str(self.ptx_path), "cubin": str(self.cubin_path),
                "resources": self.resources.as_dict(),
                "occupancy": self.occupancy.as_dict() if self.occupancy else None,
                "cached": self.cached}


@dataclass(frozen=True)
class CudaBuild:
    """A kernel built for every architecture of the options."""

    kernel_name: str
    entry: str
    source_path: Path
    compiler: str
    launch: LaunchShape
    architectures: tuple[ArchitectureBuild, ...]

    def architecture(self, name: str) -> ArchitectureBuild:
        for built in self.architectures:
            if built.architecture == name:
                return built
        raise BuildError(f"kernel {self.kernel_name} was not built for {name}; it was built "
                         f"for {', '.join(b.architecture for b in self.architectures)}")

    def report(self) -> dict[str, Any]:
        """The build report (JSON-ready): compiler, source file, launch and, per
        architecture, files, resources and occupancy."""
        return {"compiler": self.compiler, "source": str(self.source_path),
                "entry": self.entry, "grid": list(self.launch.grid),
                "block": list(self.launch.block),
                "dynamic_shared_bytes": self.launch.dynamic_shared_bytes,
                "architectures": {b.architecture: b.as_dict() for b in self.architectures}}

    def summary(self) -> str:
        """One line per architecture: registers, shared memory, spills and occupancy."""
        lines = []
        for built in self.architectures:
            r = built.resources
            spills = ("spills unknown" if r.spill_store_bytes is None else
                      f"spill {r.spill_store_bytes} B stored / {r.spill_load_bytes} B loaded")
            occ = built.occupancy
            where = (f", {occ.blocks_per_core} blocks/SM ({occ.occupancy:.0%} occupancy, "
                     f"limited by {occ.limited_by})" if occ else "")
            lines.append(f"{self.kernel_name} {built.architecture}: {r.registers} registers, "
                         f"{r.static_shared_bytes} B static shared + "
                         f"{self.launch.dynamic_shared_bytes} B dynamic, {r.local_bytes} B "
                         f"local, {spills}{where}")
        return "\n".join(lines)


def repro_command(source_path: Path, architecture: str, compiler: str) -> str:
    """The shell command that repeats one build of ``source_path`` (the plugin's own entry
    point, which prints the compiler's log)."""
    return shlex.join([sys.executable, "-m", "tilecraft_nvidia_tc.build", str(source_path),
                       "--arch", architecture, "--compiler", compiler])


def _compiler_identity(compiler: str) -> str:
    return nvrtc_version() if compiler == "nvrtc" else nvcc_version()


def _compile(text: str, source_path: Path, architecture: str, compiler: str,
             folders: Sequence[Path], work: Path) -> CompiledCode:
    if compiler == "nvrtc":
        return compile_with_nvrtc(text, source_path.name, architecture, folders)
    return compile_with_nvcc(source_path, architecture, folders, work)


def _resources(entry: str, cubin: Path, log: str) -> dict[str, Any]:
    """The entry kernel's resources as a dict; ``KeyError`` when the cubin lacks it."""
    from_log = parse_ptxas_log(log)
    tool = cuobjdump_path()
    from_cubin = dump_resource_usage(tool, cubin) if tool is not None else {}
    if entry in from_cubin:
        found = from_cubin[entry]
        return (found.merged(from_log[entry]) if entry in from_log else found).as_dict()
    if entry in from_log:
        return from_log[entry].as_dict()
    raise KeyError(sorted(set(from_cubin) | set(from_log)))


def build_cuda(text: str, kernel_name: str, *, entry: str | None = None,
               options: BuildOptions | None = None, launch: LaunchShape | None = None,
               threads: ThreadHierarchy | None = None) -> CudaBuild:
    """Build CUDA C ``text`` defining ``entry`` (default ``kernel_name``) for every
    architecture of ``options`` (module docstring). ``threads`` (the spec's hierarchy) gives
    the limits the launch is checked against and the SM residency for the occupancy."""
    options = options or BuildOptions()
    launch = launch or LaunchShape()
    entry = entry or kernel_name
    folders = include_dirs()
    try:
        compiler_id = _compiler_identity(options.compiler)
    except ToolMissing as err:
        raise CudaBuildError(f"kernel {kernel_name}: the {options.compiler} compiler is not "
                             f"usable here: {err}", kernel=kernel_name) from err
    headers = cache.headers_digest([plugin_include_dir()])
    _check_threads(kernel_name, launch, threads)
    built = []
    for architecture in options.architectures:
        flags = nvrtc_options(architecture, folders)
        key = cache.build_key(text, architecture, flags, compiler_id, headers)
        folder = cache.build_folder(key)
        source_path = folder / f"{kernel_name}.cu"
        if not source_path.is_file() or source_path.read_text(encoding="utf-8") != text:
            cache.write_atomically(source_path, text.encode())
        command = repro_command(source_path, architecture, options.compiler)
        if options.compiler == "nvrtc":
            command += "  # or: " + shlex.join(nvcc_command(
                source_path, architecture, folders, "cubin", source_path.with_suffix(".cubin")))

        def fail(message: str, log: str = "", *, _path: Path = source_path,
                 _command: str = command) -> CudaBuildError:
            tail = f"\n{options.compiler} log:\n{log.strip()}" if log.strip() else ""
            return CudaBuildError(
                f"kernel {kernel_name}: {message}; source {_path}; reproduce with: "
                f"{_command}{tail}", kernel=kernel_name, source_path=_path, command=_command,
                log=log)

        record = cache.read_record(folder)
        cached = record is not None
        if record is None:
            try:
                code = _compile(text, source_path, architecture, options.compiler, folders,
                                folder)
            except CompileFailure as err:
                raise fail(f"{options.compiler} rejected the CUDA source for {architecture}",
                           err.log) from None
            except ToolMissing as err:
                raise fail(f"the {options.compiler} compiler is not usable here: {err}") \
                    from err
            cubin = folder / f"{kernel_name}.cubin"
            ptx = folder / f"{kernel_name}.ptx"
            cache.write_atomically(cubin, code.cubin)
            cache.write_atomically(ptx, code.ptx.encode())
            try:
                resources = _resources(entry, cubin, code.log)
            except KeyError as err:
                raise fail(f"the cubin for {architecture} has no kernel named {entry}; its "
                           f"kernels are {', '.join(err.args[0]) or 'none'} (declare the "
                           f"entry extern \"C\" __global__)", code.log) from None
            except RuntimeError as err:
                raise fail(f"reading the resource usage for {architecture} failed: {err}") \
                    from err
            record = {"cubin": cubin.name, "ptx": ptx.name, "log": code.log,
                      "resources": resources, "compiler": compiler_id}
            cache.write_record(folder, record)
        resources = KernelResources(**record["resources"])
        limits = _occupancy(kernel_name, architecture, resources, launch, threads, fail)
        built.append(ArchitectureBuild(
            architecture=architecture, ptx_path=folder / record["ptx"],
            cubin_path=folder / record["cubin"], resources=resources, occupancy=limits,
            log=record["log"], cached=cached))
    return CudaBuild(kernel_name=kernel_name, entry=entry, source_path=built[0].cubin_path
                     .with_suffix(".cu"), compiler=compiler_id, launch=launch,
                     architectures=tuple(built))


def _check_threads(kernel_name: str, launch: LaunchShape,
                   threads: ThreadHierarchy | None) -> None:
    if threads is None:
        return
    if launch.threads_per_block > threads.max_threads_per_block:
        raise CudaBuildError(
            f"kernel {kernel_name}: a block of {launch.threads_per_block} threads "
            f"({'x'.join(map(str, launch.block))}) exceeds the spec's max_threads_per_block "
            f"{threads.max_threads_per_block}; split the block loops further",
            kernel=kernel_name)


def _occupancy(kernel_name: str, architecture: str, resources: KernelResources,
               launch: LaunchShape, threads: ThreadHierarchy | None,
               fail: Any) -> Occupancy | None:
    if threads is None or architecture not in threads.architectures:
        return None
    limits = threads.residency_for(architecture)
    shared = resources.static_shared_bytes + launch.dynamic_shared_bytes
    cap = limits.max_shared_bytes_per_block
    if cap is not None and shared > cap:
        raise fail(f"a block needs {shared} bytes of shared memory "
                   f"({resources.static_shared_bytes} static + {launch.dynamic_shared_bytes} "
                   f"dynamic), over the {cap} bytes one block may use on {architecture}; "
                   f"use smaller tiles")
    if resources.static_shared_bytes > (threads.shared_bytes_per_block or shared):
        raise fail(f"{resources.static_shared_bytes} bytes of static shared memory exceed "
                   f"the {threads.shared_bytes_per_block} bytes a block may declare "
                   f"statically; allocate the buffer dynamically (tc_dynamic_smem)")
    return occupancy(limits, threads_per_block=launch.threads_per_block,
                     registers_per_thread=resources.registers, shared_bytes=shared,
                     subgroup_size=threads.subgroup_size,
                     registers_per_block=threads.registers_per_block)


__all__ = ["COMPILERS", "COMPILER_ENV", "ArchitectureBuild", "BuildOptions", "CudaBuild",
           "CudaBuildError", "LaunchShape", "build_cuda", "default_compiler", "repro_command"]
