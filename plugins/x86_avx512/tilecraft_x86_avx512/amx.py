"""Permission to use AMX tiles in this process (Linux).

Linux gives a process the AMX tile state (8 KiB per thread) only when it asks: before the
first tile instruction, ``arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)``; a tile
instruction before that is killed with SIGILL. The permission is process-wide and asked for
once, here, before a kernel that uses tiles is loaded; an exported shared library asks in a
constructor of its own (:func:`permission_ir`).

>>> isinstance(amx_permitted(), bool)
True
"""

from __future__ import annotations

import ctypes
import functools
import platform
import sys

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


def permission_ir() -> str:
    """LLVM IR of a module whose constructor asks Linux for the tile state when a shared
    library holding it is loaded: a C program calling exported kernels that use AMX tiles
    needs no call of its own (a refusal leaves the request unanswered; the kernels would then
    fault, as they would have anyway)."""
    return ("declare i64 @syscall(i64, ...)\n\n"
            "define internal void @tilecraft.amx.permission() nounwind {\n"
            f"entry:\n  %granted = call i64 (i64, ...) @syscall(i64 {_SYS_ARCH_PRCTL}, "
            f"i64 {_ARCH_REQ_XCOMP_PERM}, i64 {_XFEATURE_XTILEDATA})\n  ret void\n}}\n\n"
            "@llvm.global_ctors = appending global [1 x { i32, ptr, ptr }] "
            "[{ i32, ptr, ptr } { i32 65535, ptr @tilecraft.amx.permission, ptr null }]\n")


#: an instruction only code using AMX tiles contains (to find it in generated IR)
TILE_MULTIPLY = "llvm.x86.tdpbf16ps"


__all__ = ["TILE_MULTIPLY", "amx_permitted", "permission_ir"]
