"""The Tensor Core schedule space (tilecraft_nvidia_tc.tensor_core_space, issue 12 item 1):
FlexTensor's typed sub-spaces over the AMOS mapping (WMMA, mma.sync or the CUDA-core
template), warps, fragments, BK and stages; searched on the performance model where no GPU
runs the candidates; the best point compiles and runs correctly."""

from __future__ import annotations

import numpy as np
import pytest
from tilecraft_nvidia_tc.availability import emulate_status
from tilecraft_nvidia_tc.target import NvidiaTcTarget, load_target_spec
from tilecraft_nvidia_tc.tensor_core_space import CUDA_CORES, evaluated_here

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.errors import LoweringError
from tilecraft.lower import LoweringOptions
from tilecraft.reference import evaluate
from tilecraft.target.spec import EvaluationMode

TARGET = NvidiaTcTarget()


def _gemm(m: int, k: int, n: int, dtype: str = "float16", out_dtype: str = "float32"):
    A = te.placeholder((m, k), dtype, name="A")
    B = te.placeholder((k, n), dtype, name="B")
    return ops.matmul(A, B, out_dtype=out_dtype, name="C"), [A, B]


def test_the_space_offers_wmma_mma_sync_and_the_cuda_cores():
    C, _ = _gemm(64, 48, 40)
    space = TARGET.template_space(C)
    mappings = space.space.subspaces["mapping"].values
    intrinsics = {label.split(":")[0] for label in mappings}
    assert {"wmma_m16n16k16_f16_f32", "wmma_m32n8k16_f16_f32", "wmma_m8n32k16_f16_f32",
            "mma_m16n8k16_f16_f32", CUDA_CORES} <= intrinsics
    assert {"warps", "fragments", "tc_BK", "tc_stages", "tile", "BK", "stages"} \
        <= set(space.space.subspaces)
    # fp32 has no Tensor Core mapping: the CUDA-core template's space as before
    C32, _ = _gemm(64, 48, 40, "float32", "float32")
    assert "mapping" not in TARGET.template_space(C32).space.subspaces


def test_every_point_lowers_or_names_the_limit_it_breaks():
    C, _ = _gemm(256, 256, 256, "int8", "int32")
    space = TARGET.template_space(C)
    options = LoweringOptions.from_spec(TARGET.spec)
    rng = np.random.default_rng(0)
    lowered = refused = 0
    for _ in range(24):
        config = space.decode(space.space.random_point(rng))
        try:
            [kernel] = TARGET.lower_compute(C, options, config)
        except LoweringError as error:
            assert f"kernel C_{config['intrinsic']}" in str(error) and "above" in str(error)
            refused += 1
            continue
        lowered += 1
        if "intrinsic" in config:
            tiles = kernel.attrs["tiles"]
            assert kernel.attrs["intrinsic"] == config["intrinsic"]
            assert (tiles["FM"], tiles["FN"], tiles["BK"]) == (config["FM"], config["FN"],
                                                               config["BK"])
    assert lowered >= 12


def test_candidates_are_estimated_where_no_gpu_runs_them():
    if TARGET.available().execute:
        pytest.skip("a GPU is here: candidates are measured")
    assert load_target_spec().evaluation is EvaluationMode.MEASURE
    assert TARGET.spec.evaluation is EvaluationMode.ESTIMATE
    assert evaluated_here(load_target_spec()) == TARGET.spec


def _tune(tmp_path, C):
    from tilecraft.tuning.tuner import tune

    if TARGET.available().execute:
        pytest.skip("a GPU is here: candidates are measured, not estimated")
    database = str(tmp_path / "tuning.sqlite")
    result = tune(C, TARGET, {"engine": "random", "trials": 12, "seed": 3, "n_workers": 1,
                              "database": database})
    [task] = result.tasks
    return task, database


def test_tuning_on_the_model(tmp_path):
    """tune() in estimate mode (no GPU here): the best of 12 random points is a Tensor Core
    kernel whose cost is the model's prediction of it."""
    C, _ = _gemm(67, 40, 45)
    task, _ = _tune(tmp_path, C)
    assert np.isfinite(task.best_seconds) and "intrinsic" in task.best_config
    [kernel] = TARGET.lower_compute(C, LoweringOptions.from_spec(TARGET.spec),
                                    task.best_config)
    assert TARGET.estimate(kernel).seconds == pytest.approx(task.best_seconds)
    assert all(seconds >= task.best_seconds for _, seconds, _ in task.trials)


@pytest.mark.slow
@pytest.mark.skipif(not emulate_status()[0], reason="no host C++ compiler")
def test_compiling_the_tuned_point(tmp_path):
    """compile(..., database=) lowers the tuned point; its emulated result equals the
    reference."""
    C, inputs = _gemm(67, 40, 45)
    task, database = _tune(tmp_path, C)
    exe = tc.compile(C, target="nvidia_tc", database=database)
    [compiled] = exe.kernels
    assert compiled.attrs["intrinsic"] == task.best_config["intrinsic"]
    rng = np.random.default_rng(4)
    arrays = [rng.integers(-4, 5, t.shape).astype(np.float16) for t in inputs]
    out = exe(*arrays)
    out = out[0] if isinstance(out, (list, tuple)) else out
    np.testing.assert_array_equal(np.asarray(out, np.float64),
                                  evaluate(C, dict(zip(inputs, arrays))).astype(np.float64))
