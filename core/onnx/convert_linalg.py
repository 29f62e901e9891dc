"""ONNX Det: the determinant of the last two axes' square matrices, for n <= 4, by the Leibniz
formula (a signed sum of n! products with constant indices: exact arithmetic on the entries,
no pivoting). Larger matrices are refused: they need an LU factorisation with pivoting, a
data-dependent row choice that te cannot express.

>>> # Det(x[b, 2, 2]) becomes y[b] = x[b, 0, 0] * x[b, 1, 1] - x[b, 0, 1] * x[b, 1, 0]
"""

from __future__ import annotations

import itertools

from tilecraft import te
from tilecraft.onnx.context import NodeContext, converter
from tilecraft.onnx.values import Value
from tilecraft.ops.building import named_compute
from tilecraft.ops.elementwise import axis_names

#: the largest matrix the Leibniz formula is used for (4! = 24 products of 4 entries)
MAX_DET_SIZE = 4


def _parity(permutation: tuple[int, ...]) -> int:
    """+1 for an even permutation, -1 for an odd one."""
    sign, seen = 1, list(permutation)
    for i in range(len(seen)):
        while seen[i] != i:
            j = seen[i]
            seen[i], seen[j] = seen[j], seen[i]
            sign = -sign
    return sign


@converter("Det")
def convert_det(ctx: NodeContext) -> list[Value]:
    x = ctx.tensor(0)
    if x.ndim < 2 or x.shape[-1] != x.shape[-2] or not x.dtype.is_float:
        raise ctx.unsupported(f"an input of shape {x.shape} ({x.dtype.value}): float square "
                              "matrices on the last two axes")
    n = x.shape[-1]
    if n > MAX_DET_SIZE:
        raise ctx.unsupported(f"{n} x {n} matrices (at most {MAX_DET_SIZE} x {MAX_DET_SIZE}: "
                              "larger ones need LU with pivoting)")
    terms = [(_parity(p), p) for p in itertools.permutations(range(n))]

    def body(*batch: te.Expr) -> te.Expr:
        total: te.Expr | None = None
        for sign, permutation in terms:
            product = x[(*batch, 0, permutation[0])]
            for row in range(1, n):
                product = product * x[(*batch, row, permutation[row])]
            if total is None:
                total = product if sign > 0 else -product
            else:
                total = total + product if sign > 0 else total - product
        return total

    shape = x.shape[:-2] or (1,)
    if x.ndim == 2:  # a 0-d result, held as one element
        return [named_compute(shape, ["i"], lambda i: body(), ctx.out())]
    return [named_compute(shape, axis_names(len(shape)), body, ctx.out())]
