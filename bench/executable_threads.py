"""What a thread-safe Executable costs: per-call workspaces vs one lock (issue 10, item 5).

An Executable whose kernels pack an operand into a workspace (a template GEMM's packed B) must
not let two concurrent calls share that workspace. Two ways to make that safe:

- **per-call workspaces** (what :class:`tilecraft.runtime.executable.Executable` does): a call
  takes an idle set of workspaces from a free list, or allocates one when every set is in use,
  and gives it back when it returns; concurrent calls overlap;
- **one lock**: calls are serialised; measured here as the free-list Executable with every
  call wrapped in one ``threading.Lock`` (the lock inside the Executable would cost the same).

The script times ``--calls`` calls of a small GEMM (overhead-bound) and ``--big-calls`` calls
of a larger GEMM (compute-bound), from one thread and spread over ``--threads`` threads, and
prints microseconds per call (wall time / calls). Run: ``python bench/executable_threads.py``
(about 20 s on 2 cores).
"""

from __future__ import annotations

import argparse
import os
import platform
import threading
import time
from collections.abc import Callable

import numpy as np

import tilecraft as tc
from tilecraft import ops, te


def _gemm(n: int) -> tuple[tc.Executable, dict[str, np.ndarray]]:
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    exe = tc.compile(ops.matmul(A, B, name="C"), target="x86_avx512")
    if not any(step.workspaces for step in exe._steps):
        raise SystemExit(f"the {n}x{n} GEMM uses no workspace; nothing to measure")
    rng = np.random.default_rng(0)
    return exe, {"A": rng.standard_normal((n, n), dtype=np.float32),
                 "B": rng.standard_normal((n, n), dtype=np.float32)}


def _wall(call: Callable[[], object], calls: int, threads: int) -> float:
    """Seconds to make ``calls`` calls split over ``threads`` threads."""
    per_thread = calls // threads
    barrier = threading.Barrier(threads + 1)

    def body() -> None:
        barrier.wait()
        for _ in range(per_thread):
            call()

    workers = [threading.Thread(target=body) for _ in range(threads)]
    for worker in workers:
        worker.start()
    barrier.wait()
    start = time.perf_counter()
    for worker in workers:
        worker.join()
    return time.perf_counter() - start


def _cpu() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=4000)
    parser.add_argument("--big-calls", type=int, default=80)
    parser.add_argument("--small", type=int, default=32)
    parser.add_argument("--big", type=int, default=384)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3, help="best of this many runs")
    args = parser.parse_args(argv)
    print(f"CPU: {_cpu()}; usable cores: {len(os.sched_getaffinity(0))}")
    print(f"{'kernel':<14}{'threads':>8}{'per-call ws (us)':>18}{'one lock (us)':>15}")
    for label, n, calls in (("small GEMM", args.small, args.calls),
                            ("large GEMM", args.big, args.big_calls)):
        exe, inputs = _gemm(n)
        lock = threading.Lock()

        def free() -> object:
            return exe(**inputs)

        def locked() -> object:
            with lock:
                return exe(**inputs)

        for _ in range(3):
            free()
        for threads in (1, args.threads):
            figures = [min(_wall(fn, calls, threads) for _ in range(args.repeat)) / calls * 1e6
                       for fn in (free, locked)]
            print(f"{f'{label} {n}':<14}{threads:>8}{figures[0]:>18.1f}{figures[1]:>15.1f}")


if __name__ == "__main__":
    main()
