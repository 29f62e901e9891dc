"""A stage of the compile pipeline, and the pipeline that runs stages in order and dumps what
each produced.

A stage is any object with a ``name`` (which doubles as its dump file's suffix), ``run(state)
-> state`` and ``describe(state) -> str`` (its output as text). ``Pipeline.run(state,
dump_dir)`` runs the stages in order and, with ``dump_dir``, writes ``NN-<name>.txt`` after
each (plus the files a stage writes itself, e.g. the generated sources).

>>> class Count:
...     name = "count"
...     def run(self, state):
...         state.append(len(state))
...         return state
...     def describe(self, state):
...         return f"{len(state)} items"
>>> pipeline = Pipeline([Count(), Count()])
>>> pipeline.names
['count', 'count']
>>> pipeline.run([])
[0, 1]
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from tilecraft.errors import TilecraftError


@runtime_checkable
class Stage(Protocol):
    """One step of ``tilecraft.compile``: reads the state the earlier stages filled, adds its
    own output."""

    name: str

    def run(self, state: Any) -> Any:
        """The state with this stage's output added."""

    def describe(self, state: Any) -> str:
        """This stage's output in ``state``, as text (what ``--dump-stages`` writes)."""


class StageDumpError(TilecraftError):
    """The stage dump folder cannot be written."""


def _file_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name) or "stage"


class Pipeline:
    """Stages run in order (see the module docstring)."""

    def __init__(self, stages: Sequence[Stage]):
        self.stages = list(stages)

    @property
    def names(self) -> list[str]:
        return [stage.name for stage in self.stages]

    def run(self, state: Any, dump_dir: str | Path | None = None) -> Any:
        """Run every stage on ``state``; with ``dump_dir``, dump each stage's output there."""
        directory = None if dump_dir is None else _prepare(Path(dump_dir))
        for position, stage in enumerate(self.stages, start=1):
            state = stage.run(state)
            if directory is not None:
                stem = f"{position:02d}-{_file_name(stage.name)}"
                _write(directory / f"{stem}.txt", stage.describe(state))
                extra = getattr(stage, "dump_files", None)
                if extra is not None:
                    for relative, text in extra(state).items():
                        _write(directory / stem / _file_name(relative), text)
        return state

    def describe(self, state: Any) -> str:
        """Every stage's output, one section per stage, in order."""
        return "\n\n".join(f"== {stage.name} ==\n{stage.describe(state)}"
                           for stage in self.stages)


def _prepare(directory: Path) -> Path:
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise StageDumpError(f"cannot create the stage dump folder {directory}: {err}; pass "
                             "a writable folder to dump_stages / --dump-stages") from err
    return directory


def _write(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text if text.endswith("\n") else text + "\n")
    except OSError as err:
        raise StageDumpError(f"cannot write the stage dump {path}: {err}; pass a writable "
                             "folder to dump_stages / --dump-stages") from err


__all__ = ["Pipeline", "Stage", "StageDumpError"]
