"""The ``tilecraft compile`` and ``tilecraft conformance`` subcommands.

``tilecraft compile prog.py`` runs a Python file that builds a program and compiles it (the
file defines ``graph`` or ``build()``: :mod:`tilecraft.cli_program_file`).
``--target NAME`` names the target; without it the command takes the best installed target
this machine executes and says which (:mod:`tilecraft.cli_target`). ``--target NAME:VARIANT``
compiles for a target's variant (``x86_avx512:skylake-avx512``: that CPU). ``--dump-stages
DIR`` writes what each compile stage produced (:mod:`tilecraft.pipeline`). ``--output-dir
DIR`` writes each kernel's source and whatever the target exports ahead of time
(``Target.export``: the x86 target writes ``lib<file stem>.so`` and ``<file stem>.h``);
nothing is run unless ``--run``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from tilecraft.cli_program_file import load_program
from tilecraft.cli_target import TARGET_HELP, target_for_command


def configure_compile(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", type=Path, help="Python file that builds the program")
    parser.add_argument("--target", default=None, help=TARGET_HELP)
    parser.add_argument("--graph", default=None, metavar="NAME",
                        help="variable or zero-argument function of the file holding the "
                             "program (default: graph, then build)")
    parser.add_argument("--output-dir", type=Path, default=None,
                        help="write each kernel's generated source here, and what the target "
                             "exports ahead of time (e.g. a shared library and a C header)")
    parser.add_argument("--run", action="store_true",
                        help="run on random inputs and check against the reference interpreter")
    parser.add_argument("--database", type=Path, default=None,
                        help="tuning database whose best parameters to use (`tilecraft tune`)")
    parser.add_argument("--dump-stages", type=Path, default=None, metavar="DIR",
                        help="write the output of each compile stage here (NN-<stage>.txt: "
                             "graph passes, fusion, mapping, schedule, Kernel IR, codegen with "
                             "the sources, build, report)")


def run_compile(args: argparse.Namespace) -> int:
    import tilecraft as tc
    from tilecraft.pipeline import source_suffix

    graph = load_program(args.file, args.graph)
    database = getattr(args, "database", None)
    target = target_for_command(args.target)
    dump_stages = getattr(args, "dump_stages", None)
    exe = tc.compile(graph, target=target,
                     database=str(database) if database is not None else None,
                     dump_stages=dump_stages)
    if dump_stages is not None:
        print(f"wrote the output of each compile stage to {dump_stages}")
    if args.output_dir is not None:
        args.output_dir.mkdir(parents=True, exist_ok=True)
        for name, source in exe.sources.items():
            suffix = source_suffix(source)
            (args.output_dir / f"{name}.{suffix}").write_text(source.text)
        print(f"wrote {len(exe.sources)} source file(s) to {args.output_dir}")
        exported = target.export([(c.kernel, c.source) for c in exe.compiled], graph,
                                 args.output_dir, args.file.stem)
        for path in exported:
            print(f"wrote {path}")
    if args.run:
        rng = np.random.default_rng(0)
        inputs = {}
        for tensor in graph.inputs:
            if tensor.dtype.is_int:
                inputs[tensor.name] = rng.integers(-8, 8, tensor.shape).astype(tensor.dtype.numpy)
            else:
                inputs[tensor.name] = rng.standard_normal(tensor.shape).astype(
                    tensor.dtype.numpy)
        got = exe(**inputs)
        expected = tc.reference.run(graph, **inputs)
        got = got if isinstance(got, tuple) else (got,)
        expected = expected if isinstance(expected, tuple) else (expected,)
        worst = max(float(np.max(np.abs(g.astype(np.float64) - e.astype(np.float64))))
                    for g, e in zip(got, expected))
        print(f"check against the reference interpreter: max abs error {worst:.3g}")
    print(exe.report)
    return 0


def configure_conformance(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", help="installed target name")
    parser.add_argument("pytest_args", nargs=argparse.REMAINDER,
                        help="extra arguments for pytest (e.g. -x -k gemm)")


def run_conformance(args: argparse.Namespace) -> int:
    import pytest

    from tilecraft.target.registry import get_target

    get_target(args.target)  # unknown or broken targets fail here with the registry's reason
    return int(pytest.main(["--tilecraft-target", args.target, "--pyargs",
                            "tilecraft.testing.conformance", "-p", "no:cacheprovider",
                            *args.pytest_args]))
