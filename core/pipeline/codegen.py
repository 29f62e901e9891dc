"""Stage 6, codegen: the target's source for every kernel (:meth:`Target.codegen`). The dump
writes each source in a file named after its kernel, with the source's own suffix.

>>> Codegen.name
'codegen'
"""

from __future__ import annotations

import time

from tilecraft.pipeline.state import CompileState, GeneratedSource
from tilecraft.target.base import Source

#: file suffixes of the source languages the installed targets emit (a Source of another
#: language is written with its language as the suffix)
LANGUAGE_SUFFIX = {"llvm-ir": "ll", "cuda": "cu", "opencl": "cl", "hls-cpp": "cpp",
                   "ascendc": "cpp", "text": "txt"}


def source_suffix(source: Source) -> str:
    """The file suffix of ``source``: its own ``suffix`` where it carries one, else the one of
    its language.

    >>> source_suffix(Source("x86_avx512", "k", "llvm-ir", "", "k"))
    'll'
    """
    own = getattr(source, "suffix", None)
    if isinstance(own, str) and own:
        return own.lstrip(".")
    return LANGUAGE_SUFFIX.get(source.language, source.language)


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
