"""`tilecraft compile` and `tilecraft conformance`."""

from __future__ import annotations

from pathlib import Path

import pytest

from tilecraft.cli import main

PROGRAM = """
import tilecraft as tc
from tilecraft import ops, te

X = te.placeholder((3, 19), name="X")
graph = tc.Graph.from_outputs([ops.softmax(X, axis=1)])
"""


def test_compile_writes_sources_and_checks(tmp_path: Path, capsys) -> None:
    program = tmp_path / "prog.py"
    program.write_text(PROGRAM)
    assert main(["compile", str(program), "--run", "--output-dir", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "wrote 5 source file(s)" in out
    error = float(out.split("max abs error ")[1].split()[0])
    assert error < 1e-5
    assert sorted(p.suffix for p in (tmp_path / "out").iterdir()) == [".ll"] * 5


def test_compile_names_a_missing_graph(tmp_path: Path, capsys) -> None:
    program = tmp_path / "empty.py"
    program.write_text("x = 1\n")
    assert main(["compile", str(program)]) == 2
    assert "defines none of graph, build" in capsys.readouterr().err


def test_conformance_of_unknown_target_fails_cleanly(capsys) -> None:
    assert main(["conformance", "no_such_target"]) == 2
    assert "no_such_target" in capsys.readouterr().err


@pytest.mark.slow
def test_conformance_runs_for_x86() -> None:
    assert main(["conformance", "x86_avx512", "-q"]) == 0
