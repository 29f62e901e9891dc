"""Permission to use AMX tiles in this process (Linux).

Linux gives a process the AMX tile state (8 KiB per thread) only when it asks: before the
first tile instruction, ``arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)``; a tile
instruction before that is killed with SIGILL. The permission is process-wide and asked for
once, here, before a kernel that uses tiles is loaded.

>>> isinstance(amx_permitted(), bool)
True
"""

from __future__ import annotations

import ctypes
import functools
import platform
import sys

from tilecraft.errors import TargetError

#: ``arch_prctl`` (x86-64 syscall 158) and its request for an extended state component
_SYS_ARCH_PRCTL = 158
_ARCH_REQ_XCOMP_PERM = 0x1023
_XFEATURE_XTILEDATA = 18


@functools.cache
def amx_permitted() -> bool:
    """Whether this process may use AMX tiles: Linux on x86-64 granted the tile state (asked
    for once per process)."""
    if sys.platform != "linux" or platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.syscall(_SYS_ARCH_PRCTL, _ARCH_REQ_XCOMP_PERM, _XFEATURE_XTILEDATA) == 0


def require_amx(what: str) -> None:
    """Raise a :class:`TargetError` naming ``what`` when this process cannot use AMX tiles."""
    if not amx_permitted():
        raise TargetError(f"{what} uses AMX tiles, but the kernel refused this process the tile "
                          "state (arch_prctl ARCH_REQ_XCOMP_PERM; Linux >= 5.16 on a CPU with "
                          "AMX); compile with TILECRAFT_X86_AMX=0 to use the AVX-512 "
                          "micro-kernels instead")


__all__ = ["amx_permitted", "require_amx"]
