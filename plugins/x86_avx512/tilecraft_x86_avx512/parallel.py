"""A native parallel-for for the kernels' PARALLEL loop: an OpenMP shim built once with gcc.

Python's thread pool wakes its sleeping workers through a condition variable; on a busy or
virtualised machine that costs up to a millisecond per parallel kernel — more than a whole
small GEMM. The shim runs ``entry(args, begin, end)`` on OpenMP threads, which spin a while
between calls before they sleep, so back-to-back kernels (a pack, then the main kernel) start
in microseconds. One ctypes call releases the GIL for the whole loop. When gcc or OpenMP is
missing, :func:`parallel_for` is ``None`` and the runtime uses its thread pool.

How long the threads spin is bounded (:data:`SPIN_COUNT`, unless the user set
``GOMP_SPINCOUNT`` or ``OMP_WAIT_POLICY``): libgomp's default, 300000 ``pause`` iterations, is
~15 ms on Sapphire Rapids (``pause`` ~140 cycles). On a machine shared with other work every
parallel kernel of a network then cost ~16 ms however small (a BERT-base layer, 42 kernels,
2 threads: 520-700 ms against 230-270 ms on one thread): the spinning workers use up their
time slices and the scheduler leaves the next region's barrier waiting for them. Bounded,
the same layer took 137-275 ms (2-core Xeon, load 5-6; bench/bench_networks.py).

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

#: ``GOMP_SPINCOUNT`` set before libgomp loads: ~0.5 ms of spinning on Sapphire Rapids, still
#: far more than the few microseconds of Python between two kernels of a network
SPIN_COUNT = 10000

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
    _bound_spinning()
    try:
        shim = ctypes.CDLL(str(library))
    except OSError:
        return None
    function = shim.tilecraft_parallel_for
    function.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int]
    function.restype = None
    function._keepalive = shim  # type: ignore[attr-defined]
    return function


def _bound_spinning() -> None:
    """Set ``GOMP_SPINCOUNT`` to :data:`SPIN_COUNT` before libgomp is loaded (it reads its
    environment once, when loaded), unless the user chose a wait policy or a spin count, or
    libgomp is already in this process (then its settings stand)."""
    if "GOMP_SPINCOUNT" in os.environ or "OMP_WAIT_POLICY" in os.environ:
        return
    try:
        with open("/proc/self/maps") as maps:
            if "libgomp" in maps.read():
                return
    except OSError:
        pass
    os.environ["GOMP_SPINCOUNT"] = str(SPIN_COUNT)


__all__ = ["parallel_for"]
