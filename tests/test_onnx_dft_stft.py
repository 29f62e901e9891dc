"""ONNX DFT (opsets 17 / 19 / 20) and STFT (opset 17) on awkward sizes: prime and unit
lengths, dft_length shorter and longer than the signal, real and complex input, each axis,
one-sided and inverse (irfft) transforms; each model imported, run by tilecraft's numpy
reference and compiled for x86, against onnx's reference evaluator and numpy.fft."""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import tilecraft as tc  # noqa: E402
from tilecraft.errors import TilecraftError  # noqa: E402
from tilecraft.onnx import ConstantRequired  # noqa: E402
from tilecraft.onnx.convert_spectral import dft_matrix  # noqa: E402
from tilecraft.reference import run  # noqa: E402
from tilecraft.target.registry import get_target  # noqa: E402

RNG = np.random.default_rng(23)
X86 = get_target("x86_avx512").available().execute
# float32 products over at most 16 samples of values ~1 (onnx's node tests: rtol 1e-3)
RTOL, ATOL = 1e-4, 2e-5


def _model(nodes, inputs, outputs, initializers=None, opset=20):
    graph = helper.make_graph(nodes, "g", inputs, outputs, [
        numpy_helper.from_array(v, k) for k, v in (initializers or {}).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _value(name, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def _check(model, feeds, want=None, compile_x86=True, rtol=RTOL, atol=ATOL):
    """tilecraft's reference and its x86 build against onnx's evaluator (and ``want``: numpy's
    own transform, where given)."""
    (evaluated,) = ReferenceEvaluator(model).run(None, feeds)
    if want is not None:
        np.testing.assert_allclose(evaluated, want, rtol=rtol, atol=atol)
    graph = tc.from_onnx(model)
    np.testing.assert_allclose(run(graph, feeds), evaluated, rtol=rtol, atol=atol)
    if compile_x86 and X86:
        built = tc.compile(graph, target="x86_avx512")(**feeds)
        np.testing.assert_allclose(built, evaluated, rtol=rtol, atol=atol)


def _complex(x):
    """[..., 1 or 2] as a complex array (the last dimension dropped)."""
    return x[..., 0] + 1j * x[..., 1] if x.shape[-1] == 2 else x[..., 0].astype(complex)


def _parts(z):
    return np.stack([z.real, z.imag], axis=-1).astype(np.float32)


def _dft_model(shape, axis, inverse=0, onesided=0, dft_length=None, opset=20):
    """One DFT node on ``x`` of ``shape``; the axis an attribute before opset 20, an input
    (initializer) from it; dft_length an initializer when given."""
    initializers = {}
    inputs = ["x", ""]
    attrs = {"inverse": inverse, "onesided": onesided}
    if dft_length is not None:
        inputs[1] = "dft_length"
        initializers["dft_length"] = np.array(dft_length, np.int64)
    if opset >= 20:
        inputs.append("axis")
        initializers["axis"] = np.array(axis, np.int64)
    else:
        attrs["axis"] = axis
    while inputs[-1] == "":
        inputs.pop()
    node = helper.make_node("DFT", inputs, ["y"], **attrs)
    return _model([node], [_value("x", shape)], [_value("y", None)], initializers, opset)


def _numpy_dft(x, axis, inverse, onesided, length):
    """numpy.fft's answer, with the output layout of ONNX's DFT."""
    rank = x.ndim
    signal = _complex(x)
    axis %= rank
    if inverse and onesided:
        return np.fft.irfft(signal, n=length, axis=axis)[..., None].astype(np.float32)
    if inverse:
        return _parts(np.fft.ifft(signal, n=length, axis=axis))
    spectrum = np.fft.fft(signal, n=length, axis=axis)
    if onesided:
        spectrum = np.take(spectrum, np.arange(length // 2 + 1), axis=axis)
    return _parts(spectrum)


# (shape, axis, inverse, onesided, dft_length)
DFT_CASES = [
    ((2, 7, 1), -2, 0, 0, None),          # real, prime length, ONNX 20's default axis
    ((3, 13, 2), 1, 0, 0, None),          # complex, prime
    ((4, 1, 2), 1, 0, 0, None),           # one sample
    ((2, 7, 1), 1, 0, 0, 5),              # truncated
    ((2, 7, 2), 1, 0, 0, 11),             # zero padded
    ((7, 3, 2), 0, 0, 0, None),           # the first axis, rows in between
    ((2, 5, 3, 1), 1, 0, 0, None),        # a middle axis
    ((3, 2, 13, 2), -2, 0, 0, None),      # negative axis
    ((2, 13, 1), 1, 0, 1, None),          # rfft, odd length
    ((2, 7, 1), 1, 0, 1, 10),             # rfft, zero padded to an even length
    ((3, 7, 2), 1, 0, 1, None),           # one-sided output of a complex signal
    ((2, 7, 2), 1, 1, 0, None),           # ifft, prime
    ((2, 7, 1), 1, 1, 0, 4),              # ifft of a real spectrum, truncated
    ((5, 3, 2), 0, 1, 0, 6),              # ifft along the first axis, zero padded
    ((2, 7, 2), 1, 1, 1, None),           # irfft: default length 2 * (7 - 1) = 12
    ((2, 7, 2), 1, 1, 1, 13),             # irfft, odd length
    ((2, 7, 2), 1, 1, 1, 5),              # irfft reading 3 of the 7 bins
    ((3, 4, 2), 0, 1, 1, 8),              # irfft along the first axis, padded bins
    ((2, 4, 1), 1, 1, 1, 6),              # irfft of a real spectrum
    ((3, 1, 2), 1, 1, 1, 1),              # irfft of one bin to one sample
]


@pytest.mark.parametrize("opset", [17, 19, 20])
@pytest.mark.parametrize("shape,axis,inverse,onesided,dft_length", DFT_CASES)
def test_dft(shape, axis, inverse, onesided, dft_length, opset):
    x = RNG.standard_normal(shape).astype(np.float32)
    rank = len(shape)
    n = shape[axis % rank]
    length = dft_length or (2 * (n - 1) if inverse and onesided else n)
    model = _dft_model(shape, axis, inverse, onesided, dft_length, opset)
    _check(model, {"x": x}, want=_numpy_dft(x, axis, inverse, onesided, length),
           compile_x86=opset != 19)


def test_dft_matrix_is_numpys_fft_of_the_identity():
    for samples, components, length, inverse, onesided in [
            (7, 2, 7, False, False), (7, 1, 11, False, True), (7, 2, 5, True, False),
            (7, 2, 12, True, True), (4, 2, 7, True, True)]:
        matrix = dft_matrix(samples, components, length, inverse, onesided)
        basis = np.eye(samples * components).reshape(-1, samples, components)
        want = np.stack([_numpy_dft(b, 0, inverse, onesided, length) for b in basis])
        scale = length if inverse else 1
        got = matrix.reshape(samples * components, *matrix.shape[2:]) / scale
        np.testing.assert_allclose(got, want, atol=1e-7)


@pytest.mark.parametrize("n,components", [(7, 2), (13, 1), (1, 2), (12, 2)])
def test_inverse_of_forward_is_identity(n, components):
    x = RNG.standard_normal((3, n, components)).astype(np.float32)
    nodes = [helper.make_node("DFT", ["x", "", "axis"], ["f"]),
             helper.make_node("DFT", ["f", "", "axis"], ["y"], inverse=1)]
    model = _model(nodes, [_value("x", x.shape)], [_value("y", None)],
                   {"axis": np.array(1, np.int64)})
    graph = tc.from_onnx(model)
    identity = x if components == 2 else np.concatenate([x, np.zeros_like(x)], axis=-1)
    np.testing.assert_allclose(run(graph, {"x": x}), identity, rtol=RTOL, atol=ATOL)
    if X86:
        built = tc.compile(graph, target="x86_avx512")(x=x)
        np.testing.assert_allclose(built, identity, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("n", [7, 10])
def test_irfft_of_rfft_is_identity(n):
    x = RNG.standard_normal((2, n, 1)).astype(np.float32)
    length = np.array(n, np.int64)
    nodes = [helper.make_node("DFT", ["x", "", "axis"], ["f"], onesided=1),
             helper.make_node("DFT", ["f", "n", "axis"], ["y"], onesided=1, inverse=1)]
    model = _model(nodes, [_value("x", x.shape)], [_value("y", None)],
                   {"axis": np.array(-2, np.int64), "n": length})
    graph = tc.from_onnx(model)
    np.testing.assert_allclose(run(graph, {"x": x}), x, rtol=RTOL, atol=ATOL)
    if X86:
        np.testing.assert_allclose(tc.compile(graph, target="x86_avx512")(x=x), x,
                                   rtol=RTOL, atol=ATOL)


def test_dft_float16_signal():
    x = RNG.standard_normal((2, 7, 2)).astype(np.float16)
    node = helper.make_node("DFT", ["x"], ["y"], axis=1)
    model = _model([node], [_value("x", x.shape, TensorProto.FLOAT16)],
                   [_value("y", None, TensorProto.FLOAT16)], opset=17)
    got = run(tc.from_onnx(model), {"x": x})
    assert got.dtype == np.float16
    want = _numpy_dft(x.astype(np.float32), 1, 0, 0, 7)
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=1e-2, atol=1e-2)


def _numpy_stft(x, step, window, length, onesided):
    signal = _complex(x)
    frames = 1 + (x.shape[1] - length) // step
    window = np.ones(length) if window is None else window
    out = np.stack([np.fft.fft(signal[:, f * step:f * step + length] * window, axis=1)
                    for f in range(frames)], axis=1)
    return _parts(out[:, :, :length // 2 + 1] if onesided else out)


# (shape, step, window: None / "constant" / "input", frame length, given as an input, onesided)
STFT_CASES = [
    ((1, 31, 1), 4, None, 8, True, 1),          # frame_length only; 6 frames, the tail unread
    ((2, 29, 1), 3, "constant", 7, False, 1),   # an initializer window, odd frame length
    ((2, 29, 1), 5, "input", 7, True, 1),       # a window computed at run time
    ((1, 23, 2), 2, "constant", 5, True, 0),    # complex signal, both sides
    ((3, 13, 1), 13, None, 13, False, 0),       # one frame: the whole signal
    ((1, 11, 2), 1, "input", 5, False, 1),      # step 1, complex, window at run time
]


@pytest.mark.parametrize("shape,step,window_kind,length,give_length,onesided", STFT_CASES)
def test_stft(shape, step, window_kind, length, give_length, onesided):
    x = RNG.standard_normal(shape).astype(np.float32)
    window = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(length) / length)).astype(np.float32)
    initializers = {"step": np.array(step, np.int64)}
    inputs = [_value("x", shape)]
    names = ["x", "step", "", ""]
    feeds = {"x": x}
    if window_kind == "constant":
        names[2] = "window"
        initializers["window"] = window
    elif window_kind == "input":
        names[2] = "window"
        inputs.append(_value("window", window.shape))
        feeds["window"] = window
    if give_length:
        names[3] = "frame_length"
        initializers["frame_length"] = np.array(length, np.int64)
    while names[-1] == "":
        names.pop()
    node = helper.make_node("STFT", names, ["y"], onesided=onesided)
    model = _model([node], inputs, [_value("y", None)], initializers, opset=17)
    want = _numpy_stft(x, step, window if window_kind else None, length, onesided)
    _check(model, feeds, want=want)


@pytest.mark.parametrize("node,shape,initializers,message", [
    (helper.make_node("DFT", ["x"], ["y"], axis=2), (2, 5, 2), {}, "axis=2"),
    (helper.make_node("DFT", ["x"], ["y"], axis=1), (2, 5, 3), {}, "last dimension is 3"),
    (helper.make_node("DFT", ["x"], ["y"], axis=1, inverse=1, onesided=1), (2, 1, 2), {},
     "DFT length is 0"),
    (helper.make_node("STFT", ["x", "step", "", "n"], ["y"]), (1, 5, 1),
     {"step": np.array(1, np.int64), "n": np.array(6, np.int64)}, "frame length .* is 6"),
    (helper.make_node("DFT", ["x"], ["y"], axis=1), (1, 8192, 2), {}, "matrix"),
], ids=["components-axis", "three-components", "irfft-of-one-bin", "frame-too-long",
        "too-long-for-a-matrix"])
def test_unsupported_values_are_refused(node, shape, initializers, message):
    model = _model([node], [_value("x", shape)], [_value("y", None)], initializers, opset=17)
    with pytest.raises(TilecraftError, match=message):
        tc.from_onnx(model)


def test_dft_length_computed_at_run_time_is_refused():
    node = helper.make_node("DFT", ["x", "n", "axis"], ["y"])
    model = _model([node], [_value("x", (2, 5, 1)), _value("n", (1,), TensorProto.INT64)],
                   [_value("y", None)], {"axis": np.array(1, np.int64)})
    with pytest.raises(TilecraftError, match="dft_length"):
        tc.from_onnx(model)
    assert issubclass(ConstantRequired, TilecraftError)
