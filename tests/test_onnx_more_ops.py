"""The ONNX operators beyond the issue's list (reductions, arg reductions, normalizations,
activations, generators, Tile / Trilu / CumSum) on awkward float32 shapes, where ONNX's own node
tests are float64 or older than opset 13: each model imported, run by tilecraft's numpy
reference and compiled for x86, against onnx's reference evaluator."""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import tilecraft as tc  # noqa: E402
from tilecraft.onnx import ConstantRequired  # noqa: E402
from tilecraft.reference import run  # noqa: E402
from tilecraft.target.registry import get_target  # noqa: E402

RNG = np.random.default_rng(11)
X86 = get_target("x86_avx512").available().execute


def _model(node, inputs, outputs, initializers=None, opset=21):
    graph = helper.make_graph([node], "g", inputs, outputs, [
        numpy_helper.from_array(v, k) for k, v in (initializers or {}).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _value(name, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def _check(model, feeds, rtol=1e-5, atol=1e-6, compile_x86=True, want=None):
    """tilecraft's reference and (where it runs) its x86 build against onnx's evaluator (or
    ``want``, where the evaluator departs from the operator's definition)."""
    want = ReferenceEvaluator(model).run(None, feeds) if want is None else want
    graph = tc.from_onnx(model)
    got = run(graph, feeds)
    got = got if isinstance(got, tuple) else (got,)
    for each, wanted in zip(got, want):
        np.testing.assert_allclose(each, wanted.astype(each.dtype), rtol=rtol, atol=atol)
    if compile_x86 and X86:
        built = tc.compile(graph, target="x86_avx512")(**feeds)
        built = built if isinstance(built, tuple) else (built,)
        for each, wanted in zip(built, want):
            np.testing.assert_allclose(each, wanted.astype(each.dtype), rtol=rtol, atol=atol)


@pytest.mark.parametrize("op", ["ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum",
                                "ReduceLogSumExp"])
@pytest.mark.parametrize("axes,keepdims", [((1,), 1), ((0, 2), 0), ((-1,), 0)])
def test_reductions(op, axes, keepdims):
    x = RNG.uniform(0.5, 3.0, (3, 5, 7)).astype(np.float32)
    if op == "ReduceLogSumExp":
        x = x * 40.0  # exp(120) overflows float32: the maximum is subtracted first
    model = _model(helper.make_node(op, ["x", "axes"], ["y"], keepdims=keepdims),
                   [_value("x", x.shape)], [_value("y", None)],
                   {"axes": np.array(axes, np.int64)})
    _check(model, {"x": x}, rtol=2e-5, compile_x86=axes == (1,))


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("last", [0, 1])
def test_arg_reductions_with_ties(op, last):
    x = RNG.integers(0, 3, (4, 7, 5)).astype(np.float32)  # many ties on each axis
    model = _model(helper.make_node(op, ["x"], ["y"], axis=1, keepdims=0,
                                    select_last_index=last),
                   [_value("x", x.shape)], [_value("y", None, TensorProto.INT64)])
    _check(model, {"x": x})


def test_hardmax_marks_the_first_largest():
    x = RNG.integers(0, 4, (3, 11)).astype(np.float32)
    model = _model(helper.make_node("Hardmax", ["x"], ["y"], axis=-1),
                   [_value("x", x.shape)], [_value("y", None)])
    _check(model, {"x": x})


@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_cumsum(exclusive, reverse):
    x = RNG.standard_normal((3, 13)).astype(np.float32)
    model = _model(helper.make_node("CumSum", ["x", "axis"], ["y"], exclusive=exclusive,
                                    reverse=reverse),
                   [_value("x", x.shape)], [_value("y", None)], {"axis": np.array(1, np.int64)})
    _check(model, {"x": x}, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("node", [
    helper.make_node("Mish", ["x"], ["y"]),
    helper.make_node("Shrink", ["x"], ["y"], bias=0.25, lambd=0.75),
    helper.make_node("Celu", ["x"], ["y"], alpha=2.0),
    helper.make_node("ThresholdedRelu", ["x"], ["y"], alpha=0.3),
    helper.make_node("Sign", ["x"], ["y"]),
], ids=lambda node: node.op_type)
def test_activations(node):
    x = np.linspace(-12.0, 12.0, 7 * 37, dtype=np.float32).reshape(7, 37)
    x[0, :3] = 0.0
    model = _model(node, [_value("x", x.shape)], [_value("y", None)])
    # Mish of -12: 7.4e-5 of the float32 spacing near 1 (log(1 + e) would round e away)
    _check(model, {"x": x}, rtol=2e-5, atol=1e-7)


def test_isinf_flags_and_prelu_broadcast():
    x = np.array([[1.0, -np.inf, np.inf, np.nan, -3.0]], np.float32)
    for negative, positive in ((1, 0), (0, 1), (0, 0)):
        model = _model(helper.make_node("IsInf", ["x"], ["y"], detect_negative=negative,
                                        detect_positive=positive),
                       [_value("x", x.shape)], [_value("y", None, TensorProto.BOOL)])
        _check(model, {"x": x}, compile_x86=False)
    x = RNG.standard_normal((2, 3, 5)).astype(np.float32)
    model = _model(helper.make_node("PRelu", ["x", "slope"], ["y"]), [_value("x", x.shape)],
                   [_value("y", None)], {"slope": RNG.standard_normal((3, 1)).astype(np.float32)})
    _check(model, {"x": x})


@pytest.mark.parametrize("opset", [18, 21])
def test_group_normalization_scale_per_group_or_channel(opset):
    x = RNG.standard_normal((2, 6, 5, 3)).astype(np.float32)
    extent = 3 if opset == 18 else 6
    model = _model(helper.make_node("GroupNormalization", ["x", "scale", "bias"], ["y"],
                                    num_groups=3, epsilon=1e-3),
                   [_value("x", x.shape)], [_value("y", None)],
                   {"scale": RNG.uniform(0.5, 2.0, extent).astype(np.float32),
                    "bias": RNG.standard_normal(extent).astype(np.float32)}, opset=opset)
    _check(model, {"x": x}, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("node", [
    helper.make_node("InstanceNormalization", ["x", "scale", "bias"], ["y"], epsilon=1e-3),
    helper.make_node("LpNormalization", ["x"], ["y"], axis=1, p=1),
    helper.make_node("MeanVarianceNormalization", ["x"], ["y"], axes=[0, 2]),
    helper.make_node("LRN", ["x"], ["y"], size=4, alpha=0.01, beta=0.6, bias=1.5),
], ids=lambda node: node.op_type)
def test_normalizations(node):
    x = RNG.standard_normal((2, 5, 7, 3)).astype(np.float32)
    inits = {"scale": RNG.uniform(0.5, 2.0, 5).astype(np.float32),
             "bias": RNG.standard_normal(5).astype(np.float32)} \
        if node.op_type == "InstanceNormalization" else None
    model = _model(node, [_value("x", x.shape)], [_value("y", None)], inits)
    _check(model, {"x": x}, rtol=1e-4, atol=1e-5, want=_NUMPY.get(node.op_type, lambda _: None)(x))


def _lp1(x):
    """The evaluator sums x ** p, not |x| ** p (a signed 'norm' for p = 1)."""
    return [x / np.abs(x).sum(axis=1, keepdims=True)]


def _lrn(x, size=4, alpha=0.01, beta=0.6, bias=1.5):
    """The evaluator fills the window sums of only the first N channels (its loop runs over
    the batch); the definition, for every channel."""
    squares = np.zeros_like(x)
    for c in range(x.shape[1]):
        low, high = max(0, c - (size - 1) // 2), min(x.shape[1], c + -(-(size - 1) // 2) + 1)
        squares[:, c] = (x[:, low:high] ** 2).sum(axis=1)
    return [x / (bias + alpha / size * squares) ** beta]


_NUMPY = {"LpNormalization": _lp1, "LRN": _lrn}


def test_tile_trilu_size_eye_like():
    x = RNG.standard_normal((2, 3, 5)).astype(np.float32)
    model = _model(helper.make_node("Tile", ["x", "repeats"], ["y"]), [_value("x", x.shape)],
                   [_value("y", None)], {"repeats": np.array([3, 1, 2], np.int64)})
    _check(model, {"x": x})
    for upper, k in ((1, -1), (0, 2)):
        model = _model(helper.make_node("Trilu", ["x", "k"], ["y"], upper=upper),
                       [_value("x", x.shape)], [_value("y", None)],
                       {"k": np.array(k, np.int64)})
        _check(model, {"x": x}, compile_x86=upper == 1)
    graph = tc.from_onnx(_model(helper.make_node("Size", ["x"], ["y"]), [_value("x", x.shape)],
                                [_value("y", None, TensorProto.INT64)]))
    assert not graph.inputs and run(graph, {}).ravel().tolist() == [30]  # known now
    model = _model(helper.make_node("EyeLike", ["x"], ["y"], k=-2), [_value("x", (4, 7))],
                   [_value("y", None)])
    assert np.array_equal(run(tc.from_onnx(model), {}), np.eye(4, 7, k=-2, dtype=np.float32))


def test_a_generator_of_a_run_time_value_names_the_input():
    """ConstantOfShape of a computed shape: ConstantRequired naming the input (the ONNX
    backend then compiles again with that value bound); given the value, it imports."""
    model = _model(helper.make_node("ConstantOfShape", ["shape"], ["y"], value=helper.make_tensor(
        "v", TensorProto.FLOAT, [1], [2.5])), [_value("shape", (2,), TensorProto.INT64)],
        [_value("y", None)])
    with pytest.raises(ConstantRequired, match="'shape'") as err:
        tc.from_onnx(model)
    assert err.value.input_name == "shape"
    graph = tc.from_onnx(model, input_values={"shape": np.array([3, 4], np.int64)})
    np.testing.assert_array_equal(run(graph, {}), np.full((3, 4), 2.5, np.float32))


@pytest.mark.parametrize("attrs,scales", [
    ({"mode": "nearest", "nearest_mode": "round_prefer_ceil"}, (2.3, 0.6)),
    ({"mode": "nearest", "nearest_mode": "floor", "coordinate_transformation_mode":
      "asymmetric"}, (3.0, 1.5)),
    ({"mode": "linear", "coordinate_transformation_mode": "align_corners"}, (2.3, 0.6)),
    ({"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"}, (0.5, 1.7)),
    ({"mode": "cubic", "exclude_outside": 1}, (1.9, 2.0)),
    ({"mode": "linear", "antialias": 1}, (0.45, 0.7)),
    ({"mode": "cubic", "antialias": 1}, (0.3, 0.5)),  # 8 x 14 taps: a reduction over them
], ids=["nearest-ceil", "nearest-floor", "linear-corners", "linear-pytorch", "cubic",
        "linear-antialias", "cubic-antialias"])
def test_resize_modes_on_awkward_sizes(attrs, scales):
    """7 x 5 maps (17 x 9 for the widest windows) resized by scales whose output sizes round
    down, both axes at once."""
    shape = (1, 2, 17, 9) if attrs.get("antialias") and attrs["mode"] == "cubic" else (1, 2, 7, 5)
    x = RNG.standard_normal(shape).astype(np.float32)
    model = _model(helper.make_node("Resize", ["x", "", "scales"], ["y"], **attrs),
                   [_value("x", x.shape)], [_value("y", None)],
                   {"scales": np.array([1.0, 1.0, *scales], np.float32)}, opset=19)
    _check(model, {"x": x}, rtol=1e-5, atol=1e-5)


def test_resize_by_sizes_on_some_axes_and_refusals():
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    model = _model(helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], axes=[2, 0],
                                    mode="linear"),
                   [_value("x", x.shape)], [_value("y", None)],
                   {"sizes": np.array([11, 1], np.int64)}, opset=19)
    _check(model, {"x": x}, rtol=1e-5, atol=1e-5)
    crop = _model(helper.make_node("Resize", ["x", "roi", "scales"], ["y"],
                                   coordinate_transformation_mode="tf_crop_and_resize"),
                  [_value("x", x.shape)], [_value("y", None)],
                  {"roi": np.array([0, 0, 0, 1, 1, 1], np.float32),
                   "scales": np.array([1, 1, 2], np.float32)}, opset=19)
    with pytest.raises(tc.onnx.OnnxImportError, match="tf_crop_and_resize"):
        tc.from_onnx(crop)


def test_attention_gqa_cache_mask_and_all_outputs():
    """4-d Attention on prime sizes: 6 query heads over 2 key / value heads, a past cache of
    3, causal, a boolean mask 2 columns short of the 8 keys (padded: masked), every output
    (the probabilities as qk_matmul_output)."""
    q = RNG.standard_normal((2, 6, 5, 7)).astype(np.float32)
    k = RNG.standard_normal((2, 2, 5, 7)).astype(np.float32)
    v = RNG.standard_normal((2, 2, 5, 3)).astype(np.float32)
    past_k = RNG.standard_normal((2, 2, 3, 7)).astype(np.float32)
    past_v = RNG.standard_normal((2, 2, 3, 3)).astype(np.float32)
    mask = RNG.integers(0, 2, (5, 6)).astype(bool)
    mask[:, 0] = True
    node = helper.make_node("Attention", ["q", "k", "v", "mask", "past_k", "past_v"],
                            ["y", "present_k", "present_v", "qk"], is_causal=1,
                            qk_matmul_output_mode=3, scale=0.3)
    inputs = [_value("q", q.shape), _value("k", k.shape), _value("v", v.shape),
              _value("mask", mask.shape, TensorProto.BOOL), _value("past_k", past_k.shape),
              _value("past_v", past_v.shape)]
    model = _model(node, inputs, [_value(n, None) for n in ("y", "present_k", "present_v",
                                                            "qk")], opset=23)
    feeds = {"q": q, "k": k, "v": v, "mask": mask.astype(np.uint8), "past_k": past_k,
             "past_v": past_v}
    want = ReferenceEvaluator(model).run(None, {**feeds, "mask": mask})
    _check(model, feeds, rtol=1e-5, atol=1e-6, want=want)


@pytest.mark.parametrize("layout", ["4d", "3d"])
def test_plain_attention_reaches_the_fused_attention_chain(layout):
    """Attention without mask, cache or softcap (prime sequence lengths, 2 heads of 64): its
    scores are the plain product Q K^T then the scale, which the x86 target fuses with the
    softmax and the product with V into one chain kernel; against onnx's evaluator."""
    if not X86:
        pytest.skip("the x86 target does not execute here")
    shapes = {"4d": ((1, 2, 131, 64), (1, 2, 127, 64), (1, 2, 127, 64)),
              "3d": ((1, 131, 128), (1, 127, 128), (1, 127, 128))}[layout]
    q, k, v = (RNG.standard_normal(shape).astype(np.float32) for shape in shapes)
    heads = {} if layout == "4d" else {"q_num_heads": 2, "kv_num_heads": 2}
    model = _model(helper.make_node("Attention", ["q", "k", "v"], ["y"], **heads),
                   [_value("q", q.shape), _value("k", k.shape), _value("v", v.shape)],
                   [_value("y", None)], opset=23)
    feeds = {"q": q, "k": k, "v": v}
    _check(model, feeds, rtol=1e-5, atol=1e-6)
    exe = tc.compile(tc.from_onnx(model), target="x86_avx512")
    schedules = [kernel.attrs.get("schedule", "") for kernel in exe.kernels]
    assert any(schedule.startswith("fused chain") for schedule in schedules), schedules


def test_attention_3d_softcap_window_and_unpadded_lengths():
    """3-d Attention (heads in the hidden axis), softcap, a sliding window and
    nonpad_kv_seqlen, one query row with no key to attend (zero, not NaN)."""
    q = RNG.standard_normal((2, 4, 2 * 5)).astype(np.float32)
    k = RNG.standard_normal((2, 7, 2 * 5)).astype(np.float32)
    v = RNG.standard_normal((2, 7, 2 * 3)).astype(np.float32)
    lengths = np.array([6, 1], np.int64)
    node = helper.make_node("Attention", ["q", "k", "v", "", "", "", "lengths"], ["y"],
                            q_num_heads=2, kv_num_heads=2, softcap=2.0, is_causal=1,
                            left_window_size=2)
    model = _model(node, [_value("q", q.shape), _value("k", k.shape), _value("v", v.shape),
                          _value("lengths", (2,), TensorProto.INT64)], [_value("y", None)],
                   opset=25)
    feeds = {"q": q, "k": k, "v": v, "lengths": lengths}
    want = ReferenceEvaluator(model).run(None, feeds)
    assert np.isfinite(want[0]).all() and not want[0][1, :3].any()  # batch 1: rows 0-2 empty
    _check(model, {**feeds, "lengths": lengths.astype(np.int32)}, rtol=1e-5, atol=1e-6,
           want=want)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_softmax_cross_entropy_weights_and_ignored_targets(reduction):
    """[N, C, d1, d2] scores on 7 classes, class weights, ignore_index -1 on some targets,
    the log-probabilities as a second output."""
    scores = RNG.standard_normal((3, 7, 2, 5)).astype(np.float32)
    labels = RNG.integers(0, 7, (3, 2, 5)).astype(np.int64)
    labels[0, 1, :2] = -1
    node = helper.make_node("SoftmaxCrossEntropyLoss", ["x", "t", "w"], ["loss", "log_prob"],
                            reduction=reduction, ignore_index=-1)
    model = _model(node, [_value("x", scores.shape), _value("t", labels.shape,
                                                            TensorProto.INT64)],
                   [_value("loss", None), _value("log_prob", None)],
                   {"w": RNG.uniform(0.2, 2.0, 7).astype(np.float32)})
    want = ReferenceEvaluator(model).run(None, {"x": scores, "t": labels})
    _check(model, {"x": scores, "t": labels.astype(np.int32)}, rtol=1e-5, atol=1e-6, want=want)


def test_one_hot_center_crop_pad_and_swish():
    indices = np.array([[0, -1, 4], [2, -5, 1]], np.int64)
    model = _model(helper.make_node("OneHot", ["i", "depth", "values"], ["y"], axis=1),
                   [_value("i", indices.shape, TensorProto.INT64)], [_value("y", None)],
                   {"depth": np.array(5, np.int64), "values": np.array([-2.0, 3.5], np.float32)})
    _check(model, {"i": indices.astype(np.int32)}, want=ReferenceEvaluator(model).run(
        None, {"i": indices}))
    x = RNG.standard_normal((7, 4, 3)).astype(np.float32)  # crop 7 -> 4, pad 4 -> 7
    model = _model(helper.make_node("CenterCropPad", ["x", "shape"], ["y"], axes=[0, 1]),
                   [_value("x", x.shape)], [_value("y", None)],
                   {"shape": np.array([4, 7], np.int64)})
    _check(model, {"x": x})
    model = _model(helper.make_node("Swish", ["x"], ["y"], alpha=0.7), [_value("x", x.shape)],
                   [_value("y", None)], opset=24)
    _check(model, {"x": x})


@pytest.mark.parametrize("fmod", [0, 1])
def test_integer_mod_signs(fmod):
    a = RNG.integers(-50, 50, (3, 7)).astype(np.int32)
    b = RNG.choice([-7, -3, -1, 2, 5], (7,)).astype(np.int32)
    model = _model(helper.make_node("Mod", ["a", "b"], ["y"], fmod=fmod),
                   [_value("a", a.shape, TensorProto.INT32), _value("b", b.shape,
                                                                    TensorProto.INT32)],
                   [_value("y", None, TensorProto.INT32)])
    _check(model, {"a": a, "b": b}, rtol=0, atol=0)


@pytest.mark.parametrize("p", [1, 3])
def test_lp_pool_padded_strided(p):
    x = RNG.standard_normal((1, 3, 7, 5)).astype(np.float32)
    model = _model(helper.make_node("LpPool", ["x"], ["y"], kernel_shape=[3, 2], p=p,
                                    strides=[2, 1], pads=[1, 0, 1, 1]),
                   [_value("x", x.shape)], [_value("y", None)], opset=18)
    _check(model, {"x": x}, rtol=1e-5, atol=1e-6)


def _recurrent_model(op, gates, hidden, extra_inputs, layout=0, **attrs):
    seq, batch, width, directions = 4, 3, 5, 2
    x_shape = (seq, batch, width) if layout == 0 else (batch, seq, width)
    inits = {"W": RNG.standard_normal((directions, gates * hidden, width)).astype(np.float32)
             * 0.5,
             "R": RNG.standard_normal((directions, gates * hidden, hidden)).astype(np.float32)
             * 0.5,
             "B": RNG.standard_normal((directions, 2 * gates * hidden)).astype(np.float32)}
    names = ["x", "W", "R", "B"]
    for name, array in extra_inputs.items():
        inits[name] = array
    names += [n if n in extra_inputs else "" for n in ("lens", "h0", "c0", "P")]
    while names[-1] == "":
        names.pop()
    node = helper.make_node(op, names, ["y", "y_h"], hidden_size=hidden,
                            direction="bidirectional", layout=layout, **attrs)
    return _model(node, [_value("x", x_shape)], [_value("y", None), _value("y_h", None)],
                  inits, opset=14), x_shape


@pytest.mark.parametrize("linear_before_reset", [0, 1])
def test_gru_bidirectional_initial_state(linear_before_reset):
    h0 = RNG.standard_normal((2, 3, 6)).astype(np.float32)
    model, shape = _recurrent_model("GRU", 3, 6, {"h0": h0},
                                    linear_before_reset=linear_before_reset)
    _check(model, {"x": RNG.standard_normal(shape).astype(np.float32)}, rtol=1e-5, atol=1e-5)


def test_lstm_bidirectional_peepholes_batch_major():
    """(onnx's evaluator ignores ``clip`` and ``sequence_lens``: the RNN test below checks
    them against numpy)"""
    extra = {"P": RNG.standard_normal((2, 3 * 7)).astype(np.float32),
             "c0": RNG.standard_normal((3, 2, 7)).astype(np.float32)}
    model, shape = _recurrent_model("LSTM", 4, 7, extra, layout=1)
    _check(model, {"x": RNG.standard_normal(shape).astype(np.float32)}, rtol=1e-5, atol=1e-5)


def test_rnn_clip_and_sequence_lengths_against_numpy():
    """A sequence past its length keeps its state and outputs zeros; clip bounds the
    activation's input."""
    seq, batch, width, hidden = 5, 3, 4, 6
    x = RNG.standard_normal((seq, batch, width)).astype(np.float32) * 2
    w = RNG.standard_normal((1, hidden, width)).astype(np.float32)
    r = RNG.standard_normal((1, hidden, hidden)).astype(np.float32)
    lengths = np.array([5, 2, 3], np.int32)
    node = helper.make_node("RNN", ["x", "W", "R", "", "lens"], ["y", "y_h"], hidden_size=hidden,
                            clip=0.8)
    model = _model(node, [_value("x", x.shape), _value("lens", (batch,), TensorProto.INT32)],
                   [_value("y", None), _value("y_h", None)], {"W": w, "R": r})
    h = np.zeros((batch, hidden), np.float32)
    ys = np.zeros((seq, 1, batch, hidden), np.float32)
    for t in range(seq):
        new = np.tanh(np.clip(x[t] @ w[0].T + h @ r[0].T, -0.8, 0.8))
        running = (t < lengths)[:, None]
        ys[t, 0] = np.where(running, new, 0.0)
        h = np.where(running, new, h)
    _check(model, {"x": x, "lens": lengths}, rtol=1e-5, atol=1e-5, want=[ys, h[None]])


def test_gather_and_scatter_by_run_time_indices():
    """GatherElements / GatherND / ScatterElements / ScatterND with negative and repeated
    indices on prime sizes (ScatterND ``none``: the last update naming an element wins; ``mul``
    multiplies every update naming an element)."""
    data = RNG.standard_normal((5, 7)).astype(np.float32)
    index = RNG.integers(-7, 7, (5, 3)).astype(np.int64)
    cases = [
        ("GatherElements", {"axis": 1}, [data, index]),
        ("GatherND", {}, [data, np.array([[4, -1], [0, 3], [4, -1]], np.int64)]),
        ("ScatterElements", {"axis": 1, "reduction": "max"},
         [data, index, RNG.standard_normal((5, 3)).astype(np.float32)]),
        ("ScatterND", {}, [data, np.array([[1], [3], [1]], np.int64),
                           RNG.standard_normal((3, 7)).astype(np.float32)]),
        ("ScatterND", {"reduction": "add"}, [data, np.array([[2, 6], [2, 6], [0, 0]], np.int64),
                                            RNG.standard_normal(3).astype(np.float32)]),
        ("ScatterElements", {"axis": 1, "reduction": "mul"},   # repeated indices multiply
         [data, index, RNG.uniform(0.5, 2.0, (5, 3)).astype(np.float32)]),
        ("ScatterND", {"reduction": "mul"}, [data, np.array([[2, 6], [2, 6], [0, 0]], np.int64),
                                            RNG.uniform(-2.0, 2.0, 3).astype(np.float32)]),
    ]
    for op, attrs, arrays in cases:
        names = ["data", "indices", "updates"][:len(arrays)]
        elems = [TensorProto.FLOAT, TensorProto.INT64, TensorProto.FLOAT]
        model = _model(helper.make_node(op, names, ["y"], **attrs),
                       [_value(n, a.shape, e) for n, a, e in zip(names, arrays, elems)],
                       [_value("y", None)], opset=18)
        feeds = dict(zip(names, arrays))
        want = ReferenceEvaluator(model).run(None, feeds)
        ours = {n: a.astype(np.int32) if a.dtype == np.int64 else a for n, a in feeds.items()}
        _check(model, ours, want=want)


@pytest.mark.parametrize("zero_type", [TensorProto.UINT8, TensorProto.INT8])
@pytest.mark.parametrize("per_axis", [False, True])
def test_quantize_and_dequantize_linear(zero_type, per_axis):
    """Halves round to even, values past the type's range saturate; per tensor and per axis
    (axis 1 of [3, 5, 7]); dequantized back through the same scale and zero point."""
    x = (RNG.standard_normal((3, 5, 7)) * 60.0).astype(np.float32)
    x.flat[:4] = [2.5, 3.5, -2.5, 1000.0]   # /0.5 below: 5, 7, -5, 2000 -> halves and a clip
    dtype = helper.tensor_dtype_to_np_dtype(zero_type)
    scale = np.array([0.5, 0.25, 1.0, 0.75, 2.0], np.float32) if per_axis \
        else np.array(0.5, np.float32)
    zero = (np.array([3, 0, 7, 1, 2]) if per_axis else np.array(3)).astype(dtype)
    quant = _model(helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], axis=1),
                   [_value("x", x.shape)], [_value("y", None, zero_type)],
                   {"s": scale, "z": zero})
    _check(quant, {"x": x}, rtol=0, atol=0)
    q = ReferenceEvaluator(quant).run(None, {"x": x})[0]
    dequant = _model(helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], axis=1),
                     [_value("q", q.shape, zero_type)], [_value("y", None)],
                     {"s": scale, "z": zero})
    _check(dequant, {"q": q}, rtol=0, atol=0)


def test_blocked_quantization_and_dynamic_quantize_linear():
    """Blocks of 3 along the last axis (7: a ragged last block); DynamicQuantizeLinear's
    scale, zero point and values (its node tests are opset 11) on a prime shape."""
    x = (RNG.standard_normal((5, 7)) * 4.0).astype(np.float32)
    scale = RNG.uniform(0.05, 0.2, (5, 3)).astype(np.float32)
    blocked = _model(helper.make_node("QuantizeLinear", ["x", "s"], ["y"], axis=1,
                                      block_size=3),
                     [_value("x", x.shape)], [_value("y", None, TensorProto.UINT8)],
                     {"s": scale})
    _check(blocked, {"x": x}, rtol=0, atol=0)
    for shift in (0.0, 3.0, -3.0):   # both signs, all positive, all negative
        dynamic = _model(helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"]),
                         [_value("x", (11, 13))],
                         [_value("y", None, TensorProto.UINT8), _value("s", None),
                          _value("z", None, TensorProto.UINT8)], opset=20)
        _check(dynamic, {"x": (RNG.standard_normal((11, 13)) + shift).astype(np.float32)},
               rtol=1e-6, atol=0)
