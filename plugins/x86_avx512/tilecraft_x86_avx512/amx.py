"""AMX tiles on this host: permission to use them in this process (Linux), and whether the
float32 split path pays here (:func:`amx_split_pays`).

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
import os
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

#: the environment switch of the split path: ``0`` off, ``1`` on whatever the measured rates
SWITCH = "TILECRAFT_X86_AMX"
#: bfloat16 tile products per float32 product on the split path (blocking/amx_split.py)
SPLIT_PRODUCTS = 6
#: how many times the FMA rate the tile unit's rate over SPLIT_PRODUCTS must be for the split
#: path to pay: it reaches 35-55% of the tile peak (L2-bound) against the FMA path's ~75-80%.
#: Measured on two hosts, 1 thread, 512x768x3072 with constant B: tile unit 2.95-3.15 TFLOP/s,
#: FMA 190 GFLOP/s (ratio 2.6): the split path 1.17-1.33x the FMA path's speed; tile unit
#: 1.18 TFLOP/s, FMA 156 (ratio 1.26): 0.65x (31.6 against 20.7 ms). 2.2 keeps a margin
#: above the ~2.1 where the two meet.
MIN_SPLIT_OVER_FMA = 2.2


def amx_split_pays(amx_bf16_flops: float | None, fma_flops: float | None) -> bool:
    """Whether float32 products through bfloat16 tile parts outrun the FMA path on a core
    measured at ``amx_bf16_flops`` (its tile unit) and ``fma_flops``; True when either rate
    is unknown (a named CPU's data, probing off: the CPU's features decide) or when
    ``TILECRAFT_X86_AMX=1`` asks for the path.

    >>> amx_split_pays(3.0e12, 1.9e11), amx_split_pays(1.18e12, 1.56e11)
    (True, False)
    >>> amx_split_pays(None, 1.9e11)
    True
    """
    if amx_bf16_flops is None or fma_flops is None or os.environ.get(SWITCH, "") == "1":
        return True
    return amx_bf16_flops / SPLIT_PRODUCTS >= MIN_SPLIT_OVER_FMA * fma_flops


__all__ = ["MIN_SPLIT_OVER_FMA", "SPLIT_PRODUCTS", "SWITCH", "TILE_MULTIPLY", "amx_permitted",
           "amx_split_pays", "permission_ir"]
