"""nvidia_tc's contractions through the core's GPU tiled-contraction template: the target
lowers them to the shared-memory tiled kernel (cp.async double buffering, 128-bit copies where
provable), the generated CUDA builds with NVRTC for sm_80 and sm_90 and, compiled for the host
against the emulation header, matches the numpy reference on awkward shapes in fp32 and fp16
(float32 accumulation)."""

from __future__ import annotations

import re
import time

import numpy as np
import pytest
from tilecraft_nvidia_tc.availability import build_status
from tilecraft_nvidia_tc.emulation import EmulatedKernel, find_host_compiler

from tilecraft import ops, te
from tilecraft.errors import LoweringError
from tilecraft.lower import LoweringOptions
from tilecraft.reference.evaluator import evaluate
from tilecraft.target.registry import get_target

needs_host = pytest.mark.skipif(find_host_compiler() is None, reason="no host C++ compiler")


def _target():
    return get_target("nvidia_tc")


def _kernel(tensor: te.Tensor, config: dict | None = None):
    target = _target()
    [kernel] = target.lower_compute(tensor, LoweringOptions.from_spec(target.spec), config)
    return kernel


def _emulate_against_reference(tensor: te.Tensor, config: dict | None = None) -> float:
    """Emulate the generated CUDA of ``tensor``'s tiled kernel; returns the seconds the run
    took (the host build excluded)."""
    target = _target()
    kernel = _kernel(tensor, config)
    source = target.codegen(kernel)
    rng = np.random.default_rng(5)
    env = {t: rng.standard_normal(t.shape).astype(t.dtype.numpy) for t in tensor.inputs}
    arrays = {t.name: array for t, array in env.items()}
    arrays[tensor.name] = np.full(tensor.shape, np.nan, tensor.dtype.numpy)
    emulated = EmulatedKernel(source, interleavings=2)
    start = time.perf_counter()
    emulated(arrays)
    seconds = time.perf_counter() - start
    expected = evaluate(tensor, env).astype(np.float32)
    tolerance = 1e-2 if tensor.dtype.bytes == 2 else 1e-4
    np.testing.assert_allclose(arrays[tensor.name].astype(np.float32), expected,
                               rtol=tolerance, atol=tolerance)
    return seconds


def _matmul(m: int, n: int, k: int, dtype: str = "float32") -> te.Tensor:
    return ops.matmul(te.placeholder((m, k), dtype, name="A"),
                      te.placeholder((k, n), dtype, name="B"), name="C")


def test_contractions_take_the_tiled_template_and_the_rest_the_strategy() -> None:
    target = _target()
    options = LoweringOptions.from_spec(target.spec)
    kernel = _kernel(_matmul(64, 64, 64, "float16"))
    assert kernel.attrs["strategy"] == "gpu_contraction"
    assert kernel.attrs["tiles"]["stages"] == 2
    assert kernel.attrs["vector_lanes"] == {"A": 8, "B": 8}
    assert target.lower_compute(ops.softmax(te.placeholder((4, 9), name="x")), options) is None
    assert target.template_space(ops.softmax(te.placeholder((4, 9), name="x"))) is None
    with pytest.raises(LoweringError, match="threads per block"):
        target.lower_compute(_matmul(64, 64, 64), options,
                             {"BM": 64, "BN": 64, "BK": 8, "TM": 1, "TN": 2})


def test_default_tiles_fill_the_sms_and_a_gemv_takes_the_row_reduction() -> None:
    """The default tiles come from the spec's cost model: a 1024^3 GEMM launches at least as
    many blocks as the A100 has SMs, whole warps per block, two or more blocks resident per SM;
    a gemv is left to the strategy's row reduction (a warp per row)."""
    target = _target()
    cores = target.spec.compute.cores
    for size in (64, 1024):
        kernel = _kernel(_matmul(size, size, size, "float16"))
        assert kernel.launch.block[0] % target.spec.threads.subgroup_size == 0
    assert kernel.launch.grid[0] >= cores
    from tilecraft.schedule.strategies.gpu_contraction_tiles import (
        ChipRates,
        ContractionTiles,
        resident_blocks,
    )

    tiles = ContractionTiles(**dict(zip(
        ("block_m", "block_n", "block_k", "thread_m", "thread_n", "stages"),
        kernel.attrs["tiles"].values())))
    assert resident_blocks(tiles, target.spec.threads, 2, ChipRates.from_spec(target.spec)) >= 2
    gemv = ops.gemv(te.placeholder((4096, 4096), "float16", name="A"),
                    te.placeholder((4096,), "float16", name="v"), name="G")
    assert target.lower_compute(gemv, LoweringOptions.from_spec(target.spec)) is None


def test_the_cuda_double_buffers_with_16_byte_cp_async() -> None:
    text = _target().codegen(_kernel(_matmul(64, 64, 64, "float16"))).text
    assert "tc_cp_async_16(" in text
    assert "tc_cp_async_commit();" in text
    assert "tc_cp_async_wait<1>();" in text and "tc_cp_async_wait<0>();" in text
    assert text.count("__syncthreads();") == 2


@pytest.mark.skipif(not build_status()[0], reason="no NVRTC / nvcc on this machine")
def test_the_tiled_gemm_builds_for_sm80_and_sm90_with_its_resources() -> None:
    target = _target()
    kernel = _kernel(_matmul(64, 64, 64, "float16"))
    artifact = target.build(target.codegen(kernel))
    report = artifact.meta["build"]
    text = str(report)
    assert "sm_80" in text and "sm_90" in text
    built = artifact.handle
    shared = kernel.launch.shared_bytes
    for architecture in built.architectures:
        resources = architecture.resources
        assert resources.registers > 0
        assert resources.static_shared_bytes == shared


@needs_host
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_emulated_gemms_on_awkward_shapes_match_the_reference(dtype) -> None:
    _emulate_against_reference(_matmul(17, 31, 13, dtype))
    _emulate_against_reference(_matmul(2, 3, 5, dtype),
                               {"BM": 4, "BN": 4, "BK": 4, "TM": 2, "TN": 2, "stages": 1})


@needs_host
@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_emulated_operators_match_the_reference(dtype) -> None:
    _emulate_against_reference(_matmul(67, 45, 33, dtype))
    _emulate_against_reference(ops.batch_matmul(te.placeholder((3, 5, 24), dtype, name="X"),
                                                te.placeholder((3, 24, 9), dtype, name="Y"),
                                                name="Z"))
    _emulate_against_reference(ops.dense(te.placeholder((7, 32), dtype, name="X"),
                                         te.placeholder((12, 32), dtype, name="W"), name="D"))
    _emulate_against_reference(ops.gemv(te.placeholder((37, 16), dtype, name="A"),
                                        te.placeholder((16,), dtype, name="v"), name="G"),
                               {"BM": 1, "BN": 32, "BK": 8, "TM": 1, "TN": 1})
    _emulate_against_reference(ops.conv2d(te.placeholder((1, 3, 9, 9), dtype, name="X"),
                                          te.placeholder((4, 3, 3, 3), dtype, name="W"),
                                          stride=2, padding=1, name="Y"))
    _emulate_against_reference(ops.conv2d(te.placeholder((1, 8, 5, 5), dtype, name="X"),
                                          te.placeholder((6, 8, 1, 1), dtype, name="W"),
                                          name="Y1"))
    # batched, NHWC, grouped and depthwise convolutions: implicit GEMMs too
    _emulate_against_reference(ops.conv2d(te.placeholder((2, 3, 7, 7), dtype, name="X"),
                                          te.placeholder((5, 3, 3, 3), dtype, name="W"),
                                          stride=2, padding=1, name="Yb"))
    _emulate_against_reference(ops.conv2d(te.placeholder((2, 9, 11, 4), dtype, name="X"),
                                          te.placeholder((3, 3, 2, 6), dtype, name="W"),
                                          groups=2, stride=2, layout="NHWC", name="Yg"))
    _emulate_against_reference(ops.depthwise_conv2d(te.placeholder((2, 4, 13, 11), dtype,
                                                                   name="X"),
                                                    te.placeholder((4, 2, 3, 3), dtype,
                                                                   name="W"),
                                                    dilation=2, padding=2, name="Yd"))


@needs_host
@pytest.mark.slow
def test_sampled_configs_of_the_space_emulate_correctly() -> None:
    tensor = _matmul(29, 23, 19, "float16")
    space = _target().template_space(tensor)
    rng = np.random.default_rng(1)
    for _ in range(3):
        _emulate_against_reference(tensor, space.decode(space.space.random_point(rng)))


@needs_host
@pytest.mark.slow
def test_a_128_cubed_fp16_gemm_emulates_in_a_few_seconds() -> None:
    assert _emulate_against_reference(_matmul(128, 128, 128, "float16")) < 10.0


def test_the_k_step_reads_fragments_wide_from_padded_tiles() -> None:
    """The default 1024^3 fp16 GEMM: A's tile rows padded against bank conflicts (the spec's
    32 banks of 4 bytes), B's fragment read as one 128-bit shared load per k, fragments
    copied from their tiles without a conversion pair, the result rounded once."""
    kernel = _kernel(_matmul(1024, 1024, 1024, "float16"))
    text = _target().codegen(kernel).text
    assert kernel.attrs["row_padding"]["A"] > 0
    assert "tc_load16(&B_tile[" in text and "tc_store16(&b_frag[" in text
    assert re.search(r"a_frag\[i\] = A_tile\[[^;]*\];", text)
    assert "__float2half(__half2float(" not in text


@needs_host
def test_an_emulated_padded_gemm_with_ragged_edges_matches_the_reference() -> None:
    config = _kernel(_matmul(1024, 1024, 1024, "float16")).attrs["tiles"]
    tensor = _matmul(37, 131, 45, "float16")
    assert _kernel(tensor, config).attrs["row_padding"]["A"] > 0
    _emulate_against_reference(tensor, config)


@needs_host
def test_a_ragged_k_copies_16_byte_chunks_and_emulates_to_the_reference() -> None:
    config = {"BM": 16, "BN": 32, "BK": 16, "TM": 2, "TN": 8, "stages": 2}
    tensor = _matmul(37, 40, 104, "float16")          # K = 104: 6.5 slices of 16
    text = _target().codegen(_kernel(tensor, config)).text
    assert "tc_cp_async_16(&A_tile[" in text and "tc_cp_async_4" not in text
    _emulate_against_reference(tensor, config)
    _emulate_against_reference(_matmul(37, 40, 100, "float16"), config)  # rows unaligned
