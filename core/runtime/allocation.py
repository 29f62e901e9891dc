"""Refusing allocations that cannot succeed, before making them.

numpy asks the kernel for memory lazily: with Linux's overcommit an ``np.empty`` of more bytes
than the machine has may succeed and the process is killed later, half-way through a kernel;
without it numpy raises its own ``MemoryError``. Either way the caller learns nothing about
which tensor was too large. :func:`check_allocation` compares the bytes a call is about to
allocate with the memory this machine has available and raises an :class:`AllocationError`
naming the largest tensors and their bytes instead.

The limit is ``MemAvailable`` of ``/proc/meminfo`` (free memory plus reclaimable caches; the
physical memory where that file does not exist), or ``TILECRAFT_MEMORY_LIMIT_BYTES`` when set.
Below :data:`CHECK_ABOVE_BYTES` nothing is read: small calls pay nothing.

>>> import numpy as np
>>> check_allocation([("Y", (4, 4), np.dtype("float32"))], "a call")
>>> try:
...     check_allocation([("Y", (1 << 20, 1 << 20), np.dtype("float32"))], "a call")
... except AllocationError as err:
...     print(str(err).split(";")[0])
a call needs 4398046511104 bytes (4.0 TiB) but this machine has only ... available (...)
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence

import numpy as np

from tilecraft.errors import AllocationError

#: calls allocating fewer bytes than this are not checked (reading /proc/meminfo costs ~20 us)
CHECK_ABOVE_BYTES = 256 << 20

#: environment variable overriding the limit (bytes)
LIMIT_VARIABLE = "TILECRAFT_MEMORY_LIMIT_BYTES"

Allocation = tuple[str, Sequence[int], np.dtype]


def tensor_bytes(shape: Sequence[int], dtype: np.dtype | str) -> int:
    """Bytes of a dense array of ``shape`` and ``dtype`` (Python ints: no overflow).

    >>> tensor_bytes((1 << 40, 1 << 40), "float32")
    4835703278458516698824704
    """
    return math.prod(int(n) for n in shape) * np.dtype(dtype).itemsize


def human_bytes(count: int) -> str:
    """``count`` bytes with a binary unit: ``human_bytes(3 << 30) == '3.0 GiB'``."""
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if value < 1024 or unit == "PiB":
            return f"{value:.1f} {unit}" if unit != "B" else f"{count} B"
        value /= 1024
    raise AssertionError("unreachable")


def available_memory_bytes() -> tuple[int, str]:
    """(bytes this process may still allocate, where the figure comes from)."""
    override = os.environ.get(LIMIT_VARIABLE)
    if override:
        try:
            return int(override), LIMIT_VARIABLE
        except ValueError:
            raise AllocationError(f"{LIMIT_VARIABLE}={override!r} is not a whole number of "
                                  "bytes; set it to e.g. 8589934592 or unset it") from None
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024, "MemAvailable in /proc/meminfo"
    except OSError:
        pass
    pages = os.sysconf("SC_PHYS_PAGES") if hasattr(os, "sysconf") else -1
    return max(pages, 0) * os.sysconf("SC_PAGE_SIZE"), "physical memory"


def check_allocation(allocations: Iterable[Allocation], what: str) -> None:
    """Raise an :class:`AllocationError` when ``allocations`` (name, shape, dtype) together
    need more bytes than this machine has available; ``what`` names the allocating step in the
    message (e.g. ``"calling the executable"``)."""
    sized = sorted(((tensor_bytes(shape, dtype), name, tuple(shape), np.dtype(dtype))
                    for name, shape, dtype in allocations), key=lambda item: -item[0])
    total = sum(item[0] for item in sized)
    if total < CHECK_ABOVE_BYTES:
        return
    limit, source = available_memory_bytes()
    if total <= limit:
        return
    largest = ", ".join(f"{name}: {dtype.name}{list(shape)} = {count} bytes"
                        for count, name, shape, dtype in sized[:3])
    more = f" and {len(sized) - 3} more" if len(sized) > 3 else ""
    raise AllocationError(
        f"{what} needs {total} bytes ({human_bytes(total)}) but this machine has only {limit} "
        f"bytes ({human_bytes(limit)}) available ({source}); the largest tensors: {largest}"
        f"{more}. Nothing was allocated: use smaller shapes, split the work, or free memory")
