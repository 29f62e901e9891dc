"""ONNX Det by the Leibniz formula (n <= 4): batches of 1x1 to 4x4 matrices against onnx's
reference (numpy's LU) through tilecraft's reference and an x86 build; larger or non-square
matrices refused by name."""

import sys
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

sys.path.insert(0, str(Path(__file__).parent))
from onnx import helper  # noqa: E402
from onnx_single_node import check_against_evaluator, node_model, value_info  # noqa: E402

import tilecraft as tc  # noqa: E402
from tilecraft.onnx import OnnxImportError  # noqa: E402

RNG = np.random.default_rng(43)


def _det_model(shape):
    return node_model(helper.make_node("Det", ["x"], ["y"]), [value_info("x", list(shape))],
                      [value_info("y", None)], opset=22)


@pytest.mark.parametrize("shape", [(1, 1), (2, 2), (3, 3), (4, 4), (5, 3, 3), (2, 3, 4, 4),
                                   (7, 2, 2)])
def test_det_matches_numpy(shape):
    x = RNG.standard_normal(shape).astype(np.float32)
    check_against_evaluator(_det_model(shape), {"x": x}, rtol=1e-4, atol=1e-5)


def test_a_singular_matrix_gives_zero():
    x = np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [0.5, -1.0, 7.0]], np.float32)
    graph = tc.from_onnx(_det_model(x.shape))
    assert float(np.asarray(tc.reference.run(graph, x=x)).reshape(-1)[0]) == 0.0


@pytest.mark.parametrize(("shape", "message"), [((5, 5), "5 x 5 matrices"),
                                                ((2, 3), "square matrices")])
def test_det_refuses_what_it_cannot_compute(shape, message):
    with pytest.raises(OnnxImportError, match=message):
        tc.from_onnx(_det_model(shape))
