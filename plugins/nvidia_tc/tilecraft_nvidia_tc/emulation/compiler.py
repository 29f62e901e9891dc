"""Compiling a generated ``.cu`` for the host: ``g++ -std=c++17 -O2 -DTILECRAFT_CUDA_EMULATION
-x c++ -I<include>`` into a shared library, once per source text.

Libraries are cached on disk by a hash of the source, the harness, the plugin's headers, the
compiler and its flags, under ``$TILECRAFT_CACHE_DIR/nvidia_tc/emulation`` (else
``$XDG_CACHE_HOME/tilecraft/...``, else ``~/.cache/tilecraft/...``; a per-user folder of the
temporary directory where none can be written), and in memory once loaded. The library is
written under a temporary name and renamed, so a half-written one is never loaded. A failing
compile raises :class:`~tilecraft.errors.BuildError` with the source file, the command that
reproduces it and the compiler's message. ``TILECRAFT_HOST_CXX`` names another compiler.

>>> compile_flags()[:3]
['-std=c++17', '-O2', '-fPIC']
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shlex
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

from tilecraft.errors import BuildError
from tilecraft.target.base import Source
from tilecraft_nvidia_tc.emulation.harness import ENTRY_PREFIX, ERROR_SYMBOL, harness_text

CACHE_DIR_ENV = "TILECRAFT_CACHE_DIR"
COMPILER_ENV = "TILECRAFT_HOST_CXX"
HOST_COMPILERS = ("g++", "c++", "clang++")
#: bump when the folder layout or the harness's contract changes
EMULATION_CACHE_VERSION = 1

_LOADED: dict[str, EmulationLibrary] = {}
_LOCK = threading.Lock()


def include_dir() -> Path:
    """The plugin's header folder (``tilecraft_cuda.h``, ``tilecraft_cuda_emulation.h``)."""
    return Path(str(files("tilecraft_nvidia_tc") / "include"))


def compile_flags() -> list[str]:
    """The host compiler's flags, the include folder and the files aside."""
    return ["-std=c++17", "-O2", "-fPIC", "-shared", "-fno-strict-aliasing",
            "-DTILECRAFT_CUDA_EMULATION", "-x", "c++"]


def find_host_compiler() -> str | None:
    """The host C++ compiler's path (``$TILECRAFT_HOST_CXX``, else g++, c++, clang++), or
    ``None`` when there is none."""
    named = os.environ.get(COMPILER_ENV)
    for name in ((named,) if named else HOST_COMPILERS):
        path = shutil.which(name)
        if path:
            return path
    return None


@functools.cache
def _compiler_version(compiler: str) -> str:
    try:
        result = subprocess.run([compiler, "--version"], capture_output=True, text=True,
                                timeout=60, check=False)
    except OSError as err:
        return f"{compiler}: {err}"
    return result.stdout.splitlines()[0] if result.stdout else compiler


def _headers_digest() -> str:
    digest = hashlib.sha256()
    for path in sorted(include_dir().glob("*.h")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def cache_root() -> Path:
    """The folder emulation libraries are cached in: ``emulation/`` in the plugin's cache
    folder (:func:`tilecraft_nvidia_tc.toolchain.cache.cache_root`), created if needed."""
    from tilecraft_nvidia_tc.toolchain.cache import cache_root as plugin_cache_root

    try:
        folder = plugin_cache_root() / "emulation"
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise BuildError(f"no writable folder to cache CUDA emulation libraries in ({err}); "
                         f"set {CACHE_DIR_ENV} to a writable folder") from err
    return folder


@dataclass(frozen=True)
class EmulationLibrary:
    """A loaded emulation library of one kernel: ``launch`` is its ``tc_emulate_<entry>``."""

    path: Path
    entry: str
    library: ctypes.CDLL

    @functools.cached_property
    def launch(self) -> ctypes._CFuncPtr:
        function = getattr(self.library, ENTRY_PREFIX + self.entry)
        function.restype = ctypes.c_int
        function.argtypes = [ctypes.POINTER(ctypes.c_void_p)] + [ctypes.c_uint] * 6 + [
            ctypes.c_size_t, ctypes.c_ulonglong]
        return function

    def error(self) -> str:
        """The message of the last failed launch."""
        function = getattr(self.library, ERROR_SYMBOL)
        function.restype = ctypes.c_char_p
        return function().decode(errors="replace")


def compile_emulation(source: Source) -> EmulationLibrary:
    """The emulation library of ``source`` (a CUDA :class:`Source` whose ``meta`` has
    ``entry`` and ``params``), compiled once per text (module docstring)."""
    entry = str(source.meta.get("entry", source.entry))
    params = source.meta.get("params", ())
    compiler = find_host_compiler()
    if compiler is None:
        raise BuildError(f"kernel {source.kernel_name}: no host C++ compiler to emulate CUDA "
                         f"with (looked for {', '.join(HOST_COMPILERS)}); install g++ "
                         f"(apt-get install g++) or name one in ${COMPILER_ENV}")
    source_file = f"{source.kernel_name}.cu"
    harness = harness_text(source_file, entry, len(params))
    flags = compile_flags()
    digest = hashlib.sha256()
    for part in (str(EMULATION_CACHE_VERSION), _compiler_version(compiler), " ".join(flags),
                 _headers_digest(), harness, source.text):
        digest.update(part.encode() + b"\1")
    key = digest.hexdigest()[:24]
    with _LOCK:
        loaded = _LOADED.get(key)
        if loaded is not None:
            return loaded
        folder = cache_root() / key
        library_path = folder / f"lib{entry}.so"
        if not library_path.is_file():
            _build(source, compiler, flags, folder, source_file, harness, library_path)
        loaded = EmulationLibrary(library_path, entry, ctypes.CDLL(str(library_path)))
        _LOADED[key] = loaded
        return loaded


def _build(source: Source, compiler: str, flags: list[str], folder: Path, source_file: str,
           harness: str, library_path: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / source_file).write_text(source.text, encoding="utf-8")
    (folder / "harness.cpp").write_text(harness, encoding="utf-8")
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=".lib", suffix=".so")
    os.close(handle)
    command = [compiler, *flags, f"-I{include_dir()}", "-I.", "harness.cpp", "-o", temporary]
    try:
        result = subprocess.run(command, cwd=folder, capture_output=True, text=True,
                                timeout=600, check=False)
        if result.returncode != 0:
            log = (result.stderr or result.stdout).strip()
            raise BuildError(
                f"kernel {source.kernel_name}: the host C++ compiler rejected its CUDA source "
                f"{folder / source_file} for emulation; reproduce with: cd "
                f"{shlex.quote(str(folder))} && {shlex.join(command[:-1] + ['lib.so'])}\n{log}")
        os.replace(temporary, library_path)
    finally:
        Path(temporary).unlink(missing_ok=True)


__all__ = ["EmulationLibrary", "cache_root", "compile_emulation", "compile_flags",
           "find_host_compiler", "include_dir"]
