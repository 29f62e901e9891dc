"""LLVM IR text to machine code: JIT through llvmlite's MCJIT, or an object file linked into a
shared library by ``gcc -shared`` (ahead of time).

Facts of llvmlite 0.50 / LLVM 22 this relies on (TOOLCHAINS.md): there is no
``llvm.initialize()``; the target machine must be built from ``get_host_cpu_name()`` and
``get_host_cpu_features()`` or LLVM emits no zmm code; objects for a shared library need
``reloc="pic"``. A named CPU (``cpu=(llvm_cpu, features)``, see :mod:`.cpus`) gets a target
machine of its own for that CPU and exactly those features, on any host LLVM runs on: code is
generated and assembled for it without running. Modules are optimised by the new pass
manager's O3 pipeline (``create_pass_builder`` + ``PipelineTuningOptions``) after verification.

JIT engines are cached by the SHA-256 of the IR text, so compiling the same source twice is
free; an :class:`JitModule` keeps its engine (and so its machine code) alive.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shlex
import shutil
import subprocess
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tilecraft.errors import CodegenError

_LOCK = threading.RLock()
_JIT_CACHE: OrderedDict[str, JitModule] = OrderedDict()
JIT_CACHE_SIZE = 512
MANIFEST_SYMBOL = "tilecraft_manifest"
#: the triple of code for a named CPU (the host's own code uses the process triple)
X86_TRIPLE = "x86_64-unknown-linux-gnu"
#: (LLVM cpu name, LLVM feature string) of a named CPU; ``None`` means this host
CpuChoice = tuple[str, str] | None


@functools.cache
def llvm() -> Any:
    """llvmlite.binding with the native target, asm printer and parser initialised."""
    import llvmlite.binding as binding

    binding.initialize_native_target()
    binding.initialize_native_asmprinter()
    binding.initialize_native_asmparser()
    return binding


@functools.cache
def host_cpu() -> tuple[str, str]:
    """(cpu name, feature string) of this machine as LLVM sees it."""
    binding = llvm()
    return binding.get_host_cpu_name(), binding.get_host_cpu_features().flatten()


@functools.cache
def target_machine(jit: bool = True, cpu: CpuChoice = None) -> Any:
    """The target machine of this host (or of the named ``cpu``): JIT code model, or
    position-independent for shared libraries. Shared: never hand it to an execution engine
    (see :func:`new_target_machine`)."""
    return new_target_machine(jit, cpu)


@functools.cache
def _x86_target() -> Any:
    """LLVM's x86 target, whatever this host is (all targets initialised off x86)."""
    binding = llvm()
    if not binding.get_process_triple().startswith(("x86_64", "amd64")):
        binding.initialize_all_targets()
        binding.initialize_all_asmprinters()
    return binding.Target.from_triple(X86_TRIPLE)


def new_target_machine(jit: bool = True, cpu: CpuChoice = None) -> Any:
    """A target machine of its own. An MCJIT engine takes ownership of the machine it is
    given and frees it with itself, so each engine needs a fresh one: handing every engine
    the shared one left a dangling machine once the first engine was freed (crashes in LLVM
    after a few hundred compiles)."""
    binding = llvm()
    if cpu is None:
        name, features = host_cpu()
        target = binding.Target.from_triple(binding.get_process_triple())
    else:
        name, features = cpu
        target = _x86_target()
    if jit:
        return target.create_target_machine(cpu=name, features=features, opt=3, jit=True)
    return target.create_target_machine(cpu=name, features=features, opt=3, reloc="pic",
                                        codemodel="default")


def source_hash(text: str, cpu: CpuChoice = None) -> str:
    name, features = host_cpu() if cpu is None else cpu
    return hashlib.sha256(f"{name}\n{features}\n{text}".encode()).hexdigest()


def parse_module(text: str, what: str) -> Any:
    """Parse and verify IR text (a CodegenError quoting LLVM's message otherwise)."""
    binding = llvm()
    try:
        module = binding.parse_assembly(text)
        module.verify()
    except RuntimeError as err:
        raise CodegenError(
            f"LLVM rejected the IR generated for {what}: {err}; this is a bug in the x86 code "
            "generator — dump the source (Target.codegen(kernel).text) and report it") from err
    return module


def optimize(module: Any, machine: Any, speed_level: int = 3) -> None:
    """Run the new pass manager's default per-module pipeline at O``speed_level``."""
    binding = llvm()
    module.triple = machine.triple
    module.data_layout = str(machine.target_data)
    tuning = binding.create_pipeline_tuning_options(speed_level=speed_level)
    tuning.loop_vectorization = True
    tuning.slp_vectorization = True
    tuning.loop_unrolling = True
    tuning.loop_interleaving = True
    builder = binding.create_pass_builder(machine, tuning)
    builder.getModulePassManager().run(module, builder)


def optimized_module(text: str, what: str, jit: bool = True, cpu: CpuChoice = None) -> Any:
    module = parse_module(text, what)
    optimize(module, target_machine(jit, cpu))
    return module


def emit_assembly(text: str, what: str = "a kernel", cpu: CpuChoice = None) -> str:
    """The optimised x86 assembly of an IR module for this host or the named ``cpu`` (for
    inspection and tests)."""
    with _LOCK:
        return target_machine(True, cpu).emit_assembly(optimized_module(text, what, cpu=cpu))


class JitModule:
    """Machine code of one IR module in memory; alive as long as this object is."""

    def __init__(self, engine: Any, text_hash: str) -> None:
        self._engine = engine
        self.text_hash = text_hash

    def address(self, symbol: str) -> int:
        address = self._engine.get_function_address(symbol)
        if not address:
            raise CodegenError(f"the JIT-compiled module has no function {symbol!r}")
        return address


def jit_compile(text: str, what: str = "a kernel", cpu: CpuChoice = None) -> JitModule:
    """Compile IR text to machine code in memory, for this host or the named ``cpu`` (cached
    by the text's and the CPU's hash). Running it needs a host with the CPU's features."""
    key = source_hash(text, cpu)
    with _LOCK:
        cached = _JIT_CACHE.get(key)
        if cached is not None:
            _JIT_CACHE.move_to_end(key)
            return cached
        module = optimized_module(text, what, cpu=cpu)
        engine = llvm().create_mcjit_compiler(module, new_target_machine(True, cpu))
        engine.finalize_object()
        compiled = JitModule(engine, key)
        _JIT_CACHE[key] = compiled
        while len(_JIT_CACHE) > JIT_CACHE_SIZE:
            _JIT_CACHE.popitem(last=False)
        return compiled


# ahead of time -------------------------------------------------------------------------------
def manifest_ir(manifest_json: str) -> str:
    """A module defining ``const char *tilecraft_manifest(void)`` returning the JSON text."""
    data = manifest_json.encode() + b"\0"
    escaped = "".join(chr(b) if 32 <= b < 127 and b not in (34, 92) else f"\\{b:02X}"
                      for b in data)
    return (f'@tilecraft.manifest.text = private unnamed_addr constant [{len(data)} x i8] '
            f'c"{escaped}", align 1\n\n'
            f'define ptr @"{MANIFEST_SYMBOL}"() nounwind {{\n'
            f'entry:\n  ret ptr @tilecraft.manifest.text\n}}\n')


def compile_object(texts: Sequence[str], what: str, cpu: CpuChoice = None) -> bytes:
    """Link IR modules into one, optimise it, and emit a position-independent object for this
    host or the named ``cpu``."""
    with _LOCK:
        machine = target_machine(False, cpu)
        modules = [parse_module(text, what) for text in texts]
        combined = modules[0]
        for other in modules[1:]:
            combined.link_in(other)
        optimize(combined, machine)
        return machine.emit_object(combined)


def data_assembly(blobs: Mapping[str, str]) -> str:
    """GNU assembly defining each symbol of ``blobs`` as the bytes of its file (``.incbin``,
    relative to the assembler's working directory), read-only and 64-byte aligned: a
    library's constants without spelling them in IR."""
    lines = ["\t.section .rodata"]
    for symbol, file in blobs.items():
        lines += ["\t.balign 64", f"\t.globl {symbol}", f"\t.type {symbol}, @object",
                  f"{symbol}:", f'\t.incbin "{file}"', f"\t.size {symbol}, .-{symbol}"]
    lines.append('\t.section .note.GNU-stack,"",@progbits')
    return "\n".join(lines) + "\n"


def link_shared_library(object_code: bytes, path: str | os.PathLike[str],
                        data: Mapping[str, bytes] | None = None) -> Path:
    """``gcc -shared`` the object into ``path``, with each of ``data``'s byte strings under its
    symbol (:func:`data_assembly`); a failure raises CodegenError carrying the command to
    reproduce it, run in a directory kept next to ``path`` with the files it names."""
    target = Path(path).resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    compiler = os.environ.get("TILECRAFT_X86_CC", "gcc")
    with tempfile.TemporaryDirectory(prefix="tilecraft_x86_") as scratch:
        obj = Path(scratch) / (target.stem + ".o")
        obj.write_bytes(object_code)
        inputs = [obj.name]
        if data:
            blobs = {symbol: f"constant{index}.bin" for index, symbol in enumerate(data)}
            for symbol, blob in data.items():
                (Path(scratch) / blobs[symbol]).write_bytes(blob)
            assembly = target.stem + "_constants.s"
            (Path(scratch) / assembly).write_text(data_assembly(blobs))
            inputs.append(assembly)
        # -lm: the kernels may call libm (expf, ...) where LLVM does not expand a math intrinsic
        command = [compiler, "-shared", "-o", str(target), *inputs, "-lm"]
        if shutil.which(compiler) is None:
            raise CodegenError(f"cannot link {target.name}: the C compiler {compiler!r} is not "
                               f"installed (command: {shlex.join(command)}); install gcc or "
                               "set TILECRAFT_X86_CC")
        result = subprocess.run(command, capture_output=True, text=True, check=False,
                                cwd=scratch)
        if result.returncode != 0:
            kept = target.parent / (target.stem + ".parts")
            shutil.rmtree(kept, ignore_errors=True)
            shutil.copytree(scratch, kept)
            raise CodegenError(
                f"linking {target.name} failed (exit {result.returncode}): "
                f"{result.stderr.strip() or result.stdout.strip()}; reproduce with: "
                f"cd {shlex.quote(str(kept))} && {shlex.join(command)}")
    return target
