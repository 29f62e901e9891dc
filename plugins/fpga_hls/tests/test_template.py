"""The contraction template and its search on the model: kernels for awkward shapes match the
reference by C-simulation, the tuner searches the space in estimate mode and records estimated
costs (infeasible designs as failures naming the resource), and the best design it found
compiles and C-simulates correctly."""

from __future__ import annotations

import numpy as np
import pytest
from tilecraft_fpga_hls.availability import csim_status
from tilecraft_fpga_hls.device import VU9P, ZU7EV
from tilecraft_fpga_hls.model import estimate_design
from tilecraft_fpga_hls.target import FpgaHlsTarget
from tilecraft_fpga_hls.template import as_contraction, lower_contraction

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.errors import LoweringError
from tilecraft.reference import evaluate
from tilecraft.tuning import TuningDatabase
from tilecraft.tuning.tuner import tune

needs_csim = pytest.mark.skipif(not csim_status()[0], reason=csim_status()[1])


def _conv(n: int, c: int, hw: int, k: int, kernel: int, stride: int = 1,
          padding: int = 0) -> tuple[te.Tensor, te.Tensor, te.Tensor]:
    x = te.placeholder((n, c, hw, hw), name="X")
    w = te.placeholder((k, c, kernel, kernel), name="W")
    return x, w, ops.conv2d(x, w, stride=stride, padding=padding)


def _run(target: FpgaHlsTarget, kernel, inputs: dict[str, np.ndarray], out_name: str,
         shape: tuple[int, ...]) -> np.ndarray:
    out = np.zeros(shape, np.float32)
    run = target.emulator(kernel, target.codegen(kernel))
    run({**inputs, out_name: out})
    return out


@needs_csim
@pytest.mark.parametrize(("shape", "config"), [
    ((13, 17, 11), {"pe_out": "i", "tm": 4, "pe_in": "k", "tn": 3, "tiles": {"j": 5}}),
    ((1, 1, 1), {"pe_out": "j", "tm": 2, "pe_in": "k", "tn": 2}),
    ((7, 5, 3), {"pe_out": "j", "tm": 5, "pe_in": None, "tn": 1, "tiles": {"i": 7},
                 "banks": 2}),
])
def test_gemm_template_kernels_match_numpy_by_csim(shape: tuple[int, int, int],
                                                   config: dict) -> None:
    m, k, n = shape
    a_t, b_t = te.placeholder((m, k), name="A"), te.placeholder((k, n), name="B")
    c = ops.matmul(a_t, b_t)
    kernel = lower_contraction(as_contraction(c), config)
    rng = np.random.default_rng(m)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    got = _run(FpgaHlsTarget(), kernel, {"A": a, "B": b}, c.name, (m, n))
    np.testing.assert_allclose(got, a @ b, rtol=1e-5, atol=1e-5)


@needs_csim
@pytest.mark.parametrize("lanes", [2, 3, 16])
def test_wide_reads_and_writes_match_the_reference_on_ragged_rows(lanes: int) -> None:
    # rows of 11 (input), 3 (weights) and 5 (output): beats of `lanes` with a ragged last one
    x, w, y = _conv(1, 5, 11, 7, 3, stride=2)
    config = {"pe_out": "k", "tm": 4, "pe_in": "rc", "tn": 3, "tiles": {"h": 2},
              "lanes": lanes}
    kernel = lower_contraction(as_contraction(y), config)
    text = FpgaHlsTarget().codegen(kernel).text
    assert "UNROLL" in text and "max_widen_bitwidth=512" in text
    rng = np.random.default_rng(lanes)
    xs = rng.standard_normal(x.shape).astype(np.float32)
    ws = rng.standard_normal(w.shape).astype(np.float32)
    got = _run(FpgaHlsTarget(), kernel, {"X": xs, "W": ws}, y.name, y.shape)
    np.testing.assert_allclose(got, evaluate(y, {x: xs, w: ws}), rtol=1e-4, atol=1e-4)


def test_consecutive_lanes_share_axi_beats_and_bram_banks() -> None:
    a_t, b_t = te.placeholder((8, 64), name="A"), te.placeholder((64, 40), name="B")
    view = as_contraction(ops.matmul(a_t, b_t))
    base = {"pe_out": "i", "tm": 8, "pe_in": "k", "tn": 4}
    narrow, wide = (estimate_design(lower_contraction(view, {**base, "lanes": lanes}), VU9P)
                    for lanes in (1, 16))
    read = {s.name: s for s in narrow.stages}["read_B"]
    wide_read = {s.name: s for s in wide.stages}["read_B"]
    # B's 4 x 40 tile: 160 beats narrow; 40 = 16 + 16 + 8 lanes -> 3 beats a row, 12 wide
    assert read.compute_cycles - wide_read.compute_cycles == pytest.approx(160 - 12)
    # a beat moves its 64 bytes even where the row's last one is ragged (40 -> 48 lanes)
    assert (read.ddr_bytes, wide_read.ddr_bytes) == (4 * 40 * 4, 4 * 48 * 4)
    assert not wide.initiation_intervals
    # 64 bytes per beat: 16 float32 fit one beat, 32 float32 take two (II 2, reason named)
    wider = estimate_design(lower_contraction(view, {**base, "lanes": 32}), VU9P)
    assert any("2 AXI beats per iteration to B" in why
               for _, _, why in wider.initiation_intervals.values())


@needs_csim
@pytest.mark.parametrize("order", ["spatial", "reduce"])
def test_strided_conv_with_ragged_tiles_matches_the_reference(order: str) -> None:
    x, w, y = _conv(1, 5, 11, 7, 3, stride=2)  # 5 x 5 output, 7 filters, 5 channels
    config = {"pe_out": "k", "tm": 4, "pe_in": "rc", "tn": 3, "tiles": {"h": 2, "w": 3},
              "order": order}
    kernel = lower_contraction(as_contraction(y), config)
    rng = np.random.default_rng(3)
    xs = rng.standard_normal(x.shape).astype(np.float32)
    ws = rng.standard_normal(w.shape).astype(np.float32)
    got = _run(FpgaHlsTarget(), kernel, {"X": xs, "W": ws}, y.name, y.shape)
    np.testing.assert_allclose(got, evaluate(y, {x: xs, w: ws}), rtol=1e-4, atol=1e-4)


def test_the_pe_array_costs_what_the_model_says() -> None:
    x, w, y = _conv(1, 16, 14, 32, 3)
    view = as_contraction(y)
    small = estimate_design(lower_contraction(view, {"pe_out": "k", "tm": 8, "pe_in": "rc",
                                                     "tn": 4, "tiles": {"h": 12}}), VU9P)
    large = estimate_design(lower_contraction(view, {"pe_out": "k", "tm": 32, "pe_in": "rc",
                                                     "tn": 16, "tiles": {"h": 12}}), VU9P)
    # 5 DSP per float MAC (multiplier 3, adder 2): the tree's adders and the accumulation
    assert small.usage.dsp == pytest.approx(8 * 4 * 5, abs=8 * 5)
    assert large.cycles < small.cycles / 2
    # 16x the PEs, but one element per AXI beat: the large design waits for its weights
    stages = {stage.name: stage.cycles for stage in large.stages}
    assert stages["read_W"] > 3 * stages["compute"]
    # up to 16 float32 lanes (one 512-bit beat) per cycle; the weights' rows are 3 long, so
    # a beat carries 3 of them: the read takes a third of the narrow one
    wide = estimate_design(lower_contraction(view, {"pe_out": "k", "tm": 32, "pe_in": "rc",
                                                    "tn": 16, "tiles": {"h": 12},
                                                    "lanes": 16}), VU9P)
    wide_stages = {stage.name: stage.cycles for stage in wide.stages}
    assert wide_stages["read_W"] == pytest.approx(stages["read_W"] / 3, rel=0.05)
    assert wide.cycles < large.cycles / 3  # the write stage is wide too
    assert wide.usage.bram18k > large.usage.bram18k  # two lanes per bank: more banks
    assert "k" not in large.initiation_intervals and "l_w" not in large.initiation_intervals
    assert not estimate_design(lower_contraction(view, {"pe_out": "k", "tm": 32, "pe_in": "rc",
                                                        "tn": 16}), ZU7EV).feasible


def test_a_config_for_a_compute_the_template_cannot_take_is_an_error() -> None:
    x = te.placeholder((8,), name="x")
    y = te.compute((8,), lambda i: x[i] * 2.0, name="y")
    target = FpgaHlsTarget()
    assert target.template_space(y) is None
    from tilecraft.lower import LoweringOptions

    options = LoweringOptions.from_spec(target.spec)
    assert target.lower_compute(y, options, None) is None
    with pytest.raises(LoweringError, match="compute y: the fpga_hls contraction template"):
        target.lower_compute(y, options, {"tm": 2})
    a_t, b_t = te.placeholder((4, 4), name="A"), te.placeholder((4, 4), name="B")
    with pytest.raises(LoweringError, match="no parameter\\(s\\) banana"):
        lower_contraction(as_contraction(ops.matmul(a_t, b_t)), {"banana": 1})


@needs_csim
def test_tuning_on_the_model_records_estimates_and_the_best_design_simulates(tmp_path) -> None:
    x, w, y = _conv(1, 6, 8, 9, 3)
    database = tmp_path / "fpga.sqlite"
    target = FpgaHlsTarget(device=ZU7EV, rows=8, cols=8)
    result = tune(y, target, {"trials": 24, "database": str(database), "engine": "random",
                              "seed": 2, "progress": False}, skip=())
    (task,) = [t for t in result.tasks if t.compute == y.name]
    assert task.best_config is not None and "pe_out" in task.best_config
    with TuningDatabase(database) as db:
        records = [r for r in db if y.name in r.schedule]
    assert records and all(r.estimated for r in records)
    failed = [r for r in records if not r.ok]
    # designs too large for the ZU7EV fail with the resource named, not a crash
    assert all("does not fit the ZU7EV" in r.error_message for r in failed)
    costs = sorted(r.median_cost for r in records if r.ok)
    assert costs[0] == pytest.approx(task.best_seconds)

    exe = tc.compile(y, target, database=str(database))
    (kernel,) = [k for k in exe.kernels if y.name in k.outputs]
    assert kernel.attrs["config"] == task.best_config
    rng = np.random.default_rng(0)
    xs = rng.standard_normal(x.shape).astype(np.float32)
    ws = rng.standard_normal(w.shape).astype(np.float32)
    np.testing.assert_allclose(exe(xs, ws), evaluate(y, {x: xs, w: ws}), rtol=1e-4, atol=1e-4)


def test_an_ii_the_accumulation_cannot_reach_is_an_error_when_asked_and_relaxed_otherwise(
        ) -> None:
    from tilecraft_fpga_hls.model import InfeasibleDesign
    from tilecraft_fpga_hls.model.operators import operator_cost

    x, w, y = _conv(1, 4, 6, 8, 3)
    view = as_contraction(y)
    config = {"pe_out": "k", "tm": 8, "pe_in": "rc", "tn": 4, "order": "reduce"}
    add = operator_cost("add", y.dtype).latency
    relaxed = estimate_design(lower_contraction(view, config), VU9P)
    asked, achieved, why = relaxed.initiation_intervals["l_rw"]
    assert (asked, achieved) == (1, add) and relaxed.feasible
    assert why == f"an accumulation into one element waits {add} cycles for the previous one"
    with pytest.raises(InfeasibleDesign, match=(
            rf"kernel {y.name} does not fit the VU9P .*initiation interval of loop l_rw: II=1 "
            rf"was asked for, the loop reaches II={add} \(an accumulation into one element "
            rf"waits {add} cycles.*ask for a larger II")):
        FpgaHlsTarget().estimate(lower_contraction(view, {**config, "ii": 1}))
    # the same request on the spatial order (each iteration a different element) is met
    met = FpgaHlsTarget().estimate(lower_contraction(view, {**config, "order": "spatial",
                                                            "ii": 1}))
    assert not any(key.startswith("ii_") for key in met.detail)
