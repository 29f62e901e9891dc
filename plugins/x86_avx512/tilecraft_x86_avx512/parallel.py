"""A native parallel-for for the kernels' PARALLEL loop: a small pthread pool built once with gcc.

Python's thread pool wakes its sleeping workers through a condition variable; on a busy or
virtualised machine that costs up to a millisecond per parallel kernel — more than a whole
small GEMM. The shim runs ``entry(args, begin, end)`` on native worker threads, which spin
:data:`SPIN_MICROSECONDS` between calls (``pause`` instructions, the clock read every 256)
before they sleep on a condition variable, so back-to-back kernels (a pack, then the main
kernel) start in microseconds, and so does a network's first kernel when the calls come one
after another. The spin is a time, not a count of ``pause``: one ``pause`` takes ~11 ns on the
Xeon family 6 model 167 these figures come from and ~60 ns (140 cycles) on Sapphire Rapids, so
the 2000 of before were 22 us here, shorter than Python's gap between two calls: the workers
slept and MobileNet-V2's first kernel (the stem's pad) took 0.112 ms on 2 threads, 0.045 with
them spinning (0.076 on 1 thread). One ctypes call releases the GIL for the whole loop. When
gcc is missing, :func:`parallel_for` is ``None`` and the runtime uses its thread pool.

Why not OpenMP (which this shim used before): libgomp spins 300000 ``pause`` iterations after a
region unless ``GOMP_SPINCOUNT`` says otherwise, ~15 ms on Sapphire Rapids (``pause`` ~140
cycles); on a machine shared with other work every parallel kernel of a network then cost
~16 ms however small (BERT-base layer, 42 kernels, 2 threads: 534-908 ms against 176-227 ms with
the spin bounded). The environment variable cannot be relied on: libgomp reads it once, when
loaded, and PyTorch loads its own ``libgomp.so.1`` (same soname, so the dynamic loader hands
the shim that copy) as soon as it is imported.

Regions run one at a time: a second thread launching a region while one runs (several threads
calling one Executable) runs its whole range on itself rather than waiting. Worker ``t`` of a
region of ``threads`` runs the ``t``-th of ``threads`` nearly equal contiguous chunks, as
``split_range`` cuts them; the launching thread runs chunk 0.

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
from collections.abc import Callable, Sequence
from pathlib import Path

#: how long an idle worker spins before it sleeps (the launching thread spins as long, then
#: yields its core, while it waits for the workers)
SPIN_MICROSECONDS = 200

_SOURCE = r"""
#include <stdint.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>
typedef void (*entry_t)(void **, int64_t, int64_t);

#define MAX_WORKERS 255
#define SPIN_NANOSECONDS @SPIN@
#if defined(__x86_64__) || defined(__i386__)
#define PAUSE() __builtin_ia32_pause()
#else
#define PAUSE() ((void)0)
#endif

static pthread_mutex_t busy = PTHREAD_MUTEX_INITIALIZER;  /* one region at a time */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;  /* sleeping workers */
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static int workers;                                       /* started, under busy */
static _Atomic uint64_t generation;                       /* one per region */
static _Atomic int64_t remaining;                         /* workers yet to finish it */
static uint64_t first_seen[MAX_WORKERS + 1];
static entry_t job_fn;
static void **job_args;
static int64_t job_extent;
static int job_threads;

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* whether a spin that began at *start (0: not yet; UINT64_MAX: over) has run its time;
   reads the clock every 256 calls, and stays true once it is */
static int spun_out(uint64_t *start, unsigned *spins) {
    if (*start == UINT64_MAX) return 1;
    if ((++*spins & 255u) != 0) return 0;
    uint64_t t = now_ns();
    if (*start == 0) {
        *start = t;
        return 0;
    }
    if (t - *start < SPIN_NANOSECONDS) return 0;
    *start = UINT64_MAX;
    return 1;
}

/* chunk t of job_threads nearly equal contiguous pieces of [0, job_extent) */
static void run_chunk(int64_t t) {
    int64_t n = job_threads, base = job_extent / n, extra = job_extent % n;
    int64_t begin = t * base + (t < extra ? t : extra);
    int64_t end = begin + base + (t < extra ? 1 : 0);
    if (begin < end) job_fn(job_args, begin, end);
}

static void *worker(void *arg) {
    int t = (int)(intptr_t)arg;
    uint64_t seen = first_seen[t], now;
    for (;;) {
        unsigned spins = 0;
        uint64_t start = 0;
        while ((now = atomic_load_explicit(&generation, memory_order_acquire)) == seen) {
            if (!spun_out(&start, &spins)) {
                PAUSE();
                continue;
            }
            pthread_mutex_lock(&lock);
            while ((now = atomic_load_explicit(&generation, memory_order_acquire)) == seen)
                pthread_cond_wait(&wake, &lock);
            pthread_mutex_unlock(&lock);
            break;
        }
        seen = now;
        if (t < job_threads) run_chunk(t);
        atomic_fetch_sub_explicit(&remaining, 1, memory_order_release);
    }
    return 0;
}

static void forget_workers(void) {  /* a forked child has none of the parent's threads */
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t fresh_cond = PTHREAD_COND_INITIALIZER;
    busy = fresh;
    lock = fresh;
    wake = fresh_cond;
    workers = 0;
}

void tilecraft_parallel_for(entry_t fn, void **args, int64_t extent, int threads) {
    static int registered;
    if (threads > MAX_WORKERS + 1) threads = MAX_WORKERS + 1;
    if (threads < 2 || extent < 2 || pthread_mutex_trylock(&busy) != 0) {
        fn(args, 0, extent);
        return;
    }
    if (!registered) registered = !pthread_atfork(0, 0, forget_workers);
    while (workers < threads - 1) {
        pthread_t thread;
        pthread_attr_t attr;
        int t = workers + 1;
        first_seen[t] = atomic_load(&generation);
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int failed = pthread_create(&thread, &attr, worker, (void *)(intptr_t)t);
        pthread_attr_destroy(&attr);
        if (failed) break;
        workers = t;
    }
    job_fn = fn;
    job_args = args;
    job_extent = extent;
    job_threads = workers + 1 < threads ? workers + 1 : threads;
    atomic_store_explicit(&remaining, workers, memory_order_relaxed);
    pthread_mutex_lock(&lock);
    atomic_fetch_add_explicit(&generation, 1, memory_order_release);
    pthread_cond_broadcast(&wake);
    pthread_mutex_unlock(&lock);
    run_chunk(0);
    unsigned spins = 0;
    uint64_t start = 0;
    while (atomic_load_explicit(&remaining, memory_order_acquire) > 0)
        if (!spun_out(&start, &spins)) PAUSE(); else sched_yield();
    pthread_mutex_unlock(&busy);
}
""".replace("@SPIN@", f"{SPIN_MICROSECONDS * 1000}u")

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
    ``TILECRAFT_X86_NO_OPENMP=1`` (the name from when the shim was OpenMP) forces the pool.
    Built and loaded once per process, under a lock: kernels called from several threads at
    once would otherwise each build it.

    Several threads may run the shim at the same time: one region runs on the workers, the
    others each on their launching thread (checked by tests/test_executable_threads.py)."""
    global _SHIM
    shim = _SHIM
    if shim is _UNSET:
        with _BUILD_LOCK:
            if _SHIM is _UNSET:
                _SHIM = _build()
            shim = _SHIM
    return shim  # type: ignore[return-value]


def build_shim(source: str, stem: str, flags: Sequence[str] = ()) -> ctypes.CDLL | None:
    """The shared library of C ``source`` built with gcc (``-O2 -shared -fPIC`` plus
    ``flags``) into the cache directory under ``stem`` and the source's hash, and loaded; or
    ``None`` when gcc or the loader fails. Each process builds under names of its own and
    renames the result into place, so processes building the same library at once never load
    a half-written file."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    library = _cache_dir() / f"{stem}_{digest}.so"
    if not library.exists():
        unique = f"{os.getpid()}.{threading.get_ident()}"
        written = library.with_suffix(f".{unique}.c")
        partial = library.with_suffix(f".{unique}.tmp")
        try:
            written.write_text(source)
            subprocess.run(["gcc", "-O2", *flags, "-shared", "-fPIC", str(written), "-o",
                            str(partial)], check=True, capture_output=True, timeout=60)
            os.replace(partial, library)
        except (OSError, subprocess.SubprocessError):
            return None
        finally:
            for leftover in (written, partial):
                leftover.unlink(missing_ok=True)
    try:
        return ctypes.CDLL(str(library))
    except OSError:
        return None


def _build() -> ParallelFor | None:
    if os.environ.get("TILECRAFT_X86_NO_OPENMP"):
        return None
    shim = build_shim(_SOURCE, "tilecraft_parallel_pool", ["-pthread"])
    if shim is None:
        return None
    function = shim.tilecraft_parallel_for
    function.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int]
    function.restype = None
    function._keepalive = shim  # type: ignore[attr-defined]
    return function


__all__ = ["parallel_for"]
