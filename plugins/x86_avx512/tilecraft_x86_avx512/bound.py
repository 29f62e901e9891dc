"""Kernels with some arrays bound once, and chains of them run by one native call.

An Executable calls each kernel of a network on every call, mostly on the same arrays (its
intermediates and workspaces live in one arena per concurrently running call).
:meth:`~tilecraft_x86_avx512.runtime.NativeKernel.bind` checks the arrays that stay fixed once
and fills their pointers into a native ``args`` array; a call of the :class:`BoundKernel` then
checks and points at only the others (a network's input and fresh outputs): about 0.5 us a
kernel against ~6 us through ``NativeKernel.__call__`` (pure Python cost of MobileNet-V2's 65
kernels: 475 -> 90 us a call). Consecutive bound kernels run as one :class:`KernelChain`: one
native call runs and times them all (:mod:`.sequence`), so no Python runs between them.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from tilecraft.errors import InputError
from tilecraft_x86_avx512 import runtime
from tilecraft_x86_avx512.runtime import NativeKernel, data_address
from tilecraft_x86_avx512.sequence import Step, run_steps


class BoundKernel:
    """A :class:`NativeKernel` with some parameters' arrays fixed: those were checked (types,
    shapes, dtypes, contiguity, writeability, overlaps among them) when bound and their
    pointers sit in a prebuilt native ``args`` array. A call passes the other parameters'
    arrays in the order of ``names``; each is checked as ``NativeKernel.__call__`` checks it,
    with the overlap test against every other parameter, and raises the same
    :class:`InputError` naming the parameter. A call changes nothing in the object (one with
    arrays to pass gets a fresh ``args`` array), so several threads may call one at once.
    For instance ``bound = kernel.bind({"W": packed})`` of a kernel ``(A, W, C)`` has
    ``bound.names == ("A", "C")`` and runs as ``bound([a, c])``.
    """

    def __init__(self, kernel: NativeKernel, fixed: Mapping[str, np.ndarray]) -> None:
        params = [name for name, _, _ in kernel._params]
        unknown = sorted(set(fixed) - set(params))
        if unknown:
            raise InputError(f"kernel {kernel.name} has no parameter(s) "
                             f"{', '.join(map(repr, unknown))} to bind; its parameters are "
                             f"{', '.join(params)}")
        self.kernel = kernel
        #: the parameters each call passes arrays for, in this order
        self.names = tuple(name for name in params if name not in fixed)
        checks = kernel._checks
        self._fixed = [kernel._check_one(name, fixed[name]) if name in fixed else None
                       for name, _, _, _ in checks]  # referenced while bound
        self._addresses = [0 if array is None else data_address(array)
                           for array in self._fixed]
        self._varying = tuple((k, *checks[k]) for k, array in enumerate(self._fixed)
                              if array is None)
        sizes = [int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
                 for _, shape, dtype, _ in checks]
        # written parameter k against every other j: pairs between fixed arrays now, pairs
        # with a passed array on each call (by the ranges their checked shapes give)
        pairs = [(k, j) for k in kernel._written_indices for j in range(len(checks))
                 if j != k and sizes[k] and sizes[j]]
        self._sizes = sizes
        self._pairs = tuple((k, j) for k, j in pairs
                            if self._fixed[k] is None or self._fixed[j] is None)
        self._overlap(self._addresses, [(k, j) for k, j in pairs if (k, j) not in self._pairs])
        self._threads = kernel.threads
        self._args = kernel._pointer_array(*self._addresses)
        # only a kernel with every array bound launches on this array (the others' pointers
        # in it are null until a call fills a copy)
        self._launch = None if self._varying else kernel.launcher(self._args)

    def __call__(self, arrays: Sequence[np.ndarray]) -> None:
        """Run the kernel with ``arrays`` for ``names`` (checked; InputError otherwise)."""
        kernel = self.kernel
        if not self._varying:
            if arrays:
                self._count(arrays)
            if kernel.threads != self._threads:  # set since binding: launch at the new count
                self._threads = kernel.threads
                self._launch = kernel.launcher(self._args)
            self._launch()
            return
        kernel.launcher(self.pointers(arrays))()  # ``arrays`` referenced till done

    def pointers(self, arrays: Sequence[np.ndarray]) -> Any:
        """The native ``void **args`` array of a call with ``arrays`` for ``names``, checked as
        a call checks them (InputError otherwise); the caller keeps ``arrays`` referenced while
        a kernel runs on it."""
        return self.kernel._pointer_array(*self._checked_addresses(arrays))

    def point(self, args: Any, arrays: Sequence[np.ndarray]) -> None:
        """Write the pointers of ``arrays`` (for ``names``, checked as :meth:`pointers` checks
        them) into ``args``, an ``args`` array of this kernel whose other entries are the bound
        arrays' (one :meth:`pointers` made); nothing is written when a check fails."""
        addresses = self._checked_addresses(arrays)
        for k, *_ in self._varying:
            args[k] = addresses[k]

    def _checked_addresses(self, arrays: Sequence[np.ndarray]) -> list[int]:
        """Every parameter's address with ``arrays`` for ``names``, after the checks."""
        if len(arrays) != len(self._varying):
            self._count(arrays)
        kernel = self.kernel
        addresses = self._addresses.copy()
        for array, (k, name, shape, numpy_dtype, written) in zip(arrays, self._varying):
            if type(array) is not np.ndarray or array.dtype is not numpy_dtype \
                    or array.shape != shape or not array.flags.c_contiguous \
                    or (written and not array.flags.writeable):
                kernel._check_one(name, array)  # raises, naming the parameter
            addresses[k] = data_address(array)
        self._overlap(addresses, self._pairs)
        return addresses

    @staticmethod
    def chain(bounds: Sequence[BoundKernel],
              shared: frozenset[str] = frozenset()) -> KernelChain | None:
        """``bounds`` run in order by one native call, or ``None`` where that cannot be done
        here (no gcc; a kernel without a native address). The chain takes the arrays of each
        bound's ``names``, one after another (its ``names``). ``shared`` (the bound arrays
        other kernels take too) needs nothing here: the kernels work in the host's memory."""
        if run_steps() is None or runtime.parallel_for() is None \
                or any(bound.kernel._address is None for bound in bounds):
            return None
        return KernelChain(bounds)

    def _count(self, arrays: Sequence[Any]) -> None:
        if len(arrays) != len(self._varying):
            raise InputError(f"bound kernel {self.kernel.name} takes {len(self._varying)} "
                             f"array(s), for {', '.join(self.names) or 'no parameter'}; got "
                             f"{len(arrays)}")

    def _overlap(self, addresses: Sequence[int], pairs: Sequence[tuple[int, int]]) -> None:
        """No written parameter ``k`` may share bytes with ``j``, for each pair ``(k, j)``."""
        sizes = self._sizes
        for k, j in pairs:
            if addresses[j] < addresses[k] + sizes[k] and addresses[k] < addresses[j] + sizes[j]:
                params = self.kernel._params
                raise InputError(
                    f"kernel {self.kernel.name}: the array of {params[k][0]!r}, which the kernel "
                    f"writes, overlaps the array of {params[j][0]!r}; pass separate arrays "
                    "(copy one)")


class KernelChain:
    """Bound kernels run in order by one native call (the C loop of
    :mod:`~tilecraft_x86_avx512.sequence`); a call passes the arrays of each bound's ``names``,
    one bound after the other (``names``: all of them), and returns each kernel's seconds.
    A network's input kernel and output kernel join the chain this way. A call that finds the
    chain idle (its lock taken without waiting) writes their per-call pointers into the
    chain's own steps and pointer arrays; a call made while another runs gets copies of them
    (its own steps, pointer arrays and array of seconds), so several threads may call one chain
    at once. The copies are what the idle path saves: made right after the previous call's
    kernels left Python's data out of the caches, they took ~45 us of MobileNet-V2's call at
    2 threads (Xeon family 6 model 167).
    """

    def __init__(self, bounds: Sequence[BoundKernel]) -> None:
        self.bounds = tuple(bounds)
        self.names = tuple(name for bound in self.bounds for name in bound.names)
        #: (step index, bound, its first array's index in a call's arrays) per bound that
        #: takes arrays per call
        self._varying: tuple[tuple[int, BoundKernel, int], ...] = ()
        first = 0
        for index, bound in enumerate(self.bounds):
            if bound._varying:
                self._varying += ((index, bound, first),)
                first += len(bound._varying)
        self._count = ctypes.c_int64(len(self.bounds))
        self._steps = Step * max(1, len(self.bounds))
        self._seconds = ctypes.c_double * max(1, len(self.bounds))
        self._lock = threading.Lock()  # held by the call using the chain's own arrays
        self._launches = self._build()

    def _build(self) -> _Launches:
        """The steps at the kernels' present thread counts (as :meth:`NativeKernel._run`
        launches them), the parallel shim's address, and the chain's own arrays."""
        version = runtime._THREAD_CHANGES[0]
        steps = self._steps()
        for step, bound in zip(steps, self.bounds):
            kernel = bound.kernel
            extent = kernel._extent
            parallel = not (extent is None or not kernel._parallel or kernel.threads == 1
                            or extent < 2)
            step.fn = kernel._address
            step.args = ctypes.addressof(bound._args)
            step.extent = extent or 0
            step.threads = min(kernel.threads, extent) if parallel else 1
        native = runtime.parallel_for()
        shim = ctypes.c_void_p(ctypes.cast(native, ctypes.c_void_p).value if native else None)
        own_steps, own_args = self._point_copies(steps)
        return _Launches(version, steps, shim, own_steps, own_args, self._seconds())

    def _point_copies(self, steps: Any) -> tuple[Any, tuple[Any, ...]]:
        """A copy of ``steps`` whose kernels taking arrays per call point at their own
        pointer arrays (the bound arrays' pointers filled in), and those arrays."""
        copied = self._steps.from_buffer_copy(steps)
        args = []
        for index, bound, _ in self._varying:
            pointers = bound.kernel._pointer_array(*bound._addresses)
            copied[index].args = ctypes.addressof(pointers)
            args.append(pointers)
        return copied, tuple(args)

    def __call__(self, arrays: Sequence[np.ndarray] = ()) -> list[float]:
        """Run every kernel on the bound arrays and ``arrays`` (for ``names``, checked:
        InputError naming the kernel and parameter otherwise); their seconds, in order."""
        launches = self._launches
        if launches.version != runtime._THREAD_CHANGES[0]:  # a thread count was set since
            launches = self._launches = self._build()
        if (self._varying or arrays) and len(arrays) != len(self.names):
            raise InputError(f"this chain of {len(self.bounds)} kernels takes "
                             f"{len(self.names)} array(s), for "
                             f"{', '.join(self.names) or 'no parameter'}; got {len(arrays)}")
        lock = self._lock
        if lock.acquire(blocking=False):
            try:
                return self._run(launches.steps_own, launches.args_own, launches.seconds_own,
                                 arrays, launches.shim)
            finally:
                lock.release()
        steps, args = self._point_copies(launches.steps)  # another call runs: copies
        return self._run(steps, args, self._seconds(), arrays, launches.shim)

    def _run(self, steps: Any, args: Sequence[Any], seconds: Any,
             arrays: Sequence[np.ndarray], shim: ctypes.c_void_p) -> list[float]:
        for (_, bound, first), pointers in zip(self._varying, args):
            bound.point(pointers, arrays[first:first + len(bound._varying)])
        run_steps()(steps, self._count, shim, seconds)  # type: ignore[misc]
        return seconds[:len(self.bounds)]


class _Launches(NamedTuple):
    """What :meth:`KernelChain._build` prepares: ``version`` (the thread-count change it was
    built at), ``steps`` (pointing at the bounds' own ``args``), ``shim``, and the chain's own
    arrays for a call that finds it idle (``steps_own``, ``args_own``, ``seconds_own``)."""

    version: int
    steps: Any
    shim: ctypes.c_void_p
    steps_own: Any
    args_own: tuple[Any, ...]
    seconds_own: Any


__all__ = ["BoundKernel", "KernelChain"]
