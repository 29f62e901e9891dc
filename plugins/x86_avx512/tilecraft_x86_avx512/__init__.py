"""tilecraft target plugin for x86-64 CPUs with AVX-512.

Kernel IR is compiled to LLVM IR (:mod:`.codegen`), JIT-compiled or linked into a shared
library through llvmlite (:mod:`.build`), and called through ctypes with the PARALLEL loop split
across threads (:mod:`.runtime`); ``x86_avx512:<cpu>`` compiles for a named CPU
(:mod:`.cpus`), ahead of time where this host cannot run its code. Discovery loads
:func:`make_target` from the entry point group ``tilecraft.targets``; nothing heavy happens on
import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tilecraft_x86_avx512.target import X86Avx512Target

__version__ = "0.1.0"


def make_target(cpu: str | None = None) -> X86Avx512Target:
    """Entry point of the ``tilecraft.targets`` group: the x86_avx512 target object for this
    machine, or for the named ``cpu`` (see :mod:`.cpus`; the registry asks for one through
    ``Target.with_variant`` when given ``x86_avx512:<cpu>``)."""
    from tilecraft_x86_avx512.target import X86Avx512Target

    return X86Avx512Target(cpu=cpu)


__all__ = ["__version__", "make_target"]
