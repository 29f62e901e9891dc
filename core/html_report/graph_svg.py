"""The compiled graph as an SVG drawing, without graphviz: computes in rows by depth (the
longest path from the inputs), producer-to-consumer edges, each fusion group in its own colour
and the other computes coloured by how they were scheduled; hovering a box shows its
statement and schedule.

>>> from tilecraft import te
>>> from tilecraft.graph import Graph
>>> A = te.placeholder((4,), name="A")
>>> B = te.compute((4,), lambda i: A[i] * 2.0, name="B")
>>> svg = graph_svg(Graph.from_outputs([B]), {"B": ("template", None)})
>>> svg.startswith("<svg") and ">B<" in svg
True
"""

from __future__ import annotations

from collections.abc import Mapping
from html import escape

from tilecraft.graph import Graph

__all__ = ["GROUP_COLOURS", "KIND_COLOURS", "graph_svg"]

#: fill per schedule kind of a compute outside any fusion group
KIND_COLOURS = {"template": "#cfe2f3", "tensorized": "#f9cb9c", "primitives": "#d9ead3",
                "default": "#eeeeee", "input": "#ffffff"}
#: fills of fusion groups, in turn
GROUP_COLOURS = ("#e06666", "#6fa8dc", "#93c47d", "#ffd966", "#8e7cc3", "#f6b26b", "#76a5af",
                 "#c27ba0")

_BOX_W, _BOX_H, _GAP_X, _GAP_Y, _MARGIN = 150, 26, 20, 24, 12


def graph_svg(graph: Graph, kinds: Mapping[str, tuple[str, int | None]],
              tooltips: Mapping[str, str] | None = None) -> str:
    """``kinds``: compute name -> (schedule kind, index of its fusion group or None)."""
    tooltips = tooltips or {}
    depth: dict[str, int] = {t.name: 0 for t in graph.inputs}
    rows: dict[int, list[str]] = {0: [t.name for t in graph.inputs]}
    edges: list[tuple[str, str]] = []
    constants = {t.name for t in graph.constants}
    for tensor in graph.computes:
        producers = [p for p in tensor.inputs if p.name not in constants]
        level = 1 + max((depth.get(p.name, 0) for p in producers), default=0)
        depth[tensor.name] = level
        rows.setdefault(level, []).append(tensor.name)
        edges.extend((p.name, tensor.name) for p in producers)
    width = max(len(names) for names in rows.values())
    position: dict[str, tuple[float, float]] = {}
    for level, names in rows.items():
        offset = (width - len(names)) * (_BOX_W + _GAP_X) / 2
        for column, name in enumerate(names):
            position[name] = (_MARGIN + offset + column * (_BOX_W + _GAP_X),
                              _MARGIN + level * (_BOX_H + _GAP_Y))
    total_w = 2 * _MARGIN + width * (_BOX_W + _GAP_X)
    total_h = 2 * _MARGIN + (max(rows) + 1) * (_BOX_H + _GAP_Y)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{total_w:.0f}" '
             f'height="{total_h:.0f}" viewBox="0 0 {total_w:.0f} {total_h:.0f}" '
             'font-family="sans-serif" font-size="11">']
    for source, sink in edges:
        (x0, y0), (x1, y1) = position[source], position[sink]
        parts.append(f'<line x1="{x0 + _BOX_W / 2:.1f}" y1="{y0 + _BOX_H:.1f}" '
                     f'x2="{x1 + _BOX_W / 2:.1f}" y2="{y1:.1f}" stroke="#999" '
                     'stroke-width="1"/>')
    for name, (x, y) in position.items():
        kind, group = kinds.get(name, ("input", None))
        fill = GROUP_COLOURS[group % len(GROUP_COLOURS)] if group is not None \
            else KIND_COLOURS.get(kind, "#eeeeee")
        label = name if len(name) <= 22 else name[:21] + "…"
        tip = escape(tooltips.get(name, f"{name}: {kind}"))
        parts.append(f'<g class="node" data-kind="{escape(kind)}"'
                     f'{f" data-group={chr(34)}{group}{chr(34)}" if group is not None else ""}>'
                     f'<title>{tip}</title><rect x="{x:.1f}" y="{y:.1f}" width="{_BOX_W}" '
                     f'height="{_BOX_H}" rx="4" fill="{fill}" stroke="#444"/>'
                     f'<text x="{x + _BOX_W / 2:.1f}" y="{y + _BOX_H / 2 + 4:.1f}" '
                     f'text-anchor="middle">{escape(label)}</text></g>')
    parts.append("</svg>")
    return "".join(parts)
