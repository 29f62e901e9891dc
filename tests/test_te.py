"""The tensor-expression IR: construction, dtype and shape inference, checks at construction."""

from __future__ import annotations

import pytest

from tilecraft import te
from tilecraft.dtypes import DType
from tilecraft.errors import (
    DTypeError,
    ExpressionError,
    IndexBoundsError,
    ReduceAxisError,
    ShapeError,
)
from tilecraft.te.bounds import affine, index_in_bounds, interval


def test_gemm_compute_shape_dtype_and_statement() -> None:
    A = te.placeholder((64, 128), "float32", name="A")
    B = te.placeholder((128, 32), "float32", name="B")
    k = te.reduce_axis(128, name="k")
    C = te.compute((64, 32), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    assert C.shape == (64, 32) and C.dtype is DType.FLOAT32
    assert [t.name for t in C.inputs] == ["A", "B"]
    assert C.reduce_axes == (k,)
    assert [a.name for a in C.axes] == ["i", "j"]
    assert C.statement() == "C[i, j] = sum(A[i, k] * B[k, j], axis=[k])"


def test_nodes_are_hashable_and_structural() -> None:
    A = te.placeholder((4,), name="A")
    i = te.reduce_axis(4, name="i")
    e1 = A[i] * 2.0 + 1.0
    e2 = A[i] * 2.0 + 1.0
    assert e1 == e2 and hash(e1) == hash(e2)
    j = te.reduce_axis(4, name="i")  # same name, different variable
    assert (A[j] * 2.0 + 1.0) != e1
    assert len({e1, e2}) == 1


def test_python_scalars_take_the_other_operands_dtype() -> None:
    X = te.placeholder((3,), "float16", name="X")
    e = te.compute((3,), lambda i: X[i] * 2 + 1, name="Y")
    assert e.dtype is DType.FLOAT16
    Q = te.placeholder((3,), "int8", name="Q")
    assert te.compute((3,), lambda i: Q[i] + 1, name="R").dtype is DType.INT8
    with pytest.raises(DTypeError, match="float"):
        te.compute((3,), lambda i: Q[i] + 1.5, name="S")


def test_dtype_mismatch_names_operands_and_fix() -> None:
    A = te.placeholder((4,), "float32", name="A")
    I = te.placeholder((4,), "int32", name="I")  # noqa: E741
    with pytest.raises(DTypeError, match=r"A\[i\].*I\[i\].*astype"):
        te.compute((4,), lambda i: A[i] + I[i], name="Bad")
    ok = te.compute((4,), lambda i: A[i] + I[i].astype("float32"), name="Ok")
    assert ok.dtype is DType.FLOAT32


def test_integer_true_division_and_float_floordiv_are_rejected() -> None:
    I = te.placeholder((4,), "int32", name="I")  # noqa: E741
    A = te.placeholder((4,), "float32", name="A")
    with pytest.raises(DTypeError, match="//"):
        te.compute((4,), lambda i: I[i] / 2, name="Bad")
    with pytest.raises(DTypeError, match="integer"):
        te.compute((4,), lambda i: A[i] // 2.0, name="Bad2")


def test_transcendental_needs_float() -> None:
    I = te.placeholder((4,), "int32", name="I")  # noqa: E741
    with pytest.raises(DTypeError, match="exp"):
        te.compute((4,), lambda i: te.exp(I[i]), name="Bad")


def test_wrong_index_count_and_slices() -> None:
    A = te.placeholder((4, 5), name="A")
    with pytest.raises(ShapeError, match="A has 2 dimensions"):
        te.compute((4,), lambda i: A[i], name="Bad")
    with pytest.raises(ShapeError, match="slice"):
        A[0:2, 1]


def test_lambda_arity_must_match_shape() -> None:
    A = te.placeholder((4, 5), name="A")
    with pytest.raises(ShapeError, match="one index per dimension"):
        te.compute((4, 5), lambda i: A[i, 0], name="Bad")


def test_bad_shapes() -> None:
    with pytest.raises(ShapeError, match="at least 1"):
        te.placeholder((4, 0), name="Z")
    with pytest.raises(ShapeError, match="not an int"):
        te.placeholder((4, 2.5), name="Z")


def test_out_of_bounds_index_is_rejected_with_range() -> None:
    A = te.placeholder((10,), name="A")
    with pytest.raises(IndexBoundsError, match=r"ranges over \[1, 10\].*extent 10"):
        te.compute((10,), lambda i: A[i + 1], name="Shift")


def test_guarded_index_is_accepted() -> None:
    X = te.placeholder((1, 2, 5, 5), name="X")
    P = te.compute(
        (1, 2, 7, 7),
        lambda n, c, h, w: te.select(
            (h - 1 >= 0) & (h - 1 < 5) & (w - 1 >= 0) & (w - 1 < 5), X[n, c, h - 1, w - 1], 0.0),
        name="P")
    assert P.shape == (1, 2, 7, 7)
    # the false branch of a guard is not protected by it
    with pytest.raises(IndexBoundsError):
        te.compute((7,), lambda h: te.select(h < 5, 0.0, X[0, 0, h, 0]), name="Wrong")
    # ... but its negation is
    te.compute((7,), lambda h: te.select(h >= 5, 0.0, X[0, 0, h, 0]), name="Right")


def test_reduce_axis_outside_reduction() -> None:
    A = te.placeholder((4, 8), name="A")
    r = te.reduce_axis(8, name="r")
    with pytest.raises(ReduceAxisError, match="reduce axis r is used outside"):
        te.compute((4,), lambda i: A[i, r], name="Bad")


def test_reduction_must_be_outermost() -> None:
    A = te.placeholder((4, 8), name="A")
    r = te.reduce_axis(8, name="r")
    with pytest.raises(ReduceAxisError, match="whole body"):
        te.compute((4,), lambda i: te.sum(A[i, r], axis=r) * 2.0, name="Bad")


def test_reduce_over_spatial_axis_is_rejected() -> None:
    A = te.placeholder((4,), name="A")
    with pytest.raises(ReduceAxisError, match="spatial"):
        te.compute((4,), lambda i: te.sum(A[i], axis=i), name="Bad")


def test_axis_from_another_compute_is_rejected() -> None:
    A = te.placeholder((4,), name="A")
    B = te.compute((4,), lambda i: A[i], name="B")
    foreign = B.axes[0]
    with pytest.raises(ReduceAxisError, match="belongs to another compute"):
        te.compute((4,), lambda j: A[foreign], name="Bad")


def test_multi_axis_reduction_and_min_max() -> None:
    A = te.placeholder((3, 4, 5), name="A")
    r1, r2 = te.reduce_axis(4, name="r1"), te.reduce_axis(5, name="r2")
    S = te.compute((3,), lambda i: te.max(A[i, r1, r2], axis=[r1, r2]), name="S")
    assert S.reduce_axes == (r1, r2)
    assert "max(A[i, r1, r2], axis=[r1, r2])" in S.statement()
    with pytest.raises(ExpressionError, match="second operand"):
        te.max(A[0, 0, 0])


def test_condition_cannot_be_a_python_bool() -> None:
    A = te.placeholder((4,), name="A")
    with pytest.raises(ExpressionError, match="select"):
        te.compute((4,), lambda i: A[i] if A[i] > 0.0 else 0.0, name="Bad")


def test_floordiv_mod_indices_for_depth2space() -> None:
    X = te.placeholder((1, 8, 3, 3), name="X")
    Y = te.compute((1, 2, 6, 6),
                   lambda n, c, h, w: X[n, c * 4 + (h % 2) * 2 + w % 2, h // 2, w // 2], name="Y")
    assert Y.shape == (1, 2, 6, 6)


def test_interval_and_affine_analysis() -> None:
    i = te.reduce_axis(10, name="i")
    j = te.reduce_axis(3, name="j")
    assert interval(i * 2 - j) == (-2, 18)
    assert interval((i + 3) // 4) == (0, 3)
    assert interval(i % 16) == (0, 9)
    form = affine(i * 2 - j + 5)
    assert form is not None and form.terms() == {i: 2, j: -1} and form.constant == 5
    assert affine(i * j) is None
    assert index_in_bounds(i + j, 12) and not index_in_bounds(i + j, 11)
