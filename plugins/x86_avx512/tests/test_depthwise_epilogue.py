"""The elementwise consumer of a depthwise convolution computed by its kernel before the store
(blocking/depthwise_epilogue.py), against the reference: ReLU6, a clip, bias + ReLU, a
per-channel scale then bias (a chain of two computes), a hard-swish reading the sum twice;
strides 1 and 2, prime channels and planes, 1x1 planes, widths past and short of 16 lanes,
batch 2, with and without a pad read inline (plane, ring, input read as a tensor). The fused
consumer has no kernel of its own; a consumer reading a neighbouring element, or a
convolution that is also a graph output or read twice, stays apart and still matches."""

from __future__ import annotations

import numpy as np
import pytest
from tilecraft_x86_avx512.blocking.depthwise import (
    as_depthwise,
    as_pad,
    fuse_depthwise_pads,
    lower_depthwise,
)
from tilecraft_x86_avx512.blocking.depthwise_epilogue import depthwise_epilogue
from tilecraft_x86_avx512.target import X86Avx512Target

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.graph import Graph
from tilecraft.lower.options import LoweringOptions
from tilecraft.reference import run as reference

RNG = np.random.default_rng(11)


def _inputs(graph: Graph) -> dict[str, np.ndarray]:
    # scaled so that ReLU6 and the clips cut on both sides
    return {t.name: (3 * RNG.standard_normal(t.shape)).astype(np.float32)
            for t in graph.inputs}


def _close(got: np.ndarray, want: np.ndarray) -> None:
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * scale)


def _conv(x: te.Tensor, name: str, stride: int, padding: int) -> te.Tensor:
    w = te.placeholder((x.shape[1], 1, 3, 3), name=f"{name}_w")
    return ops.depthwise_conv2d(x, w, stride=stride, padding=padding, name=name)


def _relu6(y: te.Tensor, name: str) -> te.Tensor:
    return te.compute(y.shape, lambda n, k, h, w: te.min(te.max(y[n, k, h, w], 0.0), 6.0),
                      name=name)


def _clip(y: te.Tensor, name: str) -> te.Tensor:
    return te.compute(y.shape, lambda n, k, h, w: te.min(te.max(y[n, k, h, w], -0.5), 0.75),
                      name=name)


def _bias_relu(y: te.Tensor, name: str) -> te.Tensor:
    bias = te.placeholder((y.shape[1],), name=f"{name}_bias")
    return te.compute(y.shape, lambda n, k, h, w: te.max(y[n, k, h, w] + bias[k], 0.0),
                      name=name)


def _scale_then_bias(y: te.Tensor, name: str) -> te.Tensor:
    scale = te.placeholder((y.shape[1],), name=f"{name}_scale")
    bias = te.placeholder((y.shape[1],), name=f"{name}_bias")
    scaled = te.compute(y.shape, lambda n, k, h, w: y[n, k, h, w] * scale[k],
                        name=f"{name}_scaled")
    return te.compute(y.shape, lambda n, k, h, w: te.min(scaled[n, k, h, w] + bias[k], 6.0),
                      name=name)


def _hard_swish(y: te.Tensor, name: str) -> te.Tensor:
    return te.compute(y.shape, lambda n, k, h, w: y[n, k, h, w] * te.min(
        te.max(y[n, k, h, w] + 3.0, 0.0), 6.0) / 6.0, name=name)


EPILOGUES = {"relu6": _relu6, "clip": _clip, "bias_relu": _bias_relu,
             "scale_bias": _scale_then_bias, "hard_swish": _hard_swish}

SHAPES = [  # x shape (N, C, H, W), padding
    ((1, 7, 13, 11), 1),      # prime channels and plane
    ((1, 3, 1, 1), 1),        # 1x1 plane
    ((2, 5, 9, 37), 1),       # batch 2, width past 16 lanes with a ragged tail
    ((1, 13, 17, 19), 0),     # no pad: the input read as a tensor
    ((1, 2, 70, 69), 1),      # a plane too large for the local copy: ring of rows
]


@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("x_shape, padding", SHAPES)
def test_fused_epilogues_match_reference(native, x_shape, padding, stride):
    # one branch per epilogue, each with a convolution of its own
    x = te.placeholder(x_shape, name="x")
    outs = [make(_conv(x, f"{label}_conv", stride, padding), label)
            for label, make in EPILOGUES.items()]
    graph = Graph.from_outputs(outs)
    inputs = _inputs(graph)
    exe = tc.compile(graph, target=X86Avx512Target(threads=2))
    # one kernel per branch, named after the epilogue: no convolution, pad or consumer apart
    kernels = {k.name: k.schedule for k in exe.report.kernels}
    assert sorted(kernels) == sorted(EPILOGUES)
    label_stride = stride if min(outs[0].shape[2:]) > 1 else 1  # one output: no stride
    for label, schedule in kernels.items():
        assert schedule.startswith(f"depthwise 3x3/{label_stride}:")
        assert schedule.endswith(" before the store") and f"epilogue {label}" in schedule
        assert ("read inline" in schedule) == bool(padding)
    for got, want in zip(exe(**inputs), reference(graph, inputs)):
        _close(got, want)


@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("mode", [None, "plane", "ring"])
def test_kernel_modes_in_bounds(target, mode, stride):
    # the Kernel IR interpreter checks every access, the epilogue's operands included
    x = te.placeholder((1, 3, 11, 17), name="x")
    e = _scale_then_bias(_conv(x, "y", stride, 1), "e")
    graph = Graph.from_outputs([e])
    inputs = _inputs(graph)
    y = graph.tensor("y")
    conv = as_depthwise(y)
    epilogue = depthwise_epilogue(y, graph, set(), [])
    assert epilogue is not None and [t.name for t in epilogue.chain] == ["e_scaled", "e"]
    pad = as_pad(conv.source.tensor) if mode else None
    plane_bytes = {"plane": 1 << 30, "ring": 0}.get(mode or "", 0)
    kernel = lower_depthwise(conv, LoweringOptions.from_spec(target.spec), pad,
                             plane_bytes=plane_bytes, epilogue=epilogue)
    assert kernel.name == "e" and [p.name for p in kernel.params][-1] == "e"
    arrays = {**inputs, "e": np.zeros(e.shape, np.float32)}
    if mode is None:  # the kernel reads the padded input
        padded = Graph.from_outputs([conv.source.tensor])
        arrays[padded.outputs[0].name] = reference(padded, {"x": inputs["x"]})
        del arrays["x"]
    target.emulate(kernel, arrays)
    _close(arrays["e"], reference(graph, inputs))


def _kernels_and_check(graph: Graph) -> list[str]:
    inputs = _inputs(graph)
    exe = tc.compile(graph, target=X86Avx512Target(threads=2))
    got = exe(**inputs)
    want = reference(graph, inputs)
    for g, w in zip(got if len(graph.outputs) > 1 else [got],
                    want if len(graph.outputs) > 1 else [want]):
        _close(g, w)
    return [k.name for k in exe.report.kernels]


def test_neighbour_read_stays_apart(native):
    # e reads y mirrored along the width: the kernel's vector does not hold that element
    y = _conv(te.placeholder((1, 5, 11, 23), name="x"), "y", 1, 1)
    width = y.shape[3]
    e = te.compute(y.shape, lambda n, k, h, w: te.max(y[n, k, h, w] - y[n, k, h, width - 1 - w],
                                                      0.0), name="e")
    graph = Graph.from_outputs([e])
    notes: list[str] = []
    assert depthwise_epilogue(y, graph, set(), notes) is None
    assert notes == ["epilogue e of y not fused: e reads y at another index than its own (the "
                     "kernel's vector holds no neighbouring elements)"]
    assert _kernels_and_check(graph) == ["y", "e"]


def test_convolution_read_elsewhere_stays_apart(native):
    x = te.placeholder((1, 7, 9, 18), name="x")
    # the convolution is a graph output too
    y = _conv(x, "y", 2, 1)
    e = _relu6(y, "e")
    graph = Graph.from_outputs([y, e])
    notes: list[str] = []
    assert depthwise_epilogue(y, graph, set(), notes) is None and "graph output" in notes[0]
    assert _kernels_and_check(graph) == ["y", "e"]
    # the convolution has two readers
    z = _conv(x, "z", 1, 1)
    graph = Graph.from_outputs([_relu6(z, "a"), _clip(z, "b")])
    notes = []
    assert depthwise_epilogue(z, graph, set(), notes) is None
    assert notes == ["epilogue of z not fused: z is read by a, b"]
    assert sorted(_kernels_and_check(graph)) == ["a", "b", "z"]


def test_chain_stops_at_an_intermediate_read_elsewhere(native):
    # y -> s (scale) -> e: s is a graph output, so the kernel stores s and e runs apart
    y = _conv(te.placeholder((1, 3, 5, 7), name="x"), "y", 1, 1)
    scale = te.placeholder((3,), name="scale")
    s = te.compute(y.shape, lambda n, k, h, w: y[n, k, h, w] * scale[k], name="s")
    e = _relu6(s, "e")
    graph = Graph.from_outputs([s, e])
    epilogue = depthwise_epilogue(y, graph, set(), [])
    assert epilogue is not None and epilogue.tensor is s
    groups = fuse_depthwise_pads(graph, LoweringOptions(vector_lanes=16), set())
    assert [g.computes for g in groups] == [("y_pad", "y", "s")]
    assert _kernels_and_check(graph) == ["s", "e"]


def test_taken_consumer_is_left_alone():
    y = _conv(te.placeholder((1, 3, 5, 7), name="x"), "y", 1, 0)
    graph = Graph.from_outputs([_relu6(y, "e")])
    notes: list[str] = []
    assert depthwise_epilogue(y, graph, {"e"}, notes) is None
    assert notes == ["epilogue e of y not fused: e is fused elsewhere"]
    # no pad and no epilogue: nothing fused, the note kept for the report
    groups = fuse_depthwise_pads(graph, LoweringOptions(vector_lanes=16), {"e"})
    assert [(g.computes, g.kernels, g.notes) for g in groups] == [((), (), tuple(notes))]
