"""A native parallel-for for the kernels' PARALLEL loop: an OpenMP shim built once with gcc.

Python's thread pool wakes its sleeping workers through a condition variable; on a busy or
virtualised machine that costs up to a millisecond per parallel kernel — more than a whole
small GEMM. The shim runs ``entry(args, begin, end)`` on OpenMP threads, which spin a while
between calls before they sleep, so back-to-back kernels (a pack, then the main kernel) start
in microseconds. One ctypes call releases the GIL for the whole loop. When gcc or OpenMP is
missing, :func:`parallel_for` is ``None`` and the runtime uses its thread pool.

>>> import ctypes
>>> fn = parallel_for()
>>> fn is None or callable(fn)
True
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import subprocess
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

_SOURCE = r"""
#include <stdint.h>
#include <omp.h>
typedef void (*entry_t)(void **, int64_t, int64_t);
/* [0, extent) cut into `threads` nearly equal contiguous chunks, as split_range does */
void tilecraft_parallel_for(entry_t fn, void **args, int64_t extent, int threads) {
    #pragma omp parallel num_threads(threads)
    {
        int64_t n = omp_get_num_threads(), t = omp_get_thread_num();
        int64_t base = extent / n, extra = extent % n;
        int64_t begin = t * base + (t < extra ? t : extra);
        int64_t end = begin + base + (t < extra ? 1 : 0);
        if (begin < end) fn(args, begin, end);
    }
}
"""

#: ``fn(entry_address, args, extent, threads)``
ParallelFor = Callable[[int, object, int, int], None]

_UNSET = object()
_SHIM: ParallelFor | None | object = _UNSET  # the loaded entry, None, or not yet tried


def _cache_dir() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    path = Path(root) / "tilecraft"
    try:
        path.mkdir(parents=True, exist_ok=True)
        return path
    except OSError:
        return Path(tempfile.gettempdir())


_BUILD_LOCK = threading.Lock()


def parallel_for() -> ParallelFor | None:
    """The shim's entry, or ``None`` when it cannot be built here (then: the thread pool).
    ``TILECRAFT_X86_NO_OPENMP=1`` forces the pool. Built and loaded once per process, under a
    lock: kernels called from several threads at once would otherwise each build it.

    Several threads may run the shim at the same time: libgomp gives each thread that opens a
    parallel region its own team (checked by tests/test_executable_threads.py)."""
    global _SHIM
    shim = _SHIM
    if shim is _UNSET:
        with _BUILD_LOCK:
            if _SHIM is _UNSET:
                _SHIM = _build()
            shim = _SHIM
    return shim  # type: ignore[return-value]


def _build() -> ParallelFor | None:
    if os.environ.get("TILECRAFT_X86_NO_OPENMP"):
        return None
    digest = hashlib.sha256(_SOURCE.encode()).hexdigest()[:16]
    library = _cache_dir() / f"tilecraft_parallel_{digest}.so"
    if not library.exists():
        # names of this process's own: another process may be building the same library
        unique = f"{os.getpid()}.{threading.get_ident()}"
        source = library.with_suffix(f".{unique}.c")
        partial = library.with_suffix(f".{unique}.tmp")
        try:
            source.write_text(_SOURCE)
            subprocess.run(["gcc", "-O2", "-fopenmp", "-shared", "-fPIC", str(source), "-o",
                            str(partial)], check=True, capture_output=True, timeout=60)
            os.replace(partial, library)
        except (OSError, subprocess.SubprocessError):
            return None
        finally:
            for leftover in (source, partial):
                leftover.unlink(missing_ok=True)
    try:
        shim = ctypes.CDLL(str(library))
    except OSError:
        return None
    function = shim.tilecraft_parallel_for
    function.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int]
    function.restype = None
    function._keepalive = shim  # type: ignore[attr-defined]
    return function


__all__ = ["parallel_for"]
