"""Evaluating one candidate inside a runner's worker, by its target's evaluation mode.

A remote worker (a Ray actor) is itself the isolation: it evaluates candidates in its own
process, and a candidate that crashes takes only that worker down. :func:`evaluate_candidate`
is the default :data:`~tilecraft.tuning.runners.protocol.Evaluator`: the target's model for a
target that estimates, build + check + time for one that measures (the model's prediction kept
alongside for mode ``both``).

>>> from tilecraft.tuning.workload import Workload
>>> result = evaluate_candidate(MeasureInput(Workload.from_catalog("relu[13x17]"),  # doctest: +SKIP
...                                          "x86_avx512"), MeasureSettings(repeats=2))
>>> result.ok                                                       # doctest: +SKIP
True
"""

from __future__ import annotations

import dataclasses

from tilecraft.target.spec import EvaluationMode
from tilecraft.tuning.candidate import (
    MeasureInput,
    MeasureResult,
    MeasureSettings,
    estimate_candidate,
    evaluate_in_process,
    resolve_target,
)

__all__ = ["evaluate_candidate"]


def evaluate_candidate(candidate: MeasureInput, settings: MeasureSettings) -> MeasureResult:
    """Evaluate ``candidate`` in this process, as its target's ``spec.evaluation`` says."""
    target = resolve_target(candidate.target)
    mode = target.spec.evaluation
    if mode is EvaluationMode.ESTIMATE:
        return estimate_candidate(candidate, target)
    result = evaluate_in_process(candidate, settings)
    if mode is EvaluationMode.BOTH:
        estimate = estimate_candidate(candidate, target)
        result = dataclasses.replace(result, estimate_seconds=estimate.estimate_seconds)
    return result
