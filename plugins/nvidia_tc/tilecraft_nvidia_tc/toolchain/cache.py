"""The on-disk cache of CUDA builds: one folder per (source, architecture, options, compiler,
headers) under ``$TILECRAFT_CACHE_DIR/nvidia_tc`` (else ``$XDG_CACHE_HOME/tilecraft``, else
``~/.cache/tilecraft``; where none can be written, a per-user folder of the temporary
directory).

A folder holds the source as compiled (``<kernel>.cu``), the PTX and the cubin, and
``build.json`` (the resource report and the compiler's log); it is complete once
``build.json`` exists, which is written last and atomically, so a half-written folder is
rebuilt, never trusted.

>>> len(build_key("extern \\"C\\" __global__ void k() {}", "sm_80", ("-O3",), "nvrtc 13.5"))
24
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

CACHE_DIR_ENV = "TILECRAFT_CACHE_DIR"
#: bump when the folder's layout or build.json's fields change
CACHE_VERSION = 1
RECORD = "build.json"


def cache_root() -> Path:
    """The plugin's cache folder (module docstring), created if needed."""
    candidates = []
    explicit = os.environ.get(CACHE_DIR_ENV)
    if explicit:
        candidates.append(Path(explicit))
    else:
        xdg = os.environ.get("XDG_CACHE_HOME")
        candidates.append(Path(xdg) / "tilecraft" if xdg else
                          Path.home() / ".cache" / "tilecraft")
    user = os.environ.get("USER") or str(os.getuid())
    candidates.append(Path(tempfile.gettempdir()) / f"tilecraft-{user}")
    for base in candidates:
        folder = base / "nvidia_tc"
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        if os.access(folder, os.W_OK):
            return folder
    raise OSError(f"no writable cache folder among {', '.join(map(str, candidates))}; set "
                  f"{CACHE_DIR_ENV} to a writable folder")


@functools.cache
def _headers_digest(folders: tuple[Path, ...]) -> str:
    digest = hashlib.sha256()
    for folder in folders:
        if folder.is_dir():
            for path in sorted(folder.glob("*.h")):
                digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def headers_digest(folders: Sequence[Path]) -> str:
    """A digest of the ``*.h`` files directly in ``folders`` (the plugin's own headers: a
    change to ``tilecraft_cuda.h`` is a different build). Recomputed per process."""
    return _headers_digest(tuple(folders))


def build_key(text: str, architecture: str, options: Sequence[str], compiler: str,
              headers: str = "") -> str:
    """The cache key of one build: a hash of everything that changes its output."""
    digest = hashlib.sha256()
    for part in (str(CACHE_VERSION), compiler, architecture, "\0".join(options), headers, text):
        digest.update(part.encode())
        digest.update(b"\1")
    return digest.hexdigest()[:24]


def build_folder(key: str) -> Path:
    """The folder of the build ``key``, created if needed."""
    folder = cache_root() / key[:2] / key
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def read_record(folder: Path) -> dict[str, Any] | None:
    """The build record of ``folder`` when it is complete and readable, else ``None``."""
    try:
        record = json.loads((folder / RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("cache_version") != CACHE_VERSION:
        return None
    files = [record.get("cubin"), record.get("ptx")]
    if not all(isinstance(name, str) and (folder / name).is_file() for name in files):
        return None
    return record


def write_atomically(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file renamed over it."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def write_record(folder: Path, record: dict[str, Any]) -> None:
    write_atomically(folder / RECORD, json.dumps(
        {**record, "cache_version": CACHE_VERSION}, indent=1, sort_keys=True).encode())


__all__ = ["CACHE_DIR_ENV", "build_folder", "build_key", "cache_root", "headers_digest",
           "read_record", "write_atomically", "write_record"]
