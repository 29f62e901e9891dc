"""Search efficiency (thesis Fig. 4.9): Q-method vs P-method vs random search on x86 templates.

For each operator the three engines get the same budget of measured trials on the x86 micro-kernel
template's space (register tile x KC x MC). Printed per operator: each engine's final best
(GFLOP/s), the trials the Q-method needed to reach the P-method's final best ("-" if it did not),
the trials each needed to reach 90% of its own final result, and wall time. Run:
``python bench/bench_search.py [--trials N]``.
"""

from __future__ import annotations

import sys

from common import print_table

from tilecraft.target.registry import get_target
from tilecraft.tuning.programs import conv2d, matmul
from tilecraft.tuning.tuner import tune

OPERATORS = {
    "gemm 512^3": lambda: matmul(512, 512, 512),
    "gemm 128x2304x768": lambda: matmul(128, 2304, 768),
    "conv C7 (1x1 512->256 @28)": lambda: conv2d(1, 512, 28, 28, 256, 1),
}


def _trials_to(trials, threshold: float) -> int | None:
    for index, (_, cost, _) in enumerate(trials):
        if cost <= threshold:
            return index + 1
    return None


def main() -> None:
    budget = 40
    if "--trials" in sys.argv:
        budget = int(sys.argv[sys.argv.index("--trials") + 1])
    target = get_target("x86_avx512")
    rows = []
    for name, build in OPERATORS.items():
        results = {}
        for engine in ("q", "p", "random"):
            result = tune(build(), target, {"preset": "quick", "trials": budget, "patience": None,
                                            "engine": engine, "seed": 0, "repeats": 3,
                                            "progress": False})
            results[engine] = result.tasks[0]
        p_best = results["p"].best_seconds
        q_reach = _trials_to(results["q"].trials, p_best * 1.0001)
        cells = [name]
        for engine in ("q", "p", "random"):
            task = results[engine]
            cells.append(f"{task.best_gflops:.0f}" if task.best_gflops else "failed")
        cells.append(str(q_reach) if q_reach else "-")
        for engine in ("q", "p", "random"):
            cells.append(str(results[engine].time_to_fraction(0.9) or "-"))
        cells.append("/".join(f"{results[e].seconds:.0f}" for e in ("q", "p", "random")))
        rows.append(cells)
    print_table(f"search efficiency, {budget} measured trials per engine (GFLOP/s of the best)",
                ["operator", "Q", "P", "random", "Q trials to P's best",
                 "Q to 90%", "P to 90%", "random to 90%", "seconds Q/P/random"], rows)


if __name__ == "__main__":
    main()
