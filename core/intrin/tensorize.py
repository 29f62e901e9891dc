"""Tensorizing computes inside ``tilecraft.compile`` (thesis §5.4-5.6 joined to the pipeline).

Without ``tensorize=`` the AMOS mapping stage decides for every compute, by comparing the
predicted time of its best mapping with that of the target's own lowering or the core's default
loop nest (:mod:`tilecraft.intrin.decision`). ``tilecraft.compile(graph, target,
tensorize=...)`` overrides that:

- ``None`` (the default) or ``"auto"``: the model decides, compute by compute;
- ``False`` or ``"off"``: nothing is tensorized;
- ``True``: every compute that has a verified mapping onto one of the target's intrinsics is
  lowered through the mapping the cost model ranks best (over all intrinsics);
- a mapping from compute name to what to use for it — an intrinsic name (the model's best
  verified mapping onto it), ``"auto"`` (the best over the target's intrinsics), ``False`` or
  ``"off"`` (not tensorized), or a forced mapping ``{"intrinsic": NAME, "loops": {"i1": ["n"],
  ...}, "operands": {"Src1": "A"}}`` (``operands`` optional); the computes it does not name are
  left to the model. A forced mapping that fails verification raises
  :class:`~tilecraft.intrin.mapping.MappingError` with the structured reasons, as does a
  compute named that cannot be mapped onto the intrinsic named.

Tensorized computes are lowered by :func:`~tilecraft.intrin.lowering.lower_mapped` (and left
out of fusion and tuning); where the kernel of a compute ``tensorize=`` asked for runs natively
its time is measured (median of a few runs on random inputs) and reported next to the model's
prediction in ``Executable.report`` (the computes the model chose are not timed: compiling
stays cheap; ``tilecraft report --measure`` times them).

>>> from tilecraft import Graph, te, ops
>>> from tilecraft.intrin.perfmodel import gpu_spec_example
>>> from tilecraft.intrin.examples import wmma
>>> spec = gpu_spec_example().model_copy(update={"intrinsics": (wmma(16, 16, 16),)})
>>> A = te.placeholder((20, 30), "float16", name="A")
>>> B = te.placeholder((30, 40), "float16", name="B")
>>> C = ops.matmul(A, B, out_dtype="float32", name="C")
>>> plan = plan_tensorization(Graph.from_outputs([C]), spec, {"C": "wmma_16x16x16"})
>>> print(plan["C"].ranked.mapping)
wmma_16x16x16: i1 <- (i), i2 <- (j), r1 <- (k) [Src1=A, Src2=B, Dst=C]
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tilecraft.errors import AllocationError, InputError
from tilecraft.graph import Graph
from tilecraft.intrin.generation import PhysicalMapping
from tilecraft.intrin.mapping import MappingError, Reason, ReasonKind
from tilecraft.intrin.perfmodel import RankedMapping, rank_mappings
from tilecraft.kernel_ir.nodes import Kernel
from tilecraft.lower.options import LoweringOptions
from tilecraft.runtime.allocation import check_allocation
from tilecraft.target.intrinsic import IntrinsicDecl
from tilecraft.target.spec import TargetSpec
from tilecraft.te.tensor import Tensor

#: what ``compile(..., tensorize=...)`` accepts (see the module docstring)
TensorizeRequest = bool | str | Mapping[str, Any] | None

#: the values that turn tensorization off (for the whole graph, or for one compute)
OFF_VALUES = (False, "off")
#: the values that leave the decision to the model (for the whole graph)
AUTOMATIC_VALUES = (None, "auto")

#: a measurement stops after this many timed runs, or once this many seconds have passed
MEASURE_RUNS = 5
MEASURE_BUDGET_SECONDS = 1.0


@dataclass(frozen=True)
class TensorizedCompute:
    """A compute and the mapping it is lowered through: ``ranked`` carries the mapping, its
    verification, its physical mapping and the model's cost; ``candidates`` every mapping of
    the compute onto the same intrinsic the model ranked (for the report's counts); ``forced``
    when ``tensorize=`` gave the loops."""

    compute: Tensor
    intrinsic: IntrinsicDecl
    ranked: RankedMapping
    candidates: tuple[RankedMapping, ...]
    forced: bool
    #: chosen by the mapping stage's comparison, not asked for by ``tensorize=``
    automatic: bool = False

    @property
    def physical(self) -> PhysicalMapping:
        assert self.ranked.physical is not None
        return self.ranked.physical


def _rank(model: Any, compute: Tensor, intrinsic: IntrinsicDecl, spec: TargetSpec,
          mappings: Sequence[Any], thorough: bool) -> list[RankedMapping]:
    """The mappings ranked by ``model`` (a :class:`tilecraft.cost.MappingCostModel`; ``None``:
    AMOS's analytical model, :func:`~tilecraft.intrin.perfmodel.rank_mappings`)."""
    if model is None:
        return rank_mappings(compute, intrinsic, spec, mappings=mappings, thorough=thorough)
    return list(model.rank(compute, intrinsic, spec, mappings, thorough=thorough))


def _usable(ranked: Iterable[RankedMapping]) -> list[RankedMapping]:
    """Verified mappings that generation accepts, the model's feasible ones first."""
    good = [entry for entry in ranked if entry.verified and entry.physical is not None]
    return sorted(good, key=lambda entry: (not entry.feasible, entry.seconds))


def best_mapping(compute: Tensor, intrinsic: IntrinsicDecl,
                 spec: TargetSpec, model: Any = None) -> TensorizedCompute:
    """The model's best verified mapping of ``compute`` onto ``intrinsic``; a
    :class:`MappingError` saying why when there is none. ``model``: the cost model ranking
    the mappings (default AMOS's)."""
    from tilecraft.intrin.matching import match

    result = match(compute, intrinsic)
    if not result.mappings:
        raise MappingError(f"compute {compute.name} has no mapping onto {intrinsic.name}; "
                           "tensorize it with another intrinsic or leave it out",
                           result.reasons)
    ranked = _rank(model, compute, intrinsic, spec, result.mappings, thorough=False)
    usable = _usable(ranked)
    if not usable:
        reasons = [Reason(ReasonKind.UNSUPPORTED, f"{entry.mapping}: " + (
            entry.generation_error or "; ".join(r.message for r in entry.verification.reasons)))
            for entry in ranked]
        raise MappingError(f"no mapping of compute {compute.name} onto {intrinsic.name} passes "
                           "verification and generation", reasons)
    return TensorizedCompute(compute, intrinsic, usable[0], tuple(ranked), forced=False)


def forced_mapping(compute: Tensor, intrinsic: IntrinsicDecl, spec: TargetSpec,
                   loops: Mapping[str, Sequence[str]],
                   operands: Mapping[str, str] | None = None,
                   model: Any = None) -> TensorizedCompute:
    """The mapping a user names, verified (:func:`~tilecraft.intrin.verify.force_mapping`
    raises the structured reasons) and generated."""
    from tilecraft.intrin.verify import force_mapping

    mapping = force_mapping(compute, intrinsic, loops, operands)
    (ranked,) = _rank(model, compute, intrinsic, spec, [mapping], thorough=True)
    if ranked.physical is None:
        raise MappingError(f"the forced mapping {mapping} passes verification but generation "
                           f"refuses it: {ranked.generation_error}")
    return TensorizedCompute(compute, intrinsic, ranked, (ranked,), forced=True)


def best_over_intrinsics(compute: Tensor, spec: TargetSpec,
                         model: Any = None) -> TensorizedCompute | None:
    """The best mapping of ``compute`` over every intrinsic of ``spec`` by predicted time
    (``None`` when no intrinsic has a usable mapping)."""
    found = []
    for intrinsic in spec.intrinsics:
        try:
            found.append(best_mapping(compute, intrinsic, spec, model))
        except MappingError:
            continue
    if not found:
        return None
    return min(found, key=lambda item: (not item.ranked.feasible, item.ranked.seconds))


def _forced_loops(compute: Tensor, loops: Any) -> dict[str, list[str]]:
    """A forced mapping's ``loops`` as {intrinsic loop: [software loops]}; one name may be
    given as a string. Anything else is an InputError (not a TypeError deep in matching)."""
    shape = "{intrinsic loop: [software loops]}, e.g. {'i1': ['j'], 'r1': ['k']}"
    if not isinstance(loops, Mapping):
        raise InputError(f"tensorize[{compute.name!r}]['loops'] = {loops!r}: give a mapping "
                         f"{shape}")
    checked = {}
    for key, value in loops.items():
        names = [value] if isinstance(value, str) else value
        if not isinstance(key, str) or not isinstance(names, (list, tuple)) or not names \
                or not all(isinstance(name, str) for name in names):
            raise InputError(f"tensorize[{compute.name!r}]['loops'][{key!r}] = {value!r}: give "
                             f"a mapping {shape}")
        checked[key] = list(names)
    return checked


def _one(compute: Tensor, spec: TargetSpec, choice: Any, model: Any = None
         ) -> TensorizedCompute:
    if choice == "auto" or choice is True:
        chosen = best_over_intrinsics(compute, spec, model)
        if chosen is None:
            raise MappingError(f"compute {compute.name} maps onto none of the intrinsics of "
                               f"{spec.name} ({', '.join(i.name for i in spec.intrinsics)}); "
                               "leave it out of tensorize")
        return chosen
    if isinstance(choice, str):
        return best_mapping(compute, spec.intrinsic(choice), spec, model)
    if isinstance(choice, Mapping) and "intrinsic" in choice \
            and set(choice) <= {"intrinsic", "loops", "operands"}:
        intrinsic = spec.intrinsic(str(choice["intrinsic"]))
        if "loops" not in choice:
            return best_mapping(compute, intrinsic, spec, model)
        return forced_mapping(compute, intrinsic, spec, _forced_loops(compute, choice["loops"]),
                              choice.get("operands"), model)
    raise InputError(f"tensorize[{compute.name!r}] = {choice!r}: give an intrinsic name, "
                     "'auto', False, or {'intrinsic': NAME, 'loops': {intrinsic loop: [software "
                     "loops]}, 'operands': {operand: tensor}}")


@dataclass(frozen=True)
class TensorizeChoices:
    """A ``tensorize=`` request read against a graph: the computes it asks to tensorize, with
    what (``forced``: name -> intrinsic name, ``"auto"`` or a forced mapping); those it keeps
    off (``off``); whether the model decides for the others (``automatic``); and ``every``
    (``tensorize=True``: every compute with a mapping, through the model's best)."""

    forced: Mapping[str, Any]
    off: frozenset[str]
    automatic: bool
    every: bool = False

    def describe(self, name: str) -> str:
        """How the request treats compute ``name``, for the report: ``"tensorize=False"``,
        ``"tensorize={'C': 'vpdpbusd'}"``..."""
        if self.every:
            return "tensorize=True"
        if name in self.forced:
            return f"tensorize={{{name!r}: {self.forced[name]!r}}}"
        if name in self.off and self.automatic:
            return f"tensorize={{{name!r}: False}}"
        return "tensorize=False" if not self.automatic else "the model"


def read_request(graph: Graph, request: TensorizeRequest) -> TensorizeChoices:
    """What ``request`` (see the module docstring) asks of each compute of ``graph``; an
    :class:`~tilecraft.errors.InputError` naming the problem for a request of another shape
    or naming no compute of the graph."""
    if request is True:
        return TensorizeChoices({}, frozenset(), automatic=False, every=True)
    if any(request is value or (isinstance(request, str) and request == value)
           for value in OFF_VALUES):
        return TensorizeChoices({}, frozenset(), automatic=False)
    if any(request is value or (isinstance(request, str) and request == value)
           for value in AUTOMATIC_VALUES):
        return TensorizeChoices({}, frozenset(), automatic=True)
    if not isinstance(request, Mapping):
        raise InputError(f"tensorize={request!r}: give None or 'auto' (the model decides), "
                         "False or 'off' (nothing), True (everything that maps) or a mapping "
                         "from compute name to an intrinsic name, 'auto', False, or a forced "
                         "mapping")
    computes = [tensor.name for tensor in graph.computes]
    unknown = sorted(set(request) - set(computes))
    if unknown:
        raise InputError(f"tensorize names {unknown[0]!r}, which is no compute of the graph; "
                         f"its computes are {', '.join(computes)}")
    off = frozenset(name for name, choice in request.items()
                    if any(choice is value or (isinstance(choice, str) and choice == value)
                           for value in OFF_VALUES))
    forced = {name: choice for name, choice in request.items() if name not in off}
    return TensorizeChoices(forced, off, automatic=True)


def plan_tensorization(graph: Graph, spec: TargetSpec,
                       request: TensorizeRequest,
                       model: Any = None) -> dict[str, TensorizedCompute]:
    """The computes of ``graph`` that ``request`` asks to tensorize (see the module
    docstring), by name, each with its mapping; ``model`` is the cost model ranking the
    mappings (default AMOS's). The computes left to the model are not in it: the mapping
    stage decides for them (:func:`tilecraft.intrin.decision.decide_mappings`)."""
    choices = read_request(graph, request)
    computes = {tensor.name: tensor for tensor in graph.computes}
    if choices.every:
        plan = {}
        for name, tensor in computes.items():
            chosen = best_over_intrinsics(tensor, spec, model)
            if chosen is not None:
                plan[name] = chosen
        return plan
    return {name: _one(computes[name], spec, choice, model)
            for name, choice in choices.forced.items()}


def lower_tensorized(item: TensorizedCompute, options: LoweringOptions,
                     target: Any = None) -> list[Kernel]:
    """The kernels of a planned compute: ``target``'s own (``Target.lower_mapped``) where it
    has them, else the core's (:func:`~tilecraft.intrin.lowering.lower_mapped`)."""
    from tilecraft.intrin.lowering import lower_mapped

    if target is not None:
        kernels = target.lower_mapped(item.compute, item.physical, options)
        if kernels:
            return list(kernels)
    return lower_mapped(item.compute, item.physical, options)


def random_arrays(kernel: Kernel, seed: int = 0) -> dict[str, np.ndarray]:
    """Arrays for every parameter of ``kernel``: small random values, zero outputs."""
    rng = np.random.default_rng(seed)
    arrays = {}
    for buffer in kernel.params:
        dtype = buffer.dtype
        if buffer.name in kernel.outputs:
            arrays[buffer.name] = np.zeros(buffer.shape, dtype.numpy)
        elif dtype.is_int:
            low = 0 if dtype.value.startswith("u") or dtype.value == "bool" else -4
            arrays[buffer.name] = rng.integers(low, 5, buffer.shape).astype(dtype.numpy)
        else:
            arrays[buffer.name] = rng.standard_normal(buffer.shape).astype(dtype.numpy)
    return arrays


def measure(run: Callable[[dict[str, np.ndarray]], None], kernel: Kernel,
            runs: int = MEASURE_RUNS,
            budget_seconds: float = MEASURE_BUDGET_SECONDS) -> float:
    """Median seconds of ``run`` on random arrays for ``kernel`` (one warm-up call, then up to
    ``runs`` timed ones within ``budget_seconds``)."""
    arrays = random_arrays(kernel)
    run(arrays)
    times: list[float] = []
    deadline = time.perf_counter() + budget_seconds
    while len(times) < runs and (not times or time.perf_counter() < deadline):
        start = time.perf_counter()
        run(arrays)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def native_measure(target: Any) -> Callable[[PhysicalMapping], float] | None:
    """A :data:`~tilecraft.intrin.report.MeasuredFunction` compiling a physical mapping for
    ``target`` and timing it natively, or ``None`` where ``target`` cannot execute here."""
    if not target.available().execute:
        return None
    options = LoweringOptions.from_spec(target.spec)

    def measured(physical: PhysicalMapping) -> float:
        from tilecraft.intrin.lowering import lower_mapped

        compute = physical.virtual.product.compute
        (kernel,) = target.lower_mapped(compute, physical, options) \
            or lower_mapped(compute, physical, options)
        runner = target.load(target.build(target.codegen(kernel)))
        return measure(runner, kernel)

    return measured


def report_tensorized(plan: Mapping[str, TensorizedCompute], compiled: Sequence[Any],
                      report: Any, entries: Mapping[str, Any] | None = None) -> None:
    """Record every planned compute in ``report.mappings`` (an
    :class:`~tilecraft.runtime.report.Report` whose ``kernels`` parallel ``compiled``, the
    :class:`~tilecraft.runtime.executable.CompiledKernel` list), with the measured time of its
    kernel where that runs natively and ``tensorize=`` asked for it. ``entries`` (compute -> its
    :func:`~tilecraft.intrin.report.tensorized_entry`, made by the mapping stage) are reused
    instead of matching the compute again."""
    if not plan:
        return
    import dataclasses

    from tilecraft.intrin.report import record_entries, tensorized_entry

    made = dict(entries or {})
    found = []
    for name, item in plan.items():
        measured = None
        for entry, kernel_report in zip(compiled, report.kernels):
            if item.automatic:
                break  # chosen by the model: not timed, compiling stays cheap
            if name in entry.kernel.outputs and entry.runner is not None \
                    and kernel_report.mode == "native":
                try:  # random arrays for every parameter: refused, not a numpy MemoryError
                    check_allocation([(b.name, b.shape, b.dtype.numpy)
                                      for b in entry.kernel.params],
                                     f"measuring the tensorized kernel {entry.kernel.name}")
                except AllocationError as err:
                    report.notes.append(f"{name}: not measured: {err}")
                    continue
                measured = measure(entry.runner, entry.kernel)
        planned = made.get(name)
        found.append(tensorized_entry(item, measured) if planned is None
                     else dataclasses.replace(planned, measured_seconds=measured))
    record_entries(report, found)
