"""Stage 6, codegen: the target's source for every kernel (:meth:`Target.codegen`). The dump
writes each source in a file named after its kernel, with the source's own suffix.

>>> Codegen.name
'codegen'
"""

from __future__ import annotations

import time

from tilecraft.pipeline.state import CompileState, GeneratedSource
from tilecraft.target.base import Source


def source_suffix(source: Source) -> str:
    """The file suffix of ``source``, which its code generator chose (the core keeps no table
    of languages).

    >>> source_suffix(Source("x86_avx512", "k", "llvm-ir", "", "k", suffix="ll"))
    'll'
    """
    return source.file_suffix


class Codegen:
    """Generates the source of every lowered kernel."""

    name = "codegen"

    def run(self, state: CompileState) -> CompileState:
        for lowered in state.lowered:
            for kernel in lowered.kernels:
                start = time.perf_counter()
                source = state.target.codegen(kernel)
                state.sources.append(GeneratedSource(lowered.compute, kernel, source,
                                                     time.perf_counter() - start))
        return state

    def describe(self, state: CompileState) -> str:
        return "\n".join(f"{item.kernel.name}: {item.source.language}, "
                         f"{item.source.text.count(chr(10)) + 1} lines (entry {item.source.entry})"
                         for item in state.sources)

    def dump_files(self, state: CompileState) -> dict[str, str]:
        """Each kernel's source, as ``<kernel>.<suffix>``."""
        return {f"{item.kernel.name}.{source_suffix(item.source)}": item.source.text
                for item in state.sources}
