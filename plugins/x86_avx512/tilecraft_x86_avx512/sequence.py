"""Running several bound kernels in one native call, timing each (a small C loop built once with
gcc, like the parallel shim).

An Executable runs a network's kernels one after another; between two of them Python ran its
loop, two clock reads and a list append — a few microseconds a kernel once the kernels have
pushed the interpreter's data out of the caches (MobileNet-V2 at 1 thread: the timers alone
cost ~0.2 ms of a 8.6 ms call). ``tilecraft_run_steps`` runs a list of ``(entry, args, extent,
threads)`` steps in order — inline, or through the parallel shim when ``threads > 1`` — and
writes each step's seconds into an array; one ctypes call, the GIL released once.

A step's seconds are time-stamp counter ticks from its start to the next one's, scaled so that
the steps add up to the loop's ``CLOCK_MONOTONIC`` time (two clock reads a call, no frequency
to calibrate). A ``clock_gettime`` between two kernels read a vDSO page the kernels had pushed
out of the caches: one clock read a step instead of ``rdtsc``, same process alternating,
MobileNet-V2 at 2 threads took 3.738 against 3.710 ms (Xeon family 6 model 167). Where there is
no time-stamp counter (not x86), the steps read the clock.

When gcc is missing, :func:`run_steps` is ``None`` and kernels run one call each.

>>> fn = run_steps()
>>> fn is None or callable(fn)
True
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable

from tilecraft_x86_avx512.parallel import build_shim

_SOURCE = r"""
#include <stdint.h>
#include <time.h>
typedef void (*entry_t)(void **, int64_t, int64_t);
typedef void (*parallel_t)(entry_t, void **, int64_t, int);
typedef struct { entry_t fn; void **args; int64_t extent; int64_t threads; } step_t;

static double now_seconds(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec + 1e-9 * (double)now.tv_nsec;
}
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#define TICKS() ((double)__rdtsc())
#else
#define TICKS() now_seconds()   /* no time-stamp counter: the clock's seconds are the ticks */
#endif

void tilecraft_run_steps(const step_t *steps, int64_t count, parallel_t parallel,
                         double *seconds) {
    double wall = now_seconds(), start = TICKS(), first = start;
    for (int64_t i = 0; i < count; ++i) {
        const step_t *step = &steps[i];
        if (step->threads > 1 && parallel)
            parallel(step->fn, step->args, step->extent, (int)step->threads);
        else
            step->fn(step->args, 0, step->extent);
        double stop = TICKS();
        seconds[i] = stop - start;
        start = stop;
    }
    /* the ticks between kernels, scaled so that they add up to the loop's wall time */
    double ticks = start - first, scale = ticks > 0 ? (now_seconds() - wall) / ticks : 0;
    for (int64_t i = 0; i < count; ++i)
        seconds[i] *= scale;
}
"""


class Step(ctypes.Structure):
    """One kernel launch: ``fn(args, 0, extent)`` inline, or the parallel shim's region of
    ``threads`` over ``[0, extent)``."""

    _fields_ = [("fn", ctypes.c_void_p), ("args", ctypes.c_void_p),
                ("extent", ctypes.c_int64), ("threads", ctypes.c_int64)]


#: ``fn(steps, count, parallel_for_address, seconds)``
RunSteps = Callable[[object, int, object, object], None]

_UNSET = object()
_RUNNER: RunSteps | None | object = _UNSET
_BUILD_LOCK = threading.Lock()


def run_steps() -> RunSteps | None:
    """The C loop's entry, or ``None`` when it cannot be built here. Built and loaded once
    per process, under a lock."""
    global _RUNNER
    runner = _RUNNER
    if runner is _UNSET:
        with _BUILD_LOCK:
            if _RUNNER is _UNSET:
                _RUNNER = _build()
            runner = _RUNNER
    return runner  # type: ignore[return-value]


def _build() -> RunSteps | None:
    shared = build_shim(_SOURCE, "tilecraft_run_steps")
    if shared is None:
        return None
    function = shared.tilecraft_run_steps
    # no argtypes: called with ctypes objects of the exact C types, converted by nothing
    function.restype = None
    function._keepalive = shared  # type: ignore[attr-defined]
    return function


__all__ = ["Step", "run_steps"]
