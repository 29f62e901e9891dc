"""compute_gradient, the one-compute step a graph-level backward chains: chained by hand it
gives what grad gives, and it reads only the forward tensors and the gradient it is handed."""

from __future__ import annotations

import numpy as np

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.autodiff import compute_gradient, grad
from tilecraft.graph import Graph


def test_chaining_compute_gradient_by_hand_equals_grad() -> None:
    X = te.placeholder((5, 7), name="X")
    W = te.placeholder((7, 3), name="W")
    Y = ops.tanh(X, name="Y")
    Z = ops.matmul(Y, W, name="Z")
    dZ = te.placeholder((5, 3), name="dZ")
    dY = compute_gradient(Z, dZ, Y, name="dY")
    dX = compute_gradient(Y, dY, X, name="dX")
    (expected,) = grad(Z, [X], dZ)
    rng = np.random.default_rng(4)
    arrays = {"X": rng.standard_normal((5, 7)).astype(np.float32),
              "W": rng.standard_normal((7, 3)).astype(np.float32),
              "dZ": rng.standard_normal((5, 3)).astype(np.float32)}
    assert {t.name for t in Graph.from_outputs([dX]).inputs} == {"X", "W", "dZ"}
    mine = tc.reference.run(dX, **arrays)
    np.testing.assert_allclose(mine, tc.reference.run(expected, **arrays), rtol=1e-6)
    y = np.tanh(arrays["X"])
    np.testing.assert_allclose(mine, arrays["dZ"] @ arrays["W"].T * (1 - y * y), rtol=1e-5,
                               atol=1e-6)


def test_gradients_of_gradients_match_finite_differences() -> None:
    """A gradient is a te program like any other: its own gradient (a conv data gradient with
    respect to the kernel, through the spread copy) is derived the same way."""
    import importlib.util
    import sys
    from pathlib import Path

    if "autodiff_checks" not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            "autodiff_checks", Path(__file__).with_name("autodiff_checks.py"))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["autodiff_checks"] = module
        spec.loader.exec_module(module)
    checks = sys.modules["autodiff_checks"]
    x = te.placeholder((1, 2, 7, 6), name="x")
    w = te.placeholder((3, 2, 3, 3), name="w")
    (dx,) = grad(ops.conv2d(x, w, stride=2, padding=1, name="out"), [x])
    g = te.placeholder((1, 3, 4, 3), name="grad_out")
    rng = np.random.default_rng(9)
    arrays = {"w": rng.uniform(-1, 1, (3, 2, 3, 3)), "grad_out": rng.uniform(-1, 1, g.shape)}
    inputs = [t for t in Graph.from_outputs([dx]).inputs if t.name in arrays]
    checks.check_finite_differences(dx, inputs, arrays, elements=3)
