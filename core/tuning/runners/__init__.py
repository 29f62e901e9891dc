"""Measurement runners: where tuning candidates are measured, behind one protocol
(:mod:`.protocol`). The local isolated process pool is the default (:mod:`.local`); Ray
spreads candidates over a cluster's devices (:mod:`.ray_runner`, the ``tilecraft[ray]``
extra); cost-table replay evaluates without measuring (:mod:`.replay`)."""

from tilecraft.tuning.runners.evaluate import evaluate_candidate
from tilecraft.tuning.runners.local import LocalRunner
from tilecraft.tuning.runners.protocol import (
    CompletedBatch,
    Evaluator,
    MeasureRunner,
    QueueBatch,
    RunBatch,
    device_resource,
)
from tilecraft.tuning.runners.replay import CostReplay, ReplayRunner

__all__ = ["CompletedBatch", "CostReplay", "Evaluator", "LocalRunner", "MeasureRunner",
           "QueueBatch", "ReplayRunner", "RunBatch", "device_resource", "evaluate_candidate"]
