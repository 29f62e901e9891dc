"""The mapping report (thesis §5.7, Table 5.3): per operator and intrinsic, how many candidate
loop pairs, basic matches and mappings matching finds, how many pass verification and fit the
target's memories, the mapping the model chooses, its predicted cost, and a measured cost
where a callback can measure the mapped kernel.

The measured column is filled where a ``measured`` callback times the chosen mapping's kernel
(``tilecraft report --measure`` compiles and runs it natively) and, in ``Executable.report``,
for every compute compiled through a mapping (``compile(..., tensorize=...)``, see
:func:`tensorized_entry`); ``check=True`` runs the chosen mapping on the Kernel IR interpreter
against the reference instead — a functional check, not a timing.

>>> from tilecraft import te, ops
>>> from tilecraft.intrin.examples import wmma
>>> from tilecraft.intrin.perfmodel import gpu_spec_example
>>> x = te.placeholder((1, 4, 6, 6), "float16", name="x")
>>> w = te.placeholder((8, 4, 3, 3), "float16", name="w")
>>> y = ops.conv2d(x, w, out_dtype="float32", name="y")
>>> report = mapping_report(y, gpu_spec_example(), intrinsics=[wmma(16, 16, 16)], check=True)
>>> entry = report.entries[0]
>>> entry.candidates, entry.basic_matches, entry.mappings, entry.verified, entry.feasible
(7, 7, 35, 35, 35)
>>> entry.chosen_loops["i1"], entry.chosen_loops["i2"], entry.utilisation
(['n', 'h', 'w'], ['k'], 0.375)
>>> entry.check
'ok'
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from tilecraft.graph import Graph
from tilecraft.intrin.generation import PhysicalMapping
from tilecraft.intrin.perfmodel import RankedMapping, rank_mappings
from tilecraft.target.intrinsic import IntrinsicDecl
from tilecraft.target.spec import TargetSpec
from tilecraft.te.tensor import Tensor

#: measures a generated mapping (seconds), where a target can run the mapped kernel
MeasuredFunction = Callable[[PhysicalMapping], float]

#: the functional check runs the chosen mapping on the interpreter only up to this many calls
CHECK_MAX_CALLS = 4096

MEASURED_NOTE = ("measured cost needs a target that executes the mapped (tensorized) kernel: "
                 "`tilecraft report --measure` times each chosen mapping natively, and "
                 "compile(..., tensorize=...) the computes it compiles through a mapping; "
                 "other costs are the model's predictions (Eq. 5.6-5.8); `tilecraft report "
                 "--check` runs each chosen mapping on the Kernel IR interpreter, a functional "
                 "check only")


@dataclass(frozen=True)
class MappingEntry:
    """One operator on one intrinsic. ``candidates`` counts (software loop, intrinsic loop)
    candidate pairs; ``verified`` passes Algorithm 4 (and the structural rules); ``feasible``
    also fits the target's memories under the default schedule. ``chosen`` is the best usable
    mapping by the model; ``reasons`` say why nothing matched."""

    operator: str
    intrinsic: str
    candidates: int = 0
    basic_matches: int = 0
    mappings: int = 0
    verified: int = 0
    feasible: int = 0
    chosen: str | None = None
    chosen_loops: dict[str, list[str]] = field(default_factory=dict)
    schedule: str | None = None
    utilisation: float | None = None
    intrinsic_calls: int | None = None
    bound: str | None = None
    predicted_cycles: float | None = None
    predicted_seconds: float | None = None
    measured_seconds: float | None = None
    check: str | None = None
    notes: tuple[str, ...] = ()
    reasons: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["notes"], data["reasons"] = list(self.notes), list(self.reasons)
        return data


def _random_inputs(compute: Tensor, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    inputs = {}
    for tensor in Graph.from_outputs([compute]).inputs:
        dtype = tensor.dtype
        if dtype.is_int:
            low = 0 if dtype.value.startswith("u") else -4
            inputs[tensor.name] = rng.integers(low, 5, tensor.shape).astype(dtype.numpy)
        else:
            inputs[tensor.name] = rng.standard_normal(tensor.shape).astype(dtype.numpy)
    return inputs


def functional_check(physical: PhysicalMapping) -> str:
    """Run ``physical`` on the Kernel IR interpreter with random inputs and compare with the
    reference: ``"ok"``, ``"mismatch (max error ...)"`` or ``"skipped (...)"``."""
    from tilecraft.intrin.executor import execute
    from tilecraft.reference import run

    calls = physical.intrinsic_calls
    if calls > CHECK_MAX_CALLS:
        return f"skipped ({calls} calls > {CHECK_MAX_CALLS})"
    compute = physical.virtual.product.compute
    inputs = _random_inputs(compute)
    got = np.asarray(execute(physical, inputs), dtype=np.float64)
    expected = np.asarray(run(compute, inputs), dtype=np.float64)
    error = float(np.max(np.abs(got - expected))) if got.size else 0.0
    limit = 0.0 if compute.dtype.is_int else 1e-2 * (1.0 + float(np.max(np.abs(expected))))
    return "ok" if error <= limit else f"mismatch (max error {error:.3g})"


def report_entry(compute: Tensor, intrinsic: IntrinsicDecl, spec: TargetSpec, *,
                 measured: MeasuredFunction | None = None, check: bool = False,
                 thorough: bool = True, explore_trials: int = 0,
                 model: Any = None,
                 max_mappings: int | None = None) -> tuple[MappingEntry, list[RankedMapping]]:
    """The report entry of ``compute`` on ``intrinsic``, and the ranked mappings behind it.
    With ``explore_trials`` the chosen mapping and schedule come from the joint mapping x
    schedule search (:func:`~tilecraft.intrin.explore.explore`, engine ``q``, seed 0).
    ``model``: the cost model ranking the mappings (a :class:`tilecraft.cost.MappingCostModel`;
    default AMOS's analytical model). With ``max_mappings``, more mappings than that are
    counted but not ranked (the entry says so)."""
    from tilecraft.intrin.matching import match

    result = match(compute, intrinsic)
    candidates = sum(len(loops) for loops in result.candidates.values())
    counts = dict(operator=compute.name, intrinsic=intrinsic.name, candidates=candidates,
                  basic_matches=len(result.basic_matches), mappings=len(result.mappings))
    if not result.mappings:
        return MappingEntry(**counts, reasons=tuple(r.message for r in result.reasons)), []
    if max_mappings is not None and len(result.mappings) > max_mappings:
        return MappingEntry(**counts, notes=(
            f"{len(result.mappings)} mappings, more than the {max_mappings} left to rank; "
            f"`tilecraft report` ranks them all",)), []
    ranked = rank_mappings(compute, intrinsic, spec, mappings=result.mappings,
                           thorough=thorough) if model is None else \
        list(model.rank(compute, intrinsic, spec, result.mappings, thorough=thorough))
    usable = [entry for entry in ranked if entry.usable]
    notes: list[str] = []
    best = next((entry for entry in usable if entry.physical is not None), None)
    if best is None and usable:
        best = usable[0]
        notes.append(f"mapping generation refuses it: {best.generation_error}")
    if best is None:
        return MappingEntry(**counts, verified=sum(e.verified for e in ranked),
                            notes=("no mapping fits the target's memories under the default "
                                   "schedule",)), ranked
    cost = best.cost
    if explore_trials:
        from tilecraft.intrin.explore import explore

        result = explore(compute, intrinsic, spec, budget_trials=explore_trials, seed=0,
                         ranked=ranked)
        best, cost = result.best.ranked, result.best.cost
        notes.append(f"chosen by the joint mapping x schedule search ({result.search.trials} "
                     f"trials, engine {result.search.engine}, seed 0)")
    measured_seconds, verdict = None, None
    if best.physical is not None:
        if measured is not None:
            measured_seconds = float(measured(best.physical))
        if check:
            verdict = functional_check(best.physical)
    return MappingEntry(
        **counts, verified=sum(e.verified for e in ranked), feasible=len(usable),
        chosen=str(best.mapping), chosen_loops=best.mapping.names(), schedule=str(cost.schedule),
        utilisation=best.nest.utilisation, intrinsic_calls=best.nest.intrinsic_calls,
        bound=cost.bound, predicted_cycles=cost.cycles, predicted_seconds=cost.seconds,
        measured_seconds=measured_seconds, check=verdict, notes=tuple(notes)), ranked


def tensorized_entry(item: Any, measured_seconds: float | None = None) -> MappingEntry:
    """The entry of a compute compiled through a mapping (a
    :class:`~tilecraft.intrin.tensorize.TensorizedCompute`): the counts of its intrinsic's
    mappings, the mapping used, its predicted cost and ``measured_seconds``."""
    from tilecraft.intrin.matching import match

    compute, intrinsic, chosen = item.compute, item.intrinsic, item.ranked
    result = match(compute, intrinsic)
    candidates = sum(len(loops) for loops in result.candidates.values())
    ranked = item.candidates
    cost = chosen.cost
    notes = ["compiled through this mapping (forced)" if item.forced
             else "compiled through this mapping (the model's best verified one)"]
    return MappingEntry(
        operator=compute.name, intrinsic=intrinsic.name, candidates=candidates,
        basic_matches=len(result.basic_matches), mappings=len(result.mappings),
        verified=sum(entry.verified for entry in ranked),
        feasible=sum(entry.usable for entry in ranked), chosen=str(chosen.mapping),
        chosen_loops=chosen.mapping.names(), schedule=str(cost.schedule),
        utilisation=chosen.nest.utilisation, intrinsic_calls=chosen.nest.intrinsic_calls,
        bound=cost.bound, predicted_cycles=cost.cycles, predicted_seconds=cost.seconds,
        measured_seconds=measured_seconds, notes=tuple(notes))


def record_entries(report: Any, entries: Sequence[MappingEntry]) -> None:
    """Put ``entries`` into ``report.mappings`` (an
    :class:`~tilecraft.runtime.report.Report`), replacing those of the same operator and
    intrinsic."""
    keys = {(entry.operator, entry.intrinsic) for entry in entries}
    kept = [entry for entry in report.mappings if (entry.operator, entry.intrinsic) not in keys]
    report.mappings = kept + list(entries)


@dataclass
class MappingReport:
    """Entries for every operator x intrinsic pair, and notes."""

    target: str
    entries: list[MappingEntry] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def matched(self) -> list[MappingEntry]:
        return [entry for entry in self.entries if entry.mappings]

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target, "entries": [e.to_dict() for e in self.entries],
                "notes": list(self.notes)}

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def __str__(self) -> str:
        lines = [f"mappings on target {self.target}: {len(self.matched())} of "
                 f"{len(self.entries)} operator x intrinsic pairs match"]
        lines.append(format_mapping_table(self.entries))
        lines.extend(f"note: {note}" for note in self.notes)
        return "\n".join(lines)


def _seconds(value: float | None) -> str:
    if value is None or math.isinf(value):
        return "-"
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us")):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value * 1e9:.3g} ns"


def format_mapping_table(entries: Sequence[MappingEntry], indent: str = "",
                         matched_only: bool = False) -> str:
    """The entries as a table (one row per operator x intrinsic) and, for every chosen
    mapping, its loops, schedule and what bounds it."""
    shown = [e for e in entries if e.mappings or not matched_only]
    header = (f"{'operator':<16} {'intrinsic':<24} {'cand':>4} {'basic':>5} {'maps':>5} "
              f"{'verif':>5} {'feas':>5} {'predicted':>10} {'measured':>9} {'check':>6}")
    lines = [indent + header]
    for e in shown:
        lines.append(indent + f"{e.operator[:16]:<16} {e.intrinsic[:24]:<24} {e.candidates:>4} "
                     f"{e.basic_matches:>5} {e.mappings:>5} {e.verified:>5} {e.feasible:>5} "
                     f"{_seconds(e.predicted_seconds):>10} {_seconds(e.measured_seconds):>9} "
                     f"{(e.check or '-')[:6]:>6}")
    for e in shown:
        if e.chosen is not None:
            loops = ", ".join(f"{name} <- ({', '.join(software)})"
                              for name, software in e.chosen_loops.items())
            lines.append(indent + f"{e.operator} on {e.intrinsic}: {loops}; utilisation "
                         f"{e.utilisation:.1%}, {e.intrinsic_calls} calls, bound by {e.bound}; "
                         f"schedule {e.schedule}")
        for note in e.notes:
            lines.append(indent + f"{e.operator} on {e.intrinsic}: {note}")
        if e.check and e.check != "ok":
            lines.append(indent + f"{e.operator} on {e.intrinsic}: check {e.check}")
    return "\n".join(lines)


def _computes(program: Graph | Tensor | Sequence[Tensor]) -> list[Tensor]:
    from tilecraft.reference import as_graph

    return list(as_graph(program).computes)


def mapping_report(program: Graph | Tensor | Sequence[Tensor], spec: TargetSpec,
                   intrinsics: Sequence[IntrinsicDecl | str] | None = None, *,
                   measured: MeasuredFunction | None = None, check: bool = False,
                   thorough: bool = True, explore_trials: int = 0,
                   budget_seconds: float | None = None, model: Any = None) -> MappingReport:
    """Match, verify, generate and cost every compute of ``program`` on every intrinsic of
    ``spec`` (or those named), choosing by the model under default schedules or, with
    ``explore_trials``, by the joint search. With ``budget_seconds`` a compute whose report
    takes longer is left out, with a note (how ``tilecraft.compile`` keeps it cheap).
    ``model``: the cost model ranking the mappings (default AMOS's)."""
    chosen = [spec.intrinsic(i) if isinstance(i, str) else i
              for i in (spec.intrinsics if intrinsics is None else intrinsics)]
    report = MappingReport(spec.name)
    for compute in _computes(program):
        start = time.perf_counter()
        entries = []
        for intrinsic in chosen:
            entry, _ = report_entry(compute, intrinsic, spec, measured=measured, check=check,
                                    thorough=thorough, explore_trials=explore_trials,
                                    model=model)
            entries.append(entry)
            elapsed = time.perf_counter() - start
            if budget_seconds is not None and elapsed > budget_seconds:
                report.notes.append(f"mapping report of {compute.name} skipped: it took more "
                                    f"than {budget_seconds * 1e3:.0f} ms; run `tilecraft "
                                    f"report` for it")
                entries = []
                break
        report.entries.extend(entries)
    if measured is None and any(entry.chosen for entry in report.entries):
        report.notes.append(MEASURED_NOTE)
    return report


def attach_mapping_report(report: Any, entries: Sequence[MappingEntry],
                          notes: Sequence[str] = ()) -> None:
    """Fill ``report.mappings`` (an :class:`~tilecraft.runtime.report.Report`) with the
    entries the mapping stage found (:func:`tilecraft.intrin.decision.decide_mappings`) — read,
    not matched again — and add its notes."""
    report.mappings = list(entries)
    report.notes.extend(notes)
