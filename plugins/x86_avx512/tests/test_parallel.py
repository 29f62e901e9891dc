"""The OpenMP parallel-for shim splits the PARALLEL range like the thread pool would."""

import ctypes
import threading

import pytest
from tilecraft_x86_avx512.parallel import parallel_for
from tilecraft_x86_avx512.runtime import ENTRY_PROTOTYPE, split_range


@pytest.mark.parametrize("extent, threads", [(1, 2), (7, 2), (10, 3), (64, 2), (5, 8)])
def test_shim_covers_the_range_once(extent, threads):
    shim = parallel_for()
    if shim is None:
        pytest.skip("gcc with OpenMP is not available: the runtime uses its thread pool")
    seen, lock = [], threading.Lock()

    def record(args, begin, end):
        with lock:
            seen.append((begin, end))

    callback = ENTRY_PROTOTYPE(record)
    shim(ctypes.cast(callback, ctypes.c_void_p).value, None, extent, min(threads, extent))
    assert sorted(seen) == split_range(extent, min(threads, extent))


def test_a_template_gemm_without_zero_fill_runs_on_every_thread():
    """A GEMM's kernel is all micro-kernel calls (its tiles' first slice writes C: no
    zero-fill stores): the work estimate counts the calls, so the parallel loop is threaded
    (92083a6 left it on one thread: 2 threads ran no faster than 1)."""
    import numpy as np
    from tilecraft_x86_avx512.runtime import PARALLEL_MIN_WORK
    from tilecraft_x86_avx512.target import X86Avx512Target

    import tilecraft as tc
    from tilecraft import ops, te

    rng = np.random.default_rng(0)
    x = te.placeholder((97, 130), name="x")
    w = te.constant(rng.standard_normal((130, 70)).astype(np.float32), name="w")
    exe = tc.compile(ops.matmul(x, w, name="mm"), target=X86Avx512Target(threads=2))
    (main,) = [c for c in exe.compiled if c.kernel.name == "mm"]
    assert main.source.meta["work"] >= PARALLEL_MIN_WORK
    assert main.runner._parallel
    a = rng.standard_normal((97, 130)).astype(np.float32)
    np.testing.assert_allclose(exe(a), a @ w.constant_value, rtol=1e-4, atol=1e-4)


def _other_threads_cpu_ticks() -> int:
    """User + system clock ticks of this process's threads other than the calling one."""
    import os
    import threading as _threading

    me = _threading.get_native_id()
    ticks = 0
    for tid in os.listdir("/proc/self/task"):
        if int(tid) == me:
            continue
        try:
            with open(f"/proc/self/task/{tid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:   # the thread ended meanwhile
            continue
        ticks += int(fields[11]) + int(fields[12])   # utime, stime
    return ticks


def test_idle_workers_sleep_after_their_spin():
    """After a region the workers spin SPIN_MICROSECONDS (a time, not a count of pause), then
    sleep: over the next 300 ms they take (almost) no CPU — a spin that never ended, or one
    counted in pause instructions on a machine with a slow pause, would take all of it."""
    import os
    import time

    from tilecraft_x86_avx512.parallel import SPIN_MICROSECONDS

    shim = parallel_for()
    if shim is None or not os.path.isdir("/proc/self/task"):
        pytest.skip("no native shim, or no /proc to read thread times from")
    assert SPIN_MICROSECONDS <= 1000
    callback = ENTRY_PROTOTYPE(lambda args, begin, end: None)
    shim(ctypes.cast(callback, ctypes.c_void_p).value, None, 2, 2)
    time.sleep(0.01)   # past the spin
    before = _other_threads_cpu_ticks()
    time.sleep(0.3)
    ticks_per_second = os.sysconf("SC_CLK_TCK")
    assert _other_threads_cpu_ticks() - before <= 0.05 * ticks_per_second
