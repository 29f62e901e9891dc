"""Stage 7, build / load / emulate: each source built and loaded where this machine executes
the target, run by the target's emulator where it emulates (and built as well where the
target's toolchain is here, so the report carries the build's resources), built only where it
can compile but not run, kept as source otherwise.

>>> Build.name
'build'
"""

from __future__ import annotations

import time

from tilecraft.kernel_ir.nodes import Kernel
from tilecraft.pipeline.state import CompileState
from tilecraft.runtime.executable import CompiledKernel, KernelRunner
from tilecraft.runtime.report import KernelReport
from tilecraft.target.base import Artifact, Capability, Source, Target


def make_runner(target: Target, kernel: Kernel, source: Source,
                capability: Capability) -> tuple[KernelRunner | None, str]:
    """How ``kernel`` runs here, and the report's mode (``native``, ``emulated``, ``source``)."""
    runner, mode, _ = build_kernel(target, kernel, source, capability, build=False)
    return runner, mode


def build_kernel(target: Target, kernel: Kernel, source: Source, capability: Capability,
                 build: bool) -> tuple[KernelRunner | None, str, Artifact | None]:
    """:func:`make_runner`, and the build's artifact: built wherever the target runs natively
    or only compiles, and also where it emulates when ``build`` (its toolchain is here)."""
    if capability is Capability.EXECUTE:
        artifact = target.build(source)
        return target.load(artifact), "native", artifact
    if capability is Capability.EMULATE:
        artifact = target.build(source) if build else None
        return target.emulator(kernel, source), "emulated", artifact
    if capability is Capability.COMPILE_ONLY:
        return None, "source", target.build(source)
    return None, "source", None


class Build:
    """Builds and loads (or emulates) every generated source."""

    name = "build"

    def run(self, state: CompileState) -> CompileState:
        capability = state.availability.capability
        builds = state.availability.build
        computes = {tensor.name: tensor for tensor in state.graph.computes}
        lowering = {lowered.compute: lowered.seconds for lowered in state.lowered}
        for item in state.sources:
            kernel, source = item.kernel, item.source
            start = time.perf_counter()
            runner, mode, artifact = build_kernel(state.target, kernel, source, capability,
                                                  builds)
            # the first kernel of a compute also carries the compute's lowering time
            seconds = item.seconds + time.perf_counter() - start + \
                lowering.pop(item.compute, 0.0)
            state.compiled.append(CompiledKernel(kernel, source, runner))
            state.kernel_reports.append(KernelReport(
                name=kernel.name, statement=computes[item.compute].statement(),
                schedule=str(kernel.attrs.get("schedule", "default")),
                language=source.language, source_lines=source.text.count("\n") + 1,
                source_bytes=len(source.text), mode=mode, compile_seconds=seconds,
                build_summary=str(artifact.meta.get("summary", "")) if artifact else ""))
        return state

    def describe(self, state: CompileState) -> str:
        return "\n".join(f"{report.name}: {report.mode}, {report.compile_seconds * 1e3:.1f} ms, "
                         f"schedule {report.schedule}" for report in state.kernel_reports)

