"""Loop nests: a register-tiled GEMM, a padded convolution, unrolled loops, allocations, copies,
and PARALLEL loops split across threads."""

from __future__ import annotations

import numpy as np
import pytest
from tilecraft_x86_avx512.target import X86Avx512Target
from x86_kernels import buffer, kernel, load, loop, seq, store, vloop, zeros_for

from tilecraft.kernel_ir.nodes import Allocate, Buffer, Copy, LoopKind, Region
from tilecraft.te import Var, const, select
from tilecraft.te.expr import ReduceOp


def gemm_kernel(m: int, n: int, k: int, tile_m: int = 4, tile_n: int = 32) -> tuple:
    a, b, c = buffer("A", (m, k)), buffer("B", (k, n)), buffer("C", (m, n))
    acc = Buffer("acc", (tile_m, tile_n), a.dtype, level="register")
    io, jo, ii, jv, r = Var("io"), Var("jo"), Var("ii"), Var("jv"), Var("r")
    row, col = io * tile_m + ii, jo * tile_n + jv
    init = loop(ii, tile_m, vloop(jv, tile_n, store(acc, (ii, jv), const(0.0))),
                LoopKind.UNROLLED)
    update = loop(r, k, loop(ii, tile_m, vloop(jv, tile_n, store(
        acc, (ii, jv), load(a, row, r) * load(b, r, col), ReduceOp.SUM)), LoopKind.UNROLLED))
    write = loop(ii, tile_m, vloop(jv, tile_n, store(c, (row, col), load(acc, ii, jv))),
                 LoopKind.UNROLLED)
    tiles = loop(jo, n // tile_n, seq(init, update, write))
    body = loop(io, m // tile_m, Allocate(acc, tiles), LoopKind.PARALLEL)
    return kernel("gemm_tiled", [a, b, c], ["C"], body)


def test_register_tiled_gemm(run):
    m, n, k = 48, 64, 37
    kern = gemm_kernel(m, n, k)
    rng = np.random.default_rng(13)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    out = run(kern, zeros_for(kern, A=a, B=b))
    np.testing.assert_allclose(out["C"], a @ b, rtol=1e-5, atol=1e-5)


def test_padded_convolution(run):
    channels_in, channels_out, width, taps = 3, 5, 30, 3
    x, w = buffer("X", (channels_in, width)), buffer("W", (channels_out, channels_in, taps))
    y = buffer("Y", (channels_out, width))
    co, px, ci, t = Var("co"), Var("x"), Var("ci"), Var("t")
    pos = px + t - 1
    inside = (pos >= 0) & (pos < width)
    tap = select(inside, load(x, ci, select(inside, pos, 0)), const(0.0))
    body = loop(co, channels_out, vloop(px, width, seq(
        store(y, (co, px), const(0.0)),
        loop(ci, channels_in, loop(t, taps, store(y, (co, px), load(w, co, ci, t) * tap,
                                                 ReduceOp.SUM), LoopKind.UNROLLED)))),
        LoopKind.PARALLEL)
    kern = kernel("conv1d", [x, w, y], ["Y"], body)
    rng = np.random.default_rng(14)
    xs = rng.standard_normal((channels_in, width)).astype(np.float32)
    ws = rng.standard_normal((channels_out, channels_in, taps)).astype(np.float32)
    out = run(kern, zeros_for(kern, X=xs, W=ws))
    padded = np.pad(xs, ((0, 0), (1, 1)))
    expected = np.zeros((channels_out, width), np.float32)
    for tap_index in range(taps):
        expected += np.einsum("oc,cx->ox", ws[:, :, tap_index],
                              padded[:, tap_index:tap_index + width])
    np.testing.assert_allclose(out["Y"], expected, rtol=1e-5, atol=1e-5)


def test_unrolled_loops_full_partial_and_long(run):
    x, y = buffer("X", (10, 100)), buffer("Y", (10, 100))
    i, j = Var("i"), Var("j")
    full = loop(i, 3, loop(j, 100, store(y, (i, j), load(x, i, j) + 1.0), LoopKind.UNROLLED),
                LoopKind.UNROLLED)
    partial = loop(i, 7, vloop(j, 100, store(y, (i + 3, j), load(x, i + 3, j) * 2.0)),
                   LoopKind.UNROLLED, lanes=3)
    kern = kernel("unrolled", [x, y], ["Y"], full, partial)
    data = np.random.default_rng(15).standard_normal((10, 100)).astype(np.float32)
    out = run(kern, zeros_for(kern, X=data))["Y"]
    np.testing.assert_array_equal(out[:3], data[:3] + 1)
    np.testing.assert_array_equal(out[3:], data[3:] * 2)


def test_allocations_on_stack_and_heap_and_copies(run):
    rows, cols, big = 6, 21, 100_000  # 400 kB: above the stack limit, malloc'ed
    x, y, z = buffer("X", (rows, 2 * cols)), buffer("Y", (rows, cols)), buffer("Z", (rows,))
    tile = Buffer("tile", (1, cols), x.dtype, level="L1")
    heap = Buffer("heap", (big,), x.dtype, level="DRAM")
    i, j, h = Var("i"), Var("j"), Var("h")
    # every other element of row i of X into the tile, then doubled into Y
    copy = Copy(Region(tile, (const(0), const(0)), (1, cols)),
                Region(x, (i, const(1)), (1, cols), (1, 2)))
    rows_body = loop(i, rows, Allocate(tile, seq(
        copy, vloop(j, cols, store(y, (i, j), load(tile, 0, j) * 2.0)))))
    fill = vloop(h, big, store(heap, (h,), h.astype("float32")))
    total = loop(i, rows, store(z, (i,), load(heap, big - 1 - i) + load(heap, i * 7)))
    kern = kernel("allocs", [x, y, z], ["Y", "Z"], rows_body, Allocate(heap, seq(fill, total)))
    data = np.random.default_rng(16).standard_normal((rows, 2 * cols)).astype(np.float32)
    out = run(kern, zeros_for(kern, X=data))
    np.testing.assert_array_equal(out["Y"], data[:, 1::2] * 2)
    idx = np.arange(rows)
    np.testing.assert_array_equal(out["Z"], (big - 1 - idx) + idx * 7.0)


def test_allocated_buffers_start_zeroed(run):
    n = 50
    y = buffer("Y", (n,))
    scratch = Buffer("scratch", (n,), y.dtype, level="L1")
    i = Var("i")
    kern = kernel("zeroed", [y], ["Y"],
                  Allocate(scratch, vloop(i, n, store(y, (i,), load(scratch, i) + 1.0))))
    np.testing.assert_array_equal(run(kern, {"Y": np.full(n, 9, np.float32)})["Y"],
                                  np.ones(n, np.float32))


def test_a_buffer_written_before_read_is_not_filled(native, run):
    # zeroed=False: the lowering writes every element first, so no memset is emitted
    n = 50
    x, y = buffer("X", (n,)), buffer("Y", (n,))
    scratch = Buffer("scratch", (n,), y.dtype, level="L1")
    i = Var("i")
    body = seq(vloop(i, n, store(scratch, (i,), load(x, i) * 3.0)),
               vloop(i, n, store(y, (i,), load(scratch, n - 1 - i))))
    filled = kernel("filled", [x, y], ["Y"], Allocate(scratch, body))
    unfilled = kernel("unfilled", [x, y], ["Y"], Allocate(scratch, body, zeroed=False))
    assert "llvm.memset" in native.codegen(filled).text
    assert "llvm.memset" not in native.codegen(unfilled).text
    data = np.arange(n, dtype=np.float32)
    np.testing.assert_array_equal(run(unfilled, zeros_for(unfilled, X=data))["Y"],
                                  data[::-1] * 3)


# parallel loops --------------------------------------------------------------------------
def _parallel_kernel(rows: int, cols: int):
    x, y = buffer("X", (rows, cols)), buffer("Y", (rows, cols))
    scratch = Buffer("row_scratch", (cols,), x.dtype, level="L1")
    i, j = Var("i"), Var("j")
    body = loop(i, rows, seq(
        vloop(j, cols, store(scratch, (j,), load(x, i, j) * load(x, i, j))),
        vloop(j, cols, store(y, (i, j), load(scratch, cols - 1 - j) + i.astype("float32")))),
        LoopKind.PARALLEL)
    return kernel("parallel_rows", [x, y], ["Y"], Allocate(scratch, body))


def test_parallel_chunks_equal_the_serial_run(native):
    rows, cols = 301, 257
    kern = _parallel_kernel(rows, cols)
    data = np.random.default_rng(17).standard_normal((rows, cols)).astype(np.float32)
    source = native.codegen(kern)
    assert source.meta["parallel_extent"] == rows and source.meta["parallel_safe"]
    two = X86Avx512Target(threads=2).load(native.build(source))
    one = X86Avx512Target(threads=1).load(native.build(source))
    parallel, serial = zeros_for(kern, X=data), zeros_for(kern, X=data)
    two(parallel)
    one(serial)
    np.testing.assert_array_equal(parallel["Y"], serial["Y"])
    np.testing.assert_array_equal(serial["Y"], (data * data)[:, ::-1] + np.arange(
        rows, dtype=np.float32)[:, None])
    # one chunk only (the ABI's [begin, end)), clamped to the loop's range
    part = zeros_for(kern, X=data)
    one.run_range(part, 100, 10_000)
    assert not part["Y"][:100].any()
    np.testing.assert_array_equal(part["Y"][100:], serial["Y"][100:])


def test_racing_parallel_loops_run_on_one_thread(native):
    rows, cols = 400, 128
    x, s = buffer("X", (rows, cols)), buffer("S", (1,))
    i, j = Var("i"), Var("j")
    body = loop(i, rows, vloop(j, cols, store(s, (0,), load(x, i, j), ReduceOp.SUM)),
                LoopKind.PARALLEL)
    kern = kernel("racing", [x, s], ["S"], body)
    source = native.codegen(kern)
    assert source.meta["parallel_safe"] is False
    data = np.ones((rows, cols), np.float32)
    arrays = zeros_for(kern, X=data)
    X86Avx512Target(threads=2).load(native.build(source))(arrays)
    assert arrays["S"][0] == rows * cols


@pytest.mark.parametrize("threads", [1, 2])
def test_two_python_threads_can_call_one_kernel(native, threads):
    from concurrent.futures import ThreadPoolExecutor

    kern = _parallel_kernel(64, 40)
    function = X86Avx512Target(threads=threads).compile_kernel(kern)
    rng = np.random.default_rng(18)
    inputs = [rng.standard_normal((64, 40)).astype(np.float32) for _ in range(6)]

    def call(data):
        arrays = zeros_for(kern, X=data)
        function(arrays)
        return arrays["Y"]

    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(call, inputs))
    for data, result in zip(inputs, results):
        np.testing.assert_array_equal(result, (data * data)[:, ::-1] + np.arange(
            64, dtype=np.float32)[:, None])


def test_nested_vector_loops_and_single_lanes(native, run):
    rows, cols = 5, 19
    x, y = buffer("X", (rows, cols)), buffer("Y", (rows, cols))
    i, j = Var("i"), Var("j")
    nested = vloop(i, rows, vloop(j, cols, store(y, (i, j), load(x, i, j) * 3.0)), lanes=4)
    kern = kernel("nested", [x, y], ["Y"], nested)
    assert "inside the vector loop over i" in native.codegen(kern).meta["notes"][0]
    data = np.random.default_rng(26).standard_normal((rows, cols)).astype(np.float32)
    np.testing.assert_array_equal(run(kern, zeros_for(kern, X=data))["Y"], data * 3)
    single = kernel("single_lane", [x, y], ["Y"],
                    loop(i, rows, vloop(j, cols, store(y, (i, j), -load(x, i, j)), lanes=1)))
    np.testing.assert_array_equal(run(single, zeros_for(single, X=data))["Y"], -data)


def test_stack_budget_moves_buffers_to_the_heap(native):
    from tilecraft_x86_avx512.codegen import CodegenOptions

    n = 64
    x, y = buffer("X", (4, n)), buffer("Y", (4, n))
    i, j = Var("i"), Var("j")
    scratch = Buffer("scratch", (n,), x.dtype, level="L1")
    # four unrolled copies of the Allocate: only two fit the (tiny) stack budget
    body = loop(i, 4, Allocate(scratch, seq(
        vloop(j, n, store(scratch, (j,), load(x, i, j) + 1.0)),
        vloop(j, n, store(y, (i, j), load(scratch, n - 1 - j))))), LoopKind.UNROLLED)
    kern = kernel("budget", [x, y], ["Y"], body)
    small = X86Avx512Target(CodegenOptions(stack_budget_bytes=2 * n * 4))
    source = small.codegen(kern)
    assert source.text.count("alloca [64 x float]") == 2
    assert source.text.count('call ptr @"aligned_alloc"') == 2
    assert source.text.count('call void @"free"') == 2
    data = np.random.default_rng(27).standard_normal((4, n)).astype(np.float32)
    arrays = zeros_for(kern, X=data)
    small.load(small.build(source))(arrays)
    np.testing.assert_array_equal(arrays["Y"], (data + 1)[:, ::-1])
