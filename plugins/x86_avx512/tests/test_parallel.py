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
