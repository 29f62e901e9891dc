"""Compiling a generated HLS C++ source for C-simulation: g++ with the plugin's ``include/``
(``-std=c++17 -O1 -fwrapv -fvisibility=hidden``) into a shared library, once per source text
(the core's :mod:`tilecraft.codegen.host_build`: cached by content hash, a BuildError with the
command reproducing a failure).

Libraries live in ``csim/`` of the plugin's cache folder (``$TILECRAFT_CACHE_DIR/fpga_hls``,
else ``$XDG_CACHE_HOME/tilecraft/fpga_hls``, else ``~/.cache/tilecraft/fpga_hls``) and stay
loaded once loaded.

``-fwrapv``: te's int32 arithmetic wraps (numpy's), which C's signed overflow does not promise.
``-fvisibility=hidden``: only the harness's two functions are exported, so a kernel named like
a C library function (``pipe``, ``exp``) binds to itself, not to libc's.

>>> csim_flags()[:3]
('-std=c++17', '-O1', '-fwrapv')
"""

from __future__ import annotations

import ctypes
import os
import threading
from importlib.resources import files
from pathlib import Path

from tilecraft.codegen.host_build import HostBuild, build_shared_library, find_host_compiler
from tilecraft.errors import BuildError
from tilecraft.target.base import Source
from tilecraft_fpga_hls.csim.harness import ERROR_SYMBOL, RUN_SYMBOL, harness_text

__all__ = ["CSimLibrary", "cache_folder", "compile_csim", "csim_flags", "find_host_compiler",
           "include_dir"]

CACHE_DIR_ENV = "TILECRAFT_CACHE_DIR"

_LOADED: dict[Path, CSimLibrary] = {}
_LOCK = threading.Lock()


def include_dir() -> Path:
    """The plugin's headers: ``tilecraft_hls.h``, ``ap_int.h``, ``hls_half.h``, ``hls_stream.h``."""
    return Path(str(files("tilecraft_fpga_hls") / "include"))


def csim_flags() -> tuple[str, ...]:
    """The compiler's flags; the pragmas are HLS's, so g++ is told not to warn about them."""
    return ("-std=c++17", "-O1", "-fwrapv", "-fno-strict-aliasing", "-fvisibility=hidden",
            "-Wno-unknown-pragmas")


def cache_folder() -> Path:
    """Where C-simulation libraries are kept (module docstring), created if needed."""
    explicit, xdg = os.environ.get(CACHE_DIR_ENV), os.environ.get("XDG_CACHE_HOME")
    root = Path(explicit) if explicit else (Path(xdg) / "tilecraft" if xdg else
                                            Path.home() / ".cache" / "tilecraft")
    folder = root / "fpga_hls" / "csim"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise BuildError(f"fpga_hls: no writable folder for C-simulation libraries ({err}); "
                         f"set {CACHE_DIR_ENV} to a writable folder") from err
    return folder


class CSimLibrary:
    """A loaded C-simulation library of one kernel: ``run(args)`` calls the kernel (0, or -1
    with :meth:`error` saying why)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        library = ctypes.CDLL(str(path))
        self.run = library[RUN_SYMBOL]
        self.run.restype, self.run.argtypes = ctypes.c_int, [ctypes.POINTER(ctypes.c_void_p)]
        self._message = library[ERROR_SYMBOL]
        self._message.restype = ctypes.c_char_p

    def error(self) -> str:
        """The message of the last failed run."""
        return self._message().decode(errors="replace")


def compile_csim(source: Source) -> CSimLibrary:
    """The C-simulation library of an HLS ``source`` (its ``meta`` gives entry and params),
    built once per text."""
    entry = str(source.meta.get("entry", source.entry))
    storage = [str(param["storage"]) for param in source.meta.get("params", ())]
    main = f"{source.kernel_name}.cpp"
    build = HostBuild(f"kernel {source.kernel_name} (HLS C++ for C-simulation)",
                      {main: source.text, "harness.cpp": harness_text(main, entry, storage)},
                      "harness.cpp", csim_flags(), (include_dir(),))
    with _LOCK:
        path = build_shared_library(build, cache_folder(), stem="csim")
        if path not in _LOADED:
            _LOADED[path] = CSimLibrary(path)
        return _LOADED[path]
