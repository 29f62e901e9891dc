"""Whole networks (tilecraft.models) on this x86: per network the compile time (no tuning) and,
at 1 and 2 threads side by side in one run, the tilecraft x86 run time against onnxruntime
(CPU, same ONNX export), PyTorch eager and torch.compile (inductor) on the same seeded
weights, medians, the speed-ups (their time / ours: > 1 means tilecraft is faster) and
whether every output matches onnxruntime's (rtol = atol = 1e-3). Each network's GFLOP (its
graph's arithmetic, :func:`tilecraft.tuning.workload.flop_count`) puts tilecraft's time against
the host's measured fp32 FMA ceiling (``% peak``, :func:`common.measured_ceiling_flops`), and
the closing lines say what rate a given speed-up over onnxruntime (``--goal``, default 1.2)
would take, as a share of that ceiling: where it is near or past 100 % the goal is out of
reach on this CPU whatever the compiler does.

    python bench/bench_networks.py [--small] [--threads 1,2] [--no-inline] [--no-torch]
                                   [--no-inductor] [--database PATH] [--nchw] [--goal X]
                                   [--rounds N] [NAME ...]

``--no-inline`` compiles with the graph pass ``inline_elementwise`` off (on by default: one
kernel per compute, as before it was). ``--database PATH`` compiles with the best schedules
recorded there (fill it with ``tilecraft tune`` or ``tc.tune(models.build(NAME), target,
{"database": PATH, ...})``): the ``tilecraft`` columns are then the tuned kernels and
``tilecraft untuned`` the defaults, its (x) the speed-up tuning gave. ``--nchw`` keeps every
convolution NCHW (``X86Avx512Target(layouts={"conv2d": "NCHW"})``; by default the x86 target
computes a network of dense convolutions channels-last).

tilecraft is compiled once per thread count (the x86 target plans its blocking for its
threads); torch columns are left out when torch is not installed. The runners of a thread count
are timed in ``--rounds`` alternated rounds (:func:`common.alternated`: a pause and an untimed
call before each runner's three timed calls) and the medians of the rounds are quoted: on a
shared machine a burst of someone else's work then lands on every runner alike, where timing
each runner in a block of its own let one burst decide a ratio (the same transformer_base layer
measured 47.6 and 104.7 ms in two rounds a second apart, Xeon family 6 model 207). The small
configurations take seconds; the full sizes (batch 1, sequence 512, 224^2) minutes (inductor's
compile most).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import (  # noqa: E402
    alternated,
    amx_note,
    ceiling_note,
    geomean,
    measured_ceiling_flops,
    print_table,
)

import tilecraft as tc  # noqa: E402
import tilecraft.models as models  # noqa: E402
from tilecraft.tuning.workload import flop_count  # noqa: E402


def _torch_runs(name: str, small: bool, x: np.ndarray, inductor: bool):
    """(eager, compiled or None) callables on a torch tensor of x, or None without torch."""
    try:
        import torch
        from torch_networks import torch_network
    except ImportError:
        return None
    forward = torch_network(name, small=small)
    xt = torch.from_numpy(x)
    # every network's forward is the same code object: without a reset dynamo's recompile
    # limit (8: networks x thread counts) would leave later networks running eagerly
    torch._dynamo.reset()
    compiled = None
    if inductor:
        compiled_forward = torch.compile(forward, backend="inductor")
        compiled = lambda: compiled_forward(xt)  # noqa: E731
    return torch, (lambda: forward(xt)), compiled


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f}" if seconds >= 0.01 else f"{seconds * 1e3:.3f}"


def measure(name: str, small: bool, threads: list[int], use_torch: bool, inductor: bool,
            passes: dict[str, bool] | None = None, database: str | None = None,
            layouts: dict[str, str] | None = None, rounds: int = 9
            ) -> tuple[list[str], dict[str, dict[int, float]], int]:
    import onnxruntime as ort
    from tilecraft_x86_avx512.target import X86Avx512Target

    graph = models.build(name, small=small)
    model = models.to_onnx(name, small=small)
    x = np.random.default_rng(1).standard_normal(graph.inputs[0].shape).astype(np.float32)
    torch_runs = _torch_runs(name, small, x, inductor) if use_torch else None
    times: dict[str, dict[int, float]] = {"tilecraft": {}, "onnxruntime": {}}
    matches, compile_s = True, []
    for n in threads:
        started = time.perf_counter()
        exe = tc.compile(graph, target=X86Avx512Target(threads=n, layouts=layouts),
                         passes=passes)
        compile_s.append(time.perf_counter() - started)
        runs = []
        if database is not None:
            untuned = exe
            exe = tc.compile(graph, target=X86Avx512Target(threads=n, layouts=layouts),
                             passes=passes, database=database)
            matches &= bool(np.allclose(exe(x), untuned(x), rtol=1e-3, atol=1e-3))
            runs.append(("tilecraft untuned", lambda: untuned(x)))
        options = ort.SessionOptions()
        options.intra_op_num_threads = n
        session = ort.InferenceSession(model.SerializeToString(), options,
                                       providers=["CPUExecutionProvider"])
        expected = session.run(None, {"x": x})[0]
        matches &= bool(np.allclose(exe(x), expected, rtol=1e-3, atol=1e-3))
        runs += [("tilecraft", lambda: exe(x)),
                 ("onnxruntime", lambda: session.run(None, {"x": x}))]
        if torch_runs is not None:
            torch, eager, compiled = torch_runs
            torch.set_num_threads(n)
            for column, run in (("torch eager", eager), ("torch.compile", compiled)):
                if run is not None:
                    matches &= bool(np.allclose(run().numpy(), expected, rtol=1e-3,
                                                atol=1e-3))
                    runs.append((column, run))
        for column, seconds in alternated(runs, rounds).items():
            times.setdefault(column, {})[n] = seconds
    flops = flop_count(graph)
    row = [name, f"{compile_s[0]:.1f}", f"{flops / 1e9:.3g}"]
    for n in threads:
        ours = times["tilecraft"][n]
        row.append(f"{_ms(ours)} ({_percent_of_ceiling(flops, ours, n)})")
        for column in times:
            if column != "tilecraft" and n in times[column]:
                row.append(f"{_ms(times[column][n])} ({times[column][n] / ours:.2f}x)")
    row.append("yes" if matches else "NO")
    return row, times, flops


def _percent_of_ceiling(flops: float, seconds: float, threads: int) -> str:
    """``flops`` done in ``seconds`` on ``threads`` cores as a share of the measured ceiling."""
    ceiling, _ = measured_ceiling_flops(threads)
    return f"{100 * flops / seconds / ceiling:.0f}%"


def goal_lines(results: list[tuple[list[str], dict[str, dict[int, float]], int]],
               threads: list[int], goal: float) -> list[str]:
    """Per thread count, the time and share of the measured ceiling each network would need
    to run ``goal`` times faster than onnxruntime did in this run."""
    lines = []
    for n in threads:
        parts = []
        for row, t, flops in results:
            needed = t["onnxruntime"][n] / goal
            parts.append(f"{row[0]} {_ms(needed)} ms = "
                         f"{_percent_of_ceiling(flops, needed, n)}")
        lines.append(f"{goal:g}x onnxruntime at {n} thread(s) needs (time = share of the "
                     f"ceiling): {', '.join(parts)}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="networks (default all)")
    parser.add_argument("--small", action="store_true", help="the small test configurations")
    parser.add_argument("--threads", default="1,2",
                        help="comma-separated thread counts for every framework (default 1,2)")
    parser.add_argument("--no-inline", action="store_true",
                        help="compile with the graph pass inline_elementwise off")
    parser.add_argument("--no-torch", action="store_true", help="leave PyTorch out")
    parser.add_argument("--no-inductor", action="store_true",
                        help="leave torch.compile out (its compile takes minutes at full size)")
    parser.add_argument("--database", default=None,
                        help="a tuning database: tilecraft runs its best recorded schedules "
                             "(and the untuned defaults as a column of their own)")
    parser.add_argument("--nchw", action="store_true",
                        help="tilecraft with every convolution kept NCHW (the x86 target's "
                             "layouts conv2d NCHW; by default a network of dense convolutions "
                             "is computed channels-last)")
    parser.add_argument("--rounds", type=int, default=9,
                        help="alternated rounds per runner (default 9; see common.alternated)")
    parser.add_argument("--goal", type=float, default=1.2,
                        help="the speed-up over onnxruntime whose required rate is printed "
                             "as a share of the measured ceiling (default 1.2)")
    args = parser.parse_intermixed_args(argv)
    threads = [int(n) for n in args.threads.split(",")]
    names = args.names or list(models.NETWORKS)
    passes = {"inline_elementwise": False} if args.no_inline else None
    layouts = {"conv2d": "NCHW"} if args.nchw else None
    results = [measure(name, args.small, threads, not args.no_torch, not args.no_inductor,
                       passes, args.database, layouts, args.rounds) for name in names]
    columns = list(results[0][1])
    header = ["network", "compile s", "GFLOP"]
    for n in threads:
        header.append(f"tilecraft {n}t ms (% peak)")
        header += [f"{c} {n}t ms (x)" for c in columns[1:] if n in results[0][1][c]]
    header.append("match")
    cpu = platform.processor() or platform.machine()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print_table(f"networks ({'small' if args.small else 'full size'}"
                f"{', inline_elementwise off' if args.no_inline else ''}"
                f"{', tuned from ' + args.database if args.database else ''}"
                f"{', convolutions kept NCHW' if args.nchw else ''}), {cpu}, "
                f"{os.cpu_count()} cores, load average {load:.1f}; (x) = their time / tilecraft's",
                header, [row for row, _, _ in results])
    for column in columns[1:]:
        for n in threads:
            ratios = [t[column][n] / t["tilecraft"][n] for _, t, _ in results if n in t[column]]
            if ratios:
                print(f"geomean speed-up over {column}, {n} thread(s): {geomean(ratios):.2f}x")
    for n in threads:
        print(ceiling_note(n))
    note = amx_note()   # builds the host's spec: once
    if note:
        print(note)
    for line in goal_lines(results, threads, args.goal):
        print(line)
    return 0 if all(row[-1] == "yes" for row, _, _ in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
