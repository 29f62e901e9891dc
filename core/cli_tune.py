"""The ``tilecraft tune`` subcommand: tune the schedule templates of the program a Python file
builds (the file defines ``graph`` or ``build()``, as for ``tilecraft compile``), record every
candidate in a tuning database, and print the best parameters per compute.

    tilecraft tune prog.py --preset quick --database tuning.db --events events.jsonl
    tilecraft tune prog.py --runner ray --address auto     # measure on a Ray cluster's devices

``--runner local`` (the default) measures in isolated worker processes of this machine;
``--runner ray`` on the nodes of a Ray cluster that offer the target's device resource (the
``tilecraft[ray]`` extra); the progress display then shows each node's throughput.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tilecraft.cli_target import TARGET_HELP, target_for_command
from tilecraft.errors import TilecraftError


def configure_tune(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", type=Path, help="Python file that builds the program")
    parser.add_argument("--target", default=None, help=TARGET_HELP)
    parser.add_argument("--graph", default=None, metavar="NAME",
                        help="variable or function of the file holding the program")
    parser.add_argument("--preset", default="default", choices=("quick", "default", "thorough"))
    parser.add_argument("--trials", type=int, default=None, help="trials per compute")
    parser.add_argument("--seconds", type=float, default=None, help="seconds per compute")
    parser.add_argument("--engine", default="q", help="search engine: q, p or random")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--database", type=Path, default=Path("tilecraft_tuning.db"),
                        help="tuning database file (created if missing; an interrupted run "
                             "resumes from it)")
    parser.add_argument("--events", type=Path, default=None,
                        help="write the machine-readable event stream (JSON Lines) here")
    parser.add_argument("--workers", type=int, default=1, help="processes building candidates")
    parser.add_argument("--runner", default="local", choices=("local", "ray"),
                        help="where candidates are measured: this machine's worker processes "
                             "(default) or a Ray cluster (pip install 'tilecraft[ray]')")
    parser.add_argument("--address", default=None,
                        help="Ray cluster address for --runner ray ('auto': the cluster this "
                             "machine belongs to; default: a new local one)")
    parser.add_argument("--no-progress", action="store_true", help="no live progress display")


def run_tune(args: argparse.Namespace) -> int:
    from tilecraft.cli_program_file import load_program
    from tilecraft.tuning.budget import TuningOptions
    from tilecraft.tuning.tuner import tune

    graph = load_program(args.file, args.graph)
    target = target_for_command(args.target)
    options = TuningOptions(preset=args.preset, trials=args.trials, seconds=args.seconds,
                            engine=args.engine, seed=args.seed, database=args.database,
                            events=args.events, n_workers=args.workers,
                            progress=False if args.no_progress else None)
    runner = None
    if args.runner == "ray":
        from tilecraft.tuning.runners.protocol import device_resource
        from tilecraft.tuning.runners.ray_runner import RayRunner

        # no address: a new local cluster (unless this process joined one) offering this
        # machine as one device of the target's kind
        local = ({"resources": {device_resource(target.name): 1}}
                 if args.address is None else None)
        runner = RayRunner(address=args.address, settings=options.measure_settings(),
                           init_options=local)
    elif args.address is not None:
        raise TilecraftError("--address names a Ray cluster; use it with --runner ray")
    try:
        result = tune(graph, target, options, runner=runner)
    finally:
        if runner is not None:
            runner.close()
    if not result.tasks:
        raise TilecraftError(f"target {target.name} has no tunable template for any compute of "
                             f"{args.file} ({', '.join(t.name for t in graph.computes)}); "
                             "nothing was tuned")
    for task in result.tasks:
        gflops = task.best_gflops
        best = "every candidate failed" if gflops is None else \
            f"{task.best_seconds * 1e3:.3f} ms ({gflops:.1f} GFLOP/s) with {task.best_config}"
        reused = len(task.trials) - task.measured
        recorded = f" ({reused} reused a cost already measured or in the database)" \
            if reused else ""
        print(f"{task.compute}: {len(task.trials)} trials{recorded} in {task.seconds:.1f} s, "
              f"stopped by {task.stopped_by}; best {best}; 90% of it after "
              f"{task.time_to_fraction(0.9)} trials")
    print(f"records in {args.database}; `tilecraft compile` / tc.compile(..., database=...) "
          "use the best of them")
    return 0
