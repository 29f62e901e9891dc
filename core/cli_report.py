"""The ``tilecraft report`` subcommand: the mapping report (thesis §5.7, Table 5.3) of the
program a Python file builds.

``tilecraft report prog.py --target nvidia_tc`` loads the file the way ``tilecraft compile``
does (it defines ``graph`` or ``build()``; ``--graph NAME`` picks another), matches every
compute against every intrinsic of the target (or those ``--intrinsic`` names), and prints per
operator and intrinsic the candidates, basic matches, mappings, how many pass verification and
fit the memories, the chosen mapping and its predicted cost (``--json`` for JSON); with
``--measure`` each chosen mapping is also compiled for the target and timed natively (median
of a few runs), next to the prediction.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tilecraft.cli_target import TARGET_HELP, target_for_command


def configure_report(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", type=Path, help="Python file that builds the program")
    parser.add_argument("--target", default=None, help=TARGET_HELP)
    parser.add_argument("--intrinsic", action="append", default=None, metavar="NAME",
                        help="report only this intrinsic of the target (repeatable)")
    parser.add_argument("--graph", default=None, metavar="NAME",
                        help="variable or zero-argument function of the file holding the "
                             "program (default: graph, then build)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--check", action="store_true",
                        help="run each chosen mapping on the Kernel IR interpreter and compare "
                             "with the reference (a functional check, not a timing)")
    parser.add_argument("--measure", action="store_true",
                        help="compile each chosen mapping for the target and time it natively "
                             "(median of a few runs; needs a target that executes here)")
    parser.add_argument("--explore", type=int, default=0, metavar="TRIALS",
                        help="choose mapping and schedule by the joint search with this many "
                             "trials (default: the model under default schedules)")
    parser.add_argument("--matched-only", action="store_true",
                        help="leave out operator x intrinsic pairs without a mapping")


def run_report(args: argparse.Namespace) -> int:
    from tilecraft.cli_program_file import load_program
    from tilecraft.errors import InputError
    from tilecraft.intrin.report import format_mapping_table, mapping_report
    from tilecraft.intrin.tensorize import native_measure

    if args.explore < 0:
        raise InputError(f"--explore {args.explore}: give a number of trials >= 0")
    target = target_for_command(args.target)
    spec = target.spec
    measured = native_measure(target) if args.measure else None
    if args.measure and measured is None:
        raise InputError(f"--measure: target {spec.name} cannot execute on this machine "
                         f"({target.available().explain()}); drop --measure")
    intrinsics = None if args.intrinsic is None else [spec.intrinsic(n) for n in args.intrinsic]
    graph = load_program(args.file, args.graph)
    report = mapping_report(graph, spec, intrinsics, check=args.check,
                            explore_trials=args.explore, measured=measured)
    if args.matched_only:
        report.entries = report.matched()
    if args.json:
        print(report.to_json())
        return 0
    print(f"mappings of {args.file} on target {spec.name}: {len(report.matched())} of "
          f"{len(report.entries)} operator x intrinsic pairs match")
    print(format_mapping_table(report.entries))
    for note in report.notes:
        print(f"note: {note}")
    return 0
