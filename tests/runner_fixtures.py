"""Shared pieces of the measurement-runner tests: a cost table over the x86 matmul template's
space (deterministic costs, some failures) and a tuning run that records its best sequence."""

from __future__ import annotations

import math
from typing import Any

from tilecraft.search.cost_table import CostTable
from tilecraft.target.registry import get_target
from tilecraft.tuning.programs import matmul
from tilecraft.tuning.runners import CostReplay
from tilecraft.tuning.tuner import task_space, tune

TARGET = "x86_avx512"


def table_cost(point: tuple[int, ...]) -> float:
    """A bumpy, deterministic cost landscape; every 11th point fails."""
    code = sum((index + 5) * (value + 2) ** 2 * 7919 for index, value in enumerate(point))
    if code % 11 == 0:
        return math.inf
    return 1e-3 * (1.0 + (code % 97) / 10.0)


def replay_setup(**replay_options: Any) -> tuple[Any, Any, CostReplay, CostTable]:
    """(the matmul compute, the target, its replay evaluator, the cost table)."""
    compute = matmul(64, 48, 40)
    target = get_target(TARGET)
    template, _ = task_space(compute, target)
    table = CostTable.from_function("matmul-64x48x40", template.space, table_cost)
    replay = CostReplay.from_cost_table(table, template, compute.name, **replay_options)
    return compute, target, replay, table


def best_sequence(compute: Any, target: Any, runner: Any, seed: int = 3, trials: int = 40,
                  engine: str = "q", database: Any = None) -> tuple[list[Any], Any]:
    """Tune with ``runner``; the configs that were best after each trial, and the task."""
    options = {"preset": "quick", "trials": trials, "engine": engine, "seed": seed,
               "patience": math.inf, "progress": False, "database": database}
    (task,) = tune(compute, target, options, runner=runner).tasks
    sequence, best = [], math.inf
    for config, cost, _ in task.trials:
        if cost < best:
            best = cost
            sequence.append(config)
    return sequence, task
