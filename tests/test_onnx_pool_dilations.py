"""ONNX MaxPool / AveragePool / LpPool (tilecraft.onnx.convert_nn, tilecraft.ops.pooling's
pool_windows) with dilations, on 1, 2 and 3 spatial axes: prime extents, kernel 1, dilations
2 and 3, strides larger than the kernel, asymmetric pads, ceil_mode and count_include_pad on
and off. Each model (opset 22) is imported, run by tilecraft's numpy reference and compiled for
x86, against onnx's reference evaluator, a numpy loop written here and (where installed)
onnxruntime.

Where those disagree: an AveragePool / LpPool ceil-mode window that runs 2 or more past the
padded input makes onnx's reference move half of that into the begin padding, shifting every
window; tilecraft does not (as onnxruntime, MaxPool and the numpy loop). LpPool's ceil-mode
windows clipped at the end are ``sum^(1/p)`` as ONNX defines LpPool and onnxruntime computes
it, where onnx's reference (and PyTorch) take ``(kernel size * sum / cells)^(1/p)``. auto_pad
SAME with dilations is refused (onnx's reference and onnxruntime size those pads by the
undilated kernel)."""

import itertools

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import tilecraft as tc  # noqa: E402
from tilecraft.errors import TilecraftError  # noqa: E402
from tilecraft.reference import run  # noqa: E402
from tilecraft.target.registry import get_target  # noqa: E402

try:
    import onnxruntime as ort
except ImportError:  # the other oracles still run
    ort = None

RNG = np.random.default_rng(31)
X86 = get_target("x86_avx512").available().execute


def _onnxruntime(model, x):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def _model(op, shape, elem=TensorProto.FLOAT, outputs=("y",), **attrs):
    node = helper.make_node(op, ["x"], list(outputs), **attrs)
    graph = helper.make_graph(
        [node], "pool", [helper.make_tensor_value_info("x", elem, shape)],
        [helper.make_tensor_value_info(name, elem, None) for name in outputs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])


def _geometry(spatial, kernel, strides, pads, dilations, ceil_mode, auto_pad="NOTSET"):
    """(begin pad, end pad, outputs, extra past the padded input) per spatial axis."""
    nd = len(kernel)
    axes = []
    for d in range(nd):
        n, k, s, dil = spatial[d], kernel[d], strides[d], dilations[d]
        span = (k - 1) * dil + 1
        begin, end = pads[d], pads[nd + d]
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            total = max((-(-n // s) - 1) * s + span - n, 0)
            begin, end = total // 2, total - total // 2
            if auto_pad == "SAME_LOWER":
                begin, end = end, begin
        elif auto_pad == "VALID":
            begin = end = 0
        room = n + begin + end - span
        outputs = -(-room // s) + 1 if ceil_mode else room // s + 1
        if ceil_mode and (outputs - 1) * s >= n + begin:
            outputs -= 1
        extra = max((outputs - 1) * s + span - (n + begin + end), 0)
        axes.append((begin, end, outputs, extra))
    return axes


def _numpy_pool(op, x, kernel, strides, pads, dilations, ceil_mode=0, include_pad=0, p=2,
                auto_pad="NOTSET"):
    """Each window's taps ``o * stride - begin + k * dilation``; a mean divides by the taps
    inside the input (``include_pad=0``) or inside the padded input (``=1``), never ceil
    mode's extra; LpPool is ``(sum of |x|^p)^(1/p)`` over the taps inside the input."""
    spatial = x.shape[2:]
    axes = _geometry(spatial, kernel, strides, pads, dilations, ceil_mode, auto_pad)
    y = np.zeros((*x.shape[:2], *(a[2] for a in axes)), np.float64)
    for out in itertools.product(*(range(a[2]) for a in axes)):
        real, cells = [], 1
        for o, (begin, end, _, _), n, k, s, dil in zip(out, axes, spatial, kernel, strides,
                                                       dilations):
            taps = [o * s - begin + t * dil for t in range(k)]
            real.append([q for q in taps if 0 <= q < n])
            counted = [q for q in taps if q < n + end] if include_pad \
                else real[-1]
            cells *= len(counted)
        values = x[(slice(None), slice(None), *np.ix_(*real))].astype(np.float64)
        values = values.reshape(*x.shape[:2], -1)
        at = (slice(None), slice(None), *out)
        if op == "MaxPool":
            y[at] = values.max(axis=-1)
        elif op == "AveragePool":
            y[at] = values.sum(axis=-1) / cells
        else:
            y[at] = (np.abs(values) ** p).sum(axis=-1) ** (1 / p)
    return y.astype(x.dtype)


def _check(model, x, want, compile_x86=True):
    graph = tc.from_onnx(model)
    results = {"reference": run(graph, {"x": x})}
    if compile_x86 and X86:
        results["x86"] = tc.compile(graph, target="x86_avx512")(x=x)
    for how, got in results.items():
        assert got.shape == want.shape, how
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5, err_msg=how)


CASES = [  # shape, kernel, strides, pads, dilations
    ((1, 2, 13), [3], [2], [1, 2], [2]),
    ((2, 1, 7), [1], [3], [0, 0], [3]),
    ((1, 1, 11), [2], [4], [0, 1], [3]),
    ((1, 2, 7, 5), [3, 2], [2, 3], [1, 0, 2, 1], [2, 3]),
    ((1, 1, 11, 13), [2, 3], [3, 1], [0, 1, 1, 0], [3, 2]),
    ((2, 3, 5, 7), [1, 3], [2, 2], [0, 0, 0, 0], [1, 2]),
    ((1, 1, 5, 7, 11), [2, 2, 3], [2, 3, 2], [1, 0, 1, 0, 1, 1], [2, 3, 2]),
    ((1, 2, 7, 3, 5), [3, 1, 2], [1, 2, 3], [0, 0, 1, 1, 0, 0], [2, 1, 2]),
]
VARIANTS = [("MaxPool", {}), ("AveragePool", {"count_include_pad": 0}),
            ("AveragePool", {"count_include_pad": 1}), ("LpPool", {"p": 2}),
            ("LpPool", {"p": 3})]


@pytest.mark.parametrize("ceil_mode", [0, 1])
@pytest.mark.parametrize(("op", "extra_attrs"), VARIANTS)
@pytest.mark.parametrize(("shape", "kernel", "strides", "pads", "dilations"), CASES)
def test_dilated_pools_match_onnx_reference(shape, kernel, strides, pads, dilations, op,
                                           extra_attrs, ceil_mode):
    model = _model(op, shape, kernel_shape=kernel, strides=strides, pads=pads,
                   dilations=dilations, ceil_mode=ceil_mode, **extra_attrs)
    x = RNG.standard_normal(shape).astype(np.float32)
    want = _numpy_pool(op, x, kernel, strides, pads, dilations, ceil_mode,
                       extra_attrs.get("count_include_pad", 0), extra_attrs.get("p", 2))
    extras = [a[3] for a in _geometry(shape[2:], kernel, strides, pads, dilations, ceil_mode)]
    # onnx's reference shifts windows running 2 past the end, and scales LpPool's clipped ones
    if op == "MaxPool" or max(extras) < 2 and (op != "LpPool" or not ceil_mode):
        np.testing.assert_allclose(ReferenceEvaluator(model).run(None, {"x": x})[0], want,
                                   rtol=1e-5, atol=1e-5)
    if ort is not None:
        np.testing.assert_allclose(_onnxruntime(model, x), want, rtol=1e-5, atol=1e-5)
    _check(model, x, want, compile_x86=ceil_mode == 1)


def test_ceil_mode_window_two_past_the_end_is_not_shifted():
    """kernel 3, stride 4 on 9: ceil mode's windows are [0, 3), [4, 7), [8, 9) as for MaxPool
    and onnxruntime (onnx's reference AveragePool would average x[0:2], x[3:6], x[7])."""
    x = (10.0 ** np.arange(9, dtype=np.float32)).reshape(1, 1, 9) / 1e8
    model = _model("AveragePool", [1, 1, 9], kernel_shape=[3], strides=[4], ceil_mode=1)
    want = np.array([[[x[0, 0, 0:3].mean(), x[0, 0, 4:7].mean(), x[0, 0, 8]]]], np.float32)
    np.testing.assert_allclose(_numpy_pool("AveragePool", x, [3], [4], [0, 0], [1], 1), want)
    if ort is not None:
        np.testing.assert_allclose(_onnxruntime(model, x), want, rtol=1e-6)
    _check(model, x, want)


def test_pool_windows_sums_dilated_3d_windows():
    from tilecraft import te
    from tilecraft.errors import ShapeError
    from tilecraft.ops.pooling import pool_windows
    from tilecraft.te.expr import ReduceOp

    x = te.placeholder((1, 2, 5, 7, 3), name="x")
    y = pool_windows(x, (2, 3, 1), stride=(3, 2, 2), dilation=(2, 3, 1), reduce=ReduceOp.SUM,
                     name="y")
    assert y.shape == (1, 2, 1, 1, 2)
    data = RNG.standard_normal(x.shape).astype(np.float32)
    got = run(tc.Graph.from_outputs([y]), {"x": data})
    want = data[:, :, 0:3:2, 0:7:3, 0:3:2].sum(axis=(2, 3)).reshape(1, 2, 1, 1, 2)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    with pytest.raises(ShapeError, match="ReduceOp.MAX or ReduceOp.SUM"):
        pool_windows(x, 1, reduce=ReduceOp.MIN)


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool", "LpPool"])
def test_valid_auto_pad_with_dilations(op):
    shape, kernel, strides, dilations = (1, 2, 7, 11), [3, 2], [2, 3], [2, 3]
    model = _model(op, shape, kernel_shape=kernel, strides=strides, dilations=dilations,
                   auto_pad="VALID")
    x = RNG.standard_normal(shape).astype(np.float32)
    want = _numpy_pool(op, x, kernel, strides, [0] * 4, dilations, auto_pad="VALID")
    if op == "MaxPool":  # onnx's AveragePool / LpPool size VALID by the undilated kernel
        np.testing.assert_allclose(ReferenceEvaluator(model).run(None, {"x": x})[0], want,
                                   rtol=1e-5, atol=1e-5)
    if ort is not None:
        np.testing.assert_allclose(_onnxruntime(model, x), want, rtol=1e-5, atol=1e-5)
    _check(model, x, want)


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER"])
@pytest.mark.parametrize("op", ["MaxPool", "AveragePool", "LpPool"])
def test_same_auto_pad_with_dilations_is_refused(op, auto_pad):
    model = _model(op, (1, 2, 7, 11), kernel_shape=[3, 2], strides=[2, 3], dilations=[2, 1],
                   auto_pad=auto_pad)
    with pytest.raises(TilecraftError, match=f"auto_pad={auto_pad} with dilations"):
        tc.from_onnx(model)


def test_lp_pool_ceil_mode_takes_the_norm_of_a_clipped_window():
    """kernel 3, stride 2 on 8 with ceil mode: the last window holds x[6:8], so the result is
    the 2-norm of those two values, as ONNX defines LpPool and onnxruntime computes it (onnx's
    reference scales it by 3 / 2 under the root, as if the window were averaged)."""
    x = RNG.standard_normal((1, 2, 8)).astype(np.float32)
    model = _model("LpPool", [1, 2, 8], kernel_shape=[3], strides=[2], ceil_mode=1)
    want = _numpy_pool("LpPool", x, [3], [2], [0, 0], [1], ceil_mode=1)
    last = np.sqrt((x[:, :, 6:].astype(np.float64) ** 2).sum(axis=-1))
    np.testing.assert_allclose(want[:, :, -1], last, rtol=1e-5)
    if ort is not None:
        np.testing.assert_allclose(_onnxruntime(model, x), want, rtol=1e-5, atol=1e-6)
    _check(model, x, want)


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID"])
@pytest.mark.parametrize("op", ["MaxPool", "AveragePool", "LpPool"])
def test_auto_pad_3d_without_dilations(op, auto_pad):
    shape, kernel = (1, 1, 5, 4, 7), [2, 3, 2]
    model = _model(op, shape, kernel_shape=kernel, auto_pad=auto_pad)
    x = RNG.standard_normal(shape).astype(np.float32)
    want = _numpy_pool(op, x, kernel, [1] * 3, [0] * 6, [1] * 3, auto_pad=auto_pad)
    if op != "MaxPool" or auto_pad == "VALID":  # its 3-d SAME pads fail in onnx's reference
        np.testing.assert_allclose(ReferenceEvaluator(model).run(None, {"x": x})[0], want,
                                   rtol=1e-5, atol=1e-5)
    _check(model, x, want)


def test_int8_max_pool_pads_with_the_type_minimum():
    shape = (1, 2, 7, 5)
    x = RNG.integers(-128, -1, size=shape).astype(np.int8)
    model = _model("MaxPool", shape, elem=TensorProto.INT8, kernel_shape=[2, 3],
                   strides=[2, 2], pads=[1, 1, 1, 1], dilations=[2, 1])
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    assert want.max() < 0
    _check(model, x, want)


def test_float16_average_pool():
    shape = (1, 1, 7, 5, 6)
    x = RNG.standard_normal(shape).astype(np.float16)
    model = _model("AveragePool", shape, elem=TensorProto.FLOAT16, kernel_shape=[2, 2, 2],
                   dilations=[3, 2, 1], pads=[1, 0, 1, 1, 1, 0], ceil_mode=1, strides=[2, 2, 3])
    want = _numpy_pool("AveragePool", x.astype(np.float32), [2, 2, 2], [2, 2, 3],
                       [1, 0, 1, 1, 1, 0], [3, 2, 1], 1)
    got = run(tc.from_onnx(model), {"x": x})
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize(("op", "shape", "attrs", "outputs", "message"), [
    ("MaxPool", (1, 1, 5, 5), {"kernel_shape": [2, 2], "storage_order": 2}, ("y", "i"),
     "storage_order 2"),
    ("MaxPool", (1, 1, 5), {"kernel_shape": [3], "dilations": [3]}, ("y",),
     "window 7 wide"),
    ("AveragePool", (1, 1, 2, 2, 2, 2), {"kernel_shape": [1, 1, 1, 1]}, ("y",),
     "1-d to 3-d pools"),
    ("LpPool", (1, 1, 5), {"kernel_shape": [2], "p": 9}, ("y",), "p = 9"),
])
def test_refusals_name_what_is_supported(op, shape, attrs, outputs, message):
    model = _model(op, shape, outputs=outputs, **attrs)
    with pytest.raises(TilecraftError, match=message):
        tc.from_onnx(model)


@pytest.mark.parametrize(("shape", "kernel", "strides", "pads", "dilations", "order"), [
    ((1, 2, 13), [3], [2], [1, 2], [2], 0),
    ((2, 3, 7, 5), [3, 2], [2, 3], [1, 0, 2, 1], [2, 1], 0),
    ((2, 3, 7, 5), [3, 2], [2, 3], [1, 0, 2, 1], [2, 1], 1),
    ((1, 2, 5, 6, 7), [2, 3, 2], [2, 2, 3], [0, 1, 1, 1, 0, 0], [1, 2, 2], 0),
    ((1, 2, 5, 6, 7), [2, 3, 2], [2, 2, 3], [0, 1, 1, 1, 0, 0], [1, 2, 2], 1),
])
def test_max_pool_indices_match_onnx_reference(shape, kernel, strides, pads, dilations, order):
    """MaxPool's second output: the flat index of each window's first maximum (row- or
    column-major); ties (values rounded to halves) keep the first tap in window order."""
    node = helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=kernel, strides=strides,
                            pads=pads, dilations=dilations, storage_order=order)
    graph = helper.make_graph(
        [node], "pool", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("i", TensorProto.INT64, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
    x = (np.round(RNG.standard_normal(shape) * 2) / 2).astype(np.float32)
    want_y, want_i = ReferenceEvaluator(model).run(None, {"x": x})
    graph = tc.from_onnx(model)
    runs = {"reference": run(graph, {"x": x})}
    if X86:
        runs["x86"] = tc.compile(graph, target="x86_avx512")(x=x)
    for how, (got_y, got_i) in runs.items():
        np.testing.assert_array_equal(got_y, want_y, err_msg=how)
        np.testing.assert_array_equal(got_i, want_i, err_msg=how)
