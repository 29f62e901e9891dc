"""ops.reshape reads its input at affine indices where the shapes split or merge dimensions
compatibly (no floordiv/mod for the tile analysis, operand packing and vector loads to trip
over), keeps the division where they do not, and is exact either way (the numpy oracle)."""

from __future__ import annotations

import numpy as np
import pytest

from tilecraft import ops, te
from tilecraft.reference import evaluate
from tilecraft.te.expr import Binary, BinaryOp
from tilecraft.te.visit import loads_in


def _divisions(tensor: te.Tensor) -> int:
    """How many floordiv / mod nodes the indices of ``tensor``'s loads hold."""
    count = 0

    def walk(expr) -> None:
        nonlocal count
        if isinstance(expr, Binary):
            count += expr.op in (BinaryOp.FLOORDIV, BinaryOp.MOD)
            walk(expr.a)
            walk(expr.b)

    for load in loads_in(tensor.op.body):
        for index in load.indices:
            walk(index)
    return count


CASES = [  # (input shape, output shape, affine?)
    ((512, 768), (512, 12, 64), True),      # heads split
    ((6, 35), (6, 5, 7), True),             # split the last dimension, prime factors
    ((6, 5, 7), (6, 35), False),            # merge: the merged axis must be divided
    ((2, 3, 4), (6, 4), False),             # merge the leading dimensions: divided
    ((6, 4), (2, 3, 4), True),              # split the leading dimension
    ((1, 17, 1), (17,), True),              # unit dimensions
    ((4, 6), (3, 8), False),                # neither split nor merge
    ((13,), (1, 13, 1), True),
    ((3, 1, 10), (5, 6), False),
]


@pytest.mark.parametrize("src,dst,affine", CASES)
def test_reshape_exact_and_affine_where_possible(src, dst, affine):
    x = te.placeholder(src, name="x")
    y = ops.reshape(x, dst, name="y")
    data = np.arange(np.prod(src), dtype=np.float32).reshape(src)
    np.testing.assert_array_equal(evaluate(y, {x: data}), data.reshape(dst))
    assert (_divisions(y) == 0) == affine, str(y.op.body)


def test_heads_split_then_transpose_reads_affine():
    """BERT's heads: [tokens, hidden] -> [tokens, heads, d] -> [heads, tokens, d]."""
    x = te.placeholder((10, 12), name="x")
    heads = ops.transpose(ops.reshape(x, (10, 3, 4), name="split"), (1, 0, 2), name="heads")
    data = np.random.default_rng(0).standard_normal((10, 12)).astype(np.float32)
    split = next(t for t in heads.inputs if t.name == "split")
    assert _divisions(split) == 0, str(split.op.body)
    values = evaluate(heads, {x: data, split: evaluate(split, {x: data})})
    np.testing.assert_array_equal(values, data.reshape(10, 3, 4).transpose(1, 0, 2))
