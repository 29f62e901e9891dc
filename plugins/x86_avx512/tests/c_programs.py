"""Building and running a C program against an exported kernel library (``lib<name>.so`` and
its header in the same directory), for the tests of the ahead-of-time path."""

from __future__ import annotations

import subprocess
from pathlib import Path


def run_c_program(directory: Path, source: str, library: str = "prog",
                  timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Write ``source`` as ``main.c`` in ``directory``, compile it with gcc (C11, warnings as
    errors) against ``lib<library>.so`` there, run it there and return the finished process
    (its return code unchecked: the caller asserts on it)."""
    (directory / "main.c").write_text(source)
    subprocess.run(["gcc", "-std=c11", "-O1", "-Wall", "-Werror", "-o", "main", "main.c", "-L.",
                    f"-l{library}", "-Wl,-rpath,$ORIGIN", "-lm"], cwd=directory, check=True,
                   capture_output=True, text=True)
    return subprocess.run(["./main"], cwd=directory, capture_output=True, text=True,
                          timeout=timeout)
