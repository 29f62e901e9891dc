"""The generated-CUDA emulator on hand-written kernels of the code generator's format: results
against numpy, and the faults it must report (races, divergent barriers, build failures)."""

from __future__ import annotations

import subprocess
import time

import ml_dtypes
import numpy as np
import pytest
from tilecraft_nvidia_tc.emulation import EmulatedKernel, EmulationError, find_host_compiler
from tilecraft_nvidia_tc.emulation.examples import (
    ATOMIC_SUM,
    BARRIERS_ON_TWO_LINES,
    BLOCK_ROW_SUM,
    CP_ASYNC_SCALE,
    DIVERGENT_BARRIER,
    HALF_ROUND_TRIP,
    TILED_GEMM,
    VECTOR_ADD,
    WARP_ROW_MAX,
    WMMA_GEMM,
    cuda_source,
)

from tilecraft.errors import BuildError

pytestmark = pytest.mark.skipif(find_host_compiler() is None, reason="no host C++ compiler")


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@pytest.mark.parametrize("n", [1, 997])
def test_vector_add_with_a_ragged_guard(n):
    rng = np.random.default_rng(n)
    a, b = rng.standard_normal(n, np.float32), rng.standard_normal(n, np.float32)
    source = cuda_source("vector_add", VECTOR_ADD % {"n": n}, (ceil_div(n, 128), 1, 1),
                         (128, 1, 1), [("A", "float32", (n,), False),
                                       ("B", "float32", (n,), False),
                                       ("C", "float32", (n,), True)])
    c = np.zeros(n, np.float32)
    EmulatedKernel(source)({"A": a, "B": b, "C": c})
    np.testing.assert_array_equal(c, a + b)


def row_sum_source(rows: int, cols: int, barrier: str = "__syncthreads();"):
    return cuda_source("row_sum", BLOCK_ROW_SUM % {"cols": cols, "barrier": barrier},
                       (rows, 1, 1), (128, 1, 1), [("X", "float32", (rows, cols), False),
                                                  ("Y", "float32", (rows,), True)])


@pytest.mark.parametrize("rows,cols", [(1, 1), (37, 300), (5, 128)])
def test_block_reduction_through_shared_memory(rows, cols):
    x = np.random.default_rng(cols).standard_normal((rows, cols), np.float32)
    y = np.zeros(rows, np.float32)
    EmulatedKernel(row_sum_source(rows, cols), interleavings=3)({"X": x, "Y": y})
    np.testing.assert_allclose(y, x.sum(axis=1, dtype=np.float64), rtol=1e-5, atol=1e-5)


def test_a_missing_barrier_is_caught_by_the_interleavings():
    x = np.random.default_rng(0).standard_normal((23, 300), np.float32)
    with pytest.raises(EmulationError, match="data race or a missing barrier"):
        EmulatedKernel(row_sum_source(23, 300, barrier=""))({"X": x, "Y": np.zeros(23, np.float32)})


@pytest.mark.parametrize("rows,cols", [(13, 45), (1, 32), (4, 7)])
def test_warp_shuffle_and_ballot(rows, cols):
    x = np.random.default_rng(rows).standard_normal((rows, cols), np.float32)
    source = cuda_source("row_max", WARP_ROW_MAX % {"rows": rows, "cols": cols},
                         (ceil_div(rows, 4), 1, 1), (32, 4, 1),
                         [("X", "float32", (rows, cols), False),
                          ("Y", "float32", (rows, 2), True)])
    y = np.zeros((rows, 2), np.float32)
    EmulatedKernel(source, interleavings=3)({"X": x, "Y": y})
    np.testing.assert_array_equal(y[:, 0], x.max(axis=1))
    lanes = x[:, np.arange(32) % cols] > 0
    np.testing.assert_array_equal(y[:, 1], lanes.sum(axis=1))


def gemm_source(m, n, k, tile=8, in_type="float", second_barrier="__syncthreads();"):
    dtype = {"float": "float32", "__half": "float16"}[in_type]
    text = TILED_GEMM % {"M": m, "N": n, "K": k, "tile": tile, "in_type": in_type,
                         "second_barrier": second_barrier}
    return cuda_source("tiled_gemm", text, (ceil_div(n, tile), ceil_div(m, tile), 1),
                       (tile, tile, 1), [("A", dtype, (m, k), False), ("B", dtype, (k, n), False),
                                         ("C", "float32", (m, n), True)])


@pytest.mark.parametrize("m,n,k", [(37, 29, 13), (1, 1, 1), (8, 16, 24)])
def test_tiled_gemm_with_shared_memory(m, n, k):
    rng = np.random.default_rng(m * n * k)
    a, b = rng.standard_normal((m, k), np.float32), rng.standard_normal((k, n), np.float32)
    c = np.zeros((m, n), np.float32)
    EmulatedKernel(gemm_source(m, n, k))({"A": a, "B": b, "C": c})
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def test_a_missing_barrier_after_the_tile_is_caught():
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((37, 40), np.float32), rng.standard_normal((40, 29), np.float32)
    kernel = EmulatedKernel(gemm_source(37, 29, 40, second_barrier=""), interleavings=3)
    with pytest.raises(EmulationError, match="data race or a missing barrier"):
        kernel({"A": a, "B": b, "C": np.zeros((37, 29), np.float32)})


def wmma_source(m, n, k, b_layout="row_major"):
    b_address = (f"B + k * {n} + tile_n * 16" if b_layout == "row_major"
                 else f"B + tile_n * 16 * {k} + k")  # col-major B: B^T stored row-major
    text = WMMA_GEMM % {"M": m, "N": n, "K": k, "b_layout": b_layout, "b_address": b_address,
                        "b_ldm": n if b_layout == "row_major" else k}
    tiles = (m // 16) * (n // 16)
    b_shape = (k, n) if b_layout == "row_major" else (n, k)
    return cuda_source("wmma_gemm", text, (ceil_div(tiles, 4), 1, 1), (32, 4, 1),
                       [("A", "float16", (m, k), False), ("B", "float16", b_shape, False),
                        ("C", "float32", (m, n), True)])


@pytest.mark.parametrize("m,n,k,layout", [(16, 16, 16, "row_major"), (48, 32, 80, "row_major"),
                                          (32, 48, 16, "col_major")])
def test_wmma_gemm_half_to_float(m, n, k, layout):
    rng = np.random.default_rng(m + n + k)
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    stored = b if layout == "row_major" else np.ascontiguousarray(b.T)
    c = np.zeros((m, n), np.float32)
    EmulatedKernel(wmma_source(m, n, k, layout))({"A": a, "B": stored, "C": c})
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64),
                               rtol=1e-5, atol=1e-4)


def test_gemm_128_cubed_emulates_in_a_few_seconds():
    rng = np.random.default_rng(128)
    a = rng.standard_normal((128, 128)).astype(np.float16)
    b = rng.standard_normal((128, 128)).astype(np.float16)
    expected = a.astype(np.float64) @ b.astype(np.float64)
    for source in (gemm_source(128, 128, 128, tile=16, in_type="__half"),
                   wmma_source(128, 128, 128)):
        kernel = EmulatedKernel(source)  # compiled (or found in the cache) here
        c = np.zeros((128, 128), np.float32)
        start = time.perf_counter()
        kernel({"A": a, "B": b, "C": c})  # two interleavings
        seconds = time.perf_counter() - start
        np.testing.assert_allclose(c, expected, rtol=1e-4, atol=1e-3)
        assert seconds < 10, f"{source.kernel_name}: {seconds:.1f} s for two interleavings"


def cp_async_source(blocks, chunks, threads=32, wait_one="tc_cp_async_wait<1>();",
                    wait_all="tc_cp_async_wait<0>();"):
    n = blocks * chunks * 4 * threads
    text = CP_ASYNC_SCALE % {"chunks": chunks, "wait_one": wait_one, "wait_all": wait_all}
    return cuda_source("cp_async_mirror", text, (blocks, 1, 1), (threads, 1, 1),
                       [("X", "float32", (n,), False), ("Y", "float32", (n,), True)],
                       dynamic_shared=2 * 4 * threads * 4), n


def cp_async_reference(x, threads):
    chunks = x.reshape(-1, 4 * threads)
    return (chunks + chunks[:, ::-1]).reshape(-1)


@pytest.mark.parametrize("blocks,chunks", [(1, 1), (3, 5)])
def test_cp_async_double_buffering(blocks, chunks):
    source, n = cp_async_source(blocks, chunks)
    x = np.random.default_rng(chunks).standard_normal(n).astype(np.float32)
    y = np.zeros(n, np.float32)
    EmulatedKernel(source, interleavings=3)({"X": x, "Y": y})
    np.testing.assert_array_equal(y, cp_async_reference(x, 32))


def test_a_missing_cp_async_wait_reads_stale_shared_memory():
    source, n = cp_async_source(2, 3, wait_one="", wait_all="")
    x = np.random.default_rng(1).standard_normal(n).astype(np.float32)
    y = np.zeros(n, np.float32)
    EmulatedKernel(source, interleavings=1)({"X": x, "Y": y})
    assert not np.array_equal(y, cp_async_reference(x, 32))
    assert np.isnan(y).any()  # the copies land at the thread's end: the reads saw the poison


def test_a_barrier_some_threads_never_reach_is_reported():
    source = cuda_source("divergent", DIVERGENT_BARRIER, (1, 1, 1), (64, 1, 1),
                         [("X", "float32", (64,), False), ("Y", "float32", (64,), True)])
    with pytest.raises(EmulationError, match=r"divergent barrier: 48 of 64 threads wait at "
                                             r"__syncthreads\(\) \(line 7\) while 16 have exited"):
        EmulatedKernel(source)({"X": np.ones(64, np.float32), "Y": np.zeros(64, np.float32)})


def test_barriers_on_two_lines_are_reported():
    source = cuda_source("two_barriers", BARRIERS_ON_TWO_LINES, (2, 1, 1), (32, 1, 1),
                         [("X", "float32", (32,), False), ("Y", "float32", (32,), True)])
    with pytest.raises(EmulationError, match=r"block \(\d, 0, 0\): divergent barrier: threads "
                                             r"wait at __syncthreads\(\) of line \d and of line"):
        EmulatedKernel(source)({"X": np.ones(32, np.float32), "Y": np.zeros(32, np.float32)})


def test_a_shuffle_naming_lanes_that_do_not_exist_is_reported():
    rows, cols = 1, 16
    source = cuda_source("row_max", WARP_ROW_MAX % {"rows": rows, "cols": cols}, (1, 1, 1),
                         (16, 1, 1), [("X", "float32", (rows, cols), False),
                                      ("Y", "float32", (rows, 2), True)])
    with pytest.raises(EmulationError, match="names lane 16 of warp 0, which does not exist"):
        EmulatedKernel(source)({"X": np.ones((1, 16), np.float32),
                                "Y": np.zeros((1, 2), np.float32)})


def test_half_and_bfloat16_round_to_nearest_even_like_numpy():
    special = np.array([0.0, -0.0, 1.0, 65504.0, 65519.99, 65520.0, 1e6, -1e6, 2.0 ** -24,
                        2.0 ** -25, 2.0 ** -25 * 1.0001, 3 * 2.0 ** -26, 6.1e-5, 1 + 2.0 ** -11,
                        1 + 3 * 2.0 ** -11, np.inf, -np.inf, 3.3895314e38, 1.00390625,
                        1.01171875, -2.5e-40], np.float32)
    rng = np.random.default_rng(16)
    values = np.concatenate([special, rng.standard_normal(3000).astype(np.float32) *
                             np.float32(2.0) ** rng.integers(-30, 20, 3000).astype(np.float32)])
    n = values.size
    source = cuda_source("round_trip", HALF_ROUND_TRIP % {"n": n}, (ceil_div(n, 256), 1, 1),
                         (256, 1, 1), [("X", "float32", (n,), False),
                                       ("H", "float16", (n,), True),
                                       ("B", "bfloat16", (n,), True),
                                       ("S", "float32", (n,), True)])
    h, b = np.zeros(n, np.float16), np.zeros(n, ml_dtypes.bfloat16)
    s = np.zeros(n, np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        EmulatedKernel(source)({"X": values, "H": h, "B": b, "S": s})
        expected_h, expected_b = values.astype(np.float16), values.astype(ml_dtypes.bfloat16)
        expected_s = (expected_h * expected_h + expected_h).astype(np.float32) + \
            expected_b.astype(np.float32)
    np.testing.assert_array_equal(h.view(np.uint16), expected_h.view(np.uint16))
    np.testing.assert_array_equal(b.view(np.uint16), expected_b.view(np.uint16))
    np.testing.assert_array_equal(s, expected_s)


def test_float_atomics_in_another_order_are_not_a_race():
    n = 5000
    x = np.random.default_rng(3).standard_normal(n).astype(np.float32)
    source = cuda_source("atomic_sum", ATOMIC_SUM % {"n": n}, (ceil_div(n, 64), 1, 1),
                         (64, 1, 1), [("X", "float32", (n,), False), ("Y", "float32", (1,), True)])
    y = np.zeros(1, np.float32)
    EmulatedKernel(source, interleavings=3)({"X": x, "Y": y})
    np.testing.assert_allclose(y, [x.sum(dtype=np.float64)], rtol=1e-4, atol=1e-4)


def test_a_build_failure_names_the_kernel_and_the_command_to_reproduce_it():
    source = cuda_source("broken", 'extern "C" __global__ void broken(float* Y) { Y[0] = ; }',
                         (1, 1, 1), (1, 1, 1), [("Y", "float32", (1,), True)])
    with pytest.raises(BuildError, match=r"kernel broken \(CUDA emulation\): the host compiler "
                                        r"rejected") as err:
        EmulatedKernel(source)
    message = str(err.value)
    assert "broken.cu" in message and "expected primary-expression" in message
    command = message.split("reproduce with: ", 1)[1].splitlines()[0]
    rerun = subprocess.run(command, shell=True, capture_output=True, text=True, check=False)
    assert rerun.returncode != 0 and "expected primary-expression" in rerun.stderr


def test_the_target_emulates_its_generated_source_where_the_pipeline_emulates():
    from tilecraft_nvidia_tc.target import NvidiaTcTarget

    from tilecraft.dtypes import DType
    from tilecraft.kernel_ir.nodes import Buffer, Kernel, Seq
    from tilecraft.pipeline.build import make_runner
    from tilecraft.target.base import Capability, Source

    n = 131
    params = tuple(Buffer(name, (n,), DType.FLOAT32) for name in "ABC")
    kernel = Kernel("vector_add", params, ("C",), Seq(()))  # its body is not what runs
    source = cuda_source("vector_add", VECTOR_ADD % {"n": n}, (2, 1, 1), (128, 1, 1),
                         [(name, "float32", (n,), name == "C") for name in "ABC"])
    runner, mode = make_runner(NvidiaTcTarget(), kernel, source, Capability.EMULATE)
    assert mode == "emulated" and isinstance(runner, EmulatedKernel)
    a, b, c = np.arange(n, dtype=np.float32), np.ones(n, np.float32), np.zeros(n, np.float32)
    runner({"A": a, "B": b, "C": c})
    np.testing.assert_array_equal(c, a + 1)
    not_cuda = Source("nvidia_tc", "vector_add", "text", "", "vector_add")
    assert not isinstance(NvidiaTcTarget().emulator(kernel, not_cuda), EmulatedKernel)
