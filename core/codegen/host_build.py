"""Building generated C / C++ for the host: a shared library compiled once per content, for
targets that run their own generated source on the CPU (a C-simulation, an emulation header).

:func:`build_shared_library` hashes everything that decides the result — the files, the
flags, the compiler's version and the headers of the include folders — and compiles into
``<cache>/<key>/lib<stem>.so`` only when that library is missing. It writes the library under a
temporary name and renames it into place, so a half-written one is never used. A failing
compile is a :class:`~tilecraft.errors.BuildError` naming what was built, the file, the command
that reproduces it and the compiler's message. ``$TILECRAFT_HOST_CXX`` names the compiler.

>>> build = HostBuild("kernel k", {"k.cpp": "int k() { return 1; }"}, "k.cpp", ("-O1",))
>>> len(build.key("g++ 12")), build.key("g++ 12") == build.key("g++ 13")
(24, False)
"""

from __future__ import annotations

import functools
import hashlib
import os
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tilecraft.errors import BuildError

__all__ = ["HOST_COMPILERS", "HOST_COMPILER_ENV", "HostBuild", "build_shared_library",
           "compiler_version", "find_host_compiler"]

HOST_COMPILER_ENV = "TILECRAFT_HOST_CXX"
HOST_COMPILERS = ("g++", "c++", "clang++")
#: bump when the cache folder's layout changes
HOST_BUILD_VERSION = 1


def find_host_compiler() -> str | None:
    """The path of ``$TILECRAFT_HOST_CXX``, else of the first of g++, c++, clang++ on PATH;
    ``None`` when there is none."""
    named = os.environ.get(HOST_COMPILER_ENV)
    for name in (named,) if named else HOST_COMPILERS:
        path = shutil.which(name)
        if path:
            return path
    return None


@functools.cache
def compiler_version(compiler: str) -> str:
    """The first line of ``compiler --version`` (part of every cache key)."""
    try:
        done = subprocess.run([compiler, "--version"], capture_output=True, text=True,
                              timeout=60, check=False)
    except OSError as err:
        return f"{compiler}: {err}"
    return (done.stdout.splitlines() or [compiler])[0]


@dataclass(frozen=True)
class HostBuild:
    """What to compile: ``files`` (name -> text) written side by side, ``main`` the one given
    to the compiler, ``flags`` (without ``-shared`` / ``-fPIC``, always added), the
    ``include_dirs`` (their ``*.h`` enter the key) and ``what`` for messages."""

    what: str
    files: Mapping[str, str]
    main: str
    flags: tuple[str, ...] = ()
    include_dirs: tuple[Path, ...] = ()

    def key(self, version: str) -> str:
        digest = hashlib.sha256(f"{HOST_BUILD_VERSION}\1{version}\1{self.main}".encode())
        for part in (*self.flags, *sorted(self.files.items())):
            digest.update(repr(part).encode() + b"\1")
        for folder in self.include_dirs:
            for header in sorted(Path(folder).glob("*.h")):
                digest.update(header.name.encode() + b"\0" + header.read_bytes())
        return digest.hexdigest()[:24]


def build_shared_library(build: HostBuild, cache: Path, stem: str = "kernel") -> Path:
    """The shared library of ``build`` under ``cache`` (module docstring), compiled if missing."""
    compiler = find_host_compiler()
    if compiler is None:
        raise BuildError(f"{build.what}: no host C++ compiler (looked for "
                         f"{', '.join(HOST_COMPILERS)}); install g++ or name one in "
                         f"${HOST_COMPILER_ENV}")
    folder = cache / build.key(compiler_version(compiler))
    library = folder / f"lib{stem}.so"
    if library.is_file():
        return library
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in build.files.items():
        (folder / name).write_text(text, encoding="utf-8")
    handle, partial = tempfile.mkstemp(dir=folder, prefix=f".lib{stem}", suffix=".so")
    os.close(handle)
    command = [compiler, *build.flags, "-fPIC", "-shared",
               *(f"-I{folder}" for folder in build.include_dirs), "-I.", build.main, "-o"]
    try:
        done = subprocess.run([*command, partial], cwd=folder, capture_output=True, text=True,
                              timeout=600, check=False)
        if done.returncode != 0:
            raise BuildError(
                f"{build.what}: the host compiler rejected {folder / build.main}; reproduce "
                f"with: cd {shlex.quote(str(folder))} && {shlex.join(command)} {library.name}"
                f"\n{(done.stderr or done.stdout).strip()}")
        os.replace(partial, library)
    finally:
        Path(partial).unlink(missing_ok=True)
    return library
