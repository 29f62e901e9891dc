"""Search efficiency (thesis §4.4.1, Fig. 4.9): Q-method vs P-method vs random search.

Three modes:

- default (what ``make bench`` runs): the **replay study**. Every point of five real x86 spaces
  was measured once (``--build-tables``) into cost tables under ``bench/data/``; each engine is
  replayed on those costs over many seeds, so every engine meets the same costs and the study
  is deterministic. Printed per space: the median measurements each engine needs to reach the
  space's true optimum / 95% / 90% of it, and the median fraction of the optimum it reaches
  with fixed budgets. ``--quick`` runs fewer seeds and budgets. ``--seeds N`` sets the seeds.
- ``--build-tables [NAME ...]``: measure every point of the spaces (all, or those whose key
  contains a NAME) and write the tables; run it pinned and once: ``taskset -c 1 python
  bench/bench_search.py --build-tables``.
- ``--live [--trials N]``: the old table: each engine gets N live-measured trials (tuner,
  quick preset, seed 0) on the x86 template space of three operators.

The spaces: the x86 micro-kernel template (register tile x KC x MC strips) of three
contractions, and two *slices* of FlexTensor's generic schedule space (``generate_space``; the
full spaces hold 10^5-10^9 points): a few sub-spaces free, the rest held at a fixed random
anchor point (seed 0), every point of the slice measured (see
:func:`tilecraft.search.slicing.slice_space`). A point's cost is the fastest of 7 timed runs
over two passes (three where they disagree), measured on one pinned core (1 thread).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from common import print_table

from tilecraft import ops, te
from tilecraft.search import generate_space
from tilecraft.search.cost_table import CostTable, CostTableError, machine_fingerprint
from tilecraft.search.engines import (
    PMethodSearch,
    QMethodSearch,
    RandomSearch,
    SearchEngine,
    SearchResult,
)
from tilecraft.search.slicing import slice_space
from tilecraft.search.space import Space
from tilecraft.search.study import format_trials, replay, summarize
from tilecraft.target.registry import get_target
from tilecraft.te.tensor import Tensor
from tilecraft.tuning.programs import conv2d, matmul

DATA = Path(__file__).parent / "data"
#: the seed of the synthetic landscapes' target point (far from the searches' seeds)
GOAL_SEED = 424242
TARGET = "x86_avx512"


@dataclass(frozen=True)
class StudySpace:
    """A space of the study: ``build()`` gives the compute; ``free`` (for generic spaces) the
    sub-spaces left free in the slice, ``None`` for the target's template space."""

    key: str
    title: str
    build: Callable[[], Tensor]
    free: tuple[str, ...] | None = None

    @property
    def path(self) -> Path:
        return DATA / f"search_costs_{self.key}.json"


def _softmax() -> Tensor:
    return ops.softmax(te.placeholder((64, 1000), name="A"))


STUDY_SPACES = [
    StudySpace("gemm512", "gemm 512^3 (template)", lambda: matmul(512, 512, 512)),
    StudySpace("gemm128x2304x768", "gemm 128x2304x768 (template)",
               lambda: matmul(128, 2304, 768)),
    StudySpace("conv1x1", "conv 1x1 512->256 @28 (template)",
               lambda: conv2d(1, 512, 28, 28, 256, 1)),
    StudySpace("conv3x3_generic", "conv 3x3 32->32 @16 (generic slice)",
               lambda: conv2d(1, 32, 16, 16, 32, 3, padding=1),
               ("split.h", "reorder.spatial", "unroll")),
    StudySpace("softmax_generic", "softmax 64x1000 (generic slice)", _softmax,
               ("split.i0", "split.i1")),
]


def study_space(entry: StudySpace) -> tuple[Space, Callable, str, Tensor]:
    """(the searched space, point -> config, the builder, the compute) of ``entry``."""
    from tilecraft.tuning.builders import SCHEDULE_BUILDER, TEMPLATE_BUILDER

    target = get_target(TARGET)
    tensor = entry.build()
    if entry.free is None:
        template = target.template_space(tensor)
        return template.space, template.decode, TEMPLATE_BUILDER, tensor
    full = generate_space(tensor, target.spec)
    anchor = full.random_point(np.random.default_rng(0))
    part = slice_space(full, entry.free, anchor, name=f"{entry.key}")
    return part, part.decode, SCHEDULE_BUILDER, tensor


# building the tables (measurement) ---------------------------------------------------------

def _measure_pass(measurer, workload, tensor, decode, builder, points, errors):
    """Each point's fastest repeat (seconds; ``math.inf`` on failure), in order."""
    from tilecraft.tuning.candidate import MeasureInput

    found = []
    for begin in range(0, len(points), 64):
        chunk = points[begin:begin + 64]
        inputs = [MeasureInput(workload, TARGET, {tensor.name: decode(p)}, builder=builder,
                               label=tensor.name) for p in chunk]
        for result in measurer.measure(inputs):
            if result.ok:
                found.append(min(result.costs))
            else:
                kind = str(getattr(result.error_kind, "value", result.error_kind))
                errors[kind] = errors.get(kind, 0) + 1
                found.append(math.inf)
    return found


def build_table(entry: StudySpace, repeats: int = 7, min_seconds: float = 0.0005,
                agree: float = 0.03) -> CostTable:
    """Measure every point of ``entry``'s space (in a worker process, checked against the
    reference) and save the table.

    Other processes sharing the core only ever slow a run down, so a point's cost is the
    fastest of its ``repeats`` timed runs, and every point is measured in two passes far apart
    in time, a third where the two disagree by more than ``agree``; the table keeps the least.
    """
    from tilecraft.tuning.candidate import MeasureSettings
    from tilecraft.tuning.measure import Measurer
    from tilecraft.tuning.tuner import compute_workload

    space, decode, builder, tensor = study_space(entry)
    workload = compute_workload(tensor)
    points = list(space.points())
    settings = MeasureSettings(warmup=1, repeats=repeats, min_seconds=min_seconds,
                               timeout_s=20.0)
    errors: dict[str, int] = {}
    started = time.perf_counter()
    with Measurer(n_workers=1, settings=settings) as measurer:
        def run(chosen):
            return _measure_pass(measurer, workload, tensor, decode, builder, chosen, errors)
        passes = [dict(zip(points, run(points)))]
        print(f"  {entry.key}: pass 1, {time.perf_counter() - started:.0f} s", flush=True)
        passes.append(dict(zip(points, run(points))))
        print(f"  {entry.key}: pass 2, {time.perf_counter() - started:.0f} s", flush=True)
        disputed = [p for p in points if _disagree(passes[0][p], passes[1][p], agree)]
        passes.append(dict(zip(disputed, run(disputed))))
        print(f"  {entry.key}: pass 3 ({len(disputed)} disputed points), "
              f"{time.perf_counter() - started:.0f} s", flush=True)
    costs = {p: min(run_costs.get(p, math.inf) for run_costs in passes) for p in points}
    seconds = time.perf_counter() - started
    meta = {"title": entry.title, "target": TARGET, "flops": workload.instantiate().flops,
            "repeats": repeats, "min_seconds": min_seconds, "warmup": 1, "passes": 3,
            "disputed": len(disputed),
            "cost": "fastest timed run over the passes (seconds); null = failed in every pass",
            "errors": errors, "affinity": sorted(os.sched_getaffinity(0)),
            "build_seconds": round(seconds, 1), "built": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "fixed": {k: repr(v) for k, v in space.fixed.items()}}
    table = CostTable(entry.key, space, costs, machine=machine_fingerprint(), meta=meta)
    table.save(entry.path)
    return table


def _disagree(first: float, second: float, agree: float) -> bool:
    if math.isinf(first) or math.isinf(second):
        return math.isinf(first) != math.isinf(second)
    return max(first, second) > (1 + agree) * min(first, second)


def build_tables(names: list[str]) -> None:
    chosen = [e for e in STUDY_SPACES if not names or any(n in e.key for n in names)]
    for entry in chosen:
        space = study_space(entry)[0]
        print(f"measuring {entry.key}: {space.size} points "
              f"(CPUs {sorted(os.sched_getaffinity(0))})", flush=True)
        table = build_table(entry)
        print(f"  wrote {entry.path}: optimum {table.optimum * 1e6:.1f} us, "
              f"{table.failures} failed, {table.meta['build_seconds']} s", flush=True)


# the replay study --------------------------------------------------------------------------

#: the engines of the study: label -> factory
STUDY_ENGINES: dict[str, Callable[[], SearchEngine]] = {
    "Q (move net)": lambda: QMethodSearch(),
    "Q (thesis net)": lambda: QMethodSearch(q_input="point"),
    "Q (value net)": lambda: QMethodSearch(q_input="value"),
    "Q ablation (random dirs)": lambda: QMethodSearch(learned=False),
    "P": lambda: PMethodSearch(),
    "random": lambda: RandomSearch(),
}


def load_tables(any_machine: bool = False) -> list[tuple[StudySpace, CostTable]]:
    tables = []
    for entry in STUDY_SPACES:
        try:
            tables.append((entry, CostTable.load(entry.path, study_space(entry)[0],
                                                 any_machine=any_machine)))
        except CostTableError as err:
            print(f"skipping {entry.key}: {err}")
    return tables


def hit_rates(table: CostTable, budget: int, seeds: range) -> tuple[float, float, int]:
    """How often the learned Q-method's network-made choices improved on their start, against
    the chance a uniformly random choice among the same options would have: (hit rate, chance,
    choices)."""
    hits: list[float] = []
    chance: list[float] = []

    def record(point, options, chosen, by_network) -> None:
        if not by_network:
            return
        here = table.costs[point]
        better = [table.costs[end] < here for _, end in options]
        hits.append(float(table.costs[chosen[1]] < here))
        chance.append(sum(better) / len(better))

    replay(QMethodSearch(on_choice=record), table, budget, seeds)
    if not hits:
        return math.nan, math.nan, 0
    return float(np.mean(hits)), float(np.mean(chance)), len(hits)


def _pct(value: float) -> str:
    return f"{100 * value:.1f}%"


def study(seeds: int, budget: int, budgets: tuple[int, ...], any_machine: bool) -> None:
    tables = load_tables(any_machine)
    if not tables:
        print("no cost tables: build them with `taskset -c 1 python bench/bench_search.py "
              "--build-tables`")
        return
    seed_range = range(seeds)
    fig49 = []
    diagnostics = []
    for entry, table in tables:
        space = table.space
        finite = [c for c in table.costs.values() if math.isfinite(c)]
        near = {f: sum(c <= table.threshold(f) for c in finite) for f in (0.95, 0.9)}
        flops = table.meta.get("flops")
        best = f", {flops / table.optimum / 1e9:.0f} GFLOP/s" if flops else ""
        title = (f"{table.meta.get('title', entry.key)}: {space.size} points, "
                 f"{len(space.directions)} directions, optimum {table.optimum * 1e6:.1f} us"
                 f"{best}; {near[0.95]} points >= 95%, {near[0.9]} >= 90%, "
                 f"{table.failures} failed; {seeds} seeds, budget {budget}")
        started = time.perf_counter()
        runs = {label: replay(factory(), table, budget, seed_range)
                for label, factory in STUDY_ENGINES.items()}
        print_engine_table(title, runs, table.optimum, budget, budgets)
        print(f"  (replayed in {time.perf_counter() - started:.1f} s)")
        fig49.append([entry.key] + _fig49_cells(runs, table, budget))
        hit, chance, count = hit_rates(table, budget, seed_range)
        diagnostics.append([entry.key, str(count), _pct(hit), _pct(chance)])
    print_table(f"thesis Fig. 4.9 view (medians over {seeds} seeds, budget {budget})",
                ["space", "P's final best", "P trials to it", "Q trials to P's best",
                 "ablation trials to P's best", "random at Q's count"], fig49)
    print_table("did the Q-network learn? its own choices that improved, vs a random choice "
                "among the same options", ["space", "network choices", "improved",
                                           "random would have"], diagnostics)


def print_engine_table(title: str, runs: dict[str, list[SearchResult]], optimum: float,
                       budget: int, budgets: tuple[int, ...]) -> None:
    rows = []
    for label, engine_runs in runs.items():
        summary = summarize(label, engine_runs, optimum, budgets=budgets)
        rows.append([label] + [format_trials(summary.reached[f][0], summary.seeds,
                                             summary.reached[f][1], budget)
                               for f in (1.0, 0.95, 0.9)]
                    + [_pct(summary.quality[b]) for b in budgets])
    print_table(title, ["engine", "to optimum", "to 95%", "to 90%"]
                + [f"@{b}" for b in budgets], rows)


def synthetic_study(seeds: int, budget: int, budgets: tuple[int, ...]) -> None:
    """The engines on FlexTensor's full generic space of the 3x3 conv (about 10^9 points),
    with synthetic costs: a quadratic bowl in the points' features around a random target
    point, least cost 1 ms there; "rugged" multiplies every other point's cost by up
    to 1.2 with hash noise."""
    import zlib

    tensor = next(e for e in STUDY_SPACES if e.key == "conv3x3_generic").build()
    space = generate_space(tensor, get_target(TARGET).spec)
    # the goal is drawn from a seed no search uses (a search's first random point with seed s
    # is space.random_point(default_rng(s)))
    goal_point = space.random_point(np.random.default_rng(GOAL_SEED))
    goal = space.features(goal_point)

    def smooth(point) -> float:
        return 1e-3 * (1.0 + float(np.sum((space.features(point) - goal) ** 2)))

    def rugged(point) -> float:
        if tuple(point) == goal_point:
            return 1e-3
        noise = zlib.crc32(repr(point).encode()) % 1000 / 1000
        return smooth(point) * (1 + 0.2 * noise)

    for name, cost in (("smooth", smooth), ("rugged", rugged)):
        def batch(points, cost=cost):
            return [cost(p) for p in points]
        started = time.perf_counter()
        runs = {label: [factory().search(space, batch, budget, seed) for seed in range(seeds)]
                for label, factory in STUDY_ENGINES.items()}
        # the least cost is the target point's, 1 ms, in both landscapes
        print_engine_table(f"synthetic {name} costs on the full generic space of the 3x3 conv:"
                           f" {space.size:.2e} points, {len(space.directions)} directions; "
                           f"{seeds} seeds, budget {budget}", runs, 1e-3, budget, budgets)
        print(f"  (ran in {time.perf_counter() - started:.1f} s)")


def _fig49_cells(runs: dict, table: CostTable, budget: int) -> list[str]:
    """Per seed: P's final best, the trials P / Q / the ablation need to reach it, and what
    random search reaches after Q's number of trials; medians over seeds."""
    p_runs, q_runs = runs["P"], runs["Q (move net)"]
    ablation, random_runs = runs["Q ablation (random dirs)"], runs["random"]
    finals, p_to, q_to, a_to, random_at = [], [], [], [], []
    for p_run, q_run, a_run, r_run in zip(p_runs, q_runs, ablation, random_runs):
        target = p_run.best_cost * (1 + 1e-12)
        finals.append(table.fraction_of_optimum(p_run.best_cost))
        p_to.append(p_run.trials_to_reach(target) or math.inf)
        q_to.append(q_run.trials_to_reach(target) or math.inf)
        a_to.append(a_run.trials_to_reach(target) or math.inf)
        count = q_to[-1] if math.isfinite(q_to[-1]) else budget
        random_at.append(table.fraction_of_optimum(r_run.best_so_far()[int(count) - 1]))

    def trials(values: list[float]) -> str:
        got = sum(math.isfinite(v) for v in values)
        median = float(np.median(values))
        shown = f">{budget}" if math.isinf(median) else f"{median:.0f}"
        return f"{shown} ({got}/{len(values)})"

    return [_pct(float(np.median(finals))), trials(p_to), trials(q_to), trials(a_to),
            _pct(float(np.median(random_at)))]


# live measurement (the previous table) ---------------------------------------------------

LIVE_OPERATORS = {
    "gemm 512^3": lambda: matmul(512, 512, 512),
    "gemm 128x2304x768": lambda: matmul(128, 2304, 768),
    "conv C7 (1x1 512->256 @28)": lambda: conv2d(1, 512, 28, 28, 256, 1),
}


def live(budget: int) -> None:
    """Each engine gets ``budget`` live-measured trials (tuner, quick preset, seed 0)."""
    from tilecraft.tuning.tuner import tune

    target = get_target(TARGET)
    rows = []
    for name, build in LIVE_OPERATORS.items():
        results = {}
        for engine in ("q", "p", "random"):
            result = tune(build(), target, {"preset": "quick", "trials": budget, "patience": None,
                                            "engine": engine, "seed": 0, "repeats": 3,
                                            "progress": False})
            results[engine] = result.tasks[0]
        p_best = results["p"].best_seconds
        q_reach = next((i + 1 for i, (_, cost, _) in enumerate(results["q"].trials)
                        if cost <= p_best * 1.0001), None)
        cells = [name]
        for engine in ("q", "p", "random"):
            task = results[engine]
            cells.append(f"{task.best_gflops:.0f}" if task.best_gflops else "failed")
        cells.append(str(q_reach) if q_reach else "-")
        for engine in ("q", "p", "random"):
            cells.append(str(results[engine].time_to_fraction(0.9) or "-"))
        cells.append("/".join(f"{results[e].seconds:.0f}" for e in ("q", "p", "random")))
        rows.append(cells)
    print_table(f"live search, {budget} measured trials per engine (GFLOP/s of the best)",
                ["operator", "Q", "P", "random", "Q trials to P's best",
                 "Q to 90%", "P to 90%", "random to 90%", "seconds Q/P/random"], rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build-tables", nargs="*", metavar="NAME",
                        help="measure the spaces (those whose key contains a NAME) into tables")
    parser.add_argument("--quick", action="store_true", help="5 seeds, budget 100")
    parser.add_argument("--seeds", type=int, default=None, help="seeds per engine (20)")
    parser.add_argument("--budget", type=int, default=None, help="trials per search (200)")
    parser.add_argument("--any-machine", action="store_true",
                        help="replay tables measured on another machine")
    parser.add_argument("--live", action="store_true", help="the live-measurement table")
    parser.add_argument("--trials", type=int, default=40, help="trials per engine with --live")
    args = parser.parse_args(argv)
    if args.build_tables is not None:
        build_tables(args.build_tables)
        return 0
    if args.live:
        live(args.trials)
        return 0
    seeds = args.seeds or (5 if args.quick else 20)
    budget = args.budget or (100 if args.quick else 200)
    budgets = tuple(b for b in (20, 50, 100, 200) if b <= budget)
    study(seeds, budget, budgets, args.any_machine)
    synthetic_study(3 if args.quick else 10, 300, (50, 100, 300))
    return 0


if __name__ == "__main__":
    sys.exit(main())
