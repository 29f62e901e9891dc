"""The OpenCL C code generator on hand-written kernels: each program is built and run on this
machine's OpenCL device (PoCL's CPU device here) and compared with numpy; what OpenCL cannot
express, or the device cannot hold, is a TilecraftError naming the kernel."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from tilecraft_mali.codegen import generate_opencl
from tilecraft_mali.runtime.device import find_device
from tilecraft_mali.runtime.program import OpenCLBuildError, build_program
from tilecraft_mali.target import MaliTarget

from tilecraft.dtypes import DType
from tilecraft.errors import CodegenError
from tilecraft.kernel_ir import (
    Allocate,
    Barrier,
    Buffer,
    BufferLoad,
    For,
    IfThenElse,
    Kernel,
    LoopKind,
    Seq,
    Store,
)
from tilecraft.kernel_ir.concurrency import AsyncCopy, SubgroupReduce
from tilecraft.kernel_ir.nodes import Region
from tilecraft.te import ReduceOp, Var, const
from tilecraft.te.expr import CompareOp, compare

needs_device = pytest.mark.skipif(not find_device().usable, reason=find_device().reason)


@pytest.fixture(scope="module")
def target() -> MaliTarget:
    return MaliTarget()


def run(target: MaliTarget, kernel: Kernel, arrays: dict[str, np.ndarray]) -> str:
    """Generate, build and run ``kernel`` on the OpenCL device; the source text."""
    source = target.codegen(kernel)
    target.load(target.build(source))(arrays)
    return source.text


def groups(count: int, items: int, body_of, item_axis: str = "local_id.x") -> For:
    g, t = Var("g"), Var("t")
    return For(g, const(count), LoopKind.BOUND,
               For(t, const(items), LoopKind.BOUND, body_of(g, t), axis=item_axis),
               axis="group_id.x")


@needs_device
def test_local_tile_and_barrier_reverse_each_work_group(target: MaliTarget) -> None:
    n, items = 7 * 13, 13  # a prime number of work-items per group
    a, b = Buffer("A", (n,), DType.FLOAT32), Buffer("B", (n,), DType.FLOAT32)
    tile = Buffer("tile", (items,), DType.FLOAT32, level="local")
    kernel = Kernel("reverse", (a, b), ("B",), Allocate(tile, groups(7, items, lambda g, t: Seq((
        Store(tile, (t,), BufferLoad(a, (g * items + t,))),
        Barrier("work_group"),
        Store(b, (g * items + t,), BufferLoad(tile, (const(items - 1) - t,))))))))
    x = np.random.default_rng(1).standard_normal(n).astype(np.float32)
    arrays = {"A": x, "B": np.zeros(n, np.float32)}
    text = run(target, kernel, arrays)
    assert "__local float tile[13];" in text and "barrier(CLK_LOCAL_MEM_FENCE" in text
    assert "reqd_work_group_size(13, 1, 1)" in text
    np.testing.assert_array_equal(arrays["B"], x.reshape(7, items)[:, ::-1].reshape(-1))


@needs_device
@pytest.mark.parametrize(("lanes", "extent", "wide"), [(4, 8, True), (8, 16, True), (4, 6, False)])
def test_vector_loops_use_vload_where_contiguous(target: MaliTarget, lanes: int, extent: int,
                                                 wide: bool) -> None:
    rows = 5
    a = Buffer("A", (rows, extent), DType.FLOAT32)
    bias = Buffer("bias", (extent,), DType.FLOAT32)
    out = Buffer("out", (rows, extent), DType.FLOAT32)
    j = Var("j")
    kernel = Kernel("axpy", (a, bias, out), ("out",), groups(rows, 1, lambda g, t: For(
        j, const(extent), LoopKind.VECTOR, Store(out, (g, j), BufferLoad(a, (g, j)) * 2.0
                                                 + BufferLoad(bias, (j,))), lanes=lanes)))
    rng = np.random.default_rng(lanes)
    x = rng.standard_normal((rows, extent)).astype(np.float32)
    y = rng.standard_normal(extent).astype(np.float32)
    arrays = {"A": x, "bias": y, "out": np.zeros((rows, extent), np.float32)}
    text = run(target, kernel, arrays)
    assert (f"vload{lanes}(" in text and f"vstore{lanes}(" in text) is wide
    np.testing.assert_allclose(arrays["out"], x * 2 + y, rtol=1e-6)


@needs_device
def test_half_and_bfloat16_storage_round_to_nearest_even(target: MaliTarget) -> None:
    n = 37
    h = Buffer("H", (n,), DType.FLOAT16)
    out_h = Buffer("OH", (n,), DType.FLOAT16)
    out_b = Buffer("OB", (n,), DType.BFLOAT16)
    wrapped = Buffer("W", (n,), DType.INT8)
    kernel = Kernel("halves", (h, out_h, out_b, wrapped), ("OH", "OB", "W"), groups(
        1, n, lambda g, t: Seq((
            Store(out_h, (t,), BufferLoad(h, (t,)) * 3.0),
            Store(out_b, (t,), (BufferLoad(h, (t,)).astype("float32") * 1.001)
                  .astype("bfloat16")),
            Store(wrapped, (t,), (BufferLoad(h, (t,)) * 40.0).astype("int8")
                  * const(3, "int8"))))))
    x = np.random.default_rng(3).standard_normal(n).astype(np.float16) * 8
    arrays = {"H": x, "OH": np.zeros(n, np.float16),
              "OB": np.zeros(n, ml_dtypes.bfloat16), "W": np.zeros(n, np.int8)}
    text = run(target, kernel, arrays)
    assert "vload_half(" in text and "vstore_half_rte(" in text
    wide = x.astype(np.float32)
    np.testing.assert_array_equal(arrays["OH"], (wide * 3).astype(np.float16))
    np.testing.assert_array_equal(arrays["OB"],
                                  (wide * np.float32(1.001)).astype(ml_dtypes.bfloat16))
    saturated = np.clip(np.trunc(wide * 40), -128, 127).astype(np.int8)
    np.testing.assert_array_equal(arrays["W"], (saturated.astype(np.int32) * 3).astype(np.int8))


@needs_device
@pytest.mark.parametrize(("op", "dtype", "width"), [(ReduceOp.SUM, DType.FLOAT32, 8),
                                                    (ReduceOp.MAX, DType.INT32, 4)])
def test_subgroup_reductions_give_every_lane_its_group_total(
        target: MaliTarget, op: ReduceOp, dtype: DType, width: int) -> None:
    items, count = 16, 3
    a = Buffer("A", (count * items,), dtype)
    out = Buffer("out", (count * items,), dtype)
    total = Buffer("total", (1,), dtype, level="private")
    kernel = Kernel("group_reduce", (a, out), ("out",), groups(count, items, lambda g, t: (
        Allocate(total, Seq((
            SubgroupReduce(total, (const(0),), BufferLoad(a, (g * items + t,)), t, width, op),
            Store(out, (g * items + t,), BufferLoad(total, (const(0),)))))))))
    rng = np.random.default_rng(width)
    x = (rng.integers(-50, 50, count * items)).astype(dtype.numpy)
    arrays = {"A": x, "out": np.zeros_like(x)}
    run(target, kernel, arrays)
    grouped = x.reshape(-1, width)
    reduced = grouped.sum(axis=1) if op is ReduceOp.SUM else grouped.max(axis=1)
    np.testing.assert_allclose(arrays["out"], np.repeat(reduced, width), rtol=1e-6)


def test_barrier_under_a_work_item_condition_is_refused(target: MaliTarget) -> None:
    a = Buffer("A", (8,), DType.FLOAT32)
    kernel = Kernel("divergent", (a,), ("A",), groups(1, 8, lambda g, t: IfThenElse(
        compare(CompareOp.LT, t, 4), Seq((Store(a, (t,), const(1.0)), Barrier("work_group"))))))
    with pytest.raises(CodegenError, match="kernel divergent: .*work_group barrier under the "
                                           "work-item-dependent condition"):
        target.codegen(kernel)


def test_asynchronous_copies_are_refused_by_name(target: MaliTarget) -> None:
    a = Buffer("A", (8,), DType.FLOAT32)
    tile = Buffer("tile", (8,), DType.FLOAT32, level="local")
    kernel = Kernel("async", (a,), (), Allocate(tile, groups(1, 8, lambda g, t: AsyncCopy(
        Region(tile, (const(0),), (8,)), Region(a, (const(0),), (8,))))))
    with pytest.raises(CodegenError, match="kernel async: the OpenCL C code generator cannot "
                                           "express the statement AsyncCopy"):
        target.codegen(kernel)


def test_local_memory_above_the_limit_names_kernel_limit_and_value(target: MaliTarget) -> None:
    a = Buffer("A", (8,), DType.FLOAT32)
    tile = Buffer("big", (9000,), DType.FLOAT32, level="local")
    kernel = Kernel("hungry", (a,), ("A",), Allocate(tile, groups(1, 8, lambda g, t: Store(
        a, (t,), BufferLoad(tile, (t,))))))
    with pytest.raises(CodegenError, match="kernel hungry: needs 36000 bytes of __local memory "
                                           r"per work-group, above the limit of 32768 bytes"):
        generate_opencl(kernel, target.spec)


@needs_device
def test_device_local_memory_limit_is_checked_at_build() -> None:
    limit = find_device().local_mem_bytes
    with pytest.raises(CodegenError, match=f"kernel k: needs {limit + 4} bytes .* limit of "
                                           f"{limit} bytes \\(CL_DEVICE_LOCAL_MEM_SIZE"):
        build_program("__kernel void k() {}", "k", local_bytes=limit + 4)


@needs_device
def test_build_error_carries_the_log_and_the_source_path() -> None:
    with pytest.raises(OpenCLBuildError) as caught:
        build_program("__kernel void broken(__global float* a) { a[0] = undeclared; }", "broken")
    message = str(caught.value)
    assert "undeclared" in message and "python -m tilecraft_mali.runtime.program" in message
    path = message.split("generated program ")[1].split(":\n")[0]
    assert path.endswith(".cl") and "undeclared" in open(path, encoding="utf-8").read()
