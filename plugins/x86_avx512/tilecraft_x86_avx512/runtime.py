"""Calling compiled kernels: array validation, ctypes calls, parallel chunks on threads, timing.

A compiled kernel's entry is ``void NAME(void **args, int64 begin, int64 end)``. ctypes
``CFUNCTYPE`` calls release the GIL, so chunks of the PARALLEL loop's range submitted to a
persistent thread pool run on all cores at once. Small ranges (little estimated work) and
kernels whose parallel iterations would race run inline in one call.

A NativeKernel keeps no state between calls (the native ``args`` array is built per call),
so several threads may call one at the same time; each then launches its own parallel region
(the native shim runs one region at a time; a thread finding it busy runs its whole range).

An Executable calls each kernel of a network on every call, mostly on the same arrays;
:meth:`NativeKernel.bind` gives it a kernel with those checked once (:mod:`.bound`).

Arrays are checked before any native code runs: each parameter must be present, a numpy
array, C-contiguous, of the declared shape and dtype; written ones must be writeable and must
not overlap another parameter (the generated code assumes ``noalias``). Violations raise
:class:`~tilecraft.errors.InputError` naming the parameter and the fix — never a segfault.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import statistics
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from tilecraft.dtypes import DType
from tilecraft.errors import InputError, TargetError
from tilecraft.runtime.aligned import data_address
from tilecraft_x86_avx512.parallel import parallel_for

if TYPE_CHECKING:
    from tilecraft_x86_avx512.bound import BoundKernel

#: below this many estimated element updates a kernel runs on the calling thread only
PARALLEL_MIN_WORK = 1 << 15

ENTRY_PROTOTYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)
#: a cdecl function pointer without argument types: called with ctypes objects of the exact C
#: types (prebuilt once), it converts nothing per call — ~0.25 us a call against ~0.5 us
#: through ENTRY_PROTOTYPE's per-argument conversions
_BARE_PROTOTYPE = ctypes.CFUNCTYPE(None)

#: a fresh number each time any kernel's thread count is set (a KernelChain built under
#: another number launches anew); ``next`` on a count is atomic, so no change is missed
_THREAD_COUNTER = itertools.count(1)
_THREAD_CHANGES = [0]

_POOL_LOCK = threading.Lock()
_POOL: ThreadPoolExecutor | None = None
_POOL_SIZE = 0
_IN_WORKER = threading.local()


def _mark_worker() -> None:
    _IN_WORKER.active = True


def thread_pool(workers: int) -> ThreadPoolExecutor:
    """The process-wide pool for kernel chunks (replaced by a larger one when more workers
    are asked for).

    A replaced pool is not shut down: another thread may be about to submit its chunks to
    it (kernels are called from several threads at once), and a shut-down pool refuses them.
    Its idle threads stay parked; pools grow only up to the largest thread count asked for.
    """
    global _POOL, _POOL_SIZE
    with _POOL_LOCK:
        if _POOL is None or _POOL_SIZE < workers:
            _POOL = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tilecraft-x86",
                                       initializer=_mark_worker)
            _POOL_SIZE = workers
        return _POOL


def split_range(extent: int, chunks: int) -> list[tuple[int, int]]:
    """``[0, extent)`` cut into ``chunks`` contiguous pieces of nearly equal size.

    >>> split_range(10, 3)
    [(0, 4), (4, 7), (7, 10)]
    """
    chunks = max(1, min(chunks, extent))
    base, extra = divmod(extent, chunks)
    bounds, start = [], 0
    for k in range(chunks):
        stop = start + base + (1 if k < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


class NativeKernel:
    """A kernel's machine code, loaded (the :class:`~tilecraft.target.base.KernelFunction`
    protocol): call it with a mapping from parameter name to numpy array; outputs are written
    in place. (The runtime's :class:`~tilecraft.runtime.executable.CompiledKernel` holds one as
    its runner, next to the kernel and its source.)

    Every call checks every array. The common case (exact ``np.ndarray``, the declared dtype
    object, shape, C-contiguous, writeable where written) is tested in one expression per
    parameter against data computed once here; anything else takes the detailed checks, which
    accept what they always accepted (ndarray subclasses, equal dtypes) and raise the
    :class:`InputError` naming the culprit otherwise.
    """

    def __init__(self, meta: Mapping[str, Any], entry: Callable[..., None], threads: int,
                 keepalive: Any = None) -> None:
        self.name: str = meta["kernel"]
        self.meta = dict(meta)
        self._entry = entry
        self._address = ctypes.cast(entry, ctypes.c_void_p).value if isinstance(
            entry, ctypes._CFuncPtr) else None
        self._keepalive = keepalive  # the JIT engine or shared library owning the code
        self._threads = max(1, threads)
        self._params = [(p["name"], tuple(int(n) for n in p["shape"]), DType.parse(p["dtype"]))
                        for p in meta["params"]]
        self._numpy_dtypes = [dtype.numpy for _, _, dtype in self._params]
        self._pointer_array = ctypes.c_void_p * max(1, len(self._params))
        self._written = set(meta.get("written", meta.get("outputs", ())))
        #: per parameter: (name, shape, numpy dtype, written?) — the fast path's whole input
        self._checks = tuple((name, shape, numpy_dtype, name in self._written)
                             for (name, shape, _), numpy_dtype
                             in zip(self._params, self._numpy_dtypes))
        self._written_indices = tuple(k for k, (name, _, _) in enumerate(self._params)
                                      if name in self._written)
        self._extent: int | None = meta.get("parallel_extent")
        self._parallel = bool(meta.get("parallel_safe")) and self._extent is not None \
            and int(meta.get("work", 0)) >= PARALLEL_MIN_WORK
        self._bare = None if self._address is None else ctypes.cast(self._address,
                                                                     _BARE_PROTOTYPE)
        self._range = (ctypes.c_int64(0), ctypes.c_int64(self._extent or 0))

    @property
    def threads(self) -> int:
        """Threads a parallel region of this kernel uses (settable)."""
        return self._threads

    @threads.setter
    def threads(self, threads: int) -> None:
        self._threads = max(1, int(threads))
        _THREAD_CHANGES[0] = next(_THREAD_COUNTER)  # chains rebuild their launches

    def __repr__(self) -> str:
        params = ", ".join(f"{name}: {dtype.value}{list(shape)}"
                           for name, shape, dtype in self._params)
        return f"<x86_avx512 kernel {self.name}({params})>"

    # validation ------------------------------------------------------------------------------
    def check_arrays(self, arrays: Mapping[str, Any]) -> list[np.ndarray]:
        """The arrays in parameter order, after checking them (InputError otherwise)."""
        ordered = self._checked(arrays)
        self._check_overlaps(ordered, [data_address(array) for array in ordered])
        return ordered

    def _checked(self, arrays: Mapping[str, Any]) -> list[np.ndarray]:
        """The arrays in parameter order, each checked (overlaps are checked separately)."""
        if type(arrays) is not dict and not isinstance(arrays, Mapping):
            raise InputError(f"kernel {self.name} takes a mapping from parameter name to numpy "
                             f"array, got {type(arrays).__name__}")
        ordered = []
        for name, shape, numpy_dtype, written in self._checks:
            array = arrays.get(name)
            if type(array) is not np.ndarray or array.dtype is not numpy_dtype \
                    or array.shape != shape or not array.flags.c_contiguous \
                    or (written and not array.flags.writeable):
                array = self._check_one(name, array)
            ordered.append(array)
        return ordered

    def _check_one(self, name: str, array: Any) -> np.ndarray:
        """The detailed checks of one parameter's array (the fast path's test failed)."""
        k = next(k for k, (n, _, _) in enumerate(self._params) if n == name)
        _, shape, dtype = self._params[k]
        if array is None:
            raise InputError(f"kernel {self.name}: parameter {name!r} ("
                             f"{dtype.value}{list(shape)}) is missing; pass arrays for "
                             f"{', '.join(n for n, _, _ in self._params)}")
        if not isinstance(array, np.ndarray):
            raise InputError(f"kernel {self.name}: parameter {name!r} must be a numpy array "
                             f"({dtype.value}{list(shape)}), got {type(array).__name__}; "
                             "wrap it with np.asarray")
        if array.dtype != self._numpy_dtypes[k]:
            raise InputError(f"kernel {self.name}: parameter {name!r} must have dtype "
                             f"{dtype.value}, got {array.dtype}; convert it with "
                             f".astype(...)")
        if tuple(array.shape) != shape:
            raise InputError(f"kernel {self.name}: parameter {name!r} must have shape "
                             f"{list(shape)}, got {list(array.shape)}")
        if not array.flags.c_contiguous:
            raise InputError(f"kernel {self.name}: parameter {name!r} is not C-contiguous; "
                             "pass np.ascontiguousarray(array)")
        if name in self._written and not array.flags.writeable:
            raise InputError(f"kernel {self.name}: parameter {name!r} is written but its "
                             "array is read-only; pass a writeable array")
        return array

    def _check_overlaps(self, ordered: Sequence[np.ndarray], addresses: Sequence[int]) -> None:
        """No written array may share memory with another parameter's array. The arrays are
        C-contiguous, so each occupies exactly ``[address, address + nbytes)``; intersecting
        those ranges is what ``np.may_share_memory`` does, without its per-pair call cost."""
        for k in self._written_indices:
            size = ordered[k].nbytes
            if not size:
                continue
            begin, end = addresses[k], addresses[k] + size
            for j, other in enumerate(ordered):
                other_size = other.nbytes
                if j != k and other_size and addresses[j] < end \
                        and begin < addresses[j] + other_size:
                    name, other_name = self._params[k][0], self._params[j][0]
                    raise InputError(
                        f"kernel {self.name}: the array of {name!r}, which the kernel writes, "
                        f"overlaps the array of {other_name!r}; pass separate arrays (copy one)")

    def _arguments(self, arrays: Mapping[str, Any]) -> tuple[list[np.ndarray], Any]:
        """The checked arrays (keep them referenced while the kernel runs) and the native
        ``void **args`` array pointing at their data."""
        ordered = self._checked(arrays)
        addresses = [data_address(array) for array in ordered]
        self._check_overlaps(ordered, addresses)
        return ordered, self._pointer_array(*addresses)

    # calling ---------------------------------------------------------------------------------
    def __call__(self, arrays: Mapping[str, np.ndarray]) -> None:
        ordered, args = self._arguments(arrays)  # ordered: referenced until every chunk has run
        self._run(args)
        del ordered

    def _run(self, args: Any) -> None:
        extent = self._extent
        if extent is None or not self._parallel or self.threads == 1 or extent < 2 \
                or getattr(_IN_WORKER, "active", False):
            if self._bare is not None:
                self._bare(args, *self._range)
            else:
                self._entry(args, 0, extent or 0)
            return
        native = parallel_for() if self._address is not None else None
        if native is not None:
            native(self._address, args, extent, min(self.threads, extent))
            return
        chunks = split_range(extent, self.threads)
        pool = thread_pool(self.threads)
        futures = [pool.submit(self._entry, args, begin, end) for begin, end in chunks[1:]]
        begin, end = chunks[0]
        self._entry(args, begin, end)
        for future in futures:
            future.result()

    def run_range(self, arrays: Mapping[str, np.ndarray], begin: int, end: int) -> None:
        """Run only ``[begin, end)`` of the PARALLEL loop on the calling thread."""
        ordered, args = self._arguments(arrays)
        self._entry(args, begin, end)
        del ordered

    def launcher(self, args: Any) -> Callable[[], None]:
        """A call without arguments that runs the kernel on the native ``args`` array as
        :meth:`_run` would at the kernel's present thread count (ctypes objects built once)."""
        extent = self._extent
        if extent is None or not self._parallel or self.threads == 1 or extent < 2:
            if self._bare is not None:
                return partial(self._bare, args, *self._range)
        else:
            native = parallel_for() if self._address is not None else None
            if native is not None:
                bare = _bare_shim(native)
                return partial(bare, ctypes.c_void_p(self._address), args,
                               ctypes.c_long(extent), ctypes.c_int(min(self.threads, extent)))
        return partial(self._run, args)  # Python's thread pool, or an entry without address

    def bind(self, fixed: Mapping[str, np.ndarray]) -> BoundKernel:
        """This kernel with the arrays of ``fixed`` (some of its parameters) checked now and
        their pointers filled in; the returned :class:`BoundKernel` takes the other
        parameters' arrays (its ``names``, in order) per call. The fixed arrays must keep
        their data where it is while the BoundKernel is used (it keeps them referenced)."""
        from tilecraft_x86_avx512.bound import BoundKernel  # it builds on this module

        return BoundKernel(self, fixed)


def _bare_shim(native: Callable[..., None]) -> Callable[..., None]:
    """The parallel shim's function without argument conversions (see ``_BARE_PROTOTYPE``)."""
    global _BARE_SHIM
    if _BARE_SHIM is None or _BARE_SHIM[0] is not native:
        _BARE_SHIM = (native, ctypes.cast(ctypes.cast(native, ctypes.c_void_p).value,
                                          _BARE_PROTOTYPE))
    return _BARE_SHIM[1]


_BARE_SHIM: tuple[Callable[..., None], Callable[..., None]] | None = None


def default_threads() -> int:
    """Threads for parallel chunks: ``TILECRAFT_X86_THREADS`` or the usable cores."""
    value = os.environ.get("TILECRAFT_X86_THREADS")
    if value:
        try:
            threads = int(value)
        except ValueError:
            raise TargetError(f"TILECRAFT_X86_THREADS={value!r} is not an integer; set it to "
                              "a thread count such as 2") from None
        if threads < 1:
            raise TargetError(f"TILECRAFT_X86_THREADS={threads} must be at least 1")
        return threads
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def time_kernel(fn: Callable[[Mapping[str, np.ndarray]], None],
                arrays: Mapping[str, np.ndarray], repeat: int = 10,
                warmup: int = 1) -> list[float]:
    """Wall-clock seconds of ``repeat`` calls of ``fn(arrays)`` after ``warmup`` calls.
    Report the median (``statistics.median``); the spread on a shared machine is large.

    >>> times = time_kernel(lambda arrays: None, {}, repeat=3)
    >>> len(times), all(t >= 0 for t in times)
    (3, True)
    """
    if repeat < 1:
        raise InputError(f"time_kernel: repeat={repeat} must be at least 1")
    for _ in range(warmup):
        fn(arrays)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn(arrays)
        times.append(time.perf_counter() - start)
    return times


def median_seconds(times: Sequence[float]) -> float:
    return float(statistics.median(times))
