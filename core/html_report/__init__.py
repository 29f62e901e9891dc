"""``tilecraft report --html``: one self-contained HTML page per compiled network (the optional
extra ``tilecraft[report]`` draws its plots with matplotlib).

The page holds: the graph with its fusion groups coloured (an SVG drawn here,
:mod:`tilecraft.html_report.graph_svg`); per kernel its measured median time, its FLOPs and the
bytes of its operands, the achieved GFLOP/s and GB/s and the fraction of the target's peak;
a roofline plot of the kernels against the target spec's peak rate and memory bandwidths (the
measured figures where the target measured them: ``tilecraft targets --probe``), a PNG
embedded as base64; the fusion, mapping and schedule decisions; and, with a tuning database,
the tuning curves (best GFLOP/s against trials, per compute). Nothing is fetched: no scripts,
no external style sheets or images.

>>> from tilecraft import te
>>> A = te.placeholder((8, 8), name="A")
>>> B = te.compute((8, 8), lambda i, j: te.max(A[i, j], 0.0), name="B")
>>> html = build_report(Graph.from_outputs([B]), "x86_avx512", runs=2)  # doctest: +SKIP
"""

from __future__ import annotations

import base64
import io
import math
import os
import platform
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any

import numpy as np

from tilecraft.errors import InputError
from tilecraft.graph import Graph

__all__ = ["KernelRow", "build_report", "collect_rows", "tuning_curves", "write_report"]


@dataclass
class KernelRow:
    """One kernel of the page's table."""

    name: str
    compute: str
    kind: str
    group: int | None
    seconds: float | None
    flops: int
    bytes: int
    schedule: str

    @property
    def gflops(self) -> float | None:
        return None if not self.seconds or not self.flops else self.flops / self.seconds / 1e9

    @property
    def gbytes_per_s(self) -> float | None:
        return None if not self.seconds else self.bytes / self.seconds / 1e9

    @property
    def intensity(self) -> float | None:
        return None if not self.bytes or not self.flops else self.flops / self.bytes


def _kernel_bytes(kernel: Any) -> int:
    return sum(math.prod(int(s) for s in p.shape) * np.dtype(p.dtype.numpy).itemsize
               for p in kernel.params)


def collect_rows(state: Any) -> list[KernelRow]:
    """Per kernel of a compile state: compute, schedule kind, fusion group, FLOPs, bytes (its
    operands' sizes, once each) and measured median time (from the report's run times)."""
    from tilecraft.runtime.overlap import isolate
    from tilecraft.tuning.workload import flop_count

    group_of = {name: index for index, group in enumerate(
        g for g in state.groups if g.kernels) for name in group.computes}
    groups = [g for g in state.groups if g.kernels]
    tensors = {t.name: t for t in state.graph.computes}
    flops: dict[str, int] = {}

    def compute_flops(name: str) -> int:
        if name not in flops:
            flops[name] = flop_count(isolate(state.graph, tensors[name]))
        return flops[name]

    rows, counted = [], set()
    for item, report in zip(state.sources, state.kernel_reports):
        compute = item.compute
        group = group_of.get(compute)
        members = groups[group].computes if group is not None else [compute]
        # a compute's (a group's) FLOPs go to the kernel writing it, not to a packing kernel;
        # a kernel declaring the operations it does (attrs["flops"]: a Winograd convolution's
        # products and transforms) is credited with those instead
        writes = compute in item.kernel.outputs
        declared = item.kernel.attrs.get("flops")
        if declared is not None:
            work = int(declared)
            if writes:
                counted.add(compute)
        else:
            work = sum(compute_flops(m) for m in members) \
                if writes and compute not in counted else 0
        if work:
            counted.add(compute)
        choice = state.schedules.get(compute)
        kind = "fused" if group is not None else (choice.kind.value if choice else "default")
        rows.append(KernelRow(report.name, compute, kind, group, report.median_seconds, work,
                              _kernel_bytes(item.kernel), report.schedule))
    return rows


def _peaks(spec: Any) -> tuple[float, list[tuple[str, float]]]:
    """Peak float32 FLOP/s of all cores and (level name, bytes/s) per memory level."""
    peak = spec.compute.peak_flops("float32")
    levels = [(level.name, level.bandwidth_bytes_per_cycle * spec.compute.frequency_hz)
              for level in spec.memory.levels if level.bandwidth_bytes_per_cycle]
    return peak, levels


def _png(figure: Any) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(figure)
    return base64.b64encode(buffer.getvalue()).decode()


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise InputError("the HTML report draws its plots with matplotlib: pip install "
                         "'tilecraft[report]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def roofline_png(rows: Sequence[KernelRow], spec: Any) -> str:
    """The kernels (arithmetic intensity, achieved GFLOP/s) under the spec's roofs."""
    plt = _pyplot()
    peak, levels = _peaks(spec)
    points = [r for r in rows if r.gflops and r.intensity]
    figure, axes = plt.subplots(figsize=(8, 5))
    lo = min([r.intensity for r in points] + [0.01]) / 2  # type: ignore[type-var]
    hi = max([r.intensity for r in points] + [100.0]) * 2  # type: ignore[type-var]
    xs = np.logspace(math.log10(lo), math.log10(hi), 200)
    axes.plot(xs, np.full_like(xs, peak / 1e9), color="black", lw=1.5,
              label=f"peak {peak / 1e9:.0f} GFLOP/s (float32, {spec.compute.cores} cores)")
    for name, rate in levels:
        axes.plot(xs, np.minimum(xs * rate, peak) / 1e9, lw=1, ls="--",
                  label=f"{name} {rate / 1e9:.0f} GB/s")
    if points:
        axes.scatter([r.intensity for r in points], [r.gflops for r in points],
                     c=["#cc0000" if r.kind == "fused" else "#1f77b4" for r in points],
                     s=[12 + 60 * (r.seconds or 0) / max(p.seconds or 0 for p in points)
                        for r in points], zorder=3)
        for r in sorted(points, key=lambda r: -(r.seconds or 0))[:6]:
            axes.annotate(r.name, (r.intensity, r.gflops), fontsize=7,
                          xytext=(3, 3), textcoords="offset points")
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel("arithmetic intensity (FLOP per operand byte)")
    axes.set_ylabel("achieved GFLOP/s")
    axes.set_title(f"roofline on {spec.name} (dot size: share of the time)")
    axes.legend(fontsize=7, loc="lower right")
    axes.grid(True, which="both", alpha=0.3)
    return _png(figure)


def tuning_curves(database: str, graph: Graph, target: str
                  ) -> dict[str, list[tuple[int, float]]]:
    """Per compute with records in ``database`` (tuned whole by ``tilecraft tune`` or
    isolated by an overlapped compile): (trial, best GFLOP/s so far), oldest first."""
    from tilecraft.runtime.overlap import isolate
    from tilecraft.tuning.database import TuningDatabase
    from tilecraft.tuning.record import workload_key
    from tilecraft.tuning.workload import describe_graph, flop_count

    curves: dict[str, list[tuple[int, float]]] = {}
    db = TuningDatabase(database)
    try:
        for tensor in graph.computes:
            for program in (Graph.from_outputs([tensor]), isolate(graph, tensor)):
                records = db.records(workload_key(describe_graph(program)), target)
                if not records:
                    continue
                work, best, curve = flop_count(program), math.inf, []
                if not work:
                    break  # data movement only: no GFLOP/s to follow
                for trial, record in enumerate(records, start=1):
                    cost = record.median_cost
                    if cost is not None and record.error_kind is None and cost < best:
                        best = cost
                    if math.isfinite(best):
                        curve.append((trial, work / best / 1e9))
                if curve:
                    curves[tensor.name] = curve
                    break
    finally:
        db.close()
    return curves


def tuning_png(curves: Mapping[str, list[tuple[int, float]]]) -> str:
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(8, 4.5))
    ranked = sorted(curves.items(), key=lambda item: -len(item[1]))[:12]
    for name, curve in ranked:
        axes.step([t for t, _ in curve], [g for _, g in curve], where="post", label=name)
    axes.set_xlabel("trial")
    axes.set_yscale("log")
    axes.set_ylabel("best GFLOP/s so far")
    axes.set_title("tuning curves (best against trials; computes with FLOPs, most trials first)")
    axes.legend(fontsize=7, ncol=2)
    axes.grid(True, alpha=0.3)
    return _png(figure)


def _fmt(value: float | None, unit: str = "", digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}{unit}"


def _time(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds * 1e3:.3f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.1f} us"


_STYLE = """body{font-family:sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ccc;padding:2px 6px}
th{background:#f3f3f3}td.n{text-align:right}.graph{overflow:auto;max-height:900px;
border:1px solid #ddd}pre{background:#f8f8f8;padding:8px;font-size:11px;white-space:pre-wrap}
.swatch{display:inline-block;width:12px;height:12px;border:1px solid #444;margin:0 4px}"""


def render_html(title: str, state: Any, rows: Sequence[KernelRow], total_seconds: float | None,
                roofline: str, curves_png: str | None, runs: int) -> str:
    """The page (see the module docstring)."""
    from tilecraft.html_report.graph_svg import GROUP_COLOURS, KIND_COLOURS, graph_svg

    spec = state.target.spec
    peak, levels = _peaks(spec)
    kinds: dict[str, tuple[str, int | None]] = {}
    groups = [g for g in state.groups if g.kernels]
    for tensor in state.graph.computes:
        group = next((i for i, g in enumerate(groups) if tensor.name in g.computes), None)
        choice = state.schedules.get(tensor.name)
        kinds[tensor.name] = ("fused" if group is not None else
                              choice.kind.value if choice else "default", group)
    tips = {t.name: f"{t.statement()}\n{state.schedules[t.name].describe()}"
            for t in state.graph.computes if t.name in state.schedules}
    legend = " ".join(f'<span class="swatch" style="background:{colour}"></span>{kind}'
                      for kind, colour in KIND_COLOURS.items())
    legend += " " + " ".join(
        f'<span class="swatch" style="background:{GROUP_COLOURS[i % len(GROUP_COLOURS)]}">'
        f'</span>group {i + 1}' for i in range(len(groups)))
    table = ["<table id='kernels'><tr><th>kernel</th><th>compute</th><th>schedule</th>"
             "<th>median time</th><th>share</th><th>MFLOP</th><th>KB</th><th>GFLOP/s</th>"
             "<th>% peak</th><th>GB/s</th><th>FLOP/byte</th></tr>"]
    measured = sum(r.seconds or 0 for r in rows) or None
    for r in rows:
        share = None if not measured or r.seconds is None else 100 * r.seconds / measured
        table.append(
            f"<tr><td>{escape(r.name)}</td><td>{escape(r.compute)}</td>"
            f"<td title='{escape(r.schedule)}'>{escape(r.kind)}</td>"
            f"<td class=n>{_time(r.seconds)}</td><td class=n>{_fmt(share, '%', 1)}</td>"
            f"<td class=n>{r.flops / 1e6:.3f}</td><td class=n>{r.bytes / 1e3:.1f}</td>"
            f"<td class=n>{_fmt(r.gflops)}</td>"
            f"<td class=n>{_fmt(None if r.gflops is None else 100 * r.gflops * 1e9 / peak, '%', 1)}"
            f"</td><td class=n>{_fmt(r.gbytes_per_s)}</td><td class=n>{_fmt(r.intensity)}</td>"
            "</tr>")
    table.append("</table>")
    decisions = [f"passes applied: {', '.join(state.passes_applied) or 'none'}"]
    decisions += [f"fusion group {i + 1}: {' -> '.join(g.computes)}"
                  for i, g in enumerate(groups)]
    decisions += [choice.describe() for choice in state.schedules.values()]
    notes = state.report.notes if state.report is not None else []
    mapping = ""
    if state.mapping_entries:
        from tilecraft.intrin.report import format_mapping_table

        mapping = format_mapping_table(state.mapping_entries)
    figures = ", ".join(f"{name} {rate / 1e9:.0f} GB/s" for name, rate in levels)
    total_flops = sum(r.flops for r in rows)
    curves_html = (f"<img alt='tuning curves' src='data:image/png;base64,{curves_png}'/>"
                   if curves_png else "<p>no tuning database given (<code>--database</code>)"
                   " or no records of these computes in it</p>")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>
<style>{_STYLE}</style></head><body>
<h1>{escape(title)}</h1>
<p>target <b>{escape(spec.name)}</b> ({escape(state.availability.capability.value)}) on
{escape(platform.processor() or platform.machine())}; {len(state.graph.computes)} computes,
{len(rows)} kernels, {len(groups)} fusion groups; whole call median {_time(total_seconds)}
over {runs} runs ({total_flops / 1e6:.2f} MFLOP); peak {peak / 1e9:.1f} GFLOP/s float32,
{escape(figures)}; written {time.strftime('%Y-%m-%d %H:%M:%S')}</p>
<h2>Graph</h2><p>{legend}</p>
<div class="graph" id="graph">{graph_svg(state.graph, kinds, tips)}</div>
<h2>Kernels</h2>{''.join(table)}
<h2>Roofline</h2><img alt="roofline" src="data:image/png;base64,{roofline}"/>
<h2>Tuning</h2>{curves_html}
<h2>Decisions</h2><h3>fusion and schedules</h3><pre>{escape(chr(10).join(decisions))}</pre>
<h3>intrinsic mappings</h3><pre>{escape(mapping or 'none matched')}</pre>
<h3>notes</h3><pre>{escape(chr(10).join(notes) or 'none')}</pre>
</body></html>
"""


def build_report(graph: Graph, target: Any, *, database: str | None = None, runs: int = 10,
                 title: str | None = None, seed: int = 0) -> str:
    """Compile ``graph`` for ``target`` (a name or a Target; with ``database``'s best known
    schedules), run it ``runs`` times on seeded random inputs, and return the page."""
    from tilecraft.api import _resolve_target
    from tilecraft.pipeline import run_pipeline
    from tilecraft.runtime.executable import Executable
    from tilecraft.target.base import Capability

    if runs < 1:
        raise InputError(f"runs={runs}: give at least one run to time the kernels")
    tgt = _resolve_target(target)
    state = run_pipeline(graph, tgt, database=database)
    total = None
    if state.availability.capability in (Capability.EXECUTE, Capability.EMULATE):
        exe = Executable(state.graph, tgt.name, state.compiled, state.report)
        rng = np.random.default_rng(seed)
        arrays = {t.name: (rng.standard_normal(t.shape) if t.dtype.is_float else
                           rng.integers(0, 4, t.shape)).astype(t.dtype.numpy)
                  for t in state.graph.inputs}
        total = exe.benchmark(**arrays, repeat=runs, warmup=1)
    rows = collect_rows(state)
    curves = tuning_curves(database, state.graph, tgt.name) if database else {}
    return render_html(title or f"tilecraft report: {len(state.graph.computes)} computes on "
                       f"{tgt.name}", state, rows, total, roofline_png(rows, tgt.spec),
                       tuning_png(curves) if curves else None, runs)


def write_report(path: str | Path, html: str) -> Path:
    """Write the page atomically (a temporary file renamed: never half written)."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, suffix=".html.tmp")
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(html)
        os.replace(temporary, path)
    except OSError as err:
        raise InputError(f"cannot write the report {path}: {err}; give a writable path to "
                         "--html") from err
    return path
