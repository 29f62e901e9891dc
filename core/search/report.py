"""Schedule-space sizes per operator (thesis §4.4.1 speaks of spaces "usually above 10^11").

>>> from tilecraft import te
>>> from tilecraft.target.spec import load_spec
>>> spec = load_spec({
...     "name": "toy", "api_version": 1, "version": "0",
...     "memory": {"levels": [{"name": "DRAM", "size_bytes": None,
...                            "bandwidth_bytes_per_cycle": 8, "kind": "dram"}]},
...     "compute": {"cores": 1, "frequency_hz": 1e9, "vector_bits": 0},
...     "primitives": ["split", "reorder"], "loop_kinds": ["serial"],
...     "evaluation": "estimate", "capabilities": {"models_performance": True}})
>>> A = te.placeholder((8, 6), name="A")
>>> B = te.compute((8, 6), lambda i, j: A[i, j] * 2.0, name="B")
>>> report = space_report(B, spec, levels=2)
>>> report.sizes, report.total
({'split.i': 4, 'split.j': 4, 'reorder.spatial': 2}, 32)
>>> print(report)
B on toy: 32 points
  split.i          4  split 8 into 2 (divisible), 4 choices
  split.j          4  split 6 into 2 (divisible), 4 choices
  reorder.spatial  2  reorder i j, 2 choices
  fixed: fuse_parallel=0, unroll=0, vectorize=False, inline={}, cache_write=None
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tilecraft.graph import Graph
from tilecraft.search.analysis import OperatorAnalysis
from tilecraft.search.generate import generate_space
from tilecraft.target.spec import TargetSpec
from tilecraft.te.tensor import Tensor

__all__ = ["SpaceReport", "catalog_space_reports", "format_reports", "space_report"]


@dataclass(frozen=True)
class SpaceReport:
    """The size of an operator's schedule space on a target, per sub-space and in total."""

    operator: str
    target: str
    sizes: dict[str, int]
    descriptions: dict[str, str]
    total: int
    fixed: dict[str, Any]
    notes: tuple[str, ...]

    def __str__(self) -> str:
        lines = [f"{self.operator} on {self.target}: {self.total} points"]
        width = max((len(name) for name in self.sizes), default=0)
        digits = max((len(str(size)) for size in self.sizes.values()), default=0)
        for name, size in self.sizes.items():
            lines.append(f"  {name:<{width}}  {size:>{digits}}  {self.descriptions[name]}")
        shown = {k: v for k, v in self.fixed.items() if not k.startswith(("split.", "reorder."))}
        if shown:
            lines.append("  fixed: " + ", ".join(f"{k}={v!r}" for k, v in shown.items()))
        lines.extend(f"  note: {note}" for note in self.notes)
        return "\n".join(lines)


def space_report(program: OperatorAnalysis | Graph | Tensor, spec: TargetSpec,
                 **options: Any) -> SpaceReport:
    """The :class:`SpaceReport` of ``program`` on ``spec`` (``options`` go to
    :func:`~tilecraft.search.generate.generate_space`)."""
    space = generate_space(program, spec, **options)
    return SpaceReport(
        operator=space.name.split("@", 1)[0], target=spec.name, sizes=space.sizes,
        descriptions={name: sub.describe() for name, sub in space.subspaces.items()},
        total=space.size, fixed=dict(space.fixed), notes=space.notes)


def catalog_space_reports(spec: TargetSpec, cases: Iterable[Any] | None = None,
                          **options: Any) -> list[tuple[str, SpaceReport]]:
    """``(case id, report)`` for each operator-catalog case (the standard set by default)."""
    from tilecraft.ops import catalog

    chosen = catalog.standard_set() if cases is None else list(cases)
    reports = []
    for case in chosen:
        graph, _ = case.build()
        reports.append((case.id, space_report(graph, spec, **options)))
    return reports


def format_reports(reports: Iterable[tuple[str, SpaceReport]]) -> str:
    """A table: one line per operator, its total size and its sub-space sizes."""
    rows = [(name, f"{report.total:.3g}" if report.total >= 10**6 else str(report.total),
             " ".join(f"{k}={v}" for k, v in report.sizes.items()))
            for name, report in reports]
    width = max((len(row[0]) for row in rows), default=0)
    digits = max((len(row[1]) for row in rows), default=0)
    return "\n".join(f"{name:<{width}}  {total:>{digits}}  {detail}"
                     for name, total, detail in rows)
