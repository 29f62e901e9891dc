"""The ``tilecraft report`` subcommand: the mapping report (thesis §5.7, Table 5.3) of the
program a Python file builds.

``tilecraft report prog.py --target nvidia_tc`` loads the file the way ``tilecraft compile``
does (it defines ``graph`` or ``build()``; ``--graph NAME`` picks another), matches every
compute against every intrinsic of the target (or those ``--intrinsic`` names), and prints per
operator and intrinsic the candidates, basic matches, mappings, how many pass verification and
fit the memories, the chosen mapping and its predicted cost (``--json`` for JSON); with
``--measure`` each chosen mapping is also compiled for the target and timed natively (median
of a few runs), next to the prediction.

``--html PAGE`` writes instead one self-contained HTML page for the compiled program
(:mod:`tilecraft.html_report`): the graph with its fusion groups coloured, per kernel its
time, GFLOP/s and bytes against the target's peak on a roofline plot, the fusion and mapping
decisions, and the tuning curves of ``--database``. ``--network NAME`` (``--small``) takes a
network of the model zoo (:mod:`tilecraft.models`) instead of a file.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tilecraft.cli_target import TARGET_HELP, target_for_command


def configure_report(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", type=Path, nargs="?", default=None,
                        help="Python file that builds the program (or --network)")
    parser.add_argument("--network", default=None, metavar="NAME",
                        help="a network of the model zoo (tilecraft.models) instead of a file")
    parser.add_argument("--small", action="store_true",
                        help="with --network: its small test configuration")
    parser.add_argument("--html", type=Path, default=None, metavar="PAGE",
                        help="write one self-contained HTML page for the compiled program: "
                             "graph, per-kernel times on a roofline, decisions, tuning curves")
    parser.add_argument("--database", default=None, metavar="FILE",
                        help="with --html: the tuning database (best known schedules, tuning "
                             "curves)")
    parser.add_argument("--runs", type=int, default=10,
                        help="with --html: calls timed (default 10)")
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
    if (args.file is None) == (args.network is None):
        raise InputError("report: give a Python file or --network NAME (one of them)")
    target = target_for_command(args.target)
    if args.network is not None:
        import tilecraft.models as models

        graph = models.build(args.network, small=args.small)
        label = f"{args.network}{' (small)' if args.small else ''}"
    else:
        graph = load_program(args.file, args.graph)
        label = str(args.file)
    if args.html is not None:
        from tilecraft.html_report import build_report, write_report

        if args.database is not None and not Path(args.database).is_file():
            raise InputError(f"--database {args.database}: no such file; give a tuning "
                             "database written by `tilecraft tune` or an overlapped compile")
        page = build_report(graph, target, database=args.database, runs=args.runs,
                            title=f"tilecraft report: {label} on {target.name}")
        print(f"wrote {write_report(args.html, page)}")
        return 0
    spec = target.spec
    measured = native_measure(target) if args.measure else None
    if args.measure and measured is None:
        raise InputError(f"--measure: target {spec.name} cannot execute on this machine "
                         f"({target.available().explain()}); drop --measure")
    intrinsics = None if args.intrinsic is None else [spec.intrinsic(n) for n in args.intrinsic]
    report = mapping_report(graph, spec, intrinsics, check=args.check,
                            explore_trials=args.explore, measured=measured)
    if args.matched_only:
        report.entries = report.matched()
    if args.json:
        print(report.to_json())
        return 0
    print(f"mappings of {label} on target {spec.name}: {len(report.matched())} of "
          f"{len(report.entries)} operator x intrinsic pairs match")
    print(format_mapping_table(report.entries))
    for note in report.notes:
        print(f"note: {note}")
    return 0
