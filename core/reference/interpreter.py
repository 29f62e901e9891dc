"""Run a whole graph with the reference interpreter.

>>> import numpy as np
>>> from tilecraft import te
>>> A = te.placeholder((2, 3), name="A")
>>> B = te.compute((3, 2), lambda i, j: A[j, i] + 1.0, name="B")
>>> run(B, A=np.arange(6, dtype=np.float32).reshape(2, 3))
array([[1., 4.],
       [2., 5.],
       [3., 6.]], dtype=float32)
>>> run(B, inputs={"A": np.zeros((2, 3), np.float32)}).shape
(3, 2)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tilecraft.errors import GraphError, InputError
from tilecraft.graph import Graph
from tilecraft.reference.evaluator import evaluate
from tilecraft.runtime.allocation import check_allocation
from tilecraft.runtime.inputs import masked_message
from tilecraft.te.tensor import Tensor

Program = Graph | Tensor | Sequence[Tensor]


def as_graph(program: Program) -> Graph:
    """A Graph from a Graph, one output Tensor, or a list of output Tensors."""
    if isinstance(program, Graph):
        return program
    if isinstance(program, Tensor):
        return Graph.from_outputs([program])
    if isinstance(program, (list, tuple)) and all(isinstance(t, Tensor) for t in program):
        return Graph.from_outputs(list(program))
    raise GraphError(f"the reference interpreter runs a Graph, a Tensor or a list of Tensors, "
                     f"got {type(program).__name__}; build one with Graph.from_outputs([...])")


def check_inputs(graph: Graph, arrays: Mapping[str, Any]) -> dict[Tensor, np.ndarray]:
    """Match ``arrays`` (by placeholder name) to the graph's inputs, or raise InputError
    (constants carry their own values: they are not inputs)."""
    expected = {t.name: t for t in graph.inputs}
    extra = sorted(set(arrays) - set(expected))
    if extra:
        names = ", ".join(expected) or "(none)"
        raise InputError(f"unexpected input(s) {', '.join(map(repr, extra))}; the graph's inputs "
                         f"are: {names}")
    env: dict[Tensor, np.ndarray] = {}
    for name, tensor in expected.items():
        wanted = f"{tensor.dtype.value}{list(tensor.shape)}"
        if name not in arrays:
            raise InputError(f"input {name!r} is missing; pass a {wanted} array as "
                             f"{name}=... or inputs={{{name!r}: ...}}")
        array = arrays[name]
        if isinstance(array, np.ma.MaskedArray):
            raise InputError(masked_message(name))
        if not isinstance(array, np.ndarray):
            array = np.asarray(array)
        if array.shape != tensor.shape:
            raise InputError(f"input {name!r} has shape {array.shape}, expected shape "
                             f"{tensor.shape} (dtype {tensor.dtype.value}); pass a {wanted} array")
        if array.dtype != tensor.dtype.numpy:
            raise InputError(f"input {name!r} has dtype {array.dtype}, expected dtype "
                             f"{tensor.dtype.value} (shape {tensor.shape}); convert it with "
                             f".astype({_dtype_hint(tensor)})")
        env[tensor] = array
    return env


def _dtype_hint(tensor: Tensor) -> str:
    if tensor.dtype.value == "bfloat16":
        return "ml_dtypes.bfloat16"
    return f"np.{tensor.dtype.value}"


def run(program: Program, /, inputs: Mapping[str, Any] | None = None,
        **arrays: Any) -> np.ndarray | tuple[np.ndarray, ...]:
    """Evaluate every compute of ``program`` and return its output array(s).

    Inputs are given by placeholder name, as keywords or as an ``inputs`` mapping (use the
    mapping when a placeholder is called ``inputs``). One output gives one array, several give
    a tuple: in the order of the list passed, or the graph's output order. Every compute is
    evaluated once, however many consumers it has.
    """
    graph = as_graph(program)
    given: dict[str, Any] = {}
    if inputs is not None:
        if isinstance(inputs, Mapping):
            given.update(inputs)
        else:  # a placeholder that happens to be called "inputs"
            given["inputs"] = inputs
    for name, array in arrays.items():
        if name in given:
            raise InputError(f"input {name!r} is given twice (as a keyword and in inputs=)")
        given[name] = array
    env: dict[Tensor, np.ndarray] = check_inputs(graph, given)
    env.update((t, t.constant_value) for t in graph.constants)
    # every compute's array is kept until the end: refuse before evaluating the first one
    check_allocation([(t.name, t.shape, t.dtype.numpy) for t in graph.computes],
                     "the reference interpreter")
    for tensor in graph.computes:  # topological: producers first; each computed once
        env[tensor] = evaluate(tensor, env)
    wanted = list(program) if isinstance(program, (list, tuple)) else graph.outputs
    results = tuple(env[t] if not t.is_placeholder else env[t].copy() for t in wanted)
    return results[0] if len(results) == 1 else results
