"""Where the CUDA tools are: NVRTC and the CUDA headers from pip, ``cuobjdump`` from pip or
PATH, ``nvcc`` on PATH, and the plugin's own include folder (``tilecraft_cuda.h``).

The pip wheels (``nvidia-cuda-nvrtc``, ``nvidia-cuda-crt``, ``nvidia-cuda-runtime``,
``nvidia-cuda-cuobjdump``) install under ``site-packages/nvidia/cu13`` (``include/``,
``bin/cuobjdump``, ``lib/libnvrtc.so.13``); no system CUDA is needed. ``<stdint.h>`` is not
available under NVRTC, so generated code must not include it.

>>> plugin_include_dir().name
'include'
"""

from __future__ import annotations

import functools
import shutil
from importlib.resources import files
from pathlib import Path
from types import ModuleType

#: the pip layouts of the CUDA wheels, newest first
_PIP_CUDA_ROOTS = ("cu13", "cu12")


class ToolMissing(Exception):
    """A tool cannot be used here; the message says why (never leaves the build package)."""


def plugin_include_dir() -> Path:
    """The plugin's include folder: ``tilecraft_cuda.h`` and the emulation header."""
    return Path(str(files("tilecraft_nvidia_tc") / "include"))


@functools.cache
def pip_cuda_root() -> Path | None:
    """``site-packages/nvidia/cu13`` (or ``cu12``) where the CUDA wheels put their files."""
    try:
        import nvidia
    except ImportError:
        return None
    for base in getattr(nvidia, "__path__", ()):
        for name in _PIP_CUDA_ROOTS:
            root = Path(base) / name
            if (root / "include").is_dir():
                return root
    return None


def cuda_include_dir() -> Path | None:
    """The CUDA headers (``cuda_fp16.h``, ``mma.h`` with ``crt/mma.h``) from pip, else from
    a system CUDA next to ``nvcc``; ``None`` when there are none."""
    root = pip_cuda_root()
    if root is not None and (root / "include" / "cuda_fp16.h").is_file():
        return root / "include"
    nvcc = nvcc_path()
    if nvcc is not None:
        system = nvcc.resolve().parent.parent / "include"
        if (system / "cuda_fp16.h").is_file():
            return system
    return None


def include_dirs() -> tuple[Path, ...]:
    """Include folders every build passes: the plugin's, then the CUDA headers."""
    cuda = cuda_include_dir()
    return (plugin_include_dir(),) + ((cuda,) if cuda is not None else ())


def cuobjdump_path() -> Path | None:
    """``cuobjdump`` from the pip wheel, else from PATH."""
    root = pip_cuda_root()
    if root is not None and (root / "bin" / "cuobjdump").is_file():
        return root / "bin" / "cuobjdump"
    found = shutil.which("cuobjdump")
    return Path(found) if found else None


def nvcc_path() -> Path | None:
    """``nvcc`` on PATH, if any."""
    found = shutil.which("nvcc")
    return Path(found) if found else None


@functools.cache
def nvrtc() -> ModuleType:
    """``cuda.bindings.nvrtc`` with its library loaded (:class:`ToolMissing` saying why
    not). Checked by asking NVRTC its version, which loads ``libnvrtc``."""
    try:
        from cuda.bindings import nvrtc as module
    except ImportError as err:
        raise ToolMissing(f"cuda.bindings.nvrtc cannot be imported ({err}); install the "
                          "plugin's dependencies: pip install cuda-python "
                          "nvidia-cuda-nvrtc") from err
    try:
        status, _major, _minor = module.nvrtcVersion()
    except Exception as err:  # noqa: BLE001 - the binding raises its loader's own errors
        raise ToolMissing(f"libnvrtc cannot be loaded ({type(err).__name__}: {err}); pip "
                          "install nvidia-cuda-nvrtc") from err
    if status != module.nvrtcResult.NVRTC_SUCCESS:
        raise ToolMissing(f"nvrtcVersion failed: {status}")
    return module


def nvrtc_version() -> str:
    """``"nvrtc 13.5"`` (a :class:`ToolMissing` where NVRTC cannot be loaded)."""
    major, minor = nvrtc_version_numbers()
    return f"nvrtc {major}.{minor}"


@functools.cache
def nvrtc_version_numbers() -> tuple[int, int]:
    """NVRTC's (major, minor) (a :class:`ToolMissing` where NVRTC cannot be loaded)."""
    _status, major, minor = nvrtc().nvrtcVersion()
    return int(major), int(minor)


@functools.cache
def nvcc_version() -> str:
    """``"nvcc 13.0.88"`` from ``nvcc --version`` (a :class:`ToolMissing` without nvcc)."""
    import re
    import subprocess

    path = nvcc_path()
    if path is None:
        raise ToolMissing("nvcc is not on PATH")
    try:
        out = subprocess.run([str(path), "--version"], capture_output=True, text=True,
                             timeout=60, check=False).stdout
    except (OSError, subprocess.TimeoutExpired) as err:
        raise ToolMissing(f"{path} --version failed: {err}") from err
    match = re.search(r"V(\d+\.\d+\.\d+)", out)
    return f"nvcc {match.group(1) if match else 'unknown'}"


__all__ = ["ToolMissing", "cuda_include_dir", "cuobjdump_path", "include_dirs", "nvcc_path",
           "nvcc_version", "nvrtc", "nvrtc_version",
           "nvrtc_version_numbers", "pip_cuda_root", "plugin_include_dir"]
