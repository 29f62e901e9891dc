"""``tilecraft new-target NAME``: render the template of a target plugin package.

The templates live in the repository's ``templates/target_plugin/`` and are installed as the
package ``tilecraft.scaffold_templates`` (found with ``importlib.resources``). Files ending in
``.jinja`` are rendered with Jinja (the suffix is dropped); a path part ``__package__`` becomes
the package name (``tilecraft_<name>``); other files are copied as they are.

``kind`` picks the spec skeleton: ``cpu`` (cores and vector lanes), ``gpu`` (a thread
hierarchy), ``npu`` (spatial units with their operand levels, a grid of cores) or ``fpga`` (a
spatial architecture with a fabric budget). The core lowers a target of each kind with the
matching strategy (:mod:`tilecraft.schedule.strategies`), so the rendered package needs no
lowering code of its own.

>>> names = scaffold_names("my_npu")
>>> names.package, names.distribution, names.class_name
('tilecraft_my_npu', 'tilecraft-my-npu', 'MyNpuTarget')
>>> KINDS
('cpu', 'gpu', 'npu', 'fpga')
"""

from __future__ import annotations

import importlib.resources
import re
from dataclasses import asdict, dataclass
from importlib.resources.abc import Traversable
from pathlib import Path

import jinja2

import tilecraft
from tilecraft.errors import TargetError

TEMPLATE_PACKAGE = "tilecraft.scaffold_templates"
TEMPLATE_FOLDER = "target_plugin"
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")

#: the kinds of chip a scaffold's spec can describe (``tilecraft new-target --kind``)
KINDS = ("cpu", "gpu", "npu", "fpga")


@dataclass(frozen=True)
class ScaffoldNames:
    """The names a new plugin package uses, all derived from the target name."""

    target: str
    package: str
    distribution: str
    class_name: str
    api_version: int
    tilecraft_version: str


def scaffold_names(name: str) -> ScaffoldNames:
    """Names for target ``name`` (a :class:`TargetError` if it is not a valid name)."""
    from tilecraft.target.spec import TARGET_API_VERSION

    if not _NAME.match(name) or name.endswith("_"):
        raise TargetError(f"target name {name!r} is not valid; use lower case letters, digits "
                          "and single underscores, starting with a letter (e.g. my_npu)")
    if "__" in name:
        raise TargetError(f"target name {name!r} has a double underscore; use single ones")
    class_name = "".join(part.capitalize() for part in name.split("_")) + "Target"
    return ScaffoldNames(target=name, package=f"tilecraft_{name}",
                         distribution=f"tilecraft-{name.replace('_', '-')}",
                         class_name=class_name, api_version=TARGET_API_VERSION,
                         tilecraft_version=tilecraft.__version__)


def template_root() -> Traversable | Path:
    """The folder of the plugin package template: the installed package data, or the
    checkout's ``templates/`` when tilecraft runs from a source tree not reinstalled yet."""
    try:
        root = importlib.resources.files(TEMPLATE_PACKAGE) / TEMPLATE_FOLDER
        if root.is_dir():
            return root
    except ModuleNotFoundError:
        pass
    checkout = Path(tilecraft.__file__).resolve().parent.parent / "templates" / TEMPLATE_FOLDER
    if checkout.is_dir():
        return checkout
    raise TargetError(f"the target package template is missing: neither the package "
                      f"{TEMPLATE_PACKAGE} nor {checkout} exists; reinstall tilecraft")


def _template_files(folder: Traversable | Path, prefix: tuple[str, ...] = ()
                    ) -> list[tuple[tuple[str, ...], Traversable | Path]]:
    files = []
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name == "__pycache__" or entry.name.endswith(".pyc"):
            continue
        if entry.is_dir():
            files += _template_files(entry, prefix + (entry.name,))
        else:
            files.append((prefix + (entry.name,), entry))
    return files


def render_target_package(name: str, directory: str | Path, kind: str = "cpu") -> list[Path]:
    """Create the plugin package of target ``name``, a chip of ``kind`` (one of
    :data:`KINDS`), in ``directory/name``; returns the files written. Refuses to write into
    a folder that exists and is not empty."""
    names = scaffold_names(name)
    if kind not in KINDS:
        raise TargetError(f"unknown target kind {kind!r}; choose one of {', '.join(KINDS)}")
    root = Path(directory) / name
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise TargetError(f"{root} already exists and is not empty; choose another --dir or "
                          "name, or remove it")
    environment = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                                     autoescape=False)
    context = {**asdict(names), "kind": kind}
    written = []
    for parts, source in _template_files(template_root()):
        relative = [names.package if part == "__package__" else part for part in parts]
        text = source.read_text(encoding="utf-8")
        if relative[-1].endswith(".jinja"):
            relative[-1] = relative[-1][:-len(".jinja")]
            try:
                text = environment.from_string(text).render(context)
            except jinja2.TemplateError as err:
                raise TargetError(f"template {'/'.join(parts)} failed to render: {err}") from err
        path = root.joinpath(*relative)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written
