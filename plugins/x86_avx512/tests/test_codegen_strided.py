"""Strided vector loads (lane stride 2-4) read as one masked wide load and a shuffle: values
equal numpy's slicing, with ragged tails, lane-varying conditions and the last element of a
buffer read by the last lane (nothing past it is touched); larger strides still gather."""

from __future__ import annotations

import numpy as np
import pytest
from x86_kernels import buffer, kernel, load, loop, store, vloop

from tilecraft.kernel_ir.nodes import IfThenElse
from tilecraft.te import Var, const


@pytest.mark.parametrize("stride", [2, 3, 4, 5])
@pytest.mark.parametrize("count", [1, 7, 16, 33, 64])
def test_strided_load(run, native, stride, count):
    # rows of count outputs, each reading x[r, stride * i + offset]: the last lane of the
    # last row reads the buffer's last element
    rows, offset = 3, 1
    width = stride * (count - 1) + offset + 1
    x, y = buffer("X", (rows, width)), buffer("Y", (rows, count))
    r, i = Var("r"), Var("i")
    kern = kernel(f"strided{stride}_{count}", [x, y], ["Y"],
                  loop(r, rows, vloop(i, count, store(y, (r, i), load(x, r, i * stride + offset)))))
    xs = np.arange(rows * width, dtype=np.float32).reshape(rows, width)
    out = run(kern, {"X": xs, "Y": np.zeros((rows, count), np.float32)})
    np.testing.assert_array_equal(out["Y"], xs[:, offset::stride][:, :count])
    text = native.codegen(kern).text
    if stride <= 4:
        assert "shufflevector" in text and "masked.gather" not in text
    else:
        assert "masked.gather" in text


def test_strided_load_under_a_lane_condition(run):
    # only odd lanes load; the others store -1
    count, stride = 37, 2
    x, y = buffer("X", (stride * count,)), buffer("Y", (count,))
    i = Var("i")
    body = IfThenElse(i % 2 > 0,
                      store(y, (i,), load(x, i * stride)), store(y, (i,), const(-1.0)))
    kern = kernel("strided_masked", [x, y], ["Y"], vloop(i, count, body))
    xs = np.arange(stride * count, dtype=np.float32) + 0.5
    out = run(kern, {"X": xs, "Y": np.zeros(count, np.float32)})
    want = np.where(np.arange(count) % 2 > 0, xs[::stride], -1.0).astype(np.float32)
    np.testing.assert_array_equal(out["Y"], want)
