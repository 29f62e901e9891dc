"""C-simulation: generated HLS C++ compiled with g++ against the plugin's headers and run on
numpy buffers — results against numpy, the headers' types against numpy's, stream errors that
name the stream, build errors with a repro command, and the build cache."""

from __future__ import annotations

import numpy as np
import pytest
from tilecraft_fpga_hls.availability import csim_status
from tilecraft_fpga_hls.codegen import generate_hls
from tilecraft_fpga_hls.csim import CSimError, CSimKernel, compile_csim
from tilecraft_fpga_hls.examples import gemm_kernel
from tilecraft_fpga_hls.spec import fpga_spec
from tilecraft_fpga_hls.target import FpgaHlsTarget

from tilecraft.dtypes import DType
from tilecraft.errors import BuildError
from tilecraft.kernel_ir import Buffer, BufferLoad, For, Kernel, LoopKind, Seq, Store
from tilecraft.kernel_ir.concurrency import Dataflow
from tilecraft.kernel_ir.nodes import Stream, StreamPop, StreamPush
from tilecraft.target.base import Source
from tilecraft.te import Var, const

pytestmark = pytest.mark.skipif(not csim_status()[0], reason=csim_status()[1])


@pytest.mark.parametrize(("rows", "cols", "k", "tiles", "dtype"), [
    (4, 8, 13, (2, 3), "int8"), (1, 1, 1, (1, 1), "int8"), (3, 5, 7, (1, 2), "float32"),
    (2, 3, 5, (3, 1), "float16"),
])
def test_tiled_gemm_on_the_mac_array_matches_numpy(rows: int, cols: int, k: int,
                                                   tiles: tuple[int, int], dtype: str) -> None:
    target = FpgaHlsTarget(rows=rows, cols=cols, dtype=dtype)
    kernel = gemm_kernel(rows, cols, k, tiles, DType.parse(dtype))
    run = target.emulator(kernel, target.codegen(kernel))
    assert isinstance(run, CSimKernel)
    m, n = tiles[0] * rows, tiles[1] * cols
    rng = np.random.default_rng(k)
    if dtype == "int8":
        a = rng.integers(-128, 128, (m, k), dtype=np.int8)
        b = rng.integers(-128, 128, (k, n), dtype=np.int8)
        arrays = {"A": a, "B": b, "C": np.zeros((m, n), np.int32)}
        run(arrays)
        np.testing.assert_array_equal(arrays["C"], a.astype(np.int32) @ b.astype(np.int32))
        return
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    arrays = {"A": a, "B": b, "C": np.zeros((m, n), dtype)}
    expected = np.zeros((m, n), dtype)
    target.emulate(kernel, {"A": a, "B": b, "C": expected})  # the Kernel IR interpreter
    run(arrays)
    # float16: the accumulator rounds to half after every MAC in both, but the interpreter runs
    # the intrinsic's declared semantics, whose product may round differently (one half ulp)
    tolerance = 1e-6 if dtype == "float32" else 2e-3
    np.testing.assert_allclose(arrays["C"], expected, rtol=tolerance, atol=tolerance)


def _elementwise(dtype: DType, value: object, n: int = 300) -> Kernel:
    x = Buffer("x", (n,), dtype, level="DDR")
    y = Buffer("y", (n,), dtype, level="DDR")
    i = Var("i")
    load = BufferLoad(x, (i,))
    body = For(i, const(n), LoopKind.PIPELINED, Store(y, (i,), value(load)),  # type: ignore[operator]
               initiation_interval=1)
    return Kernel("elementwise", (x, y), ("y",), body)


def _csim(kernel: Kernel, **arrays: np.ndarray) -> None:
    CSimKernel(generate_hls(kernel, fpga_spec()))(arrays)


def test_half_rounds_to_nearest_even_like_numpy() -> None:
    rng = np.random.default_rng(0)
    specials = np.float32([0.0, -0.0, np.inf, -np.inf, 65504.0, 65520.0, 65519.99, 6e-8,
                           2.98e-8, 1e-5, -3.0517578e-05, 1.0009765625, 1.00048828125])
    with np.errstate(over="ignore"):
        x = np.concatenate([specials, rng.standard_normal(283).astype(np.float32) * 100]) \
            .astype(np.float16)
    y = np.zeros_like(x)
    # y = half(x * 1.001): the constant is a half (1.0009765625), the product is computed in
    # float and rounds once, to nearest-even, when stored (te's conventions)
    _csim(_elementwise(DType.FLOAT16, lambda v: v * 1.001, len(x)), x=x, y=y)
    with np.errstate(over="ignore"):
        expected = (x.astype(np.float32) * np.float32(np.float16(1.001))).astype(np.float16)
    np.testing.assert_array_equal(y, expected)


def test_int8_arithmetic_wraps_like_numpy() -> None:
    x = np.arange(-128, 128, dtype=np.int8)
    y = np.zeros_like(x)
    _csim(_elementwise(DType.INT8, lambda v: v * 3 + 7, 256), x=x, y=y)
    np.testing.assert_array_equal(y, x * np.int8(3) + np.int8(7))


def _pipe(pushes: int, pops: int) -> Kernel:
    x = Buffer("x", (pushes,), DType.FLOAT32, level="DDR")
    y = Buffer("y", (pops,), DType.FLOAT32, level="DDR")
    s = Stream("x_stream", DType.FLOAT32, depth=2)
    i, j = Var("i"), Var("j")
    read = For(i, const(pushes), LoopKind.PIPELINED, StreamPush(s, BufferLoad(x, (i,))),
               initiation_interval=1)
    write = For(j, const(pops), LoopKind.PIPELINED, StreamPop(s, y, (j,)),
                initiation_interval=1)
    return Kernel("pipe", (x, y), ("y",), Seq((Dataflow((read, write), (s,)),)))


def test_streams_carry_values_between_stages() -> None:
    x, y = np.arange(7, dtype=np.float32), np.zeros(7, np.float32)
    _csim(_pipe(7, 7), x=x, y=y)
    np.testing.assert_array_equal(y, x)


@pytest.mark.parametrize(("pushes", "pops", "message"), [
    (3, 5, r"kernel pipe: C-simulation: stream x_stream read while empty \(3 values read so "
           r"far\)"),
    (5, 3, r"kernel pipe: C-simulation: stream x_stream holds 2 unread value\(s\) after its "
           r"dataflow region"),
])
def test_stream_misuse_is_an_error_naming_the_stream(pushes: int, pops: int,
                                                     message: str) -> None:
    with pytest.raises(CSimError, match=message):
        _csim(_pipe(pushes, pops), x=np.zeros(pushes, np.float32),
              y=np.zeros(pops, np.float32))


def test_build_is_cached_and_errors_carry_a_repro_command() -> None:
    source = generate_hls(_pipe(4, 4), fpga_spec())
    assert compile_csim(source) is compile_csim(source)
    broken = Source("fpga_hls", "broken", "hls-c++", "this is not C++;\n", "broken",
                    meta={"entry": "broken", "params": []}, suffix="cpp")
    with pytest.raises(BuildError, match=r"kernel broken \(HLS C\+\+ for C-simulation\): the "
                                         r"host compiler rejected .*harness.cpp; reproduce "
                                         r"with: cd "):
        compile_csim(broken)
