"""Depthwise convolutions on their own x86 kernel (blocking/depthwise.py), against the
reference: windows 3x3 / 5x5 / 7x7 / 3x5, strides 1-3, padding 0-3, dilation, odd and prime
planes down to 1x1, channels 1-17, batch 1-2; the pad read inline (whole plane or ring of
rows) or as a tensor, a non-zero pad value, conv2d with groups == channels; the compiled
graph has one kernel per depthwise convolution, none for its pad."""

from __future__ import annotations

import numpy as np
import pytest
from tilecraft_x86_avx512.blocking.depthwise import (
    as_depthwise,
    as_pad,
    fuse_depthwise_pads,
    lower_depthwise,
)
from tilecraft_x86_avx512.target import X86Avx512Target

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.graph import Graph
from tilecraft.lower.options import LoweringOptions
from tilecraft.reference import run as reference

RNG = np.random.default_rng(5)


def _inputs(graph: Graph) -> dict[str, np.ndarray]:
    return {t.name: RNG.standard_normal(t.shape).astype(np.float32) for t in graph.inputs}


def _evaluate(tensor: te.Tensor, inputs: dict[str, np.ndarray]) -> np.ndarray:
    """``tensor`` by the reference, from those of ``inputs`` it reads."""
    graph = Graph.from_outputs([tensor])
    return reference(graph, {t.name: inputs[t.name] for t in graph.inputs})


def _close(got: np.ndarray, want: np.ndarray) -> None:
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * scale)


def _relu6_dw(x_shape, kernel, stride, padding, dilation=1):
    """relu6(x + bias) -> depthwise conv: the pad reads the activation (inlined into it by the
    graph passes, as in MobileNet)."""
    channels = x_shape[1]
    x = te.placeholder(x_shape, name="x")
    bias = te.placeholder((channels,), name="bias")
    act = te.compute(x_shape, lambda n, c, h, w: te.min(te.max(x[n, c, h, w] + bias[c], 0.0),
                                                       6.0), name="act")
    w = te.placeholder((channels, 1, *kernel), name="w")
    return ops.depthwise_conv2d(act, w, stride=stride, padding=padding, dilation=dilation,
                                name="y")


CASES = [  # x shape (N, C, H, W), kernel, stride, padding
    ((1, 3, 7, 7), (3, 3), 1, 1),
    ((1, 3, 7, 7), (3, 3), 2, 1),
    ((2, 17, 13, 11), (3, 3), 1, 0),
    ((2, 17, 13, 11), (3, 3), 2, 2),
    ((1, 1, 13, 11), (5, 5), 1, 2),
    ((1, 17, 13, 11), (5, 5), 2, 2),
    ((2, 3, 7, 7), (5, 5), 2, 1),
    ((1, 3, 1, 1), (3, 3), 1, 1),
    ((2, 3, 1, 1), (3, 3), 2, 2),
    ((1, 1, 7, 7), (5, 5), 1, 0),
    ((1, 3, 40, 37), (3, 3), 1, 1),    # past the vector width, ragged tail
    ((1, 2, 70, 69), (3, 3), 2, 1),    # a plane too large for the local copy: ring of rows
    ((1, 2, 66, 67), (5, 5), 1, 2),
]


@pytest.mark.parametrize("x_shape, kernel, stride, padding", CASES)
def test_depthwise_conv_matches_reference(native, x_shape, kernel, stride, padding):
    y = _relu6_dw(x_shape, kernel, stride, padding)
    graph = Graph.from_outputs([y])
    inputs = _inputs(graph)
    exe = tc.compile(graph, target=X86Avx512Target(threads=2))
    kernels = exe.report.kernels
    # no pad kernel; without padding the activation stays a kernel (a convolution takes no
    # elementwise producer inline)
    assert [k.name for k in kernels] == (["y"] if padding else ["act", "y"])
    assert kernels[-1].schedule.startswith(f"depthwise {kernel[0]}x{kernel[1]}/{stride}")
    if padding:
        assert "read inline" in kernels[-1].schedule
    _close(exe(**inputs), reference(graph, inputs))


def _lowered(y, pad_mode: str | None, threads_options: LoweringOptions, threads: int = 1):
    conv = as_depthwise(y)
    assert conv is not None
    pad = as_pad(conv.source.tensor) if pad_mode else None
    plane_bytes = {"plane": 1 << 30, "ring": 0}.get(pad_mode or "", 0)
    return lower_depthwise(conv, threads_options, pad, plane_bytes=plane_bytes, threads=threads)


KERNEL_CASES = [  # x shape, kernel, stride, padding, dilation
    ((2, 5, 13, 11), (3, 3), 1, 2, 2),
    ((1, 3, 13, 11), (3, 5), (2, 1), (1, 2), 1),
    ((1, 2, 20, 21), (3, 3), 3, 1, 1),
    ((1, 2, 6, 6), (5, 5), 1, 2, 2),
    ((2, 3, 30, 9), (7, 7), 2, 3, 1),
    ((1, 4, 10, 12), (1, 1), 2, 0, 1),
    ((1, 3, 17, 33), (3, 3), 2, 1, 1),
]


@pytest.mark.parametrize("x_shape, kernel, stride, padding, dilation", KERNEL_CASES)
@pytest.mark.parametrize("pad_mode", [None, "plane", "ring"])
def test_depthwise_kernel_modes(run, target, x_shape, kernel, stride, padding, dilation,
                                pad_mode):
    # the input read as a tensor (the pad materialised), or the pad read inline into a copy
    # of the whole plane or into a ring of rows
    y, arrays, want = _kernel_case(x_shape, kernel, stride, padding, dilation, pad_mode)
    kernel_ir = _lowered(y, pad_mode, LoweringOptions.from_spec(target.spec))
    _close(run(kernel_ir, arrays)["y"], want)


def _kernel_case(x_shape, kernel, stride, padding, dilation, pad_mode: str | None):
    """``y``, the arrays its kernel reads in ``pad_mode`` (the padded input computed by the
    reference where the kernel reads it as a tensor, else the activation) and ``y`` zeroed,
    and the reference's ``y``; skips a pad mode without padding."""
    y = _relu6_dw(x_shape, kernel, stride, padding, dilation)
    if pad_mode and as_pad(as_depthwise(y).source.tensor) is None:
        pytest.skip("no padding")
    graph = Graph.from_outputs([y])
    inputs = _inputs(graph)
    arrays = {**inputs, "y": np.zeros(y.shape, np.float32)}
    source = as_depthwise(y).source.tensor
    if pad_mode is None:
        arrays[source.name] = _evaluate(source, inputs)
    else:
        arrays["act"] = _evaluate(source.inputs[0], inputs)
    return y, arrays, reference(graph, inputs)


@pytest.mark.parametrize("block", [1, 2, 3])
@pytest.mark.parametrize("x_shape, kernel, stride, padding, dilation", [
    ((1, 2, 13, 11), (5, 5), 2, 2, 1),
    ((1, 2, 20, 21), (3, 3), 3, 1, 1),
    ((1, 1, 9, 8), (3, 3), 1, 1, 1),
    ((1, 1, 12, 7), (3, 3), 2, 1, 2),
])
def test_row_blocks_stay_in_bounds(target, monkeypatch, block, x_shape, kernel, stride, padding,
                                   dilation):
    # the Kernel IR interpreter checks every access: ring slots, short last blocks
    import tilecraft_x86_avx512.blocking.depthwise as depthwise

    monkeypatch.setattr(depthwise, "ROW_BLOCK", block)
    x = te.placeholder(x_shape, name="x")
    y = ops.depthwise_conv2d(x, te.placeholder((x_shape[1], 1, *kernel), name="w"),
                             stride=stride, padding=padding, dilation=dilation, name="y")
    graph = Graph.from_outputs([y])
    inputs = _inputs(graph)
    want = reference(graph, inputs)
    for mode in ("plane", "ring", None):
        kernel_ir = _lowered(y, mode, LoweringOptions.from_spec(target.spec))
        arrays = {**inputs, "y": np.zeros(y.shape, np.float32)}
        if mode is None:
            arrays["y_pad"] = _evaluate(as_depthwise(y).source.tensor, inputs)
            del arrays["x"]
        target.emulate(kernel_ir, arrays)
        _close(arrays["y"], want)


@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize("x_shape, kernel, stride, padding, dilation", KERNEL_CASES)
@pytest.mark.parametrize("pad_mode", [None, "ring"])
def test_row_bands_match_reference(native, target, monkeypatch, threads, x_shape, kernel, stride,
                                   padding, dilation, pad_mode):
    """Bands of output rows in the parallel loop (every channel of a band on one thread, the
    ring primed at the band's first row, the last band shorter), run natively at 1 and 2
    threads and emulated (every access checked)."""
    import tilecraft_x86_avx512.blocking.depthwise as depthwise

    monkeypatch.setattr(depthwise, "MIN_BAND_ROWS", 1)
    y, arrays, want = _kernel_case(x_shape, kernel, stride, padding, dilation, pad_mode)
    kernel_ir = _lowered(y, pad_mode, LoweringOptions.from_spec(target.spec), threads)
    rows, bands = depthwise.row_chunks(y.shape[2], threads)
    if bands > 1:
        assert f"parallel({bands} bands of {rows} rows)" in kernel_ir.attrs["schedule"]
    else:  # one block of rows (2 output rows): the channels
        assert y.shape[2] <= depthwise.ROW_BLOCK and "channels) > rows" in kernel_ir.attrs[
            "schedule"]
    arrays = {p.name: arrays[p.name] for p in kernel_ir.params}
    function = native.compile_kernel(kernel_ir)
    saved = function.threads
    try:
        for count in (1, 2):
            function.threads = count
            got = dict(arrays, y=np.full(y.shape, np.nan, np.float32))
            function(got)
            _close(got["y"], want)
    finally:
        function.threads = saved
    emulated = dict(arrays, y=np.full(y.shape, np.nan, np.float32))
    target.emulate(kernel_ir, emulated)
    _close(emulated["y"], want)


def test_row_chunks_rule(monkeypatch):
    import tilecraft_x86_avx512.blocking.depthwise as depthwise

    assert depthwise.row_chunks(112, 1) == (112, 1)
    assert depthwise.row_chunks(112, 2) == (56, 2)
    assert depthwise.row_chunks(57, 2) == (30, 2)  # whole row blocks, the last band short
    assert depthwise.row_chunks(7, 2) == (7, 1)   # too few rows: channels
    rows, bands = depthwise.row_chunks(113, 3)
    assert rows % depthwise.ROW_BLOCK == 0 and rows * (bands - 1) < 113 <= rows * bands


def test_nonzero_pad_value_and_dilation(native):
    x = te.placeholder((2, 3, 9, 10), name="x")
    padded = ops.pad(x, [(0, 0), (0, 0), (2, 1), (1, 3)], value=1.5, name="x_pad")
    y = ops.depthwise_conv2d(padded, te.placeholder((3, 1, 3, 3), name="w"), stride=2,
                             dilation=2, name="y")
    assert as_pad(padded).fill.value == 1.5
    graph = Graph.from_outputs([y])
    inputs = _inputs(graph)
    exe = tc.compile(graph, target=X86Avx512Target(threads=2))
    assert [k.name for k in exe.report.kernels] == ["y"]
    _close(exe(**inputs), reference(graph, inputs))


def test_grouped_conv_forms(native):
    # conv2d with groups == channels is depthwise; with two filters per channel it is a
    # grouped convolution the template runs
    x = te.placeholder((2, 5, 11, 11), name="x")
    y = ops.conv2d(x, te.placeholder((5, 1, 3, 3), name="w"), groups=5, padding=1, name="y")
    assert as_depthwise(y) is not None
    graph = Graph.from_outputs([y])
    inputs = _inputs(graph)
    exe = tc.compile(graph, target=X86Avx512Target(threads=2))
    assert [k.schedule.split(":")[0] for k in exe.report.kernels] == ["depthwise 3x3/1"]
    _close(exe(**inputs), reference(graph, inputs))
    doubled = ops.conv2d(x, te.placeholder((10, 1, 3, 3), name="w"), groups=5, name="y")
    assert as_depthwise(doubled) is None


def test_pad_read_by_another_compute_stays_a_tensor(native):
    # the pad has a second reader: it keeps its kernel, the convolution reads it as a tensor
    y = _relu6_dw((1, 3, 12, 12), (3, 3), 1, 1)
    pad = as_depthwise(y).source.tensor
    other = te.compute(pad.shape, lambda n, c, h, w: pad[n, c, h, w] * 2.0, name="other")
    graph = Graph.from_outputs([y, other])
    assert fuse_depthwise_pads(graph, LoweringOptions(vector_lanes=16), set()) == []
    inputs = _inputs(graph)
    exe = tc.compile(graph, target=X86Avx512Target(threads=2))
    schedules = {k.name: k.schedule for k in exe.report.kernels}
    assert schedules["y"].startswith("depthwise") and "inline" not in schedules["y"]
    for got, want in zip(exe(**inputs), reference(graph, inputs)):
        _close(got, want)


def test_recognition():
    x = te.placeholder((1, 4, 8, 8), name="x")
    w = te.placeholder((4, 1, 3, 3), name="w")
    assert as_depthwise(ops.conv2d(x, te.placeholder((6, 4, 3, 3), name="w6"))) is None
    assert as_depthwise(ops.matmul(te.placeholder((4, 4), name="a"),
                                   te.placeholder((4, 4), name="b"))) is None
    conv = as_depthwise(ops.depthwise_conv2d(x, w, stride=(2, 1), padding=1, name="y"))
    assert (conv.rows.stride, conv.cols.stride, conv.label) == (2, 1, "3x3/(2,1)")
    # a pad of the channel axis is no pad of the plane
    assert as_pad(ops.pad(x, [(0, 0), (1, 0), (1, 1), (1, 1)])) is None
    assert as_pad(ops.relu(x)) is None


def test_config_keeps_the_template_path():
    # a forced template configuration still runs the micro-kernel template
    from tilecraft_x86_avx512.conv_variants import lower_conv_variant

    y = ops.depthwise_conv2d(te.placeholder((1, 5, 17, 17), name="x"),
                             te.placeholder((5, 1, 3, 3), name="w"), name="y")
    options = LoweringOptions(vector_lanes=16)
    plain = lower_conv_variant(y, options, 49152, 1 << 21, 1)
    assert plain is not None and plain[0].attrs["schedule"].startswith("depthwise")
    forced = lower_conv_variant(y, options, 49152, 1 << 21, 1, {"PACK_A": 1})
    assert forced is not None and "micro-kernel" in forced[-1].attrs["schedule"]
