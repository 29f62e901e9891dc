"""mali's float contractions through the core's GPU tiled-contraction template: slices of both
operands staged in ``__local`` memory between work-group barriers (no asynchronous copies on
Mali), the generated OpenCL C built and run on this machine's OpenCL device (PoCL's CPU device
standing in for a Mali GPU) and compared with the numpy reference on awkward shapes."""

from __future__ import annotations

import numpy as np
import pytest

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.errors import LoweringError
from tilecraft.graph import Graph
from tilecraft.lower import LoweringOptions
from tilecraft.reference.evaluator import evaluate
from tilecraft.target.registry import get_target

needs_device = pytest.mark.skipif(not get_target("mali").available().build,
                                  reason="no OpenCL device (pip install pocl-binary-distribution)")


def _target():
    return get_target("mali")


def _kernel(tensor: te.Tensor, config: dict | None = None):
    target = _target()
    [kernel] = target.lower_compute(tensor, LoweringOptions.from_spec(target.spec), config)
    return kernel


def _run_against_reference(tensor: te.Tensor, config: dict | None = None) -> None:
    target = _target()
    kernel = _kernel(tensor, config)
    source = target.codegen(kernel)
    function = target.emulator(kernel, source)
    rng = np.random.default_rng(7)
    env = {t: rng.standard_normal(t.shape).astype(t.dtype.numpy) for t in tensor.inputs}
    arrays = {t.name: array for t, array in env.items()}
    arrays[tensor.name] = np.full(tensor.shape, np.nan, tensor.dtype.numpy)
    function(arrays)
    np.testing.assert_allclose(arrays[tensor.name], evaluate(tensor, env), rtol=1e-4,
                               atol=1e-4)


def _matmul(m: int, n: int, k: int) -> te.Tensor:
    return ops.matmul(te.placeholder((m, k), name="A"), te.placeholder((k, n), name="B"),
                      name="C")


def test_contractions_take_the_template_with_one_stage_and_the_rest_the_strategy() -> None:
    target = _target()
    options = LoweringOptions.from_spec(target.spec)
    kernel = _kernel(_matmul(64, 64, 64))
    assert kernel.attrs["strategy"] == "gpu_contraction"
    assert kernel.attrs["tiles"]["stages"] == 1          # no async_copy_bytes on Mali
    space = target.template_space(_matmul(64, 64, 64))
    rng = np.random.default_rng(1)
    for _ in range(20):
        assert space.decode(space.space.random_point(rng))["stages"] == 1
    softmax = ops.softmax(te.placeholder((4, 9), name="x"))
    assert target.lower_compute(softmax, options) is None
    assert target.template_space(softmax) is None
    int8 = ops.matmul(te.placeholder((8, 8), "int8", name="A"),
                      te.placeholder((8, 8), "int8", name="B"), out_dtype="int32")
    assert target.lower_compute(int8, options) is None
    with pytest.raises(LoweringError, match="not a float contraction"):
        target.lower_compute(softmax, options, {"BM": 8})


@pytest.mark.parametrize(("config", "limit"), [
    ({"BM": 64, "BN": 64, "BK": 8, "TM": 1, "TN": 8}, "threads per block"),
    ({"BM": 64, "BN": 64, "BK": 128, "TM": 4, "TN": 4}, "shared memory per block"),
    ({"BM": 128, "BN": 128, "BK": 8, "TM": 8, "TN": 8},
     "above the 64 a thread of a 256-thread block"),
    ({"BM": 32, "BN": 32, "BK": 8, "TM": 4, "TN": 4, "stages": 2}, "asynchronous copies"),
])
def test_configs_over_mali_limits_are_refused_by_name(config: dict, limit: str) -> None:
    with pytest.raises(LoweringError, match=f"compute C: .*{limit}"):
        _kernel(_matmul(128, 128, 128), config)


def test_the_opencl_stages_tiles_in_local_memory_between_barriers() -> None:
    source = _target().codegen(_kernel(_matmul(67, 45, 33)))
    text = source.text
    assert text.count("__local float") == 2
    assert text.count("barrier(CLK_LOCAL_MEM_FENCE") == 2
    assert "async_work_group_copy" not in text
    assert 0 < source.meta["local_bytes"] <= _target().spec.threads.shared_bytes_per_block


@needs_device
@pytest.mark.parametrize(("m", "n", "k"), [(17, 31, 13), (2, 3, 5), (67, 45, 33), (1, 7, 3)])
def test_gemm_on_the_device_matches_the_reference(m: int, n: int, k: int) -> None:
    _run_against_reference(_matmul(m, n, k))


@needs_device
def test_a_non_default_config_with_ragged_tiles_matches() -> None:
    _run_against_reference(_matmul(23, 29, 19), {"BM": 16, "BN": 8, "BK": 4, "TM": 2, "TN": 4})


@needs_device
@pytest.mark.parametrize("case", ["batch_matmul", "dense", "conv2d", "conv2d_strided"])
def test_other_contractions_on_the_device_match_the_reference(case: str) -> None:
    if case == "batch_matmul":
        tensor = ops.batch_matmul(te.placeholder((3, 7, 9), name="A"),
                                  te.placeholder((3, 9, 5), name="B"), name="C")
    elif case == "dense":
        tensor = ops.dense(te.placeholder((5, 11), name="x"),
                           te.placeholder((7, 11), name="w"), name="C")
    elif case == "conv2d":
        tensor = ops.conv2d(te.placeholder((1, 3, 9, 9), name="x"),
                            te.placeholder((4, 3, 3, 3), name="w"), padding=1, name="C")
    else:
        tensor = ops.conv2d(te.placeholder((1, 5, 11, 7), name="x"),
                            te.placeholder((3, 5, 3, 2), name="w"), stride=2, name="C")
    kernel = _kernel(tensor)
    assert kernel.attrs["strategy"] == "gpu_contraction"
    _run_against_reference(tensor)


@needs_device
def test_compile_runs_the_tiled_kernel_as_opencl() -> None:
    A, B = te.placeholder((17, 13), name="A"), te.placeholder((13, 31), name="B")
    executable = tc.compile(Graph.from_outputs([ops.matmul(A, B, name="C")]), target="mali")
    rng = np.random.default_rng(3)
    a = rng.standard_normal((17, 13)).astype(np.float32)
    b = rng.standard_normal((13, 31)).astype(np.float32)
    np.testing.assert_allclose(executable(A=a, B=b), a @ b, rtol=1e-5, atol=1e-5)
    [kernel] = executable.kernels
    assert kernel.attrs["strategy"] == "gpu_contraction"
