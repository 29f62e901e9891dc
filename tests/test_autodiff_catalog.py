"""Every differentiable operator of the ops catalog: tilecraft.autodiff's gradients against
central finite differences in float64 on the reference interpreter (issue 18 item 3)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tilecraft import ops
from tilecraft.autodiff import grad
from tilecraft.errors import AutodiffError
from tilecraft.ops import catalog


def _helper(name: str) -> Any:
    """A helper module beside this file (tests are imported with --import-mode=importlib)."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


C = _helper("autodiff_checks")

#: operators with no gradient: integer-valued results, or a dtype conversion
NOT_DIFFERENTIABLE = {"cast"}
_INTEGER_TAGS = {"int8", "uint8", "int32"}
_HALF_TAGS = {"float16", "bfloat16"}


def differentiable_cases() -> list[catalog.OpCase]:
    return [c for c in catalog.cases() if c.name not in NOT_DIFFERENTIABLE
            and not c.tags & (_INTEGER_TAGS | _HALF_TAGS)]


def case_arrays(case: catalog.OpCase) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(case.seed())
    return {spec.name: rng.uniform(spec.low, spec.high, spec.shape) for spec in case.inputs}


def test_every_operator_but_cast_has_a_differentiable_case() -> None:
    covered = {c.name for c in differentiable_cases()}
    assert set(catalog.operators()) - covered == NOT_DIFFERENTIABLE


@pytest.mark.parametrize("case", differentiable_cases(), ids=lambda c: c.id)
def test_catalog_gradients_match_finite_differences(case: catalog.OpCase) -> None:
    output = case.output()
    inputs = [t for t in _placeholders(output)]
    C.check_finite_differences(output, inputs, case_arrays(case), seed=case.seed(),
                               elements=2)


@pytest.mark.parametrize("case", [c for c in catalog.cases() if c.tags & _INTEGER_TAGS
                                  and c.name != "cast"], ids=lambda c: c.id)
def test_integer_cases_say_they_have_no_gradient(case: catalog.OpCase) -> None:
    output = case.output()
    with pytest.raises(AutodiffError, match="integer type"):
        grad(output, _placeholders(output))


def _placeholders(output: Any) -> list[Any]:
    from tilecraft.graph import Graph

    return list(Graph.from_outputs([output]).inputs)


# the sweep over bigger shapes: slow ----------------------------------------------------------
BIG = [
    ("conv2d-resnet-3x3", lambda x, w: ops.conv2d(x, w, stride=1, padding=1, name="out"),
     (2, 16, 14, 14), (16, 16, 3, 3)),
    ("conv2d-stride2-7x7", lambda x, w: ops.conv2d(x, w, stride=2, padding=3, name="out"),
     (1, 3, 23, 23), (8, 3, 7, 7)),
    ("conv2d-grouped-dilated", lambda x, w: ops.conv2d(x, w, padding=2, dilation=2, groups=4,
                                                       name="out"),
     (1, 8, 19, 17), (12, 2, 3, 3)),
    ("conv_transpose2d-s3", lambda x, w: ops.conv_transpose2d(x, w, stride=3, padding=1,
                                                              name="out"),
     (1, 6, 9, 11), (6, 5, 4, 4)),
    ("batch_matmul", lambda a, b: ops.batch_matmul(a, b, name="out"), (4, 33, 47), (4, 47, 29)),
]


@pytest.mark.slow
@pytest.mark.parametrize("entry", BIG, ids=lambda e: e[0])
def test_bigger_shapes_match_finite_differences(entry: Any) -> None:
    from tilecraft import te

    _, build, shape_a, shape_b = entry
    a = te.placeholder(shape_a, name="a")
    b = te.placeholder(shape_b, name="b")
    output = build(a, b)
    rng = np.random.default_rng(5)
    arrays = {"a": rng.uniform(-1, 1, shape_a), "b": rng.uniform(-1, 1, shape_b)}
    C.check_finite_differences(output, [a, b], arrays, elements=3)


HALF_CASES = [c for c in catalog.cases() if c.tags & _HALF_TAGS and c.name not in
              NOT_DIFFERENTIABLE and not c.tags & _INTEGER_TAGS]


@pytest.mark.parametrize("case", HALF_CASES[:8], ids=lambda c: c.id)
def test_half_precision_gradients_follow_the_float32_ones(case: catalog.OpCase) -> None:
    """The gradient computes keep the forward's dtype; float16/bfloat16 gradients agree with
    the float32 gradients of the same operator on the same (rounded) values."""
    from tilecraft.dtypes import DType
    from tilecraft.ops.opcase import InputSpec, OpCase

    twin = OpCase(case.name, case.variant, tuple(
        InputSpec(s.name, s.shape, DType.FLOAT32, s.low, s.high) for s in case.inputs),
        case.params, case.tags, case.rtol, case.atol, case.pack_inputs)
    half_arrays = case.arrays()
    results = []
    for variant, arrays in ((case, half_arrays),
                            (twin, {n: a.astype(np.float32) for n, a in half_arrays.items()})):
        output = variant.output()
        grads = grad(output, _placeholders(output))
        g = np.linspace(-1, 1, int(np.prod(output.shape))).reshape(output.shape)
        feed = {**arrays, "grad_out": g.astype(output.dtype.numpy)}
        results.append([np.asarray(C.run(t, feed), np.float32) for t in grads])
        assert all(t.dtype == output.dtype for t in grads)
    for half, full in zip(*results):
        np.testing.assert_allclose(half, full, rtol=3e-2, atol=3e-2 * max(1, np.abs(full).max()))
