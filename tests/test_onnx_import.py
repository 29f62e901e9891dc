"""tc.from_onnx: models built with onnx.helper imported, compared with the numpy reference,
compiled for x86 and compared with onnxruntime (a second oracle); bad models refused."""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import tilecraft as tc  # noqa: E402
from tilecraft.onnx import OnnxImportError  # noqa: E402

RNG = np.random.default_rng(7)


def _model(nodes, inputs, outputs, initializers, opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs,
                              [numpy_helper.from_array(v, k) for k, v in initializers.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10  # onnxruntime refuses the IR version onnx 1.23 writes
    return model


def _onnxruntime(model, **feeds):
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _value(name, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def _conv_bn_relu_gemm():
    """x[1,3,9,7] -> Conv 3x3 pad 1 stride 2 (5 ch, bias) -> BN -> Relu -> Flatten -> Gemm."""
    w = RNG.standard_normal((5, 3, 3, 3)).astype(np.float32)
    inits = {"w": w, "b": RNG.standard_normal(5).astype(np.float32),
             "gamma": RNG.uniform(0.5, 1.5, 5).astype(np.float32),
             "beta": RNG.standard_normal(5).astype(np.float32),
             "mean": RNG.standard_normal(5).astype(np.float32),
             "var": RNG.uniform(0.5, 2.0, 5).astype(np.float32),
             "fc": RNG.standard_normal((11, 5 * 5 * 4)).astype(np.float32),
             "fc_b": RNG.standard_normal(11).astype(np.float32)}
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("BatchNormalization", ["c", "gamma", "beta", "mean", "var"], ["n"],
                         epsilon=1e-3),
        helper.make_node("Relu", ["n"], ["r"]),
        helper.make_node("Flatten", ["r"], ["f"]),
        helper.make_node("Gemm", ["f", "fc", "fc_b"], ["y"], transB=1, alpha=0.5),
    ]
    return _model(nodes, [_value("x", [1, 3, 9, 7])], [_value("y", [1, 11])], inits)


def _attention():
    """One attention head: x[1,7,12] -> Q, K, V MatMuls -> (1,7,2,6) heads -> Transpose ->
    scores MatMul / sqrt(6) -> Softmax -> MatMul V -> Transpose -> Reshape back."""
    d, heads, seq = 12, 2, 7
    inits = {f"w{n}": RNG.standard_normal((d, d)).astype(np.float32) for n in "qkv"}
    inits["split_shape"] = np.array([1, seq, heads, d // heads], np.int64)
    inits["merge_shape"] = np.array([1, seq, d], np.int64)
    inits["scale"] = np.array(1.0 / np.sqrt(d // heads), np.float32)
    nodes = []
    for n in "qkv":
        nodes += [helper.make_node("MatMul", ["x", f"w{n}"], [f"{n}"]),
                  helper.make_node("Reshape", [n, "split_shape"], [f"{n}_h"]),
                  helper.make_node("Transpose", [f"{n}_h"], [f"{n}_t"],
                                   perm=[0, 2, 3, 1] if n == "k" else [0, 2, 1, 3])]
    nodes += [helper.make_node("MatMul", ["q_t", "k_t"], ["scores"]),
              helper.make_node("Mul", ["scores", "scale"], ["scaled"]),
              helper.make_node("Softmax", ["scaled"], ["p"], axis=-1),
              helper.make_node("MatMul", ["p", "v_t"], ["o"]),
              helper.make_node("Transpose", ["o"], ["o_t"], perm=[0, 2, 1, 3]),
              helper.make_node("Reshape", ["o_t", "merge_shape"], ["y"])]
    return _model(nodes, [_value("x", [1, seq, d])], [_value("y", [1, seq, d])], inits)


@pytest.mark.parametrize("build", [_conv_bn_relu_gemm, _attention])
def test_model_matches_onnxruntime_on_x86(build):
    pytest.importorskip("llvmlite")
    model = build()
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = RNG.standard_normal(shape).astype(np.float32)
    expected = _onnxruntime(model, x=x)[0]
    graph = tc.from_onnx(model)
    assert [t.name for t in graph.inputs] == ["x"]
    np.testing.assert_allclose(tc.reference.run(graph, x=x), expected, rtol=1e-4, atol=1e-4)
    exe = tc.compile(graph, target="x86_avx512")
    np.testing.assert_allclose(exe(x), expected, rtol=1e-4, atol=1e-4)


def test_initializers_as_inputs_keep_their_names():
    model = _conv_bn_relu_gemm()
    graph = tc.from_onnx(model, initializers="inputs")
    names = {t.name for t in graph.inputs}
    assert {"x", "w", "b", "gamma", "fc"} <= names and not graph.constants
    weights = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    x = RNG.standard_normal((1, 3, 9, 7)).astype(np.float32)
    np.testing.assert_allclose(tc.reference.run(graph, x=x, **weights),
                               _onnxruntime(model, x=x)[0], rtol=1e-4, atol=1e-4)


def test_every_unsupported_node_is_listed_at_once():
    nodes = [helper.make_node("Relu", ["x"], ["a"]),
             helper.make_node("NonZero", ["a"], ["b"], name="first_bad"),
             helper.make_node("Relu", ["b"], ["c"]),  # depends on a failed node: not listed
             helper.make_node("Pad", ["x", "pads"], ["d"], mode="reflect", name="second_bad"),
             helper.make_node("Add", ["c", "d"], ["y"])]
    model = _model(nodes, [_value("x", [2, 3])], [_value("y", [2, 3])],
                   {"pads": np.array([0, 3, 0, 3], np.int64)})  # reflect past the extent
    with pytest.raises(OnnxImportError) as err:
        tc.from_onnx(model)
    message = str(err.value)
    assert "2 node(s)" in message
    assert "'first_bad' (NonZero, opset 17)" in message
    assert "'second_bad' (Pad, opset 17)" in message and "reflect" in message


def test_an_older_opset_is_converted_by_onnx_version_converter():
    """Opset 11: Softmax's axis coerced the input to 2-d and Squeeze took its axes as an
    attribute; the converter's adapters rewrite both, so the import reads them as opset 13."""
    nodes = [helper.make_node("Softmax", ["x"], ["s"], axis=1),
             helper.make_node("Squeeze", ["s"], ["y"], axes=[1])]
    model = _model(nodes, [_value("x", [2, 1, 5])], [_value("y", [2, 5])], {}, opset=11)
    x = RNG.standard_normal((2, 1, 5)).astype(np.float32)
    graph = tc.from_onnx(model)
    want = _onnxruntime(model, x=x)[0]
    np.testing.assert_allclose(tc.reference.run(graph, x=x), want, rtol=1e-5, atol=1e-6)


def test_shape_arithmetic_is_folded_at_import():
    """Shape -> Gather -> Unsqueeze -> Concat -> Reshape, as exporters write a flatten."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
             helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
             helper.make_node("Concat", ["n1", "minus_one"], ["shape"], axis=0),
             helper.make_node("Reshape", ["x", "shape"], ["y"])]
    model = _model(nodes, [_value("x", [3, 2, 5])], [_value("y", [3, 10])],
                   {"zero": np.array(0, np.int64), "axes": np.array([0], np.int64),
                    "minus_one": np.array([-1], np.int64)})
    x = RNG.standard_normal((3, 2, 5)).astype(np.float32)
    graph = tc.from_onnx(model)
    assert graph.outputs[0].shape == (3, 10)
    np.testing.assert_array_equal(tc.reference.run(graph, x=x), x.reshape(3, 10))


def test_bad_input_is_a_tilecraft_error(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    with pytest.raises(OnnxImportError, match="cannot read the ONNX model"):
        tc.from_onnx(bad)
    unknown = _model([helper.make_node("Relu", ["x"], ["a"]),
                      helper.make_node("NotAnOp", ["a"], ["y"], name="odd")],
                     [_value("x", [2])], [_value("y", [2])], {}, opset=11)
    with pytest.raises(OnnxImportError, match=r"'odd' \(NotAnOp, opset 11\)"):
        tc.from_onnx(unknown)
    dangling = _model([helper.make_node("Resize", ["x", "scales"], ["y"])],
                      [_value("x", [2])], [_value("y", [2])], {}, opset=10)
    with pytest.raises(OnnxImportError, match="opset 10.*version converter could not bring "
                                              "it there .*scales is undefined"):
        tc.from_onnx(dangling)
    dynamic = _model([helper.make_node("Relu", ["x"], ["y"])], [_value("x", ["batch", 3])],
                     [_value("y", ["batch", 3])], {})
    with pytest.raises(OnnxImportError, match="input_shapes"):
        tc.from_onnx(dynamic)
    graph = tc.from_onnx(dynamic, input_shapes={"x": (4, 3)})
    assert graph.inputs[0].shape == (4, 3)


@pytest.mark.parametrize(("shape", "axis", "flat"), [
    ((3, 4), -1, (3, 4)), ((2, 3, 4, 5), -1, (24, 5)), ((2, 3, 4, 5), -3, (2, 60)),
    ((2, 3, 4, 5), 4, (120, 1)), ((2, 3), 0, (1, 6)), ((2, 3), -2, (1, 6))])
def test_flatten_counts_a_negative_axis_from_the_back(shape, axis, flat):
    """axis -1 of a rank-r input is axis r - 1 (it was taken modulo r + 1: (12, 1) for
    (3, 4); the node tests could not see it, their runner comparing values only)."""
    model = _model([helper.make_node("Flatten", ["x"], ["y"], axis=axis)],
                   [_value("x", list(shape))], [_value("y", None)], {})
    graph = tc.from_onnx(model)
    assert graph.outputs[0].shape == flat
    x = RNG.standard_normal(shape).astype(np.float32)
    np.testing.assert_array_equal(tc.reference.run(graph, x=x), x.reshape(flat))
    with pytest.raises(OnnxImportError, match=r"axis 5 for a rank-4 input"):
        tc.from_onnx(_model([helper.make_node("Flatten", ["x"], ["y"], axis=5)],
                            [_value("x", [2, 3, 4, 5])], [_value("y", None)], {}))


def _if_model(condition_from_shape: bool):
    """y = If(cond, then: Relu(x) * 2, else: Neg(x)); cond is Size(x) > 5 (known at import:
    x is 2x3) or a graph input (run time)."""
    then_graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Mul", ["r", "two"], ["t"])],
        "then", [], [_value("t", [2, 3])], [numpy_helper.from_array(np.float32(2.0), "two")])
    else_graph = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [],
                                   [_value("e", [2, 3])])
    nodes = [helper.make_node("If", ["cond"], ["y"], then_branch=then_graph,
                              else_branch=else_graph, name="branchy")]
    inputs = [_value("x", [2, 3])]
    if condition_from_shape:
        nodes[:0] = [helper.make_node("Size", ["x"], ["n"]),
                     helper.make_node("Greater", ["n", "five"], ["cond"])]
        initializers = {"five": np.array(5, np.int64)}
    else:
        inputs.append(helper.make_tensor_value_info("cond", TensorProto.BOOL, []))
        initializers = {}
    return _model(nodes, inputs, [_value("y", [2, 3])], initializers)


def test_an_if_known_at_import_becomes_the_branch_it_takes():
    model = _if_model(condition_from_shape=True)
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    graph = tc.from_onnx(model)
    np.testing.assert_allclose(tc.reference.run(graph, x=x), _onnxruntime(model, x=x)[0])
    np.testing.assert_allclose(tc.reference.run(graph, x=x), np.maximum(x, 0) * 2)
    with pytest.raises(OnnxImportError, match=r"'branchy' \(If, opset 17\): its condition "
                                              r"'cond' is computed at run time"):
        tc.from_onnx(_if_model(condition_from_shape=False))
