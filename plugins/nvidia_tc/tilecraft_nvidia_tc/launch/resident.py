"""Kernels whose data stays in the GPU's memory between them: the ``bind`` / ``chain``
protocol of the Executable (``tilecraft.runtime.executable``) for the driver launcher.

A :class:`DriverLauncher` alone copies every array to the device, launches, copies the outputs
back and frees its buffers: right for one kernel, wasteful for a network, whose intermediates
would cross PCIe twice per kernel. The Executable binds each kernel's fixed arrays once (its
intermediates and workspaces, constants, precomputed packs) and runs consecutive bound kernels
as one chain. :class:`ResidentChain` gives those fixed arrays device memory of their own when
it is made: the host's arrays are covered by as few device allocations as their byte ranges
need (each view of an arena brings the whole arena: the arena of intermediates is mirrored
as one allocation, so the memory plan's reuse holds on the device), and their contents are
uploaded once (constants and packs are then on the device; intermediates are written there by
the kernels). A call
then copies only the arrays passed per call (the network's inputs in, its outputs out) and
the ``shared`` bound arrays that kernels outside the chain also take (in before, out after),
launches every kernel on the default stream with an event between each two, and returns each
kernel's seconds from the events.

>>> regions([(0x1000, 0x1400), (0x1200, 0x1800), (0x2000, 0x2010)])
[(4096, 6144), (8192, 8208)]
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tilecraft.errors import InputError
from tilecraft_nvidia_tc.launch.arguments import check_arrays, pack_arguments
from tilecraft_nvidia_tc.launch.driver import DriverLauncher, _check


def regions(ranges: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """The byte ranges ``[start, end)`` merged where they overlap or touch, in order."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted(ranges):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _owner(array: np.ndarray) -> np.ndarray:
    """The array whose memory ``array`` views (itself if it owns its memory): a view of an
    arena brings the whole arena."""
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array


def _span(array: np.ndarray) -> tuple[int, int]:
    start = array.__array_interface__["data"][0]
    return start, start + array.nbytes


class BoundLaunch:
    """A :class:`DriverLauncher` with the arrays of some parameters fixed; a call passes the
    others' arrays in the order of ``names`` and runs the kernel as the launcher does (copies
    in, launch, copies out). Consecutive bound launches run as a :class:`ResidentChain`."""

    def __init__(self, launcher: DriverLauncher, fixed: Mapping[str, np.ndarray]) -> None:
        buffers = [p.name for p in launcher.parameters if not p.is_scalar]
        unknown = sorted(set(fixed) - set(buffers))
        if unknown:
            raise InputError(f"kernel {launcher.build.kernel_name} has no buffer parameter(s) "
                             f"{', '.join(map(repr, unknown))} to bind; its buffers are "
                             f"{', '.join(buffers)}")
        self.launcher = launcher
        self.fixed = check_arrays(launcher.build.kernel_name,
                                  [p for p in launcher.parameters if p.name in fixed], fixed)
        #: the parameters each call passes arrays for, in this order
        self.names = tuple(name for name in buffers if name not in fixed)

    def __call__(self, arrays: Sequence[np.ndarray]) -> None:
        self.launcher.run({**self.fixed, **self._passed(arrays)})

    def _passed(self, arrays: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
        if len(arrays) != len(self.names):
            raise InputError(f"bound kernel {self.launcher.build.kernel_name} takes "
                             f"{len(self.names)} array(s), for "
                             f"{', '.join(self.names) or 'no parameter'}; got {len(arrays)}")
        return dict(zip(self.names, arrays))

    @staticmethod
    def chain(bounds: Sequence[BoundLaunch],
              shared: frozenset[str] = frozenset()) -> ResidentChain | None:
        """``bounds`` run in order with their data in device memory (module docstring), or
        ``None`` when they do not share one driver."""
        drivers = {id(bound.launcher.driver) for bound in bounds}
        return ResidentChain(bounds, shared) if len(drivers) == 1 else None


class ResidentChain:
    """Bound launches run in order, their fixed arrays in device memory of the chain's own
    (see the module docstring); ``names``: every bound's ``names``, one bound after another.
    One call runs at a time (a lock: the GPU runs one stream's kernels in order anyway)."""

    def __init__(self, bounds: Sequence[BoundLaunch], shared: frozenset[str]) -> None:
        self.bounds = tuple(bounds)
        self.names = tuple(name for bound in self.bounds for name in bound.names)
        self.driver = self.bounds[0].launcher.driver
        self._lock = threading.Lock()
        self.bounds[0].launcher.make_current()
        self._allocations: list[int] = []
        self._events: list[Any] = []
        weakref.finalize(self, _release, self.driver, self._allocations, self._events)
        owners = [_span(_owner(array)) for bound in self.bounds for array in bound.fixed.values()]
        self._regions = []
        for start, end in regions(owners):
            pointer = int(_check(self.driver, self.driver.cuMemAlloc(end - start), "cuMemAlloc"))
            self._allocations.append(pointer)
            _to_device(self.driver, [(start, pointer, end - start)])
            self._regions.append((start, end, pointer))
        #: per bound, its fixed parameters' device pointers
        self._fixed_pointers = [{name: self._device(_span(array)[0])
                                 for name, array in bound.fixed.items()}
                                for bound in self.bounds]
        # the shared bound arrays: (host address, device pointer, bytes), copied in before a
        # call where a kernel reads one, out after it where a kernel writes one
        self._copy_in, self._copy_out = [], []
        for bound, pointers in zip(self.bounds, self._fixed_pointers):
            for parameter in bound.launcher.parameters:
                if parameter.name in shared and parameter.name in bound.fixed:
                    start, end = _span(bound.fixed[parameter.name])
                    item = (start, pointers[parameter.name], end - start)
                    target = self._copy_out if parameter.output else self._copy_in
                    if item not in target:
                        target.append(item)
        # a kernel every array of which is bound (a network's inner kernels) has the same
        # arguments each call: packed once here, not per call
        self._packed = [None if bound.names else pack_arguments(
            bound.launcher.build.kernel_name, bound.launcher.parameters, pointers,
            bound.launcher.scalars) for bound, pointers in zip(self.bounds, self._fixed_pointers)]
        for _ in range(len(self.bounds) + 1):
            self._events.append(_check(self.driver, self.driver.cuEventCreate(0),
                                       "cuEventCreate"))

    def _device(self, address: int) -> int:
        for start, end, pointer in self._regions:
            if start <= address < end or start == address:
                return pointer + address - start
        raise AssertionError(f"host address {address:#x} is in no region")  # pragma: no cover

    def __call__(self, arrays: Sequence[np.ndarray] = ()) -> list[float]:
        """Run every kernel with ``arrays`` for ``names`` (checked: an InputError naming the
        kernel and parameter otherwise); each kernel's seconds, in order."""
        if len(arrays) != len(self.names):
            raise InputError(f"this chain of {len(self.bounds)} kernels takes "
                             f"{len(self.names)} array(s), for "
                             f"{', '.join(self.names) or 'no parameter'}; got {len(arrays)}")
        passed, first = [], 0
        for bound in self.bounds:
            count = len(bound.names)
            given = dict(zip(bound.names, arrays[first:first + count]))
            first += count
            checked = check_arrays(bound.launcher.build.kernel_name,
                                   [p for p in bound.launcher.parameters if p.name in given],
                                   given)
            passed.append(checked)
        with self._lock:
            self.bounds[0].launcher.make_current()
            return self._run(passed)

    def _run(self, passed: Sequence[Mapping[str, np.ndarray]]) -> list[float]:
        driver = self.driver
        buffers: dict[int, tuple[int, np.ndarray]] = {}  # host address -> (device, array)
        read: set[int] = set()
        written: set[int] = set()
        try:
            for bound, given in zip(self.bounds, passed):
                outputs = {p.name for p in bound.launcher.parameters if p.output}
                for name, array in given.items():
                    address = _span(array)[0]
                    if address not in buffers:
                        pointer = int(_check(driver, driver.cuMemAlloc(max(array.nbytes, 1)),
                                             "cuMemAlloc"))
                        buffers[address] = (pointer, array)
                    (written if name in outputs else read).add(address)
            _to_device(driver, [(address, buffers[address][0], buffers[address][1].nbytes)
                                for address in read] + self._copy_in)
            events = self._events
            _check(driver, driver.cuEventRecord(events[0], 0), "cuEventRecord")
            packs = []
            for index, (bound, given) in enumerate(zip(self.bounds, passed)):
                launcher = bound.launcher
                packed = self._packed[index]
                if packed is None:
                    pointers = dict(self._fixed_pointers[index])
                    pointers.update((name, buffers[_span(array)[0]][0])
                                    for name, array in given.items())
                    packed = pack_arguments(launcher.build.kernel_name, launcher.parameters,
                                            pointers, launcher.scalars)
                    packs.append(packed)  # referenced until the launches are done
                launcher._launch_packed(packed)
                _check(driver, driver.cuEventRecord(events[index + 1], 0), "cuEventRecord")
            _check(driver, driver.cuEventSynchronize(events[-1]), "cuEventSynchronize")
            _to_host(driver, [(address, buffers[address][0], buffers[address][1].nbytes)
                              for address in written] + self._copy_out)
            return [float(_check(driver, driver.cuEventElapsedTime(events[k], events[k + 1]),
                                 "cuEventElapsedTime")) / 1e3
                    for k in range(len(self.bounds))]
        finally:
            for pointer, _ in buffers.values():
                driver.cuMemFree(pointer)


def _to_device(driver: Any, copies: Sequence[tuple[int, int, int]]) -> None:
    """Each ``(host address, device pointer, bytes)`` copied host to device."""
    for host, pointer, size in copies:
        _check(driver, driver.cuMemcpyHtoD(pointer, host, size), "cuMemcpyHtoD")


def _to_host(driver: Any, copies: Sequence[tuple[int, int, int]]) -> None:
    """Each ``(host address, device pointer, bytes)`` copied device to host."""
    for host, pointer, size in copies:
        _check(driver, driver.cuMemcpyDtoH(host, pointer, size), "cuMemcpyDtoH")


def _release(driver: Any, allocations: list[int], events: list[Any]) -> None:
    """Free a chain's device memory and events (when it is collected)."""
    for pointer in allocations:
        driver.cuMemFree(pointer)
    for event in events:
        driver.cuEventDestroy(event)


__all__ = ["BoundLaunch", "ResidentChain", "regions"]
