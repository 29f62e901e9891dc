"""Bad input to tilecraft.autodiff: typed errors naming the culprit, zeros with a warning."""

from __future__ import annotations

import numpy as np
import pytest

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.autodiff import compute_gradient, grad
from tilecraft.errors import AutodiffError, AutodiffWarning, TilecraftError


def test_an_integer_compute_on_the_path_is_named() -> None:
    X = te.placeholder((4,), name="X")
    rounded = te.compute((4,), lambda i: X[i].astype("int32"), name="rounded")
    back = te.compute((4,), lambda i: rounded[i].astype("float32") * 2.0, name="back")
    with pytest.raises(AutodiffError, match="rounded"):
        grad(back, [X])


def test_an_integer_cast_inside_a_body_is_not_differentiable() -> None:
    X = te.placeholder((4,), name="X")
    Y = te.compute((4,), lambda i: X[i].astype("int32").astype("float32"), name="Y")
    with pytest.raises(AutodiffError, match="compute Y.*integer type int32"):
        grad(Y, [X])


def test_an_integer_wrt_is_refused() -> None:
    X = te.placeholder((4,), "int8", name="X")
    Y = te.compute((4,), lambda i: X[i].astype("float32"), name="Y")
    with pytest.raises(AutodiffError, match="X has the integer type int8"):
        grad(Y, [X])


@pytest.mark.parametrize("index, why", [
    (lambda i, j, X, idx: X[i * j], "product of loop variables"),
    (lambda i, j, X, idx: X[idx[i] % 5], "not a loop variable|not affine"),
    (lambda i, j, X, idx: X[(i * 3 + j) // (j + 1)], "non-constant"),
])
def test_unsolvable_indices_name_the_compute_and_the_index(index, why) -> None:  # noqa: ANN001
    X = te.placeholder((25,), name="X")
    idx = te.placeholder((5,), "int32", name="idx")
    Y = te.compute((5, 5), lambda i, j: index(i, j, X, idx) * 2.0, name="Y")
    with pytest.raises(AutodiffError, match=f"compute Y: index 0 of X.*({why})"):
        grad(Y, [X])


def test_a_clamp_the_guard_does_not_imply_is_refused() -> None:
    X = te.placeholder((5,), name="X")
    Y = te.compute((7,), lambda i: X[te.max(te.min(i - 1, 4), 0)], name="Y")
    with pytest.raises(AutodiffError, match="clamp"):
        grad(Y, [X])


def test_a_tensor_the_output_ignores_gets_zeros_and_a_warning() -> None:
    X = te.placeholder((3,), name="X")
    unused = te.placeholder((2, 2), name="unused")
    Y = ops.relu(X, name="Y")
    with pytest.warns(AutodiffWarning, match="Y does not depend on unused"):
        dX, dU = grad(Y, [X, unused])
    assert dU.shape == (2, 2)
    np.testing.assert_array_equal(tc.reference.run(dU), np.zeros((2, 2), np.float32))
    with pytest.raises(AutodiffError, match="strict"):
        grad(Y, [unused], strict=True)


def test_a_read_only_in_a_condition_has_no_gradient() -> None:
    X = te.placeholder((3,), name="X")
    W = te.placeholder((3,), name="W")
    Y = te.compute((3,), lambda i: te.select(X[i] > 0.0, W[i], 0.0), name="Y")
    dY = te.placeholder((3,), name="dY")
    assert compute_gradient(Y, dY, X) is None
    with pytest.warns(AutodiffWarning):
        grad(Y, [X])


def test_grad_output_must_have_the_output_shape() -> None:
    X = te.placeholder((3,), name="X")
    Y = ops.tanh(X, name="Y")
    with pytest.raises(AutodiffError, match="grad_output G has shape"):
        grad(Y, [X], te.placeholder((4,), name="G"))


def test_an_errors_is_a_tilecraft_error() -> None:
    assert issubclass(AutodiffError, TilecraftError)


def test_gradients_chain_through_a_given_grad_output_and_intermediates() -> None:
    """grad_output may itself be computed; wrt may hold intermediates and the output."""
    X = te.placeholder((6,), name="X")
    H = ops.sigmoid(X, name="H")
    Y = ops.mul(H, H, name="Y")
    G = te.compute((6,), lambda i: X[i] * 3.0, name="G")  # d loss / dY, read from X
    dX, dH, dY = grad(Y, [X, H, Y], G)
    assert dY is G
    x = np.linspace(-2, 2, 6).astype(np.float32)
    h = 1 / (1 + np.exp(-x))
    np.testing.assert_allclose(tc.reference.run(dH, X=x), 3 * x * 2 * h, rtol=1e-5)
    np.testing.assert_allclose(tc.reference.run(dX, X=x), 3 * x * 2 * h * h * (1 - h),
                               rtol=1e-5, atol=1e-7)
