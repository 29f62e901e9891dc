"""An Executable keeps its intermediate tensors between calls (fresh pages fault on every call:
~84 MiB a step of the small CNN), while every graph output is a fresh array the caller keeps."""

from __future__ import annotations

import numpy as np
import pytest

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.reference import run
from tilecraft.target.registry import get_target

pytestmark = pytest.mark.skipif(not get_target("x86_avx512").available().execute,
                                reason="x86_avx512 cannot execute on this machine")


def test_intermediates_kept_outputs_fresh() -> None:
    x = te.placeholder((13, 7), name="x")
    w = te.placeholder((7, 5), name="w")
    mid = te.compute((13, 7), lambda i, j: x[i, j] * 2.0 + 1.0, name="mid")
    out = ops.relu(ops.matmul(mid, w, name="prod"), name="out")
    side = te.compute((13, 7), lambda i, j: mid[i, j] - x[i, j], name="side")
    graph = tc.Graph.from_outputs([out, side])
    exe = tc.compile(graph, target="x86_avx512")
    kept = {name for step in exe._steps for name, _, _ in step.workspaces}
    fresh = {name for step in exe._steps for name, _, _ in step.allocations}
    assert {"mid", "prod"} <= kept and fresh == {"out", "side"}
    rng = np.random.default_rng(3)
    calls = [{"x": rng.standard_normal((13, 7)).astype(np.float32),
              "w": rng.standard_normal((7, 5)).astype(np.float32)} for _ in range(3)]
    results = [exe(**inputs) for inputs in calls]
    for inputs, got in zip(calls, results):  # earlier results untouched by later calls
        for ours, expected in zip(got, run(graph, inputs)):
            np.testing.assert_allclose(ours, expected, rtol=1e-5, atol=1e-5)
    assert results[0][0] is not results[1][0] and results[0][1] is not results[1][1]
