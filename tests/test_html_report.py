"""`tilecraft report --html` (tilecraft.html_report): one self-contained page per compiled
program — checked with an HTML parser: the graph's boxes and fusion colours, the kernel table's
FLOPs against flop_count, embedded PNGs, tuning curves from database records, nothing
external."""

from __future__ import annotations

import base64
import math
from html.parser import HTMLParser
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from tilecraft import ops, te  # noqa: E402
from tilecraft.cli import main  # noqa: E402
from tilecraft.errors import InputError  # noqa: E402
from tilecraft.graph import Graph  # noqa: E402
from tilecraft.html_report import build_report, tuning_curves  # noqa: E402
from tilecraft.runtime.overlap import isolate  # noqa: E402
from tilecraft.tuning.database import TuningDatabase  # noqa: E402
from tilecraft.tuning.record import TuningRecord, workload_key  # noqa: E402
from tilecraft.tuning.workload import describe_graph, flop_count  # noqa: E402


def chain_and_tail() -> Graph:
    """A GEMM chain x86 fuses (C -> R -> E), then a softmax on its own; odd sizes."""
    A = te.placeholder((96, 40), name="A")
    B = te.placeholder((40, 72), name="B")
    D = te.placeholder((72, 24), name="D")
    E = ops.matmul(ops.relu(ops.matmul(A, B, name="C"), name="R"), D, name="E")
    return Graph.from_outputs([ops.softmax(E, name="F")])


class Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.rows: list[list[str]] = []
        self._row: list[str] | None = None
        self._cell: str | None = None
        self._table = False

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        self.tags.append((tag, attributes))
        if tag == "table" and attributes.get("id") == "kernels":
            self._table = True
        elif tag == "tr" and self._table:
            self._row = []
        elif tag in ("td", "th") and self._row is not None:
            self._cell = ""

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._row is not None and self._cell is not None:
            self._row.append(self._cell)
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self.rows.append(self._row)
            self._row = None
        elif tag == "table":
            self._table = False

    def handle_data(self, data):
        if self._cell is not None:
            self._cell += data


@pytest.fixture(scope="module")
def database(tmp_path_factory) -> tuple[str, list[float]]:
    """Records of the softmax F, isolated as tuning tunes it: costs known. Their schedules
    are points of F's space (compile with the database lowers the best one)."""
    import numpy as np

    from tilecraft.target.registry import get_target
    from tilecraft.tuning.tuner import task_space

    graph = chain_and_tail()
    program = isolate(graph, graph.outputs[0])
    template, _ = task_space(program.outputs[0], get_target("x86_avx512"))
    rng = np.random.default_rng(0)
    path = str(tmp_path_factory.mktemp("db") / "tuning.sqlite")
    costs = [4e-5, 6e-5, 2e-5, 3e-5, 1e-5]
    db = TuningDatabase(path)
    for index, cost in enumerate(costs):
        config = template.decode(template.space.random_point(rng))
        db.add(TuningRecord(workload_key=workload_key(describe_graph(program)),
                            target="x86_avx512", schedule={"F": config},
                            costs=(cost,), timestamp=1000.0 + index))
    db.close()
    return path, costs


@pytest.fixture(scope="module")
def page(database) -> tuple[str, Page]:
    html = build_report(chain_and_tail(), "x86_avx512", database=database[0], runs=3,
                        title="chain & tail")
    parsed = Page()
    parsed.feed(html)
    return html, parsed


def test_the_page_is_self_contained(page):
    html, parsed = page
    tags = [tag for tag, _ in parsed.tags]
    assert "script" not in tags and "link" not in tags and "iframe" not in tags
    sources = [attrs.get("src") for tag, attrs in parsed.tags if tag == "img"]
    assert len(sources) == 2  # the roofline and the tuning curves
    for source in sources:
        assert source.startswith("data:image/png;base64,")
        assert base64.b64decode(source.split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
    assert "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "chain &amp; tail" in html  # the title is escaped


def test_the_graph_colours_the_fused_group(page):
    _, parsed = page
    nodes = [attrs for tag, attrs in parsed.tags if tag == "g" and attrs.get("class") == "node"]
    # the inputs A, B, D, the computes C, R, E and the softmax's five primitives but its
    # subtract, which inline_elementwise (on by default) folded into its exp
    assert len(nodes) == 3 + 3 + 4
    groups = [attrs.get("data-group") for attrs in nodes]
    # the chain is group 0, the softmax's computes (one row kernel on x86) group 1
    assert groups.count("0") == 3 and groups.count("1") == 4 and groups.count(None) == 3
    kinds = sorted(attrs["data-kind"] for attrs in nodes)
    assert kinds.count("fused") == 3 + 4 and kinds.count("input") == 3


def test_the_kernel_table_counts_flops_and_times(page):
    _, parsed = page
    header, *rows = parsed.rows
    column = {name: index for index, name in enumerate(header)}
    by_compute = {row[column["compute"]]: row for row in rows}
    graph = chain_and_tail()
    tensors = {t.name: t for t in graph.computes}
    fused = sum(flop_count(isolate(graph, tensors[n])) for n in ("C", "R", "E"))
    assert float(by_compute["E"][column["MFLOP"]]) == pytest.approx(fused / 1e6, abs=1e-3)
    assert by_compute["E"][column["schedule"]] == "fused"
    softmax = sum(flop_count(isolate(graph, t)) for t in graph.computes  # one row kernel
                  if t.name not in ("C", "R", "E"))
    assert float(by_compute["F"][column["MFLOP"]]) == pytest.approx(softmax / 1e6, abs=1e-3)
    for row in rows:
        assert row[column["median time"]].endswith(("us", "ms"))
        # the operands' bytes: at least the output's
        assert float(row[column["KB"]]) > 0


def test_tuning_curves_are_the_best_so_far(database):
    path, costs = database
    graph = chain_and_tail()
    curves = tuning_curves(path, graph, "x86_avx512")
    assert list(curves) == ["F"]
    work = flop_count(isolate(graph, graph.outputs[0]))
    best = [min(costs[:i + 1]) for i in range(len(costs))]
    assert [t for t, _ in curves["F"]] == [1, 2, 3, 4, 5]
    assert [g for _, g in curves["F"]] == pytest.approx([work / c / 1e9 for c in best])
    assert all(a <= b for (_, a), (_, b) in zip(curves["F"], curves["F"][1:]))
    assert math.isfinite(curves["F"][-1][1])


PROGRAM = '''
from tilecraft import ops, te
from tilecraft.graph import Graph

A = te.placeholder((17, 31), name="A")
W = te.placeholder((31, 13), name="W")
graph = Graph.from_outputs([ops.relu(ops.matmul(A, W, name="P"), name="Y")])
'''


def test_the_cli_writes_the_page(tmp_path: Path, capsys):
    program = tmp_path / "prog.py"
    program.write_text(PROGRAM)
    out = tmp_path / "pages" / "prog.html"
    assert main(["report", str(program), "--target", "x86_avx512", "--html", str(out),
                 "--runs", "2"]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    parsed = Page()
    parsed.feed(out.read_text())
    assert [row[1] for row in parsed.rows[1:]].count("P") >= 1
    assert not list(out.parent.glob("*.tmp"))  # written whole, nothing left half written


def test_cli_refusals(tmp_path: Path, capsys):
    program = tmp_path / "prog.py"
    program.write_text(PROGRAM)
    assert main(["report", "--target", "x86_avx512", "--html", str(tmp_path / "x.html")]) == 2
    assert "a Python file or --network" in capsys.readouterr().err
    assert main(["report", str(program), "--target", "x86_avx512", "--html",
                 str(tmp_path / "x.html"), "--database", str(tmp_path / "missing.sqlite")]) == 2
    assert "--database" in capsys.readouterr().err
    assert not (tmp_path / "x.html").exists()
    with pytest.raises(InputError, match="runs=0"):
        build_report(Graph.from_outputs([ops.relu(te.placeholder((3,), name="Z"))]),
                     "x86_avx512", runs=0)
