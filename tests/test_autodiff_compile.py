"""Gradients compile for x86 like any program: compiled results equal the reference
interpreter's on awkward shapes (issue 18 item 3)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.autodiff import grad
from tilecraft.graph import Graph
from tilecraft.target.registry import get_target


@pytest.fixture(scope="module")
def x86() -> Any:
    target = get_target("x86_avx512")
    if not target.available().codegen:
        pytest.skip(f"x86_avx512 cannot generate code here: {target.available().explain()}")
    return target


CASES: list[tuple[str, Callable[..., te.Tensor], list[tuple[int, ...]]]] = [
    ("conv2d-s2-p1", lambda x, w: ops.conv2d(x, w, stride=2, padding=1, name="out"),
     [(2, 3, 9, 7), (5, 3, 3, 3)]),
    ("conv_transpose2d-s2", lambda x, w: ops.conv_transpose2d(x, w, stride=2, padding=1,
                                                              output_padding=1, name="out"),
     [(1, 3, 5, 4), (3, 2, 3, 3)]),
    ("max_pool2d", lambda x: ops.max_pool2d(x, 3, stride=2, padding=1, name="out"),
     [(1, 2, 11, 9)]),
    ("depth_to_space", lambda x: ops.depth_to_space(x, 2, name="out"), [(1, 8, 3, 5)]),
    ("layer_norm", lambda x, g, b: ops.layer_norm(x, g, b, name="out"), [(7, 13), (13,), (13,)]),
    ("softmax-gelu", lambda x: ops.softmax(ops.gelu(x, name="g"), name="out"), [(5, 17)]),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c[0])
def test_compiled_gradients_equal_the_reference(case: Any, x86: Any) -> None:
    _, build, shapes = case
    tensors = [te.placeholder(shape, name=f"in{i}") for i, shape in enumerate(shapes)]
    graph = Graph.from_outputs(grad(build(*tensors), tensors))
    rng = np.random.default_rng(2)
    arrays = {t.name: rng.uniform(-1, 1, t.shape).astype(np.float32) for t in graph.inputs}
    compiled = tc.compile(graph, x86)(**arrays)
    expected = tc.reference.run(graph, **arrays)
    for mine, reference in zip(compiled, expected):
        np.testing.assert_allclose(mine, reference, rtol=2e-4, atol=2e-5)
