"""Which computes are lowered through an AMOS mapping: decided by comparing predictions
(thesis §5.6 — the model chooses among the verified mappings — carried one step further:
whether the best of them beats what the target would do without one).

For every compute with a usable mapping (verified by Algorithm 4, generated, and fitting the
target's memories under the default schedule), the cost model's prediction for its best
mapping, over every intrinsic of the target, is weighed against the prediction for the
alternative:

- the target's own lowering of the compute, where it has one
  (:meth:`Target.native_lowering <tilecraft.target.base.Target.native_lowering>`: x86's
  micro-kernel templates estimate themselves from their register tiles and the measured peak;
  a strategy that reports no estimate already uses the intrinsics and is kept);
- else the core's default loop nest (:func:`tilecraft.cost.loop_nest.estimate_loop_nest`).

The mapping's prediction is for the kernels the mapping is lowered to. Where the target lowers
it itself (:meth:`Target.lower_mapped <tilecraft.target.base.Target.lower_mapped>` returns
kernels: a GPU's warp-tiled Tensor Core kernel over every SM), it is the cost model on the
target's whole spec, with no packing loops (the target's kernels stage their operands
themselves). Otherwise it is for the kernel :func:`~tilecraft.intrin.lowering.lower_mapped`
generates: the cost model on the spec as that kernel uses it (its loops are serial:
:func:`~tilecraft.intrin.lowering.serial_view`), plus the element-by-element loops that pack
its operands, at the spec's scalar peak of one core. Among the intrinsics, a mapping the
target lowers itself is preferred to one left to the core's serial nest (also for
``tensorize=True``). It is chosen when it is predicted at least :data:`MAPPING_MARGIN` times
faster. A compute the fusion stage grouped stays in its group (the
fused kernel is the target's plan for it). ``tensorize=`` overrides the comparison
(:mod:`tilecraft.intrin.tensorize`: names or ``True`` force a mapping, ``False``/``"off"``
keeps computes off). Every decision keeps both predictions and the reason, for the mapping
stage's output and the compile report.

>>> from tilecraft import Graph, ops, te
>>> from tilecraft.intrin.examples import wmma
>>> from tilecraft.intrin.perfmodel import gpu_spec_example
>>> from tilecraft.lower import LoweringOptions
>>> from tilecraft.target.declared import DeclaredTarget
>>> class ToyGpu(DeclaredTarget):  # declares an intrinsic, has no lowering of its own
...     spec = gpu_spec_example().model_copy(update={"intrinsics": (wmma(16, 16, 16),)})
>>> A = te.placeholder((64, 64), "float16", name="A")
>>> B = te.placeholder((64, 64), "float16", name="B")
>>> graph = Graph.from_outputs([ops.matmul(A, B, out_dtype="float32", name="C")])
>>> target = ToyGpu()
>>> plan = decide_mappings(graph, target, LoweringOptions.from_spec(target.spec), None)
>>> decision = plan.decisions["C"]
>>> decision.tensorized, decision.source.value, decision.alternative
(True, 'model', "the core's default loop nest")
>>> decision.speedup > MAPPING_MARGIN
True
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tilecraft.errors import TilecraftError
from tilecraft.graph import Graph
from tilecraft.intrin.report import MEASURED_NOTE, MappingEntry, report_entry
from tilecraft.intrin.tensorize import (
    TensorizeChoices,
    TensorizedCompute,
    TensorizeRequest,
    plan_tensorization,
    read_request,
)
from tilecraft.lower.options import LoweringOptions
from tilecraft.target.base import LoweringEstimate, Target
from tilecraft.target.spec import TargetSpec
from tilecraft.te.tensor import Tensor

#: how many times faster the best mapping must be predicted than the alternative to be chosen:
#: the two predictions come from different models (AMOS's Eq. 5.6-5.8 against a template's or a
#: roofline's), so a difference within their errors must not flip a decision
MAPPING_MARGIN = 1.5

#: mappings the survey of one compute ranks at most, over all intrinsics (in the spec's order;
#: an intrinsic with more than are left is counted, not ranked): ranking one costs about a
#: millisecond, so a compute stays within the mapping report's 50 ms — bounded by work, not
#: by a clock, so that a compile decides the same on a busy machine
SURVEY_MAX_MAPPINGS = 40


#: what the compile report's predicted column is
SERIAL_NOTE = ("predicted mapping costs are for the kernels compile generates through a "
               "mapping: serial loops on one core (the cost model on the spec's serial view), "
               "without their packing loops, which the decisions add")


class DecisionSource(str, enum.Enum):
    """Who decided whether a compute is tensorized."""

    MODEL = "model"      # the comparison of predictions
    FORCED = "forced"    # tensorize= named it, or was True
    OFF = "off"          # tensorize= turned it off


@dataclass(frozen=True)
class MappingDecision:
    """Whether ``compute`` is tensorized, who decided (``source``) and why (``reason``), with
    both predictions: the best mapping's (``mapping``, ``mapping_seconds``; ``None`` where
    nothing was predicted) and the alternative's (``alternative``: the strategy,
    ``alternative_seconds``, ``alternative_basis``)."""

    compute: str
    tensorized: bool
    source: DecisionSource
    reason: str
    mapping: str | None = None
    mapping_seconds: float | None = None
    alternative: str | None = None
    alternative_seconds: float | None = None
    alternative_basis: str = ""

    @property
    def speedup(self) -> float | None:
        """The alternative's predicted time over the mapping's (``None`` without both)."""
        if not self.mapping_seconds or self.alternative_seconds is None:
            return None
        return self.alternative_seconds / self.mapping_seconds

    def describe(self) -> str:
        """One line: the verdict, who decided, and why.

        >>> MappingDecision("C", False, DecisionSource.OFF, "tensorize=False").describe()
        'C: not tensorized (off): tensorize=False'
        """
        verdict = "tensorized" if self.tensorized else "not tensorized"
        return f"{self.compute}: {verdict} ({self.source.value}): {self.reason}"


@dataclass
class MappingPlan:
    """What the mapping stage decided: the computes tensorized (name -> mapping), a decision
    for every compute with a usable mapping or named by ``tensorize=``, and the cheap mapping
    report (``entries``, ``notes``)."""

    tensorized: dict[str, TensorizedCompute] = field(default_factory=dict)
    decisions: dict[str, MappingDecision] = field(default_factory=dict)
    entries: list[MappingEntry] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Survey:
    """One compute matched on every intrinsic: the report's entries, the best usable
    mapping (``None`` if there is none) and the best usable mapping of every intrinsic
    (``candidates``)."""

    entries: tuple[MappingEntry, ...]
    best: TensorizedCompute | None
    candidates: tuple[TensorizedCompute, ...] = ()


@dataclass(frozen=True)
class _Prediction:
    """A mapping's predicted seconds: its nest's and its packing loops'; ``own`` when the
    target lowers the mapping itself (the nest is then predicted on the whole spec)."""

    item: TensorizedCompute
    nest: float
    packing: float
    own: bool

    @property
    def seconds(self) -> float:
        return self.nest + self.packing

    def describe(self) -> str:
        if self.own:
            return (f"predicted {seconds_text(self.seconds)} (the target's own kernels, "
                    "the cost model on its whole spec)")
        return (f"predicted {seconds_text(self.seconds)} (nest {seconds_text(self.nest)} + "
                f"packing {seconds_text(self.packing)})")


def seconds_text(value: float | None) -> str:
    """A duration for a reason line.

    >>> seconds_text(2.5e-5), seconds_text(None)
    ('25 us', 'not estimated')
    """
    if value is None or math.isinf(value):
        return "not estimated"
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us")):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value * 1e9:.3g} ns"


def _survey(compute: Tensor, view: TargetSpec, model: Any, limit: int) -> _Survey:
    entries, best, candidates = [], None, []
    for intrinsic in view.intrinsics:
        entry, ranked = report_entry(compute, intrinsic, view, thorough=False, model=model,
                                     max_mappings=limit)
        limit -= len(ranked)
        entries.append(entry)
        chosen = next((r for r in ranked if r.usable and r.physical is not None), None)
        if chosen is None:
            continue
        item = TensorizedCompute(compute, intrinsic, chosen, tuple(ranked), forced=False,
                                 automatic=True)
        candidates.append(item)
        if best is None or chosen.seconds < best.ranked.seconds:
            best = item
    return _Survey(tuple(entries), best, tuple(candidates))


def mapped_seconds(item: TensorizedCompute, spec: TargetSpec,
                   options: LoweringOptions) -> tuple[float, float]:
    """The predicted seconds of ``item``'s kernel: the cost model's for its nest (``item``
    ranked on the serial view) and those of its packing loops (every element they store at
    the scalar peak of one core, :meth:`~tilecraft.intrin.lowering.MappedKernelBuilder.
    copied_elements`)."""
    from tilecraft.intrin.lowering import MappedKernelBuilder

    dtype = item.compute.dtype
    scalar = spec.compute.flops_per_core(dtype) / spec.compute.lanes(dtype) / 2
    copies = MappedKernelBuilder(item.physical, options).copied_elements()
    return item.ranked.seconds, copies / scalar


def _lowers_itself(target: Target, item: TensorizedCompute, options: LoweringOptions) -> bool:
    """Whether ``target`` lowers ``item``'s mapping with kernels of its own (a target
    failing to is left to the core's serial nest, which reports its own errors)."""
    try:
        return bool(target.lower_mapped(item.compute, item.physical, options))
    except TilecraftError:
        return False


def _whole_spec_seconds(item: TensorizedCompute, spec: TargetSpec, model: Any) -> float:
    """``item``'s mapping predicted by ``model`` (default AMOS's) on the whole ``spec``."""
    from tilecraft.intrin.perfmodel import rank_mappings

    mappings = [item.ranked.mapping]
    if model is None:
        ranked = rank_mappings(item.compute, item.intrinsic, spec, mappings=mappings)
    else:
        ranked = list(model.rank(item.compute, item.intrinsic, spec, mappings, thorough=False))
    return ranked[0].seconds if ranked else item.ranked.seconds


def _predict(item: TensorizedCompute, target: Target, options: LoweringOptions,
             model: Any) -> _Prediction:
    """``item``'s predicted time as it would be lowered (see the module docstring)."""
    if _lowers_itself(target, item, options):
        return _Prediction(item, _whole_spec_seconds(item, target.spec, model), 0.0, True)
    nest, packing = mapped_seconds(item, target.spec, options)
    return _Prediction(item, nest, packing, False)


def _best_prediction(items: Sequence[TensorizedCompute], target: Target,
                     options: LoweringOptions, model: Any) -> _Prediction:
    """The best of ``items``: the target's own lowerings first, then the fastest."""
    predictions = [_predict(item, target, options, model) for item in items]
    return min(predictions, key=lambda p: (not p.own, p.seconds if p.own
                                           else p.item.ranked.seconds))


def _alternative(target: Target, tensor: Tensor, options: LoweringOptions) -> LoweringEstimate:
    from tilecraft.cost.loop_nest import estimate_loop_nest

    native = target.native_lowering(tensor, options)
    return native if native is not None else estimate_loop_nest(tensor, target.spec, options)


def _with_predictions(compute: str, tensorized: bool, source: DecisionSource, reason: str,
                      mapping: str | None, seconds: float | None,
                      alternative: LoweringEstimate | None) -> MappingDecision:
    return MappingDecision(compute, tensorized, source, reason, mapping, seconds,
                           None if alternative is None else alternative.strategy,
                           None if alternative is None else alternative.seconds,
                           "" if alternative is None else alternative.basis)


def _compare(tensor: Tensor, prediction: _Prediction, target: Target,
             options: LoweringOptions, margin: float) -> MappingDecision:
    """The model's decision for a compute with a usable mapping and nothing grouping it."""
    from tilecraft.intrin.verify import verify

    best = prediction.item
    seconds = prediction.seconds
    mapping = str(best.ranked.mapping)
    predicted = f"the best mapping, {mapping}, {prediction.describe()}"
    alternative = _alternative(target, tensor, options)
    if alternative.seconds is None:
        return _with_predictions(
            tensor.name, False, DecisionSource.MODEL,
            f"{alternative.strategy} already uses the target's intrinsics; {predicted}",
            mapping, seconds, alternative)
    ratio = alternative.seconds / seconds if seconds > 0 else math.inf
    versus = f"{alternative.strategy}, predicted {seconds_text(alternative.seconds)}"
    if ratio < margin:
        how = "slower than" if ratio < 1 else f"only {ratio:.2g}x faster than"
        return _with_predictions(tensor.name, False, DecisionSource.MODEL,
                                 f"{predicted}, is {how} {versus} (margin {margin:g}x)",
                                 mapping, seconds, alternative)
    check = verify(tensor, best.intrinsic, best.ranked.mapping)  # the full rules, once
    if not check.ok:
        why = "; ".join(reason.message for reason in check.reasons)
        return _with_predictions(tensor.name, False, DecisionSource.MODEL,
                                 f"{predicted}, fails full verification: {why}",
                                 mapping, seconds, alternative)
    return _with_predictions(tensor.name, True, DecisionSource.MODEL,
                             f"{predicted}, is {ratio:.2g}x faster than {versus} "
                             f"(margin {margin:g}x)", mapping, seconds, alternative)


def _requested(tensor: Tensor, prediction: _Prediction, choices: TensorizeChoices,
               target: Target, options: LoweringOptions) -> MappingDecision:
    item = prediction.item
    return _with_predictions(
        tensor.name, True, DecisionSource.FORCED,
        f"{choices.describe(tensor.name)} asks for it: {item.ranked.mapping}, "
        f"{prediction.describe()}", str(item.ranked.mapping), prediction.seconds,
        _alternative(target, tensor, options))


def decide_mappings(graph: Graph, target: Target, options: LoweringOptions,
                    request: TensorizeRequest, *, model: Any = None,
                    grouped: Mapping[str, Sequence[str]] | None = None,
                    margin: float = MAPPING_MARGIN,
                    max_mappings: int = SURVEY_MAX_MAPPINGS) -> MappingPlan:
    """Decide for every compute of ``graph`` whether it is lowered through an AMOS mapping on
    ``target`` (see the module docstring). ``request`` is ``tensorize=``; ``model`` the cost
    model ranking mappings (default AMOS's); ``grouped`` maps each compute the fusion stage
    grouped to its group's computes; ``max_mappings`` bounds the mappings ranked per compute
    (:data:`SURVEY_MAX_MAPPINGS`). A cost model failing on a compute becomes a note; it never
    breaks a compile."""
    from tilecraft.intrin.lowering import serial_view

    spec = target.spec
    view = serial_view(spec)
    choices = read_request(graph, request)
    plan = MappingPlan()
    plan.tensorized = plan_tensorization(graph, view, request, model)
    grouped = grouped or {}
    for tensor in graph.computes:
        name = tensor.name
        try:
            survey = _survey(tensor, view, model, max_mappings)
        except TilecraftError as err:
            plan.notes.append(f"mapping survey of {name} failed: {err}")
            survey = _Survey((), None)
        plan.entries.extend(entry for entry in survey.entries if entry.mappings)
        requested = plan.tensorized.get(name)
        if requested is not None:
            if choices.every:  # the best over the intrinsics, the target's own lowerings first
                choice = _best_prediction([requested, *survey.candidates], target, options,
                                          model)
                requested = dataclasses.replace(choice.item, automatic=False)
                choice = dataclasses.replace(choice, item=requested)
                plan.tensorized[name] = requested
            else:
                choice = _predict(requested, target, options, model)
            plan.decisions[name] = _requested(tensor, choice, choices, target, options)
            continue
        best = survey.best
        if best is None:
            continue
        mapping = str(best.ranked.mapping)
        if not choices.automatic or name in choices.off:
            plan.decisions[name] = MappingDecision(
                name, False, DecisionSource.OFF, f"{choices.describe(name)} (its best "
                f"mapping would be {mapping})", mapping)
        elif name in grouped:
            others = " -> ".join(grouped[name])
            plan.decisions[name] = MappingDecision(
                name, False, DecisionSource.MODEL, f"lowered with its fusion group {others} "
                f"(the target's plan for it; its best mapping would be {mapping})", mapping)
        else:
            choice = _best_prediction(survey.candidates or (best,), target, options, model)
            decision = _compare(tensor, choice, target, options, margin)
            plan.decisions[name] = decision
            if decision.tensorized:
                plan.tensorized[name] = choice.item
    if any(entry.chosen for entry in plan.entries):
        plan.notes.extend((SERIAL_NOTE, MEASURED_NOTE))
    return plan


__all__ = ["MAPPING_MARGIN", "SURVEY_MAX_MAPPINGS", "DecisionSource", "MappingDecision",
           "MappingPlan", "decide_mappings", "mapped_seconds", "seconds_text"]
