"""tilecraft.passes.col2im_gather: the scatter-form conv gradient's gather is recognised as the
col2im of the transposed convolution with the right stride, padding and dilation — and nothing
that differs from one is."""

from __future__ import annotations

import pytest

from tilecraft import ops, te
from tilecraft.autodiff import grad
from tilecraft.graph import Graph
from tilecraft.passes.col2im_gather import as_col2im_gather
from tilecraft.te.expr import LogicalOp, Reduce, Select, logical
from tilecraft.te.visit import transform


def _gathers(x_shape, w_shape, **kwargs):
    x = te.placeholder(x_shape, name="x")
    conv = {3: ops.conv1d, 4: ops.conv2d, 5: ops.conv3d}[len(x_shape)]
    y = conv(x, te.placeholder(w_shape, name="w"), name="y", **kwargs)
    graph = Graph.from_outputs(grad(y, [x]))
    return graph, [(c, as_col2im_gather(c)) for c in graph.computes
                   if as_col2im_gather(c) is not None]


@pytest.mark.parametrize("x_shape, w_shape, kwargs, expected", [
    ((2, 3, 9, 9), (4, 3, 3, 3), dict(stride=2, padding=1), ((2, 2), (0, 0), (1, 1))),
    ((1, 2, 11, 10), (3, 2, 3, 2), dict(stride=(2, 3), padding=(1, 0)), ((2, 3), (0, 0), (1, 1))),
    ((3, 4, 13, 13), (5, 4, 3, 3), dict(stride=2, padding=2, dilation=2),
     ((2, 2), (0, 0), (2, 2))),
    ((2, 3, 17), (4, 3, 5), dict(stride=3, padding=1), ((3,), (0,), (1,))),
    ((1, 2, 7, 9, 8), (2, 2, 3, 3, 2), dict(stride=(2, 2, 2)), ((2, 2, 2), (0, 0, 0), (1, 1, 1))),
])
def test_strided_conv_gradient_gather_is_col2im(x_shape, w_shape, kwargs, expected):
    _, found = _gathers(x_shape, w_shape, **kwargs)
    assert len(found) == 1
    tensor, gather = found[0]
    conv = gather.conv
    assert (conv.stride, conv.padding, conv.dilation) == expected
    assert gather.cols.shape == (x_shape[1], *w_shape[2:], x_shape[0], *conv.x.shape[2:])
    assert conv.tensor is tensor and tensor.shape[:2] == x_shape[:2]


def test_stride_one_gradient_is_not_a_col2im():
    _, found = _gathers((2, 3, 9, 9), (4, 3, 3, 3), padding=1)
    assert found == []


def test_a_changed_condition_is_not_a_col2im():
    _, found = _gathers((2, 3, 9, 9), (4, 3, 3, 3), stride=2, padding=1)
    tensor = found[0][0]
    body = tensor.op.body
    select = body.body
    # keep only the first of each output's taps along h: no longer the whole col2im
    fewer = logical(LogicalOp.AND, select.cond, body.axes[0] <= 0)

    def changed_body(*axes):
        rename = dict(zip(tensor.axes, axes))
        return transform(Reduce(body.op, Select(fewer, select.true_value, select.false_value),
                                body.axes), lambda node: rename.get(node))

    changed = te.compute(tensor.shape, changed_body, name="changed")
    assert as_col2im_gather(changed) is None
