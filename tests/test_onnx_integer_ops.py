"""ONNX MatMulInteger, ConvInteger, QLinearMatMul and QLinearConv
(tilecraft.onnx.convert_integer_ops) on awkward shapes: prime extents, batch broadcast, 1-d
operands, 1x1 and 3x3 kernels with strides, pads, dilations and groups, per-tensor and
per-channel zero points and scales (known and run-time), int8 and uint8 at their limits; each
model imported, run by tilecraft's numpy reference and compiled for x86, against onnx's
reference evaluator: exactly for the int32 products, and for the requantized outputs exactly
except where the float64 value the reference rounds lies within float32's error of a half."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import tilecraft as tc  # noqa: E402
from tilecraft.onnx import OnnxImportError  # noqa: E402
from tilecraft.reference import run  # noqa: E402
from tilecraft.target.registry import get_target  # noqa: E402

RNG = np.random.default_rng(23)
X86 = get_target("x86_avx512").available().execute
ELEM = {np.dtype(np.uint8): TensorProto.UINT8, np.dtype(np.int8): TensorProto.INT8,
        np.dtype(np.int32): TensorProto.INT32, np.dtype(np.float32): TensorProto.FLOAT,
        np.dtype(np.float16): TensorProto.FLOAT16}


def _bytes(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """Random values of a byte type over its whole range, with both limits present."""
    info = np.iinfo(dtype)
    values = RNG.integers(info.min, info.max + 1, shape).astype(dtype)
    flat = values.reshape(-1)
    if flat.size >= 2:
        flat[0], flat[-1] = info.min, info.max
    return values


def _model(op: str, inputs: dict[str, np.ndarray | None], known: set[str],
           out_elem: int, **attrs: Any) -> tuple[Any, dict[str, np.ndarray]]:
    """A one-node model of ``op``: the inputs in ``known`` are initializers, the others graph
    inputs (an input given as None is omitted); returns it with its feeds."""
    names = [name if value is not None else "" for name, value in inputs.items()]
    while names and not names[-1]:
        names.pop()
    node = helper.make_node(op, names, ["y"], **attrs)
    given = {k: v for k, v in inputs.items() if v is not None}
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(k, ELEM[v.dtype], list(v.shape))
         for k, v in given.items() if k not in known],
        [helper.make_tensor_value_info("y", out_elem, None)],
        [numpy_helper.from_array(v, k) for k, v in given.items() if k in known])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    return model, {k: v for k, v in given.items() if k not in known}


def _runs(model: Any, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The model's output by tilecraft's reference and, where it runs here, its x86 build."""
    graph = tc.from_onnx(model)
    feeds = {k: v.reshape(1) if v.ndim == 0 else v for k, v in feeds.items()}  # 0-d as (1,)
    results = [run(graph, feeds)]
    if X86:
        results.append(tc.compile(graph, target="x86_avx512")(**feeds))
    return [r[0] if isinstance(r, tuple) else r for r in results]


def _check_exact(model: Any, feeds: dict[str, np.ndarray]) -> np.ndarray:
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    for got in _runs(model, feeds):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    return want


def _check_requantized(model: Any, feeds: dict[str, np.ndarray], exact: np.ndarray) -> None:
    """Equal to the reference, except by one where ``exact`` (the float64 value the reference
    rounds) is within float32's rounding error of a half."""
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    near_half = np.abs(np.abs(exact - np.floor(exact)) - 0.5) <= np.abs(exact) * 2.0 ** -22
    for got in _runs(model, feeds):
        assert got.dtype == want.dtype and got.shape == want.shape
        diff = np.abs(got.astype(np.int32) - want.astype(np.int32))
        assert (diff[~near_half] == 0).all(), np.argwhere((diff > 0) & ~near_half)[:5]
        assert (diff <= 1).all()


# ---- MatMulInteger -----------------------------------------------------------------------------


@pytest.mark.parametrize("a_shape,b_shape,a_type,b_type,a_zp,b_zp,known", [
    # uint8 activations x int8 weights, known; per-column weight zero points too far to fold
    ((7, 13), (13, 5), np.uint8, np.int8, np.uint8(131),
     np.array([100, -100, 0, 127, -128], np.int8), {"B", "a_zero_point", "b_zero_point"}),
    # batch broadcast, everything at run time, per-column zero points of each batch
    ((3, 1, 5, 11), (2, 11, 7), np.int8, np.int8, np.int8(-3),
     _bytes((2, 1, 7), np.int8), set()),
    # 1-d A; uint8 x uint8
    ((11,), (11, 3), np.uint8, np.uint8, np.uint8(255), np.uint8(1), {"B"}),
    # 1-d B
    ((2, 11), (11,), np.int8, np.uint8, np.int8(127), np.uint8(0), set()),
    # a zero point per row of A (shape (M, 1)); B's known zero point folds into B (uint8 - 128)
    ((5, 17), (17, 3), np.uint8, np.uint8, np.array([[0], [1], [255], [7], [9]], np.uint8),
     np.uint8(128), {"B", "a_zero_point", "b_zero_point"}),
    # A's (K,) zero point: numpy broadcasting subtracts it along k (the int32 fallback)
    ((3, 4), (4, 6), np.uint8, np.int8, np.array([1, 2, 3, 250], np.uint8), None,
     {"a_zero_point"}),
    # B's zero point varying along k, known and run time
    ((3, 4), (4, 6), np.int8, np.int8, None, _bytes((4, 1), np.int8), {"B", "b_zero_point"}),
    ((2, 3, 4), (4, 6), np.int8, np.int8, None, _bytes((4, 6), np.int8), set()),
    # no zero points: the plain product, batched on both sides
    ((2, 3, 4, 5), (3, 5, 7), np.uint8, np.int8, None, None, set()),
])
def test_matmul_integer(a_shape, b_shape, a_type, b_type, a_zp, b_zp, known):
    inputs = {"A": _bytes(a_shape, a_type), "B": _bytes(b_shape, b_type),
              "a_zero_point": None if a_zp is None else np.asarray(a_zp),
              "b_zero_point": None if b_zp is None else np.asarray(b_zp)}
    model, feeds = _model("MatMulInteger", inputs, known, TensorProto.INT32)
    _check_exact(model, feeds)


def test_matmul_integer_dynamic_quantization_pattern():
    """What quantize_dynamic writes: DynamicQuantizeLinear's run-time uint8 zero point, known
    int8 weights without one."""
    a = _bytes((1, 29, 31), np.uint8)
    inputs = {"A": a, "B": _bytes((31, 19), np.int8), "a_zero_point": np.asarray(np.uint8(77))}
    model, feeds = _model("MatMulInteger", inputs, {"B"}, TensorProto.INT32)
    _check_exact(model, feeds)


def test_matmul_integer_refuses_a_zero_point_that_enlarges_its_operand():
    inputs = {"A": _bytes((3, 4), np.uint8), "B": _bytes((4, 2), np.uint8),
              "a_zero_point": _bytes((2, 3, 1), np.uint8)}
    model, _ = _model("MatMulInteger", inputs, {"a_zero_point"}, TensorProto.INT32)
    with pytest.raises(OnnxImportError, match="a_zero_point"):
        tc.from_onnx(model)


# ---- ConvInteger -------------------------------------------------------------------------------


def _conv_case(x_shape, w_shape, x_type, w_type, x_zp, w_zp, known, **attrs):
    inputs = {"x": _bytes(x_shape, x_type), "w": _bytes(w_shape, w_type),
              "x_zero_point": None if x_zp is None else np.asarray(x_zp),
              "w_zero_point": None if w_zp is None else np.asarray(w_zp)}
    return _model("ConvInteger", inputs, known, TensorProto.INT32, **attrs)


@pytest.mark.parametrize("x_shape,w_shape,x_type,w_type,x_zp,w_zp,known,attrs", [
    # 3x3, asymmetric pads, strides; known weights, known input zero point
    ((2, 3, 11, 13), (5, 3, 3, 3), np.uint8, np.int8, np.uint8(7), None, {"w", "x_zero_point"},
     dict(pads=[1, 2, 0, 1], strides=[2, 1])),
    # groups, dilation, run-time input zero point, known per-channel weight zero points that do
    # not fold
    ((1, 6, 7, 9), (4, 3, 3, 3), np.int8, np.int8, np.int8(-128),
     np.array([127, -128, 5, 0], np.int8), {"w", "w_zero_point"},
     dict(group=2, dilations=[2, 1], pads=[2, 1, 2, 1])),
    # known per-channel uint8 weight zero points that fold (w - zp fits int8); 1x1 stride 2
    ((1, 5, 7, 7), (3, 5, 1, 1), np.uint8, np.uint8, np.uint8(255),
     np.array([128, 127, 129], np.uint8), {"w", "w_zero_point"}, dict(strides=[2, 2])),
    # everything at run time (the node tests' form), depthwise, SAME_UPPER with stride 2
    ((2, 4, 5, 7), (4, 1, 3, 3), np.uint8, np.uint8, np.uint8(3),
     np.array([0, 1, 254, 255], np.uint8), set(), dict(group=4, auto_pad="SAME_UPPER",
                                                        strides=[2, 2])),
    ((1, 2, 6, 5), (3, 2, 2, 3), np.int8, np.uint8, np.int8(1), np.uint8(200), set(),
     dict(auto_pad="SAME_LOWER")),
    # 1-d and 3-d
    ((2, 3, 13), (2, 3, 3), np.uint8, np.int8, np.uint8(128), np.int8(-1), {"w"},
     dict(pads=[2, 1], strides=[3])),
    ((1, 2, 5, 3, 4), (3, 2, 3, 1, 2), np.int8, np.int8, np.int8(9), None, set(),
     dict(pads=[1, 0, 0, 1, 0, 1])),
    # no zero points at all
    ((1, 3, 5, 5), (2, 3, 3, 3), np.uint8, np.int8, None, None, {"w"}, dict(pads=[1, 1, 1, 1])),
])
def test_conv_integer(x_shape, w_shape, x_type, w_type, x_zp, w_zp, known, attrs):
    model, feeds = _conv_case(x_shape, w_shape, x_type, w_type, x_zp, w_zp, known, **attrs)
    _check_exact(model, feeds)


def test_conv_integer_refuses_a_per_channel_input_zero_point():
    model, _ = _conv_case((1, 3, 4, 4), (2, 3, 1, 1), np.uint8, np.uint8,
                          np.array([1, 2, 3], np.uint8), None, {"x_zero_point"})
    with pytest.raises(OnnxImportError, match="x_zero_point"):
        tc.from_onnx(model)


# ---- QLinearMatMul -----------------------------------------------------------------------------


def _int32_matmul(a, azp, b, bzp):
    a32 = a.astype(np.int32) - (0 if azp is None else azp.astype(np.int32))
    b32 = b.astype(np.int32) - (0 if bzp is None else bzp.astype(np.int32))
    return np.matmul(a32, b32)


@pytest.mark.parametrize("a_type,y_type,scale_type,per_column,known", [
    (np.uint8, np.uint8, np.float32, False, set()),
    (np.int8, np.int8, np.float16, False, set()),
    (np.uint8, np.int8, np.float32, True, {"b", "b_scale", "b_zero_point", "y_scale",
                                           "a_scale", "y_zero_point"}),
    (np.int8, np.uint8, np.float16, True, {"b", "b_scale", "b_zero_point"}),
    (np.uint8, np.uint8, np.float16, True, {"a_scale", "b_scale", "y_scale", "b",
                                            "b_zero_point"}),
])
def test_qlinear_matmul(a_type, y_type, scale_type, per_column, known):
    a, b = _bytes((2, 7, 13), a_type), _bytes((13, 5), np.int8)
    azp = np.array([_bytes((1,), a_type)[0]], a_type)
    bzp = _bytes((5,), np.int8) if per_column else np.array([-7], np.int8)
    scales = [np.array(RNG.uniform(0.001, 0.05, shape), scale_type)
              for shape in ((1,), (5,) if per_column else (1,), (1,))]
    # a multiplier about 0.01: the products (some 10^4) cover the output range and beyond
    scales[2] = np.array([scales[0][0] * 2.5], scale_type)
    yzp = np.array([131 if y_type == np.uint8 else -3], y_type)
    inputs = {"a": a, "a_scale": scales[0], "a_zero_point": azp, "b": b,
              "b_scale": scales[1], "b_zero_point": bzp, "y_scale": scales[2],
              "y_zero_point": yzp}
    model, feeds = _model("QLinearMatMul", inputs, known, ELEM[np.dtype(y_type)])
    multiplier = scales[0] * scales[1] / scales[2]
    exact = _int32_matmul(a, azp, b, bzp) * multiplier.astype(np.float64) + yzp
    _check_requantized(model, feeds, exact)
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    info = np.iinfo(y_type)
    assert (want == info.min).any() and (want == info.max).any()  # saturates both ways


def test_qlinear_matmul_with_dyadic_scales_is_exact():
    """Scales that are powers of two leave nothing to float32's rounding: exact equality,
    halves to even included."""
    a, b = _bytes((3, 1, 4, 9), np.uint8), _bytes((2, 9, 6), np.uint8)
    inputs = {"a": a, "a_scale": np.float32(0.25), "a_zero_point": np.uint8(100), "b": b,
              "b_scale": np.float32(0.125), "b_zero_point": np.uint8(128),
              "y_scale": np.float32(64.0), "y_zero_point": np.uint8(128)}
    model, feeds = _model("QLinearMatMul", inputs, {"b", "b_scale", "b_zero_point"},
                          TensorProto.UINT8)
    _check_exact(model, feeds)


# ---- QLinearConv -------------------------------------------------------------------------------


def _qlinear_conv_inputs(x_type, w_type, y_type, channels, per_channel, bias):
    x = _bytes((2, 6, 9, 7), x_type)
    w = _bytes((channels, 6 // (3 if channels == 3 else 1), 3, 3), w_type)
    count = channels if per_channel else 1
    return {"x": x, "x_scale": np.float32(0.02), "x_zero_point": np.asarray(
        _bytes((1,), x_type)[0]),
        "w": w, "w_scale": RNG.uniform(0.001, 0.01, count).astype(np.float32),
        "w_zero_point": _bytes((count,), w_type) if per_channel else np.asarray(
            w_type(0)),
        "y_scale": np.float32(0.9), "y_zero_point": np.asarray(y_type(
            100 if y_type == np.uint8 else -5)),
        "B": RNG.integers(-20000, 20000, channels).astype(np.int32) if bias else None}


@pytest.mark.parametrize("x_type,w_type,y_type,channels,per_channel,bias,known,attrs", [
    (np.uint8, np.int8, np.uint8, 5, True, True,
     {"w", "w_scale", "w_zero_point", "B", "x_scale", "y_scale", "x_zero_point",
      "y_zero_point"}, dict(pads=[1, 1, 1, 1], strides=[2, 1])),
    (np.int8, np.int8, np.int8, 3, False, False, set(), dict(group=3, pads=[0, 1, 2, 0])),
    (np.uint8, np.uint8, np.int8, 4, True, True, set(), dict(dilations=[2, 2])),
])
def test_qlinear_conv(x_type, w_type, y_type, channels, per_channel, bias, known, attrs):
    inputs = _qlinear_conv_inputs(x_type, w_type, y_type, channels, per_channel, bias)
    model, feeds = _model("QLinearConv", inputs, known, ELEM[np.dtype(y_type)], **attrs)
    conv = _conv_reference(inputs, attrs)
    bias_term = 0 if inputs["B"] is None else inputs["B"].reshape(1, -1, 1, 1)
    multiplier = (inputs["x_scale"] * inputs["w_scale"] / inputs["y_scale"]).reshape(1, -1, 1, 1)
    exact = (conv + bias_term) * multiplier.astype(np.float64) + inputs["y_zero_point"]
    _check_requantized(model, feeds, exact)


def _conv_reference(inputs, attrs):
    """int32 conv(x - x_zp, w - w_zp) by onnx's reference (as a float Conv of the shifted
    values: exact, every partial sum well inside float64's integers)."""
    x = inputs["x"].astype(np.float64) - float(inputs["x_zero_point"])
    w = inputs["w"].astype(np.float64) - inputs["w_zero_point"].astype(np.float64).reshape(
        -1, 1, 1, 1)
    node = helper.make_node("Conv", ["x", "w"], ["y"], **attrs)
    graph = helper.make_graph([node], "g", [
        helper.make_tensor_value_info("x", TensorProto.DOUBLE, list(x.shape)),
        helper.make_tensor_value_info("w", TensorProto.DOUBLE, list(w.shape))],
        [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    return ReferenceEvaluator(model).run(None, {"x": x, "w": w})[0]


def test_qlinear_conv_refuses_a_per_channel_output_zero_point():
    inputs = _qlinear_conv_inputs(np.uint8, np.int8, np.uint8, 5, True, False)
    inputs["y_zero_point"] = np.arange(5, dtype=np.uint8)
    model, _ = _model("QLinearConv", inputs, {"y_zero_point"}, TensorProto.UINT8)
    with pytest.raises(OnnxImportError, match="y_zero_point"):
        tc.from_onnx(model)


# ---- onnx's node tests written at opset 10 -----------------------------------------------------


@functools.cache
def _node_tests() -> dict[str, Any]:
    import onnx.backend.test.loader as loader

    return {case.name: case for case in loader.load_model_tests(kind="node")}


def node_test_at_opset_13(name: str) -> tuple[Any, list[tuple[list[Any], list[Any]]]]:
    """onnx's node test ``name`` with its model's opset raised from 10 to 13 (these operators
    are the same at both), and its data sets."""
    case = _node_tests()[name]
    model = onnx.ModelProto()
    model.CopyFrom(case.model)
    model.opset_import[0].version = 13
    return model, case.data_sets


@pytest.mark.parametrize("name", ["test_matmulinteger", "test_convinteger_with_padding",
                                  "test_convinteger_without_padding", "test_qlinearconv"])
def test_opset_10_node_tests_at_opset_13(name):
    model, data_sets = node_test_at_opset_13(name)
    names = [i.name for i in model.graph.input]
    for inputs, outputs in data_sets:
        for got in _runs(model, dict(zip(names, inputs))):
            np.testing.assert_array_equal(got, outputs[0])
