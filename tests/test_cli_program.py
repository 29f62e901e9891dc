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
    assert "wrote 1 source file(s)" in out  # the softmax is one row-group kernel
    error = float(out.split("max abs error ")[1].split()[0])
    assert error < 1e-5
    # the sources, and what x86_avx512 exports ahead of time: a shared library and a C header
    assert sorted(p.suffix for p in (tmp_path / "out").iterdir()) == [".h"] + [".ll"] * 1 + \
        [".so"]


def test_compile_for_a_named_cpu_writes_the_library_and_header(tmp_path: Path,
                                                                capsys) -> None:
    program = tmp_path / "prog.py"
    program.write_text(PROGRAM)
    out = tmp_path / "out"
    assert main(["compile", str(program), "--target", "x86_avx512:skylake-avx512",
                 "--output-dir", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"wrote {out / 'libprog.so'}" in printed and f"wrote {out / 'prog.h'}" in printed
    assert "target x86_avx512:skylake-avx512" in printed
    assert (out / "libprog.so").read_bytes()[:4] == b"\x7fELF"
    header = (out / "prog.h").read_text()
    assert "static inline int prog_run(const float *X, float *" in header
    assert header.count("(void **args, int64_t begin, int64_t end);") == 1  # one row group


def test_compile_for_an_unknown_cpu_or_variant_fails_cleanly(tmp_path: Path, capsys) -> None:
    program = tmp_path / "prog.py"
    program.write_text(PROGRAM)
    assert main(["compile", str(program), "--target", "x86_avx512:pentium4"]) == 2
    assert "unknown x86 CPU 'pentium4'" in capsys.readouterr().err
    assert main(["compile", str(program), "--target", "mali:g78"]) == 2
    assert "target mali has no variant" in capsys.readouterr().err


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
