"""Measurement runners: the local process pool vs a local Ray cluster, and a simulated fleet.

Two parts:

- **local vs Ray** (real candidates): the x86 matmul template tuned for a fixed budget of
  trials (random engine, seed 0, quick preset) once with the local pool of ``--workers``
  processes and once on a local Ray cluster with as many x86 device units; printed: wall time,
  candidates per minute, and the Ray overhead per candidate.
- **simulated fleet** (no measurement noise): a Ray cluster offering 16 units of a fake device;
  batches of cost-table replay candidates (each "measured" in ``--delay`` seconds) spread over
  1, 2, 4, 8, 16 workers; printed: candidates per minute, speed-up over one worker, and the
  per-candidate overhead (wall time x workers / candidates - delay).

    python bench/bench_runners.py            # needs `pip install 'tilecraft[ray]'`
    python bench/bench_runners.py --small    # a tiny budget
"""

from __future__ import annotations

import argparse
import time

from common import print_table

from tilecraft.target.registry import get_target
from tilecraft.tuning import MeasureInput, TuningOptions, Workload
from tilecraft.tuning.programs import matmul
from tilecraft.tuning.record import canonical_json
from tilecraft.tuning.runners import CostReplay, LocalRunner
from tilecraft.tuning.tuner import tune

TARGET = "x86_avx512"
FLEET_DEVICE = "simulated_device"


def local_vs_ray(ray, trials: int, workers: int) -> list[list[str]]:
    from tilecraft.tuning.runners.ray_runner import RayRunner

    target = get_target(TARGET)
    options = {"preset": "quick", "trials": trials, "engine": "random", "seed": 0,
               "progress": False, "n_workers": workers}
    rows, walls = [], {}
    for name in ("local", "ray"):
        compute = matmul(96, 80, 72)
        settings = TuningOptions.coerce(options).measure_settings()
        runner = LocalRunner(workers, settings) if name == "local" else RayRunner(settings=settings)
        started = time.perf_counter()
        with runner:
            (task,) = tune(compute, target, options, runner=runner).tasks
        wall = walls[name] = time.perf_counter() - started
        rows.append([name, str(len(task.trials)), f"{wall:.2f}",
                     f"{len(task.trials) / wall * 60:.0f}", f"{task.best_gflops or 0:.1f}"])
    overhead = (walls["ray"] - walls["local"]) / trials
    rows.append(["ray - local", "", "", "", f"overhead {overhead * 1e3:.1f} ms/candidate"])
    return rows


def fleet(ray, per_worker: int, delay_s: float, sizes: list[int]) -> list[list[str]]:
    from tilecraft.tuning.runners.ray_runner import RayRunner

    schedules = [{"C": {"tile": i}} for i in range(per_worker * max(sizes))]
    replay = CostReplay({canonical_json(s): 1e-3 * (1 + i % 7) for i, s in enumerate(schedules)},
                        delay_s=delay_s)
    rows, base = [], None
    for size in sizes:
        candidates = per_worker * size
        batch = [MeasureInput(Workload("fleet:simulated", name="C"), FLEET_DEVICE, s)
                 for s in schedules[:candidates]]
        with RayRunner(evaluator=replay, max_workers_per_kind=size) as runner:
            runner.submit(batch[:size]).results()  # workers started and warm
            started = time.perf_counter()
            results = runner.submit(batch).results()
            wall = time.perf_counter() - started
        assert all(r.ok for r in results)
        rate = candidates / wall * 60
        base = base or rate
        overhead = wall * size / candidates - delay_s
        rows.append([str(size), f"{wall:.2f}", f"{rate:.0f}", f"{rate / base:.2f}x",
                     f"{overhead * 1e3:.1f}"])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="a tiny budget")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--delay", type=float, default=0.05,
                        help="simulated seconds per candidate in the fleet")
    args = parser.parse_args()
    try:
        import ray
    except ImportError:
        raise SystemExit("bench_runners needs Ray: pip install 'tilecraft[ray]'") from None
    trials = 6 if args.small else 32
    sizes = [1, 2, 4] if args.small else [1, 2, 4, 8, 16]
    per_worker = 8 if args.small else 40
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             resources={TARGET: args.workers, FLEET_DEVICE: max(sizes)})
    try:
        print(f"local pool vs local Ray cluster: x86 matmul 96x80x72, {trials} trials, "
              f"{args.workers} worker(s)")
        print_table("local pool vs Ray", ["runner", "trials", "wall s", "cand/min",
                                          "best GFLOP/s"], local_vs_ray(ray, trials, args.workers))
        print(f"\nsimulated fleet: cost-table replay, {args.delay:g} s per candidate, "
              f"{per_worker} candidates per worker")
        print_table("simulated fleet", ["workers", "wall s", "cand/min", "speed-up",
                                        "overhead ms/cand"],
                    fleet(ray, per_worker, args.delay, sizes))
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
