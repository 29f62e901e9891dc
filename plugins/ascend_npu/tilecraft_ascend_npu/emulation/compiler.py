"""Building an AscendC-style source for the host: the kernel and a generated harness
(``templates/harness.cpp.jinja``: the kernel once per AI core, errors caught as messages),
``g++ -std=c++17 -O1 -shared -fPIC -I<include>``, into a shared library.

Libraries are kept per content — a hash of the source, the harness, the header, the compiler
and its flags — in ``$TILECRAFT_CACHE_DIR/ascend_npu`` (else ``$XDG_CACHE_HOME/tilecraft/
ascend_npu``, else ``~/.cache/tilecraft/ascend_npu``), and in this process once loaded, so
tests and repeated compiles build each kernel once. A library is written under a temporary name
and renamed into place. A compiler error is a :class:`~tilecraft.errors.BuildError` naming the
kernel, with the source's path, a command that reproduces it and the compiler's output.

>>> FLAGS[:2]
('-std=c++17', '-O1')
"""

from __future__ import annotations

import ctypes
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

__all__ = ["FLAGS", "AscendLibrary", "build_library", "cache_folder", "header_folder",
           "host_compiler"]

FLAGS = ("-std=c++17", "-O1", "-shared", "-fPIC", "-w", "-DTILECRAFT_ASCEND_EMULATION")
LAYOUT_VERSION = "1"
_libraries: dict[str, AscendLibrary] = {}
_guard = threading.Lock()


def header_folder() -> Path:
    """The folder of ``tilecraft_ascendc.h``."""
    return Path(str(files("tilecraft_ascend_npu") / "include"))


def host_compiler() -> str | None:
    """``$TILECRAFT_HOST_CXX`` or g++ (else clang++) on PATH; None without one."""
    for candidate in (os.environ.get("TILECRAFT_HOST_CXX"), "g++", "clang++"):
        if candidate and shutil.which(candidate):
            return shutil.which(candidate)
    return None


def cache_folder() -> Path:
    """Where built libraries are kept (module docstring)."""
    root = os.environ.get("TILECRAFT_CACHE_DIR")
    if root:
        base = Path(root)
    else:
        xdg = os.environ.get("XDG_CACHE_HOME")
        base = (Path(xdg) if xdg else Path.home() / ".cache") / "tilecraft"
    folder = base / "ascend_npu"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise BuildError(f"cannot create the AscendC emulation cache {folder} ({err}); set "
                         "TILECRAFT_CACHE_DIR to a writable folder") from err
    return folder


@dataclass(frozen=True)
class AscendLibrary:
    """A built kernel: ``run(args, block_dim) -> status`` and ``error()``, its message."""

    path: Path
    handle: ctypes.CDLL

    def run(self, pointers: ctypes.Array, block_dim: int) -> int:
        function = self.handle.tc_ascend_run
        function.restype = ctypes.c_int
        function.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int]
        return int(function(pointers, block_dim))

    def error(self) -> str:
        function = self.handle.tc_ascend_error
        function.restype = ctypes.c_char_p
        return function().decode(errors="replace")


def build_library(source: Source) -> AscendLibrary:
    """The library of ``source`` (module docstring), built at most once per content."""
    from tilecraft_ascend_npu.codegen.kernel import render_template

    compiler = host_compiler()
    if compiler is None:
        raise BuildError(f"kernel {source.kernel_name}: no host C++ compiler to emulate its "
                         "AscendC source with (g++ or clang++, or $TILECRAFT_HOST_CXX); "
                         "install g++")
    kernel_file = f"{source.kernel_name}.cpp"
    harness = render_template("harness.cpp.jinja", entry=source.entry, source_file=kernel_file,
                              param_count=len(source.meta.get("params", ())))
    header = (header_folder() / "tilecraft_ascendc.h").read_bytes()
    key = hashlib.sha256(b"\0".join([
        LAYOUT_VERSION.encode(), compiler.encode(), " ".join(FLAGS).encode(), header,
        harness.encode(), source.text.encode()])).hexdigest()[:20]
    with _guard:
        if key in _libraries:
            return _libraries[key]
        folder = cache_folder() / key
        library = folder / "kernel.so"
        if not library.exists():
            _compile(source, compiler, folder, kernel_file, harness, library)
        loaded = AscendLibrary(library, ctypes.CDLL(str(library)))
        _libraries[key] = loaded
        return loaded


def _compile(source: Source, compiler: str, folder: Path, kernel_file: str, harness: str,
             library: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / kernel_file).write_text(source.text, encoding="utf-8")
    (folder / "harness.cpp").write_text(harness, encoding="utf-8")
    descriptor, partial = tempfile.mkstemp(prefix=".kernel", suffix=".so", dir=folder)
    os.close(descriptor)
    command = [compiler, *FLAGS, f"-I{header_folder()}", "harness.cpp", "-o"]
    try:
        done = subprocess.run([*command, partial], cwd=folder, capture_output=True, text=True,
                              timeout=300, check=False)
        if done.returncode:
            repro = f"cd {shlex.quote(str(folder))} && {shlex.join([*command, 'kernel.so'])}"
            raise BuildError(f"kernel {source.kernel_name}: g++ rejected its AscendC source "
                             f"{folder / kernel_file}; reproduce with: {repro}\n"
                             f"{(done.stderr or done.stdout).strip()}")
        os.replace(partial, library)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)
