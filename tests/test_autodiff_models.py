"""Whole networks of the model zoo differentiate: the gradient of each small network's output
with respect to its input, through every layer, against finite differences in float64."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tilecraft import models


def _helper(name: str) -> Any:
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


C = _helper("autodiff_checks")


@pytest.mark.parametrize("network", [
    "bert_base_layer", "resnet18",
    pytest.param("mobilenet_v2", marks=pytest.mark.slow),
    pytest.param("vit_base_block", marks=pytest.mark.slow),
    pytest.param("resnet50", marks=pytest.mark.slow),
])
def test_small_network_input_gradients_match_finite_differences(network: str) -> None:
    graph = getattr(models, network)(small=True)
    (output,) = graph.outputs
    inputs = list(graph.inputs)
    rng = np.random.default_rng(7)
    arrays = {t.name: rng.standard_normal(t.shape) * 0.5 for t in inputs}
    C.check_finite_differences(output, inputs, arrays, elements=2)


@pytest.mark.slow
@pytest.mark.parametrize("network", ["bert_base_layer", "resnet18"])
def test_small_network_input_gradients_compile_for_x86(network: str) -> None:
    """The ~100 gradient computes of a whole network go through the x86 pipeline (fusion,
    schedules, micro-kernels) and equal the reference (~15 s each to compile)."""
    import tilecraft as tc
    from tilecraft.autodiff import grad
    from tilecraft.graph import Graph
    from tilecraft.target.registry import get_target

    target = get_target("x86_avx512")
    if not target.available().codegen:
        pytest.skip(f"x86_avx512 cannot generate code here: {target.available().explain()}")
    graph = getattr(models, network)(small=True)
    program = Graph.from_outputs(grad(graph.outputs[0], list(graph.inputs)))
    rng = np.random.default_rng(0)
    arrays = {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in program.inputs}
    compiled = tc.compile(program, target, passes={"fold_batch_norm": False})(**arrays)
    expected = tc.reference.run(program, **arrays)
    scale = float(np.abs(expected).max())
    np.testing.assert_allclose(compiled, expected, rtol=1e-4, atol=1e-5 * max(1.0, scale))
