"""What a compilation decided and measured, per kernel; printed by ``print(exe.report)``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class KernelReport:
    """One kernel: where it came from, how it was scheduled, its source and its timings."""

    name: str
    statement: str
    schedule: str
    language: str
    source_lines: int
    source_bytes: int
    mode: str
    compile_seconds: float
    run_seconds: list[float] = field(default_factory=list)
    #: what the target's build said of the kernel (``Artifact.meta["summary"]``: e.g. registers,
    #: shared memory, spills and occupancy per architecture); empty where nothing was built
    build_summary: str = ""

    @property
    def median_seconds(self) -> float | None:
        if not self.run_seconds:
            return None
        ordered = sorted(self.run_seconds)
        middle = len(ordered) // 2
        if len(ordered) % 2:
            return ordered[middle]
        return 0.5 * (ordered[middle - 1] + ordered[middle])


@dataclass
class Report:
    """The report of an :class:`~tilecraft.runtime.executable.Executable`."""

    target: str
    capability: str
    kernels: list[KernelReport] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: operator x intrinsic pairs that match (``tilecraft.intrin.report.MappingEntry``)
    mappings: list[Any] = field(default_factory=list)

    def kernel(self, name: str) -> KernelReport:
        for entry in self.kernels:
            if entry.name == name:
                return entry
        raise KeyError(name)

    def __str__(self) -> str:
        lines = [f"target {self.target} ({self.capability}), {len(self.kernels)} kernel(s)"]
        header = f"  {'kernel':<18} {'mode':<8} {'source':>14} {'compile':>9} {'median run':>11}"
        lines.append(header)
        for k in self.kernels:
            run = "-" if k.median_seconds is None else _fmt_seconds(k.median_seconds)
            source = f"{k.source_lines} lines"
            lines.append(f"  {k.name:<18} {k.mode:<8} {source:>14} "
                         f"{_fmt_seconds(k.compile_seconds):>9} {run:>11}")
        for k in self.kernels:
            lines.append(f"  {k.name}: {k.statement}")
            lines.append(f"    schedule: {k.schedule}")
            if k.build_summary:
                lines.extend(f"    build: {line}" for line in k.build_summary.splitlines())
        if self.mappings:
            from tilecraft.intrin.report import format_mapping_table

            lines.append("  intrinsic mappings (predicted by the model, measured where a kernel "
                         "was compiled through the mapping; `tilecraft report` for more):")
            lines.append(format_mapping_table(self.mappings, indent="    "))
        lines.extend(f"  note: {note}" for note in self.notes)
        return "\n".join(lines)


def _fmt_seconds(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} us"
