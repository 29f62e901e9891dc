"""tilecraft.autodiff's gradients against torch.autograd on awkward shapes (primes, size 1,
strides that do not divide), both in float64: torch on the same inputs and output gradient."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tilecraft import ops, te

torch = pytest.importorskip("torch")
F = torch.nn.functional


def _helper(name: str) -> Any:
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


C = _helper("autodiff_checks")

Case = tuple[str, Callable[..., Any], Callable[..., Any], list[tuple[int, ...]], dict[str, Any]]

CASES: list[Case] = [
    ("matmul-13x17x1", lambda a, b: ops.matmul(a, b, name="out"), torch.matmul,
     [(13, 17), (17, 1)], {}),
    ("batch_matmul-tb", lambda a, b: ops.batch_matmul(a, b, transpose_b=True, name="out"),
     lambda a, b: torch.matmul(a, b.transpose(1, 2)), [(3, 5, 7), (3, 11, 7)], {}),
    ("dense-bias", lambda x, w, b: ops.dense(x, w, b, name="out"), F.linear,
     [(5, 13), (7, 13), (7,)], {}),
    ("conv2d-s2-p1-d2-g2", lambda x, w: ops.conv2d(x, w, stride=2, padding=1, dilation=2,
                                                   groups=2, name="out"),
     lambda x, w: F.conv2d(x, w, stride=2, padding=1, dilation=2, groups=2),
     [(2, 4, 11, 13), (6, 2, 3, 3)], {}),
    ("conv2d-s3-rect", lambda x, w: ops.conv2d(x, w, stride=(3, 2), padding=(2, 0), name="out"),
     lambda x, w: F.conv2d(x, w, stride=(3, 2), padding=(2, 0)),
     [(1, 3, 17, 7), (5, 3, 4, 3)], {}),
    ("conv1d-s2-g3", lambda x, w: ops.conv1d(x, w, stride=2, padding=3, groups=3, name="out"),
     lambda x, w: F.conv1d(x, w, stride=2, padding=3, groups=3), [(2, 3, 19), (6, 1, 5)], {}),
    ("conv3d-s2", lambda x, w: ops.conv3d(x, w, stride=2, padding=1, name="out"),
     lambda x, w: F.conv3d(x, w, stride=2, padding=1), [(1, 2, 5, 7, 6), (3, 2, 3, 2, 3)], {}),
    ("depthwise-m2", lambda x, w: ops.depthwise_conv2d(x, w, stride=2, padding=1, name="out"),
     lambda x, w: F.conv2d(x, w, stride=2, padding=1, groups=3), [(1, 3, 9, 7), (6, 1, 3, 3)],
     {}),
    ("conv_transpose2d-s3-op2", lambda x, w: ops.conv_transpose2d(
        x, w, stride=3, padding=1, output_padding=2, dilation=2, groups=2, name="out"),
     lambda x, w: F.conv_transpose2d(x, w, stride=3, padding=1, output_padding=2, dilation=2,
                                     groups=2),
     [(1, 4, 5, 3), (4, 3, 3, 2)], {}),
    ("conv_transpose1d-s2", lambda x, w: ops.conv_transpose1d(x, w, stride=2, padding=2,
                                                              name="out"),
     lambda x, w: F.conv_transpose1d(x, w, stride=2, padding=2), [(2, 3, 7), (3, 5, 5)], {}),
    ("max_pool2d-k3-s2-p1", lambda x: ops.max_pool2d(x, 3, stride=2, padding=1, name="out"),
     lambda x: F.max_pool2d(x, 3, stride=2, padding=1), [(2, 3, 11, 7)], {}),
    ("avg_pool2d-k3x2-s2", lambda x: ops.avg_pool2d(x, (3, 2), stride=2, padding=1, name="out"),
     lambda x: F.avg_pool2d(x, (3, 2), stride=2, padding=1, count_include_pad=True),
     [(1, 2, 9, 7)], {}),
    ("depth_to_space-b3", lambda x: ops.depth_to_space(x, 3, name="out"),
     lambda x: F.pixel_shuffle(x, 3), [(2, 18, 5, 3)], {}),
    ("space_to_depth-b2", lambda x: ops.space_to_depth(x, 2, name="out"),
     lambda x: F.pixel_unshuffle(x, 2), [(1, 3, 6, 10)], {}),
    ("reshape-7x6-to-3x14", lambda x: ops.reshape(x, (3, 14), name="out"),
     lambda x: x.reshape(3, 14), [(7, 6)], {}),
    ("transpose-201", lambda x: ops.transpose(x, (2, 0, 1), name="out"),
     lambda x: x.permute(2, 0, 1), [(3, 5, 7)], {}),
    ("pad-asym", lambda x: ops.pad(x, ((1, 0), (2, 3)), value=0.5, name="out"),
     lambda x: F.pad(x, (2, 3, 1, 0), value=0.5), [(5, 7)], {}),
    ("concat-axis1", lambda a, b: ops.concat([a, b], axis=1, name="out"),
     lambda a, b: torch.cat([a, b], dim=1), [(3, 1), (3, 5)], {}),
    ("softmax-axis0", lambda x: ops.softmax(x, axis=0, name="out"),
     lambda x: torch.softmax(x, 0), [(7, 3)], {}),
    ("log_softmax", lambda x: ops.log_softmax(x, name="out"),
     lambda x: torch.log_softmax(x, -1), [(5, 13)], {}),
    ("layer_norm-affine", lambda x, g, b: ops.layer_norm(x, g, b, name="out"),
     lambda x, g, b: F.layer_norm(x, (17,), g, b, eps=1e-5), [(3, 17), (17,), (17,)], {}),
    ("batch_norm", lambda x, m, v, g, b: ops.batch_norm(x, m, v, g, b, name="out"),
     lambda x, m, v, g, b: ((x - m[:, None, None]) / torch.sqrt(v[:, None, None] + 1e-5)
                            * g[:, None, None] + b[:, None, None]),  # F.batch_norm: no d/dmean
     [(2, 3, 5, 7), (3,), (3,), (3,), (3,)], {"positive": {2}}),
    ("gelu", lambda x: ops.gelu(x, name="out"), F.gelu, [(11, 3)], {}),
    ("sigmoid-tanh-chain", lambda x: ops.tanh(ops.sigmoid(x, name="s"), name="out"),
     lambda x: torch.tanh(torch.sigmoid(x)), [(13,)], {}),
    ("variance-mean", lambda x: ops.variance(x, axes=1, name="out"),
     lambda x: torch.var(x, dim=1, unbiased=False), [(5, 11)], {}),
    ("reduce_max", lambda x: ops.reduce_max(x, axes=(0, 2), name="out"),
     lambda x: torch.amax(x, dim=(0, 2)), [(3, 5, 7)], {}),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c[0])
def test_gradients_match_torch_autograd(case: Case) -> None:
    _, build, reference, shapes, options = case
    rng = np.random.default_rng(11)
    names = [f"in{i}" for i in range(len(shapes))]
    tensors = [te.placeholder(shape, name=name) for shape, name in zip(shapes, names)]
    output = build(*tensors)
    arrays = {}
    for position, (name, shape) in enumerate(zip(names, shapes)):
        low = 0.5 if position in options.get("positive", ()) else -1.0
        arrays[name] = rng.uniform(low, 1.0, shape)
    g_out = rng.uniform(-1, 1, output.shape)
    ours = C.gradients64(output, tensors, arrays, g_out)
    leaves = [torch.tensor(arrays[n], dtype=torch.float64, requires_grad=True) for n in names]
    result = reference(*leaves)
    assert tuple(result.shape) == output.shape
    result.backward(torch.tensor(g_out))
    for tensor, mine, leaf in zip(tensors, ours, leaves):
        np.testing.assert_allclose(mine, leaf.grad.numpy(), rtol=1e-9, atol=1e-10,
                                   err_msg=f"d{output.name}/d{tensor.name}")
