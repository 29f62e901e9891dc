"""Fig. 4.6's three designs (thesis §4.6.3, §4.7.5) on a zoo network (ResNet-18 small by
default) on this x86, side by side in one run, the same tuning work in each (every tunable
compute isolated, ``--trials`` candidates each, one worker process):

* compile then run: tune everything, then run the N inferences;
* synchronous overlap (``overlap="sync"``): each inference waits for the next search stage;
* asynchronous overlap (``overlap=True``): inferences never wait.

Per design: the time to the first result, the time to finish N inferences, the median latency
of the first and of the last 10 inferences, the best call, the swaps made, and when the tuning
ended.

    python bench/bench_overlap.py [--network resnet18] [--full] [--n 2000] [--trials 4]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import print_table  # noqa: E402

import tilecraft as tc  # noqa: E402
import tilecraft.models as models  # noqa: E402


def run_design(design: str, graph: tc.Graph, x: np.ndarray, n: int, trials: int,
               expected: np.ndarray) -> list[str]:
    options = {"preset": "quick", "trials": trials, "batch_size": max(1, trials // 2),
               "progress": False, "seed": 0}
    start = time.perf_counter()
    exe = tc.compile(graph, target="x86_avx512", tuning=options,
                     overlap="sync" if design == "synchronous overlap" else True,
                     passes={"fold_batch_norm": False})
    tuned_at = None
    if design == "compile then run":
        exe.wait()
        tuned_at = time.perf_counter() - start
    latencies, first = [], None
    for _ in range(n):
        called = time.perf_counter()
        y = exe(x)
        latencies.append(time.perf_counter() - called)
        if first is None:
            first = time.perf_counter() - start
            if not np.allclose(y, expected, rtol=1e-3, atol=1e-3):
                raise SystemExit(f"{design}: the first result differs from the reference")
        if tuned_at is None and exe.tuning_done:
            tuned_at = time.perf_counter() - start
    total = time.perf_counter() - start
    if not np.allclose(y, expected, rtol=1e-3, atol=1e-3):
        raise SystemExit(f"{design}: the last result differs from the reference")
    exe.close()  # the rest of the tuning, if any, is not counted
    return [design, f"{first:.2f}", f"{total:.2f}",
            f"{statistics.median(latencies[:10]) * 1e3:.2f}",
            f"{statistics.median(latencies[-10:]) * 1e3:.2f}", f"{min(latencies) * 1e3:.2f}",
            str(len(exe.swaps)),
            "-" if tuned_at is None else f"{tuned_at:.1f}"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--network", default="resnet18", choices=sorted(models.NETWORKS))
    parser.add_argument("--full", action="store_true", help="full size (default: small)")
    parser.add_argument("--n", type=int, default=2000, help="inferences per design")
    parser.add_argument("--trials", type=int, default=4, help="candidates per compute")
    args = parser.parse_args(argv)
    from tilecraft.reference.interpreter import run as reference_run

    graph = models.build(args.network, small=not args.full)
    x = np.random.default_rng(1).standard_normal(graph.inputs[0].shape).astype(np.float32)
    expected = reference_run(graph, {graph.inputs[0].name: x})
    rows = [run_design(design, graph, x, args.n, args.trials, expected)
            for design in ("compile then run", "synchronous overlap", "asynchronous overlap")]
    cpu = platform.processor() or platform.machine()
    print_table(f"{args.network} ({'full' if args.full else 'small'}), {args.n} inferences, "
                f"{args.trials} trials per compute, {cpu}",
                ["design", "first result s", f"{args.n} done s", "first 10 ms (median)",
                 "last 10 ms (median)", "best call ms", "swaps", "tuning ended s"], rows)
    print(f"load average (1, 5, 15 min) at the end: {os.getloadavg()}; on a busy 2-core "
          "machine a call's latency swings between its best and ~15 ms (a parallel kernel "
          "waiting for a descheduled thread), with or without swaps")
    base = float(rows[0][2])
    for row in rows[1:]:
        print(f"{row[0]}: first result {float(rows[0][1]) / float(row[1]):.1f}x sooner, "
              f"{args.n} inferences {base / float(row[2]):.2f}x sooner than compile then run")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
