"""The two CUDA C compilers a build can use, one function each with the same shape:
``(text, file name, architecture, include folders, work folder) -> CompiledCode``.

- :func:`compile_with_nvrtc`: NVRTC through ``cuda.bindings.nvrtc`` (pip, no system CUDA),
  once per architecture: ``--gpu-architecture=sm_XX`` gives the cubin and its PTX together;
  ``--ptxas-options=--verbose`` puts ptxas' resource report in the log, and ``--no-cache``
  (NVRTC 12.9 on) keeps NVRTC's own cache out of it: where a CUDA driver is installed, NVRTC
  13.0 answers a source it compiled before (in any process) from that cache without running
  ptxas, and the log comes back empty (seen on an H200 machine; NVIDIA/Fuser PR 4694 met the
  same). The plugin caches builds itself (``cache.py``), with the report in the record.
- :func:`compile_with_nvcc`: ``nvcc -cubin`` and ``nvcc -ptx`` (with ``-Xptxas -v``) where
  ``nvcc`` is on PATH.

A rejected source raises :class:`CompileFailure` with the compiler's log; the caller turns it
into a :class:`~tilecraft.errors.BuildError` with the file and the repro command.

>>> nvcc_command(Path("k.cu"), "sm_90", (Path("/inc"),), "cubin", Path("k.cubin"))[:4]
['nvcc', '-cubin', '-arch=sm_90', '-std=c++17']
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tilecraft_nvidia_tc.toolchain.tools import (
    ToolMissing,
    nvcc_path,
    nvrtc,
    nvrtc_version_numbers,
)

#: options every build passes besides the architecture and the include folders
COMMON_OPTIONS = ("-std=c++17",)


@dataclass(frozen=True)
class CompiledCode:
    """The PTX text, the cubin bytes and the compiler's log of one architecture."""

    ptx: str
    cubin: bytes
    log: str


class CompileFailure(Exception):
    """The compiler rejected the source; ``log`` is its output."""

    def __init__(self, log: str) -> None:
        super().__init__(log)
        self.log = log


#: the first NVRTC with a cache of its own, and the option that turns it off
NVRTC_CACHE_SINCE = (12, 9)
NVRTC_NO_CACHE = "--no-cache"


def nvrtc_options(architecture: str, include_dirs: Sequence[Path],
                  version: tuple[int, int] | None = None) -> list[str]:
    """NVRTC's options for one architecture (what :func:`compile_with_nvrtc` passes);
    ``version`` is NVRTC's (major, minor), read from the library when not given.

    >>> nvrtc_options("sm_90", (), version=(13, 0))
    ['--gpu-architecture=sm_90', '-std=c++17', '--ptxas-options=--verbose', '--no-cache']
    >>> nvrtc_options("sm_80", (), version=(12, 4))[-1]
    '--ptxas-options=--verbose'
    """
    if version is None:
        version = nvrtc_version_numbers()
    no_cache = [NVRTC_NO_CACHE] if version >= NVRTC_CACHE_SINCE else []
    return [f"--gpu-architecture={architecture}", *COMMON_OPTIONS,
            "--ptxas-options=--verbose", *no_cache, *(f"-I{folder}" for folder in include_dirs)]


def _text(buffer: bytes | bytearray) -> str:
    return bytes(buffer).rstrip(b"\0").decode("utf-8", errors="replace")


def compile_with_nvrtc(text: str, file_name: str, architecture: str,
                       include_dirs: Sequence[Path]) -> CompiledCode:
    """Compile ``text`` for ``architecture`` with NVRTC (module docstring)."""
    module = nvrtc()
    success = module.nvrtcResult.NVRTC_SUCCESS
    status, program = module.nvrtcCreateProgram(text.encode(), file_name.encode(), 0, [], [])
    if status != success:
        raise ToolMissing(f"nvrtcCreateProgram failed: {status}")
    try:
        options = [option.encode() for option in nvrtc_options(architecture, include_dirs)]
        (compiled,) = module.nvrtcCompileProgram(program, len(options), options)
        _status, size = module.nvrtcGetProgramLogSize(program)
        # NVRTC writes into the buffers it is given: each must be a fresh, mutable one.
        # ``b" " * 1`` is CPython's shared one-byte singleton, and an empty log (its size
        # is 1) would turn every ``b" "`` of the process into ``b"\0"``; Python 3.12 then
        # compiles the later-imported modules' f-strings without their spaces.
        log_buffer = bytearray(size)
        module.nvrtcGetProgramLog(program, log_buffer)
        log = _text(log_buffer)
        if compiled != success:
            raise CompileFailure(log or str(compiled))
        _status, size = module.nvrtcGetPTXSize(program)
        ptx = bytearray(size)
        module.nvrtcGetPTX(program, ptx)
        _status, size = module.nvrtcGetCUBINSize(program)
        cubin = bytearray(size)
        (got,) = module.nvrtcGetCUBIN(program, cubin)
        if got != success or size == 0:
            raise CompileFailure(f"{log}\nNVRTC produced no cubin for {architecture} ({got})")
        return CompiledCode(ptx=_text(ptx), cubin=bytes(cubin), log=log)
    finally:
        module.nvrtcDestroyProgram(program)


def nvcc_command(source: Path, architecture: str, include_dirs: Sequence[Path], kind: str,
                 output: Path, nvcc: str = "nvcc") -> list[str]:
    """The nvcc command line that builds ``kind`` (``cubin`` or ``ptx``) of ``source``."""
    return [nvcc, f"-{kind}", f"-arch={architecture}", *COMMON_OPTIONS, "-Xptxas", "-v",
            *(f"-I{folder}" for folder in include_dirs), str(source), "-o", str(output)]


def compile_with_nvcc(source: Path, architecture: str, include_dirs: Sequence[Path],
                      folder: Path) -> CompiledCode:
    """Compile the file ``source`` for ``architecture`` with nvcc into ``folder``."""
    path = nvcc_path()
    if path is None:
        raise ToolMissing("nvcc is not on PATH; use the NVRTC compiler (the default)")
    outputs = {}
    logs = []
    for kind in ("cubin", "ptx"):
        output = folder / f"{source.stem}.{kind}.nvcc-out"
        command = nvcc_command(source, architecture, include_dirs, kind, output, str(path))
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=600,
                                  check=False)
        except (OSError, subprocess.TimeoutExpired) as err:
            raise CompileFailure(f"{path} could not run: {err}") from err
        logs.append(done.stdout + done.stderr)
        if done.returncode != 0:
            raise CompileFailure("".join(logs))
        outputs[kind] = output.read_bytes()
        output.unlink()
    return CompiledCode(ptx=outputs["ptx"].decode(), cubin=outputs["cubin"],
                        log="".join(logs))


__all__ = ["COMMON_OPTIONS", "CompileFailure", "CompiledCode", "compile_with_nvcc",
           "compile_with_nvrtc", "nvcc_command", "nvrtc_options"]
