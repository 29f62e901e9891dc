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
