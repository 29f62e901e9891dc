"""The integer linear algebra of autodiff: Smith normal form, column echelon bases, and the
solutions of index equations (strided reads, broadcasts, floordiv/mod pairs)."""

from __future__ import annotations

import random
from fractions import Fraction

import numpy as np
import pytest

import tilecraft as tc
from tilecraft import te
from tilecraft.autodiff import grad
from tilecraft.autodiff.smith import column_echelon, multiply, smith_normal_form


def determinant(matrix: list[list[int]]) -> Fraction:
    m = [[Fraction(x) for x in row] for row in matrix]
    size, det = len(m), Fraction(1)
    for col in range(size):
        pivot = next((r for r in range(col, size) if m[r][col] != 0), None)
        if pivot is None:
            return Fraction(0)
        if pivot != col:
            m[col], m[pivot] = m[pivot], m[col]
            det = -det
        det *= m[col][col]
        for r in range(col + 1, size):
            factor = m[r][col] / m[col][col]
            m[r] = [a - factor * b for a, b in zip(m[r], m[col])]
    return det


def test_the_textbook_example() -> None:
    a = [[2, 4, 4], [-6, 6, 12], [10, -4, -16]]
    form = smith_normal_form(a)
    assert form.diagonal == [2, 6, 12]
    assert multiply(multiply(form.left, a), form.right) == form.diagonal_matrix


@pytest.mark.parametrize("seed", range(40))
def test_random_matrices(seed: int) -> None:
    rng = random.Random(seed)
    rows, cols = rng.randint(1, 5), rng.randint(1, 6)
    a = [[rng.randint(-7, 7) * rng.randint(0, 1) for _ in range(cols)] for _ in range(rows)]
    form = smith_normal_form(a)
    assert multiply(multiply(form.left, a), form.right) == form.diagonal_matrix
    assert abs(determinant(form.left)) == 1 and abs(determinant(form.right)) == 1
    d = form.diagonal_matrix
    assert all(d[i][j] == 0 for i in range(rows) for j in range(cols) if i != j)
    diagonal = form.diagonal
    assert all(x > 0 for x in diagonal[:form.rank]) and all(x == 0 for x in diagonal[form.rank:])
    assert all(diagonal[i + 1] % diagonal[i] == 0 for i in range(form.rank - 1))
    assert form.rank == np.linalg.matrix_rank(np.array(a, dtype=float))


@pytest.mark.parametrize("seed", range(20))
def test_column_echelon_keeps_the_lattice(seed: int) -> None:
    rng = random.Random(100 + seed)
    rows, cols = rng.randint(1, 6), rng.randint(1, 4)
    a = [[rng.randint(-5, 5) for _ in range(cols)] for _ in range(rows)]
    e = column_echelon(a)
    pivots = [next(r for r in range(rows) if e[r][c] != 0) for c in range(len(e[0]))]
    assert pivots == sorted(set(pivots))
    # same lattice: same rank and the same invariant factors
    assert smith_normal_form(e, len(e[0])).diagonal[:len(pivots)] == \
        smith_normal_form(a).diagonal[:smith_normal_form(a).rank]


def _gradient(output: te.Tensor, x: te.Tensor, arrays: dict, g: np.ndarray) -> np.ndarray:
    (dx,) = grad(output, [x])
    return tc.reference.run(dx, **{f"grad_{output.name}": g, **arrays})


def test_a_strided_read_gets_a_divisibility_condition() -> None:
    X = te.placeholder((11,), name="X")
    Y = te.compute((4,), lambda i: X[3 * i + 1] * 1.0, name="Y")
    (dX,) = grad(Y, [X])
    assert "% 3" in dX.statement() and not dX.reduce_axes
    g = np.arange(1, 5, dtype=np.float32)
    expected = np.zeros(11, np.float32)
    expected[[1, 4, 7, 10]] = g
    np.testing.assert_array_equal(tc.reference.run(dX, grad_Y=g), expected)


def test_a_broadcast_read_becomes_a_reduction() -> None:
    X = te.placeholder((1, 5), name="X")
    Y = te.compute((7, 5), lambda i, j: X[0, j] * 2.0, name="Y")
    (dX,) = grad(Y, [X])
    assert [axis.extent for axis in dX.reduce_axes] == [7]
    g = np.random.default_rng(0).standard_normal((7, 5)).astype(np.float32)
    np.testing.assert_allclose(tc.reference.run(dX, grad_Y=g), 2 * g.sum(0, keepdims=True),
                               rtol=1e-6)


def test_paired_floordiv_and_mod_recombine_without_new_loops() -> None:
    X = te.placeholder((4, 6), name="X")
    Y = te.compute((24,), lambda i: X[i // 6, i % 6], name="Y")
    (dX,) = grad(Y, [X])
    assert not dX.reduce_axes
    g = np.arange(24, dtype=np.float32)
    np.testing.assert_array_equal(tc.reference.run(dX, grad_Y=g), g.reshape(4, 6))


def test_an_unpaired_floordiv_leaves_a_loop_over_the_remainder() -> None:
    X = te.placeholder((4,), name="X")
    Y = te.compute((12,), lambda i: X[i // 3] * 1.0, name="Y")  # upsampling by 3
    (dX,) = grad(Y, [X])
    assert [axis.extent for axis in dX.reduce_axes] == [3]
    g = np.arange(12, dtype=np.float32)
    np.testing.assert_array_equal(tc.reference.run(dX, grad_Y=g), g.reshape(4, 3).sum(1))


def test_a_read_at_one_element_sums_everything_into_it() -> None:
    X = te.placeholder((3,), name="X")
    Y = te.compute((4, 5), lambda i, j: X[2] * 1.0, name="Y")
    (dX,) = grad(Y, [X])
    g = np.ones((4, 5), np.float32)
    np.testing.assert_array_equal(tc.reference.run(dX, grad_Y=g), [0.0, 0.0, 20.0])


@pytest.mark.parametrize("stride", [1, 2, 3])
def test_a_conv_data_gradient_is_a_plain_contraction_of_the_spread_gradient(stride: int) -> None:
    """Stride 1: the output gradient padded with zeros, no test inside the loops, the kernel
    read in place — the transposed convolution as a contraction like the forward's. Strided:
    the scatter form instead (a spread copy would multiply stride**2 times as many zeros): a
    contraction over the output channels alone, then a gather of the ceil(K / s) taps per
    axis that reach each input element."""
    from tilecraft import ops
    from tilecraft.te import Reduce, Select
    from tilecraft.te.visit import walk

    x = te.placeholder((1, 3, 7, 6), name="x")
    w = te.placeholder((4, 3, 3, 2), name="w")
    out = ops.conv2d(x, w, stride=stride, name="out")  # no padding: the gradient needs one
    (dx,) = grad(out, [x])
    body = dx.body
    if stride == 1:
        assert isinstance(body, Reduce) and not any(isinstance(n, Select) for n in walk(body))
        assert sorted(t.name for t in dx.inputs) == ["grad_x_via_out_spread_grad_out", "w"]
        assert str(body.body.b).startswith("w[r_k, j, ")  # the kernel read in place
    else:
        (cols,) = dx.inputs
        assert cols.name == "grad_x_via_out_cols" and [a.extent for a in cols.reduce_axes] == [4]
        assert not any(isinstance(n, Select) for n in walk(cols.body))
        assert sorted(t.name for t in cols.inputs) == ["grad_out", "w"]
        taps = [-(-3 // stride), -(-2 // stride)]  # a single tap is no loop
        assert [a.extent for a in dx.reduce_axes] == [t for t in taps if t > 1]
    rng = np.random.default_rng(stride)
    xv, wv = (rng.standard_normal(t.shape).astype(np.float32) for t in (x, w))
    g = rng.standard_normal(out.shape).astype(np.float32)
    torch = pytest.importorskip("torch")
    xt = torch.tensor(xv, requires_grad=True)
    torch.nn.functional.conv2d(xt, torch.tensor(wv), stride=stride).backward(torch.tensor(g))
    np.testing.assert_allclose(tc.reference.run(dx, w=wv, grad_out=g), xt.grad.numpy(),
                               rtol=1e-5, atol=1e-5)


def test_no_padding_where_a_zero_would_not_cancel_the_rest() -> None:
    X = te.placeholder((6,), name="X")
    W = te.placeholder((4,), name="W")
    r = te.reduce_axis(3, name="r")
    Y = te.compute((4,), lambda i: te.sum(X[i + r] / W[i], axis=r), name="Y")
    (dX,) = grad(Y, [X])  # i = z - r must be tested: the quotient 1/W would not cancel
    from tilecraft.te import Select
    from tilecraft.te.visit import walk

    assert all("padded" not in t.name for t in dX.inputs)
    assert any(isinstance(n, Select) for n in walk(dX.body))
    wv = np.array([1, 2, 4, 8], np.float32)
    g = np.ones(4, np.float32)
    expected = np.zeros(6, np.float32)
    for i in range(4):
        expected[i:i + 3] += 1 / wv[i]
    np.testing.assert_allclose(tc.reference.run(dX, W=wv, grad_Y=g), expected, rtol=1e-6)


@pytest.mark.parametrize("build", [
    lambda x: __import__("tilecraft").ops.reshape(x, (5, 6), name="out"),
    lambda x: __import__("tilecraft").ops.transpose(x, (2, 0, 1), name="out"),
], ids=["reshape", "transpose"])
def test_layout_gradients_are_the_inverse_layout_without_loops_or_tests(build) -> None:  # noqa: ANN001
    from tilecraft.te import Select
    from tilecraft.te.visit import walk

    x = te.placeholder((2, 3, 5), name="x")
    out = build(x)
    (dx,) = grad(out, [x])
    assert not dx.reduce_axes and not any(isinstance(n, Select) for n in walk(dx.body))
    g = np.arange(30, dtype=np.float32).reshape(out.shape)
    forward = tc.reference.run(out, x=np.arange(30, dtype=np.float32).reshape(2, 3, 5))
    # a permutation: the gradient puts each output element back where it came from
    back = tc.reference.run(dx, grad_out=g)
    assert sorted(back.ravel()) == list(range(30))
    np.testing.assert_array_equal(back.ravel()[forward.ravel().astype(int)], g.ravel())


@pytest.mark.parametrize("mode", ["CRD", "DCR"])
def test_depth_to_space_gradients_are_space_to_depth(mode: str) -> None:
    from tilecraft import ops

    x = te.placeholder((1, 8, 3, 5), name="x")
    out = ops.depth_to_space(x, 2, mode=mode, name="out")
    (dx,) = grad(out, [x])
    assert not dx.reduce_axes
    g = np.random.default_rng(1).standard_normal(out.shape).astype(np.float32)
    gs = te.placeholder(out.shape, name="g")
    expected = tc.reference.run(ops.space_to_depth(gs, 2, mode=mode, name="s2d"), g=g)
    np.testing.assert_array_equal(tc.reference.run(dx, grad_out=g), expected)
