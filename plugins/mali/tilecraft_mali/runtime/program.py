"""Building an OpenCL C program for the device of :mod:`.device`, once per source text.

Each source is written to the plugin's cache folder (``$TILECRAFT_MALI_CACHE_DIR``, else
``~/.cache/tilecraft/mali``, else the temporary folder) under its hash, so that a build error
can name a file to reproduce it with: the :class:`OpenCLBuildError` carries the compiler's log,
that path and the command ``python -m tilecraft_mali.runtime.program FILE``. Built programs are
kept for the process (and pyopencl keeps binaries on disk), so a kernel builds once.
"""

from __future__ import annotations

import functools
import hashlib
import os
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tilecraft.errors import BuildError, TargetError
from tilecraft_mali.codegen.memory import check_local_bytes
from tilecraft_mali.runtime.device import DeviceInfo, find_device

__all__ = ["BuiltProgram", "OpenCLBuildError", "build_program", "cache_dir"]

CACHE_DIR_ENV = "TILECRAFT_MALI_CACHE_DIR"


class OpenCLBuildError(BuildError):
    """The device's compiler rejected a generated program (the message has its log)."""


@functools.cache
def cache_dir() -> Path:
    """The folder generated sources are written to (module docstring), created if needed."""
    explicit = os.environ.get(CACHE_DIR_ENV)
    candidates = [Path(explicit)] if explicit else [Path.home() / ".cache" / "tilecraft" / "mali"]
    candidates.append(Path(tempfile.gettempdir()) / f"tilecraft-{os.getuid()}" / "mali")
    for folder in candidates:
        try:
            folder.mkdir(parents=True, exist_ok=True)
            return folder
        except OSError:
            continue
    raise TargetError(f"mali: no writable cache folder among {[str(c) for c in candidates]}; "
                      f"set {CACHE_DIR_ENV}")


@dataclass(frozen=True)
class BuiltProgram:
    """A program built for ``device``, with the path of its source."""

    program: Any
    path: Path
    device: DeviceInfo


def _device() -> DeviceInfo:
    device = find_device()
    if not device.usable:
        raise TargetError(f"mali cannot build OpenCL C here: {device.reason}")
    return device


@functools.lru_cache(maxsize=512)
def _build(text: str, kernel_name: str) -> BuiltProgram:
    import pyopencl as cl

    device = _device()
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    path = cache_dir() / f"{kernel_name}-{digest}.cl"
    if not path.exists():
        path.write_text(text, encoding="utf-8")
    try:
        program = cl.Program(device.context, text).build(options=["-cl-std=CL1.2"])
    except cl.Error as err:
        log = getattr(err, "what", None)
        detail = log.what() if log is not None and hasattr(log, "what") else str(err)
        raise OpenCLBuildError(
            f"kernel {kernel_name}: the OpenCL C compiler of {device.name!r} rejected the "
            f"generated program {path}:\n{detail.strip()}\nreproduce with: "
            f"python -m tilecraft_mali.runtime.program {path}") from None
    return BuiltProgram(program, path, device)


def build_program(text: str, kernel_name: str, local_bytes: int = 0,
                  work_group: Sequence[int] = (1, 1, 1)) -> BuiltProgram:
    """``text`` built for this process' device (module docstring); a CodegenError names the
    kernel, limit and value when its ``__local`` memory or work-group exceeds the device."""
    device = _device()
    check_local_bytes(kernel_name, local_bytes, device.local_mem_bytes,
                      f"CL_DEVICE_LOCAL_MEM_SIZE of {device.name!r}")
    items = 1
    for extent in work_group:
        items *= int(extent)
    if items > device.max_work_group_size:
        raise TargetError(f"kernel {kernel_name}: work-groups of {items} work-items exceed "
                          f"CL_DEVICE_MAX_WORK_GROUP_SIZE {device.max_work_group_size} of "
                          f"{device.name!r}; bind fewer iterations to local_id axes")
    return _build(text, kernel_name)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tilecraft_mali.runtime.program FILE.cl``: build one file as the target
    does; print the compiler's log and exit 1 when it fails."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m tilecraft_mali.runtime.program FILE.cl", file=sys.stderr)
        return 2
    path = Path(args[0])
    try:
        built = build_program(path.read_text(encoding="utf-8"), path.stem)
    except (OSError, BuildError, TargetError) as err:
        print(err, file=sys.stderr)
        return 1
    print(f"built {path} for {built.device.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
