"""Matrix products: GEMV, GEMM, batched GEMM, bilinear, dense (thesis Table 4.2: GMV, GMM, BIL).

Each is one ``sum`` of a product of loads. Float inputs give a result of the same dtype
(half types accumulate in float32 and round once on store); integer inputs accumulate in int32
by default (``out_dtype=`` chooses, e.g. ``'int32'`` for uint8 x int8).

>>> from tilecraft import te
>>> A = te.placeholder((4, 3), name="A")
>>> B = te.placeholder((3, 5), name="B")
>>> print(matmul(A, B, name="C").statement())
C[i, j] = sum(A[i, k] * B[k, j], axis=[k])
"""

from __future__ import annotations

from tilecraft import te
from tilecraft.dtypes import DType
from tilecraft.errors import ShapeError
from tilecraft.ops.building import (
    check_tensor,
    named_compute,
    operand,
    output_name,
    product_dtype,
)
from tilecraft.ops.elementwise import bias_add
from tilecraft.te.tensor import Tensor


def gemv(A: Tensor, x: Tensor, out_dtype: DType | str | None = None,  # noqa: N803
         name: str | None = None) -> Tensor:
    """``y[i] = sum_k A[i, k] * x[k]`` for A (M, K) and x (K,)."""
    check_tensor(A, "gemv", "A", 2)
    check_tensor(x, "gemv", "x", 1)
    m, k_extent = A.shape
    if x.shape[0] != k_extent:
        raise ShapeError(f"gemv: A ({A.name}) is {m}x{k_extent} but x ({x.name}) has "
                         f"{x.shape[0]} elements; x needs {k_extent}")
    dtype = product_dtype("gemv", A, x, out_dtype)
    k = te.reduce_axis(k_extent, "k")
    return named_compute(
        (m,), ["i"],
        lambda i: te.sum(operand(A[i, k], dtype) * operand(x[k], dtype), axis=k),
        output_name(name, "gemv"))


def matmul(A: Tensor, B: Tensor,  # noqa: N803
           transpose_a: bool = False, transpose_b: bool = False,
           out_dtype: DType | str | None = None, name: str | None = None) -> Tensor:
    """``C = op(A) @ op(B)`` for 2-d A and B; ``op`` transposes when asked."""
    check_tensor(A, "matmul", "A", 2)
    check_tensor(B, "matmul", "B", 2)
    m, ka = (A.shape[1], A.shape[0]) if transpose_a else A.shape
    kb, n = (B.shape[1], B.shape[0]) if transpose_b else B.shape
    if ka != kb:
        raise ShapeError(f"matmul: inner dimensions differ: op(A) ({A.name}) is {m}x{ka} and "
                         f"op(B) ({B.name}) is {kb}x{n}; fix the shapes or set "
                         "transpose_a/transpose_b")
    dtype = product_dtype("matmul", A, B, out_dtype)
    k = te.reduce_axis(ka, "k")

    def body(i: te.Expr, j: te.Expr) -> te.Expr:
        a = A[k, i] if transpose_a else A[i, k]
        b = B[j, k] if transpose_b else B[k, j]
        return te.sum(operand(a, dtype) * operand(b, dtype), axis=k)

    return named_compute((m, n), ["i", "j"], body, output_name(name, "matmul"))


def batch_matmul(A: Tensor, B: Tensor,  # noqa: N803
                 transpose_a: bool = False, transpose_b: bool = False,
                 out_dtype: DType | str | None = None, name: str | None = None) -> Tensor:
    """``C[b] = op(A[b]) @ op(B[b])`` for 3-d A and B; a batch of 1 broadcasts."""
    check_tensor(A, "batch_matmul", "A", 3)
    check_tensor(B, "batch_matmul", "B", 3)
    ba, bb = A.shape[0], B.shape[0]
    if ba != bb and 1 not in (ba, bb):
        raise ShapeError(f"batch_matmul: batch sizes differ: {A.name} has {ba} and {B.name} "
                         f"has {bb}; they must match (or one of them be 1)")
    m, ka = (A.shape[2], A.shape[1]) if transpose_a else A.shape[1:]
    kb, n = (B.shape[2], B.shape[1]) if transpose_b else B.shape[1:]
    if ka != kb:
        raise ShapeError(f"batch_matmul: inner dimensions differ: op(A) ({A.name}) is "
                         f"{m}x{ka} and op(B) ({B.name}) is {kb}x{n}; fix the shapes or set "
                         "transpose_a/transpose_b")
    dtype = product_dtype("batch_matmul", A, B, out_dtype)
    k = te.reduce_axis(ka, "k")

    def body(b: te.Expr, i: te.Expr, j: te.Expr) -> te.Expr:
        a_batch = 0 if ba == 1 else b
        b_batch = 0 if bb == 1 else b
        a = A[a_batch, k, i] if transpose_a else A[a_batch, i, k]
        rhs = B[b_batch, j, k] if transpose_b else B[b_batch, k, j]
        return te.sum(operand(a, dtype) * operand(rhs, dtype), axis=k)

    return named_compute((max(ba, bb), m, n), ["b", "i", "j"], body,
                         output_name(name, "batch_matmul"))


def bilinear(x1: Tensor, x2: Tensor, W: Tensor,  # noqa: N803
             bias: Tensor | None = None,
             name: str | None = None) -> Tensor:
    """PyTorch's Bilinear: ``out[n, o] = sum_ij x1[n, i] * W[o, i, j] * x2[n, j] (+ bias[o])``."""
    check_tensor(x1, "bilinear", "x1", 2)
    check_tensor(x2, "bilinear", "x2", 2)
    check_tensor(W, "bilinear", "W", 3)
    batch, i_extent = x1.shape
    if x2.shape[0] != batch:
        raise ShapeError(f"bilinear: x1 ({x1.name}) has batch {batch} but x2 ({x2.name}) has "
                         f"{x2.shape[0]}; they must match")
    j_extent = x2.shape[1]
    out_features = W.shape[0]
    if W.shape[1:] != (i_extent, j_extent):
        raise ShapeError(f"bilinear: W ({W.name}) has shape {W.shape}; with x1 of {i_extent} "
                         f"and x2 of {j_extent} features it must be (out, {i_extent}, "
                         f"{j_extent})")
    dtype = product_dtype("bilinear", x1, x2, None)
    product_dtype("bilinear", x1, W, None)
    final = output_name(name, "bilinear")
    i = te.reduce_axis(i_extent, "ri")
    j = te.reduce_axis(j_extent, "rj")
    out = named_compute(
        (batch, out_features), ["n", "o"],
        lambda n, o: te.sum(operand(x1[n, i], dtype) * operand(W[o, i, j], dtype)
                            * operand(x2[n, j], dtype), axis=[i, j]),
        final if bias is None else f"{final}_product")
    if bias is None:
        return out
    return bias_add(out, bias, axis=1, name=final)


def dense(x: Tensor, W: Tensor,  # noqa: N803
          bias: Tensor | None = None, out_dtype: DType | str | None = None,
          name: str | None = None) -> Tensor:
    """PyTorch's Linear: ``y = x @ W.T (+ bias)`` for x (N, in) and W (out, in)."""
    check_tensor(x, "dense", "x", 2)
    check_tensor(W, "dense", "W", 2)
    if x.shape[1] != W.shape[1]:
        raise ShapeError(f"dense: x ({x.name}) has {x.shape[1]} features but W ({W.name}) is "
                         f"{W.shape} (out, in); W needs {x.shape[1]} columns")
    final = output_name(name, "dense")
    out = matmul(x, W, transpose_b=True, out_dtype=out_dtype,
                 name=final if bias is None else f"{final}_matmul")
    if bias is None:
        return out
    return bias_add(out, bias, axis=1, name=final)


def grouped_dense(x: Tensor, w: Tensor, out_dtype: DType | str | None = None,
                  name: str | None = None) -> Tensor:
    """Grouped fully connected layer (AMOS's GFC): x (N, G, C), w (G, K, C) -> (N, G, K),
    ``y[n, g, k] = sum_c x[n, g, c] * w[g, k, c]``."""
    op = "grouped_dense"
    check_tensor(x, op, "x", 3)
    check_tensor(w, op, "w", 3)
    batch, groups, channels = x.shape
    w_groups, out_features, w_channels = w.shape
    if (w_groups, w_channels) != (groups, channels):
        raise ShapeError(f"{op}: w ({w.name}, shape {w.shape}) must be (G, K, C) with "
                         f"G={groups} and C={channels} of x ({x.name}, shape {x.shape})")
    dtype = product_dtype(op, x, w, out_dtype)
    rc = te.reduce_axis(channels, "rc")
    return named_compute(
        (batch, groups, out_features), ["n", "g", "k"],
        lambda n, g, k: te.sum(operand(x[n, g, rc], dtype) * operand(w[g, k, rc], dtype),
                               axis=rc),
        output_name(name, op))
