"""Fusion decisions for training (thesis §4.6.2): a memory-bound operator of the forward graph
fused with its producer, its consumer, both, or neither, decided by Eq. 4.10.

Fusing a forward pair ``X -> Y`` (``t`` the tensor between them) has three effects once the
backward graph is there:

* the forward graph no longer writes and reads ``t``: ``dT += 2 |t|``, one kernel fewer;
* the backward graph fuses the two operators' gradients the same way, so the gradient of
  ``t`` is neither written nor read: ``dT += 2 |g_t|``, one kernel fewer;
* a gradient compute that reads ``t`` (a saved activation: relu' reads its input, a weight
  gradient the layer's input) now recomputes it from ``X``'s inputs: ``dC -= flops(X)``,
  ``dT += |t| - |inputs of X|``.

``R = dT / P_d + dC / P_c + dK * L_start`` (Eq. 4.10,
:func:`tilecraft.fusion.benefit.fusion_benefit`) with the target's peak figures. *One + One*
(both one input, e.g. pad -> relu) always pays; *Many + One* and *One + Many* pay unless
the recomputed operator is costly (a conv whose output relu' reads); *Many + Many* of two
compute-intensive operators is left to the graph-level chain planner. "Both" adds the two
pairs' terms; "neither" is chosen when no case has a positive R, and the decision says why.

>>> from tilecraft import ops, te
>>> from tilecraft.autodiff import backward
>>> from tilecraft.fusion.benefit import PeakFigures
>>> from tilecraft.graph import Graph
>>> x = te.placeholder((64, 256), name="x")
>>> w1 = te.placeholder((256, 256), name="w1")
>>> w2 = te.placeholder((10, 256), name="w2")
>>> h = ops.relu(ops.dense(x, w1, name="d1"), name="h")
>>> loss = ops.mean(ops.dense(h, w2, name="d2"), name="loss")
>>> bw = backward(Graph.from_outputs([loss]), loss, wrt=[w1, w2])
>>> peaks = PeakFigures(bandwidth_bytes_per_s=40e9, flops_per_s=1e12)
>>> decision = decide(bw, peaks)["h"]
>>> decision.case.value, decision.consumer.kind, decision.producer.kind
('with consumer', 'One+Many', 'Many+One')
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from tilecraft.autodiff.backward import BackwardGraph
from tilecraft.fusion.benefit import FusionBenefit, PeakFigures, fusion_benefit
from tilecraft.fusion.classify import flop_count, is_compute_intensive
from tilecraft.target.spec import TargetSpec
from tilecraft.te.tensor import Tensor


class Case(str, enum.Enum):
    PRODUCER = "with producer"
    CONSUMER = "with consumer"
    BOTH = "with both"
    NEITHER = "neither"


@dataclass(frozen=True)
class PairEstimate:
    """Eq. 4.10 for fusing the forward pair ``producer -> consumer`` and its gradients."""

    producer: str
    consumer: str
    kind: str  # "One+One", "One+Many", "Many+One", "Many+Many"
    benefit: FusionBenefit
    recomputed: bool  # the backward graph reads the eliminated tensor, so recomputes it

    def __str__(self) -> str:
        again = f", {self.producer} recomputed in the backward" if self.recomputed else ""
        return f"{self.producer} -> {self.consumer} ({self.kind}{again}): {self.benefit}"


@dataclass(frozen=True)
class TrainingFusionDecision:
    operator: str
    case: Case
    producer: PairEstimate | None
    consumer: PairEstimate | None
    benefit: FusionBenefit | None
    reason: str

    def __str__(self) -> str:
        return f"training fusion {self.operator}: {self.case.value} - {self.reason}"


def _arity(tensor: Tensor) -> str:
    return "One" if len([t for t in tensor.inputs if not t.is_constant]) <= 1 else "Many"


def _bytes(tensor: Tensor) -> float:
    return float(tensor.size * tensor.dtype.bytes)


def _pair(bw: BackwardGraph, producer: Tensor, consumer: Tensor,
          peaks: PeakFigures) -> PairEstimate | str:
    """The estimate of fusing ``producer -> consumer``, or why the pair cannot fuse."""
    graph = bw.forward
    kind = f"{_arity(producer)}+{_arity(consumer)}"
    if is_compute_intensive(producer) and is_compute_intensive(consumer):
        return (f"{producer.name} -> {consumer.name} is Many+Many of two compute-intensive "
                "operators: the chain planner decides it")
    others = [c.name for c in graph.consumers(producer) if c is not consumer]
    if others or producer in graph.outputs:
        read_by = ", ".join(others) or "the caller (an output)"
        return f"{producer.name} is also read by {read_by}, so it is written anyway"
    saved_bytes, saved_flops, kernels = 2 * _bytes(producer), 0.0, 1
    gradient = bw.grad_of.get(producer.name)
    if gradient is not None and not gradient.is_placeholder:
        saved_bytes += 2 * _bytes(gradient)
        kernels += 1
    backward_readers = [t for t in bw.gradient_computes if producer in t.inputs]
    if backward_readers:
        saved_flops -= flop_count(producer)
        saved_bytes += _bytes(producer) - sum(_bytes(t) for t in producer.inputs)
    return PairEstimate(producer.name, consumer.name, kind,
                        fusion_benefit(saved_bytes, saved_flops, kernels, peaks),
                        bool(backward_readers))


def decide(bw: BackwardGraph,
           target: PeakFigures | TargetSpec) -> dict[str, TrainingFusionDecision]:
    """The §4.6.2 decision for each memory-bound compute of the forward graph, by name."""
    peaks = target if isinstance(target, PeakFigures) else \
        PeakFigures.from_spec(target, bw.loss.dtype)
    graph = bw.forward
    decisions: dict[str, TrainingFusionDecision] = {}
    for tensor in graph.computes:
        if is_compute_intensive(tensor):
            continue
        notes: list[str] = []
        producer = None
        for candidate in (p for p in tensor.inputs if not p.is_placeholder):
            estimate = _pair(bw, candidate, tensor, peaks)
            if isinstance(estimate, str):
                notes.append(estimate)
            elif producer is None or estimate.benefit.seconds > producer.benefit.seconds:
                producer = estimate
        consumers = graph.consumers(tensor)
        consumer = None
        if len(consumers) == 1:
            estimate = _pair(bw, tensor, consumers[0], peaks)
            if isinstance(estimate, str):
                notes.append(estimate)
            else:
                consumer = estimate
        elif consumers:
            notes.append(f"{tensor.name} feeds {len(consumers)} computes, so it is written anyway")
        options: list[tuple[Case, FusionBenefit]] = []
        if producer is not None:
            options.append((Case.PRODUCER, producer.benefit))
        if consumer is not None:
            options.append((Case.CONSUMER, consumer.benefit))
        if producer is not None and consumer is not None:
            p, c = producer.benefit, consumer.benefit
            options.append((Case.BOTH, fusion_benefit(
                p.saved_bytes + c.saved_bytes, p.saved_flops + c.saved_flops,
                p.saved_kernels + c.saved_kernels, peaks)))
        estimates = "; ".join(str(e) for e in (producer, consumer) if e is not None)
        best = max(options, key=lambda option: option[1].seconds, default=None)
        if best is None or not best[1].worthwhile:
            why = estimates + ": no case has R > 0" if estimates else "nothing to fuse with"
            reason = "; ".join([why, *notes])
            decisions[tensor.name] = TrainingFusionDecision(tensor.name, Case.NEITHER, producer,
                                                            consumer, None, reason)
            continue
        case, gain = best
        reason = "; ".join([f"{gain} ({estimates})", *notes])
        decisions[tensor.name] = TrainingFusionDecision(tensor.name, case, producer, consumer,
                                                        gain, reason)
    return decisions


__all__ = ["Case", "PairEstimate", "TrainingFusionDecision", "decide"]
