"""The ``tilecraft`` command line (console script ``tilecraft = tilecraft.cli:main``).

Each subcommand is a :class:`Subcommand`: a name, a one-line help, a ``configure(parser)``
that adds its arguments, and a ``run(args) -> exit code``. To add one, write those two
functions (in this module or in the module of the feature, importing heavy code inside
``run``) and append a ``Subcommand`` to :data:`SUBCOMMANDS`, or call :func:`add_subcommand`.

A :class:`~tilecraft.errors.TilecraftError` prints ``tilecraft: error: <message>`` and exits
with status 2, without a traceback.

>>> main(["schemas", "list"])
intrinsic.json
intrinsic_set.json
memory_hierarchy.json
micro_kernel.json
target_spec.json
0
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tilecraft import cli_program, cli_report, cli_tune
from tilecraft.errors import TilecraftError

if TYPE_CHECKING:
    from tilecraft.target.registry import TargetInfo


@dataclass(frozen=True)
class Subcommand:
    name: str
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


# tilecraft targets ----------------------------------------------------------------------------


def _configure_targets(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--verbose", "-v", action="store_true",
                        help="also print where each target comes from, and the full reason "
                             "(with traceback) of broken ones")
    parser.add_argument("--probe", action="store_true",
                        help="measure this machine's figures again (peak rates, bandwidths) "
                             "for every target that measures them, replace the cached ones, "
                             "and print them")


def _run_targets(args: argparse.Namespace) -> int:
    from tilecraft.target.registry import format_target_table, format_variants, list_targets

    infos = list_targets()
    if not infos:
        print("no tilecraft targets are installed; install a plugin package "
              "(pip install -e plugins/<name>) or write one with `tilecraft new-target NAME`")
        return 0
    print(format_target_table(infos))
    variants = format_variants(infos)
    if variants:
        print(f"\n{variants}")
    if args.verbose:
        for info in infos:
            print(f"\n{info.name}: {info.origin}")
            if not info.ok:
                print(info.reason)
                if info.details:
                    print(info.details.rstrip())
    if args.probe:
        _probe_targets(infos)
    return 0


def _probe_targets(infos: Sequence[TargetInfo]) -> None:
    """Each working target's freshly measured figures; a probe that fails is reported (with
    the plugin's exception) and the others go on."""
    for info in infos:
        if not info.ok or info.target is None:
            continue
        try:
            figures = info.target.probe()
        except Exception as err:  # noqa: BLE001 - shown, not raised: the other targets go on
            print(f"\n{info.name}: probe failed: {type(err).__name__}: {err}")
            continue
        if figures:
            width = max(len(name) for name in figures)
            print(f"\n{info.name}: measured figures")
            for name, value in figures.items():
                print(f"  {name.ljust(width)}  {value}")


# tilecraft schemas ----------------------------------------------------------------------------


def _configure_schemas(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    export = actions.add_parser("export", help="write the JSON Schema files")
    export.add_argument("directory", nargs="?", type=Path, default=None,
                        help="where to write them (default: the checkout's schemas/)")
    check = actions.add_parser("check", help="exit 1 if the files in DIR are stale")
    check.add_argument("directory", nargs="?", type=Path, default=None)
    actions.add_parser("list", help="list the exported schema files")


def _run_schemas(args: argparse.Namespace) -> int:
    from tilecraft.target import schemas

    if args.action == "list":
        print("\n".join(schemas.schema_names()))
        return 0
    directory = args.directory or schemas.default_schema_dir()
    if args.action == "export":
        for path in schemas.export_schemas(directory):
            print(f"wrote {path}")
        return 0
    stale = [name for name in schemas.schema_names()
             if not (directory / name).is_file()
             or (directory / name).read_text(encoding="utf-8") != schemas.schema_text(name)]
    if stale:
        print(f"stale or missing in {directory}: {', '.join(stale)}; run "
              f"`tilecraft schemas export {directory}`")
        return 1
    print(f"{directory}: up to date")
    return 0


# tilecraft new-target -------------------------------------------------------------------------


def _configure_new_target(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", help="target name: lower case letters, digits and _")
    parser.add_argument("--dir", type=Path, default=Path("."), dest="directory",
                        help="folder to create the package folder NAME in (default: .)")
    parser.add_argument("--kind", choices=("cpu", "gpu", "npu", "fpga"), default="cpu",
                        help="the spec skeleton: a CPU (cores, vector lanes), a GPU (thread "
                             "hierarchy), an NPU (matrix and vector units, grid of cores) or "
                             "an FPGA (dataflow on a fabric budget); the core lowers each kind "
                             "with its own strategy (default: cpu)")


def _run_new_target(args: argparse.Namespace) -> int:
    from tilecraft.scaffold import render_target_package

    written = render_target_package(args.name, args.directory, args.kind)
    root = args.directory / args.name
    print(f"created the target plugin package {root} ({len(written)} files):")
    for path in written:
        print(f"  {path.relative_to(root)}")
    print(f"next: pip install -e {root} && pytest {root}/tests && tilecraft targets")
    return 0


#: every subcommand, in help order.
SUBCOMMANDS: list[Subcommand] = [
    Subcommand("targets", "list installed targets, their status and what this machine can do "
               "with them", _configure_targets, _run_targets),
    Subcommand("schemas", "export or check the JSON Schema files of the spec models",
               _configure_schemas, _run_schemas),
    Subcommand("new-target", "create a new target plugin package from the template",
               _configure_new_target, _run_new_target),
    Subcommand("compile", "compile the program a Python file builds, for a target",
               cli_program.configure_compile, cli_program.run_compile),
    Subcommand("conformance", "run the conformance suite for an installed target",
               cli_program.configure_conformance, cli_program.run_conformance),
    Subcommand("tune", "tune the schedule templates of the program a Python file builds",
               cli_tune.configure_tune, cli_tune.run_tune),
    Subcommand("report", "report how the program a Python file builds maps onto a target's "
               "intrinsics", cli_report.configure_report, cli_report.run_report),
]


def add_subcommand(subcommand: Subcommand) -> None:
    """Add (or replace, by name) a subcommand."""
    SUBCOMMANDS[:] = [s for s in SUBCOMMANDS if s.name != subcommand.name] + [subcommand]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tilecraft", description="tilecraft: a compiler for AI workloads on AI chips")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for subcommand in SUBCOMMANDS:
        sub = commands.add_parser(subcommand.name, help=subcommand.help,
                                  description=subcommand.help)
        subcommand.configure(sub)
        sub.set_defaults(_run=subcommand.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        return int(args._run(args))
    except TilecraftError as err:
        print(f"tilecraft: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("tilecraft: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
