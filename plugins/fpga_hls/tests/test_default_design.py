"""Untuned contractions take the design the model picks (a PE array sized on the device), the
report says its predicted time and resources, and the generated C++ C-simulates correctly."""

from __future__ import annotations

import numpy as np
import pytest
from tilecraft_fpga_hls.availability import csim_status
from tilecraft_fpga_hls.device import VU9P, ZU7EV
from tilecraft_fpga_hls.published.fpga15 import ALEXNET, design_config, layer_compute
from tilecraft_fpga_hls.published.fpga15 import project_estimate as paper_design
from tilecraft_fpga_hls.target import FpgaHlsTarget
from tilecraft_fpga_hls.template import model_default_design

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.reference import evaluate

needs_csim = pytest.mark.skipif(not csim_status()[0], reason=csim_status()[1])


@needs_csim
@pytest.mark.parametrize("shape", [(13, 17, 11), (1, 1, 1), (2, 31, 5)])
def test_compile_without_tuning_builds_the_models_pe_array(shape: tuple[int, int, int]) -> None:
    m, k, n = shape
    a_t, b_t = te.placeholder((m, k), name="A"), te.placeholder((k, n), name="B")
    c = ops.matmul(a_t, b_t)
    exe = tc.compile(c, target="fpga_hls")
    (kernel,) = exe.kernels
    report = str(exe.report)
    if max(shape[0], shape[2]) > 1:  # the template needs a spatial axis above one
        assert kernel.attrs["strategy"] == "fpga_hls.contraction"
        assert "chosen by the model" in report and "predicted" in report
        assert "DSP" in report and "BRAM18K" in report
        estimate = FpgaHlsTarget().estimate(kernel)
        assert kernel.attrs["predicted_seconds"] == pytest.approx(estimate.seconds)
    rng = np.random.default_rng(m)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    np.testing.assert_allclose(exe(a, b), a @ b, rtol=1e-4, atol=1e-4)


@needs_csim
def test_default_strided_conv_simulates_and_beats_a_one_pe_design() -> None:
    x = te.placeholder((1, 5, 11, 11), name="X")
    w = te.placeholder((7, 5, 3, 3), name="W")
    y = ops.conv2d(x, w, stride=2)
    exe = tc.compile(y, target="fpga_hls")
    rng = np.random.default_rng(1)
    xs = rng.standard_normal(x.shape).astype(np.float32)
    ws = rng.standard_normal(w.shape).astype(np.float32)
    np.testing.assert_allclose(exe(xs, ws), evaluate(y, {x: xs, w: ws}), rtol=1e-4, atol=1e-4)
    (kernel,) = exe.kernels
    one_pe = FpgaHlsTarget().estimate(FpgaHlsTarget().lower_compute(
        y, None, {"pe_out": "k", "tm": 1, "pe_in": "rc", "tn": 1})[0])  # type: ignore[arg-type]
    assert kernel.attrs["predicted_seconds"] < one_pe.seconds / 10


def test_the_model_picks_a_feasible_design_at_least_as_fast_as_fpga15_on_the_device() -> None:
    for layer in ALEXNET[2:4]:
        choice = model_default_design(layer_compute(layer), VU9P)
        assert choice is not None and choice.estimate.feasible
        assert choice.estimate.usage.dsp <= VU9P.dsp_slices
        paper = paper_design(layer, VU9P, design_config(layer))
        assert choice.estimate.seconds < paper.seconds
    # on the small part the same layer gets a smaller, still feasible array
    small = model_default_design(layer_compute(ALEXNET[2]), ZU7EV)
    assert small is not None and small.estimate.usage.dsp <= ZU7EV.dsp_slices


def test_untuned_designs_can_still_take_the_dataflow_lowering() -> None:
    a_t, b_t = te.placeholder((4, 6), name="A"), te.placeholder((6, 5), name="B")
    exe = tc.compile(ops.matmul(a_t, b_t), target=FpgaHlsTarget(model_default=False))
    (kernel,) = exe.kernels
    assert kernel.attrs.get("strategy") != "fpga_hls.contraction"
