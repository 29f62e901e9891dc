"""FPGA'15 (Zhang et al.): its roofline model gives its reported design point, and the
project's model, given the same device (VC707 at 100 MHz) and the same tiling
(<Tm, Tn> = <64, 7>), reproduces that design's compute cycles and DSP use."""

from __future__ import annotations

import math

import pytest
from tilecraft_fpga_hls.model import estimate_design
from tilecraft_fpga_hls.published.fpga15 import (
    ALEXNET,
    DESIGN_TM,
    DESIGN_TN,
    REPORTED_GFLOPS,
    VC707,
    ConvLayer,
    total_gflops,
)
from tilecraft_fpga_hls.template import as_contraction, lower_contraction

from tilecraft import ops, te


def test_the_roofline_model_is_within_eight_percent_of_the_reported_performance() -> None:
    roof = total_gflops(ALEXNET, DESIGN_TM, DESIGN_TN, VC707.clock_hz)
    # the model's roof is an upper bound; the measured design reaches 92.8% of it
    assert REPORTED_GFLOPS < roof < REPORTED_GFLOPS * 1.08
    assert sum(layer.operations for layer in ALEXNET) == 1_331_569_728
    layer = ALEXNET[2]
    assert layer.computational_roof(DESIGN_TM, DESIGN_TN) == pytest.approx(
        2 * 13 * 13 * 192 * 256 * 9 / (3 * 37 * 13 * 13 * 9))


def _design(layer: ConvLayer):
    height = layer.s * (layer.r - 1) + layer.k
    x = te.placeholder((1, layer.n, height, height), name="X")
    w = te.placeholder((layer.m, layer.n, layer.k, layer.k), name="W")
    y = ops.conv2d(x, w, stride=layer.s)
    config = {"pe_out": "k", "tm": DESIGN_TM, "pe_in": "rc", "tn": DESIGN_TN,
              "tiles": {"h": layer.r, "w": layer.c}}
    return estimate_design(lower_contraction(as_contraction(y), config), VC707)


@pytest.mark.parametrize("layer", ALEXNET, ids=lambda layer: layer.name)
def test_the_project_model_reproduces_the_design_per_layer(layer: ConvLayer) -> None:
    design = _design(layer)
    assert design.usage.dsp == 64 * 7 * 5  # the paper's 448 MACs of 5 DSP slices: 2240
    compute = next(stage for stage in design.stages if stage.name == "compute")
    invocations = math.ceil(layer.m / DESIGN_TM) * math.ceil(layer.n / DESIGN_TN) * layer.groups
    # compute cycles within 2% of the paper's (the model adds each tile's pipeline fill)
    assert compute.cycles * invocations == pytest.approx(layer.cycles(DESIGN_TM, DESIGN_TN),
                                                         rel=0.02)
    assert design.feasible
