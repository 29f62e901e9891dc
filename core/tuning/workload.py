"""Workloads: programs a worker process can rebuild from a name and arguments.

A tuning candidate crosses a process boundary, and a te graph does not travel well (its nodes
hold identities, its builders closures). A :class:`Workload` is what travels instead: the
*name* of a builder function and its arguments. Any process calls
:meth:`Workload.instantiate` to get the same graph, the same input arrays (drawn from a seed)
and the reference outputs' tolerances.

A builder is named ``"package.module:function"`` or ``"path/to/file.py:function"`` (what
``tilecraft tune FILE.py`` uses). It returns a :class:`~tilecraft.graph.Graph`, an output
tensor or a list of them, a pair ``(program, arrays)``, or a :class:`WorkloadInstance`.

>>> w = Workload.from_catalog("matmul[m13-k17-n19]")
>>> instance = w.instantiate()
>>> [t.name for t in instance.graph.inputs], instance.flops
(['A', 'B'], 8398)
>>> len(w.key)
32
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import sys
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tilecraft.dtypes import DType
from tilecraft.errors import TilecraftError
from tilecraft.graph import Graph
from tilecraft.te.expr import Binary, Expr, Load, Reduce, Unary
from tilecraft.te.tensor import Tensor
from tilecraft.te.visit import children
from tilecraft.tuning.record import workload_key

__all__ = ["TuningError", "Workload", "WorkloadInstance", "catalog_case", "default_tolerance",
           "flop_count", "resolve_reference"]


class TuningError(TilecraftError):
    """The tuning machinery was set up wrongly (an unknown builder, bad options, a worker
    process that cannot start) — as opposed to a candidate failing, which is a result."""


# references ----------------------------------------------------------------------------------
def resolve_reference(reference: str, what: str = "builder") -> Any:
    """The object a ``"module:attr"`` or ``"file.py:attr"`` reference names.

    >>> resolve_reference("tilecraft.tuning.workload:flop_count").__name__
    'flop_count'
    """
    module_part, sep, attr = reference.rpartition(":")
    if not sep or not module_part or not attr:
        raise TuningError(f"{what} reference {reference!r} is not of the form "
                          "'package.module:function' or 'path/to/file.py:function'")
    if module_part.endswith(".py"):
        module = _load_file(Path(module_part), what, reference)
    else:
        try:
            module = importlib.import_module(module_part)
        except ImportError as err:
            raise TuningError(f"{what} reference {reference!r}: cannot import module "
                              f"{module_part!r} ({err}); install it or name a file "
                              "'path/to/file.py:function'") from err
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise TuningError(f"{what} reference {reference!r}: {module_part} has no attribute "
                              f"{attr!r}; define it at module level (worker processes import "
                              "it by name)") from None
    return obj


def _load_file(path: Path, what: str, reference: str) -> Any:
    """Import a Python file once per process under a name derived from its absolute path."""
    location = path.expanduser().resolve()
    if not location.is_file():
        raise TuningError(f"{what} reference {reference!r}: no file {location}")
    digest = hashlib.sha256(str(location).encode()).hexdigest()[:12]
    name = f"_tilecraft_file_{location.stem}_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, location)
    if spec is None or spec.loader is None:
        raise TuningError(f"{what} reference {reference!r}: cannot import {location}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


# flops and tolerances -----------------------------------------------------------------------
def _value_ops(expr: Expr) -> int:
    """Arithmetic operations of one evaluation of ``expr``: every +, -, *, /, max, min and
    unary function counts one; index arithmetic inside loads, comparisons, selects and casts
    count nothing."""
    if isinstance(expr, Load):
        return 0
    own = 1 if isinstance(expr, (Binary, Unary)) else 0
    return own + sum(_value_ops(child) for child in children(expr))


def flop_count(program: Graph | Tensor) -> int:
    """Arithmetic operations of a program (a reduction's combine counts one per point: a
    matmul is ``2*M*N*K``), the numerator of the GFLOP/s that tuning reports.

    >>> from tilecraft import te
    >>> A = te.placeholder((4, 6), name="A")
    >>> k = te.reduce_axis(6, name="k")
    >>> S = te.compute((4,), lambda i: te.sum(A[i, k] * 2.0, axis=k), name="S")
    >>> flop_count(S)
    48
    """
    graph = program if isinstance(program, Graph) else Graph.from_outputs([program])
    total = 0
    for tensor in graph.computes:
        body = tensor.body
        points = tensor.size
        per_point = _value_ops(body)
        if isinstance(body, Reduce):
            for axis in body.axes:
                points *= axis.extent
            per_point = 1 + _value_ops(body.body)
        total += points * per_point
    return total


def default_tolerance(dtype: DType) -> tuple[float, float]:
    """``(rtol, atol)`` a compiled result of ``dtype`` must meet against the reference:
    exact for integers and booleans; float32 allows for reassociated sums; half precision
    for one rounding of the result."""
    if dtype in (DType.FLOAT16, DType.BFLOAT16):
        return 2e-2, 2e-2
    if dtype.is_float:
        return 1e-4, 1e-4
    return 0.0, 0.0


def _sample(tensor: Tensor, rng: np.random.Generator) -> np.ndarray:
    dtype = tensor.dtype
    if dtype is DType.BOOL:
        return rng.integers(0, 2, size=tensor.shape).astype(bool)
    if dtype.is_int:
        low = -4 if dtype.is_signed else 0
        return rng.integers(low, 5, size=tensor.shape).astype(dtype.numpy)
    return rng.uniform(-1.0, 1.0, size=tensor.shape).astype(np.float32).astype(dtype.numpy)


# workloads ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class WorkloadInstance:
    """A workload built in this process: the graph, its input arrays and the tolerances a
    candidate's outputs must meet against the reference."""

    graph: Graph
    inputs: Mapping[str, np.ndarray]
    rtol: float | None = None
    atol: float | None = None

    @functools.cached_property
    def flops(self) -> int:
        return flop_count(self.graph)

    def tolerance(self, tensor: Tensor) -> tuple[float, float]:
        rtol, atol = default_tolerance(tensor.dtype)
        return (self.rtol if self.rtol is not None else rtol,
                self.atol if self.atol is not None else atol)

    @functools.cached_property
    def expected(self) -> dict[str, np.ndarray]:
        """The reference interpreter's outputs, by output name (computed once)."""
        from tilecraft.reference import run

        outputs = run(list(self.graph.outputs), inputs=dict(self.inputs))
        if not isinstance(outputs, tuple):
            outputs = (outputs,)
        return {t.name: array for t, array in zip(self.graph.outputs, outputs)}


@dataclass(frozen=True)
class Workload:
    """A program by builder name and arguments (see the module docstring).

    ``seed`` draws the input arrays when the builder returns none; ``rtol``/``atol``
    override the default tolerances of the correctness check; ``name`` labels it in events
    and reports (the builder reference when empty).
    """

    builder: str
    args: tuple[Any, ...] = ()
    kwargs: tuple[tuple[str, Any], ...] = ()
    seed: int = 0
    rtol: float | None = None
    atol: float | None = None
    name: str = ""
    _cache: dict[str, Any] = field(default_factory=dict, init=False, repr=False,
                                   compare=False, hash=False)

    def __post_init__(self) -> None:
        if not isinstance(self.builder, str) or ":" not in self.builder:
            raise TuningError(f"Workload builder must be a reference 'module:function' or "
                              f"'file.py:function', got {self.builder!r}")
        object.__setattr__(self, "args", tuple(self.args))
        kwargs = self.kwargs
        if isinstance(kwargs, Mapping):
            kwargs = tuple(kwargs.items())
        object.__setattr__(self, "kwargs", tuple(sorted((str(k), v) for k, v in kwargs)))

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_cache"] = {}  # built graphs stay in the process that built them
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    @classmethod
    def from_catalog(cls, case_id: str) -> Workload:
        """The operator-catalog case ``case_id`` (its inputs and tolerances included)."""
        return cls("tilecraft.tuning.workload:catalog_case", (case_id,), name=case_id)

    @property
    def label(self) -> str:
        return self.name or self.builder

    def instantiate(self) -> WorkloadInstance:
        """Build the program in this process — once per process for equal workloads (a
        worker receives a fresh copy with every candidate; the graph, inputs and reference
        outputs are shared between them). Treat the instance's arrays as read-only."""
        if "instance" not in self._cache:
            try:
                instance = _INSTANCES.get(self)
            except TypeError:  # unhashable arguments: no sharing
                instance = None
            if instance is not None:
                _INSTANCES.move_to_end(self)
            else:
                instance = self._build()
                try:
                    _INSTANCES[self] = instance
                    while len(_INSTANCES) > _INSTANCES_KEPT:
                        _INSTANCES.popitem(last=False)
                except TypeError:
                    pass
            self._cache["instance"] = instance
        return self._cache["instance"]

    def _build(self) -> WorkloadInstance:
        builder = resolve_reference(self.builder, "workload builder")
        made = builder(*self.args, **dict(self.kwargs))
        arrays: Mapping[str, np.ndarray] | None = None
        if isinstance(made, WorkloadInstance):
            return WorkloadInstance(made.graph, made.inputs,
                                    self.rtol if self.rtol is not None else made.rtol,
                                    self.atol if self.atol is not None else made.atol)
        if isinstance(made, tuple) and len(made) == 2 and isinstance(made[1], Mapping):
            made, arrays = made
        graph = _as_graph(made, self.builder)
        if arrays is None:
            rng = np.random.default_rng(self.seed)
            arrays = {t.name: _sample(t, rng) for t in graph.inputs}
        return WorkloadInstance(graph, dict(arrays), self.rtol, self.atol)

    def built_flops(self) -> int:
        """The program's flop count if it was built in this process already, else 0."""
        instance = self._cache.get("instance")
        return instance.flops if instance is not None else 0

    @property
    def key(self) -> str:
        """:func:`~tilecraft.tuning.record.workload_key` of the built program's content (its
        statements, names, shapes and dtypes), so the same operator built by another builder
        finds the same records."""
        if "key" not in self._cache:
            self._cache["key"] = workload_key(describe_graph(self.instantiate().graph))
        return self._cache["key"]


#: workloads built in this process, most recent last
_INSTANCES: OrderedDict[Workload, WorkloadInstance] = OrderedDict()
_INSTANCES_KEPT = 8


def describe_graph(graph: Graph) -> dict[str, Any]:
    """The canonical description of a program that its workload key hashes."""
    return {
        "inputs": [[t.name, t.dtype.value, list(t.shape)] for t in graph.inputs],
        "computes": [[t.name, t.dtype.value, list(t.shape), t.statement()]
                     for t in graph.computes],
        "outputs": [t.name for t in graph.outputs],
    }


def _as_graph(made: Any, builder: str) -> Graph:
    graph = Graph.of(made)
    if graph is not None:
        return graph
    raise TuningError(f"workload builder {builder!r} returned {type(made).__name__}; it must "
                      "return a Graph, a Tensor, a list of Tensors, (program, arrays) or a "
                      "WorkloadInstance")


def catalog_case(case_id: str) -> WorkloadInstance:
    """Builder of :meth:`Workload.from_catalog`: the case's graph, inputs and tolerances."""
    from tilecraft.ops import catalog

    case = catalog.get(case_id)
    graph, arrays = case.build()
    return WorkloadInstance(graph, arrays, case.rtol, case.atol)
