"""Helpers of the autodiff tests: the reference interpreter in float64, and finite differences.

``float64_reference()`` makes float32 tensors hold float64 arrays while it is active (the
interpreter computes in its storage dtype), so central differences of the forward program are
accurate to ~1e-9 and a wrong gradient cannot hide behind float32 rounding.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence

import numpy as np

import tilecraft as tc
from tilecraft import dtypes, te
from tilecraft.autodiff import grad
from tilecraft.dtypes import DType
from tilecraft.graph import Graph
from tilecraft.te import Tensor


@contextlib.contextmanager
def float64_reference() -> Iterator[None]:
    saved = dtypes._NUMPY_DTYPES[DType.FLOAT32]
    dtypes._NUMPY_DTYPES[DType.FLOAT32] = np.dtype(np.float64)
    try:
        yield
    finally:
        dtypes._NUMPY_DTYPES[DType.FLOAT32] = saved


def run(tensor: Tensor, arrays: Mapping[str, np.ndarray]) -> np.ndarray:
    """``tensor`` by the reference interpreter, given any superset of its inputs; constants
    (te.constant weights) are read in the storage dtype of the moment (float64 under
    :func:`float64_reference`)."""
    graph = Graph.from_outputs([tensor])
    if not graph.constants:
        needed = {t.name for t in graph.inputs}
        return np.asarray(tc.reference.run(tensor, **{n: a for n, a in arrays.items()
                                                      if n in needed}))
    env = {t: np.asarray(arrays[t.name], t.dtype.numpy) for t in graph.inputs}
    env.update((t, t.constant_value.astype(t.dtype.numpy)) for t in graph.constants)
    for compute in graph.computes:
        env[compute] = tc.reference.evaluate(compute, env)
    return env[tensor]


def gradients64(output: Tensor, wrt: Sequence[Tensor], arrays: Mapping[str, np.ndarray],
                grad_output: np.ndarray) -> list[np.ndarray]:
    """tilecraft's gradients of ``sum(output * grad_output)``, evaluated in float64."""
    grads = grad(output, list(wrt))
    feed = dict(arrays)
    feed[f"grad_{output.name}"] = grad_output
    with float64_reference():
        return [run(g, feed) for g in grads]


def check_finite_differences(output: Tensor, wrt: Sequence[Tensor],
                             arrays: Mapping[str, np.ndarray], seed: int = 0,
                             elements: int = 4, rtol: float = 1e-6) -> None:
    """Each gradient against central differences of ``sum(output * g)`` in float64: along two
    random directions and at ``elements`` random single elements of each tensor."""
    rng = np.random.default_rng(seed)
    arrays = {n: np.asarray(a, np.float64) for n, a in arrays.items()}
    g_out = rng.uniform(-1, 1, output.shape)
    grads = gradients64(output, wrt, arrays, g_out)

    def objective(values: Mapping[str, np.ndarray]) -> float:
        with float64_reference():
            return float(np.sum(run(output, values) * g_out))

    step = 1e-6
    for tensor, gradient in zip(wrt, grads):
        assert gradient.shape == tensor.shape
        directions = [rng.uniform(-1, 1, tensor.shape) for _ in range(2)]
        for index in rng.choice(tensor.size, size=min(elements, tensor.size), replace=False):
            unit = np.zeros(tensor.size)
            unit[index] = 1.0
            directions.append(unit.reshape(tensor.shape))
        for direction in directions:
            up, down = dict(arrays), dict(arrays)
            up[tensor.name] = arrays[tensor.name] + step * direction
            down[tensor.name] = arrays[tensor.name] - step * direction
            numeric = (objective(up) - objective(down)) / (2 * step)
            analytic = float(np.sum(gradient * direction))
            scale = max(1.0, abs(numeric), float(np.sum(np.abs(gradient * direction))))
            assert abs(numeric - analytic) <= rtol * scale, (
                f"d{output.name}/d{tensor.name}: finite differences {numeric!r}, "
                f"gradient {analytic!r}")


def check_unary_derivative(function: Callable[[te.Expr], te.Expr],
                           numpy_f: Callable[[np.ndarray], np.ndarray], x: np.ndarray) -> None:
    """The derivative autodiff gives ``y = function(X)`` at the points ``x`` (float32, the
    reference interpreter) against central differences of ``numpy_f`` (float64)."""
    from tilecraft.reference import run

    X = te.placeholder((x.size,), "float32", name="X")
    y = te.compute(X.shape, lambda i: function(X[i]), name="Y")
    (dx,) = grad(y, [X])
    got = run(Graph.from_outputs([dx]), {"X": x.astype(np.float32),
                                         "grad_Y": np.ones(x.size, np.float32)})
    step = 1e-6 * np.maximum(1.0, np.abs(x))
    numeric = (numpy_f(x + step) - numpy_f(x - step)) / (2 * step)
    np.testing.assert_allclose(got, numeric, rtol=1e-4, atol=1e-5)
