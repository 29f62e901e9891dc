"""Compiling a generated ``.cu`` for the host: ``g++ -std=c++17 -O2 -DTILECRAFT_CUDA_EMULATION
-x c++ -I<include>`` into a shared library, once per source text, through the core's
:mod:`tilecraft.codegen.host_build` (the content-hash cache, the half-written-library guard and
the :class:`~tilecraft.errors.BuildError` with the repro command are the core's).

Libraries are cached on disk under ``$TILECRAFT_CACHE_DIR/nvidia_tc/emulation`` (else
``$XDG_CACHE_HOME/tilecraft/...``, else ``~/.cache/tilecraft/...``; a per-user folder of the
temporary directory where none can be written), keyed by the source, the harness, the plugin's
headers, the compiler and its flags, and in memory once loaded. ``TILECRAFT_HOST_CXX`` names
another compiler.

>>> compile_flags()[:3]
['-std=c++17', '-O2', '-fno-strict-aliasing']
"""

from __future__ import annotations

import ctypes
import functools
import threading
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

from tilecraft.codegen.host_build import (
    HOST_COMPILERS,
    HostBuild,
    build_shared_library,
    find_host_compiler,
)
from tilecraft.errors import BuildError
from tilecraft.target.base import Source
from tilecraft_nvidia_tc.emulation.harness import ENTRY_PREFIX, ERROR_SYMBOL, harness_text

CACHE_DIR_ENV = "TILECRAFT_CACHE_DIR"

_LOADED: dict[tuple[str, ...], EmulationLibrary] = {}
_LOCK = threading.Lock()


def include_dir() -> Path:
    """The plugin's header folder (``tilecraft_cuda.h``, ``tilecraft_cuda_emulation.h``)."""
    return Path(str(files("tilecraft_nvidia_tc") / "include"))


def compile_flags() -> list[str]:
    """The host compiler's flags (the core adds ``-fPIC -shared`` and the include folders)."""
    return ["-std=c++17", "-O2", "-fno-strict-aliasing", "-DTILECRAFT_CUDA_EMULATION",
            "-x", "c++"]


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
                         "(apt-get install g++) or name one in $TILECRAFT_HOST_CXX")
    source_file = f"{source.kernel_name}.cu"
    build = HostBuild(f"kernel {source.kernel_name} (CUDA emulation)",
                      {source_file: source.text,
                       "harness.cpp": harness_text(source_file, entry, len(params))},
                      "harness.cpp", tuple(compile_flags()), (include_dir(),))
    folder = cache_root()
    memo = (compiler, str(folder), entry, *build.files.values())
    with _LOCK:
        loaded = _LOADED.get(memo)
        if loaded is None:
            library_path = build_shared_library(build, folder, stem=entry)
            loaded = EmulationLibrary(library_path, entry, ctypes.CDLL(str(library_path)))
            _LOADED[memo] = loaded
        return loaded


__all__ = ["EmulationLibrary", "cache_root", "compile_emulation", "compile_flags",
           "find_host_compiler", "include_dir"]
