"""The repository stands alone: nothing a user reads points at files outside it (a design
document or seed folder next to the checkout); the thesis is cited by section instead."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: what pointed outside the repository before it was self-contained
OUTSIDE = re.compile(r"\.\./shared|shared/(DESIGN|seeds)|DESIGN\.md|DESIGN's")

SUFFIXES = {".py", ".md", ".jinja", ".toml", ".yaml", ".cfg", ".txt"}


def _read_by_users() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "Makefile", ROOT / "pyproject.toml"]
    for folder in ("core", "plugins", "templates", "examples", "bench", "schemas"):
        files += [path for path in sorted((ROOT / folder).rglob("*"))
                  if path.suffix in SUFFIXES and path.is_file()
                  and ".egg-info" not in str(path) and "__pycache__" not in path.parts]
    return files


def test_no_reference_leaves_the_repository() -> None:
    files = _read_by_users()
    assert len(files) > 100  # the walk found the sources
    found = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
             for path in files
             for number, line in enumerate(path.read_text(encoding="utf-8",
                                                          errors="replace").splitlines(), 1)
             if OUTSIDE.search(line)]
    assert found == [], "\n".join(found)
