"""The structure of lowered kernels: the default (CPU strategy's) schedule, explicit schedules
built with the primitives, clamping of guarded loads, options from a target spec, and lowering
errors."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

import tilecraft as tc
from tilecraft import te
from tilecraft.dtypes import DType
from tilecraft.errors import LoweringError
from tilecraft.graph import Graph
from tilecraft.kernel_ir.interpreter import run_kernels
from tilecraft.kernel_ir.nodes import (
    Allocate,
    BufferLoad,
    For,
    Kernel,
    LoopKind,
    Seq,
    Stmt,
    Store,
    walk_expr,
)
from tilecraft.lower import LoweringOptions, lower_compute, lower_graph
from tilecraft.schedule import create_schedule
from tilecraft.schedule.strategies import schedule_with_strategy
from tilecraft.te.expr import Binary, BinaryOp

OPTIONS = LoweringOptions(vector_lanes=16, cores=2)


def _statements(stmt: Stmt) -> list[Stmt]:
    found = [stmt]
    if isinstance(stmt, Seq):
        for part in stmt.stmts:
            found += _statements(part)
    elif isinstance(stmt, (For, Allocate)):
        found += _statements(stmt.body)
    return found


def _loops(kernel: Kernel) -> list[For]:
    return [s for s in _statements(kernel.body) if isinstance(s, For)]


def _stores(kernel: Kernel) -> list[Store]:
    return [s for s in _statements(kernel.body) if isinstance(s, Store)]


def _gemm(m: int, n: int, k: int, dtype: str = "float32") -> te.Tensor:
    A = te.placeholder((m, k), dtype, name="A")
    B = te.placeholder((k, n), dtype, name="B")
    r = te.reduce_axis(k, name="k")
    return te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")


def _conv(batch: int = 1, pad_guard: bool = True) -> te.Tensor:
    X = te.placeholder((batch, 3, 6, 6), name="X")
    W = te.placeholder((2, 3, 3, 3), name="W")
    rc, ry, rx = te.reduce_axis(3, "rc"), te.reduce_axis(3, "ry"), te.reduce_axis(3, "rx")

    def body(n, f, y, x):
        yy, xx = y + ry - 1, x + rx - 1
        inside = (yy >= 0) & (yy < 6) & (xx >= 0) & (xx < 6)
        return te.sum(te.select(inside, X[n, rc, yy, xx], 0.0) * W[f, rc, ry, rx],
                      axis=[rc, ry, rx])

    return te.compute((batch, 2, 6, 6), body, name="Y")


def _clamped(load: BufferLoad) -> list[str]:
    """Per index of ``load``: 'min', 'max', 'both' or '' for the clamps applied."""
    kinds = []
    for index in load.indices:
        ops = {n.op for n in walk_expr(index) if isinstance(n, Binary)
               and n.op in (BinaryOp.MAX, BinaryOp.MIN)}
        kinds.append("both" if len(ops) == 2 else next((op.value for op in ops), ""))
    return kinds


# the default schedule ---------------------------------------------------------------------------

def test_gemm_default_schedule_parallel_reduce_vector() -> None:
    C = _gemm(17, 23, 5)
    kernel = lower_compute(C, OPTIONS)
    assert [k.name for k in kernel.params] == ["A", "B", "C"]
    assert kernel.outputs == ("C",)
    assert all(b.level == "global" for b in kernel.params)
    outer = kernel.body
    assert isinstance(outer, For) and outer.kind is LoopKind.PARALLEL and outer.var.name == "i"
    init, update = outer.body.stmts
    assert isinstance(init, For) and init.kind is LoopKind.VECTOR and init.lanes == 16
    assert isinstance(init.body, Store) and init.body.value == te.const(0.0)
    assert update.kind is LoopKind.SERIAL and update.var.name == "k"
    inner = update.body
    assert inner.kind is LoopKind.VECTOR and inner.var.name == "j" and inner.lanes == 16
    assert isinstance(inner.body, Store) and inner.body.accumulate is te.ReduceOp.SUM
    assert kernel.attrs["schedule"] == "C: i: parallel(17) > k: serial(5) > j: vector(23, lanes=16)"
    assert kernel.attrs["statement"] == C.statement()
    assert kernel.attrs["strategy"] == "cpu"
    assert [step["primitive"] for step in kernel.attrs["trace"]] == \
        ["reorder", "parallel", "vectorize"]


def test_batch_one_axes_are_dropped_and_leading_axes_fused_for_parallelism() -> None:
    Y = _conv(batch=1)
    stage = schedule_with_strategy(Y, LoweringOptions(vector_lanes=8, cores=2))[Y]
    # axes: n f y x | rc ry rx; n has extent 1, f (2) is too small alone: fuse f and y
    assert stage.describe() == "n: serial(1) > f_y: parallel(12) > rc: serial(3) > " \
                               "ry: serial(3) > rx: serial(3) > x: vector(6, lanes=8)"
    kernel = lower_compute(Y, LoweringOptions(vector_lanes=8, cores=2))
    (parallel,) = [loop for loop in _loops(kernel) if loop.kind is LoopKind.PARALLEL]
    assert parallel is kernel.body and parallel.extent == te.const(12)
    store = _stores(kernel)[0]
    fused = parallel.var
    assert store.indices[0] == te.const(0)  # the batch axis of extent 1
    assert store.indices[1] == fused // 6 and store.indices[2] == fused % 6


def test_large_leading_axis_is_not_fused() -> None:
    C = _gemm(64, 8, 3)
    stage = schedule_with_strategy(C, LoweringOptions(vector_lanes=8, cores=2))[C]
    assert stage.describe() == "i: parallel(64) > k: serial(3) > j: vector(8, lanes=8)"


def test_full_reduction_vectorises_the_reduce_axis_without_parallel_loop() -> None:
    X = te.placeholder((4, 9), name="X")
    a, b = te.reduce_axis(4, "a"), te.reduce_axis(9, "b")
    S = te.compute((1,), lambda i: te.sum(X[a, b], axis=[a, b]), name="S")
    kernel = lower_compute(S, OPTIONS)
    loops = _loops(kernel)
    # a and b are contiguous in X: fused into one vector loop of 36 (the CPU strategy)
    assert [(loop.var.name, loop.kind) for loop in loops] == [("a_b", LoopKind.VECTOR)]
    vector = loops[-1]
    store = vector.body
    assert isinstance(store, Store) and store.accumulate is te.ReduceOp.SUM
    assert all(vector.var not in walk_expr(index) for index in store.indices)


def test_innermost_extent_one_vectorises_reduction() -> None:
    kernel = lower_compute(_gemm(8, 1, 37), OPTIONS)
    loops = _loops(kernel)
    assert loops[0].kind is LoopKind.PARALLEL and loops[0].var.name == "i"
    assert loops[-1].var.name == "k" and loops[-1].kind is LoopKind.VECTOR


def test_switches_and_loop_kinds_turn_off_parallel_and_vector() -> None:
    C = _gemm(9, 10, 4)
    for options in (LoweringOptions(parallel=False, vectorize=False),
                    LoweringOptions(loop_kinds=frozenset({LoopKind.SERIAL})),
                    LoweringOptions(vector_lanes=1, parallel=False)):
        kernel = lower_compute(C, options)
        assert {loop.kind for loop in _loops(kernel)} == {LoopKind.SERIAL}
        # the innermost spatial axis still runs inside the reduction
        assert [loop.var.name for loop in _loops(kernel)] == ["i", "j", "k", "j"]


def test_lanes_follow_the_output_dtype() -> None:
    options = LoweringOptions(vector_lanes={"float32": 16, "int32": 8, "float16": 32})
    assert _loops(lower_compute(_gemm(3, 40, 2), options))[-1].lanes == 16
    assert _loops(lower_compute(_gemm(3, 40, 2, "int32"), options))[-1].lanes == 8
    assert _loops(lower_compute(_gemm(3, 40, 2, "float16"), options))[-1].lanes == 32


def test_small_reduce_loop_is_unrolled() -> None:
    kernel = lower_compute(_conv(), LoweringOptions(vector_lanes=8, unroll_limit=3))
    kinds = {loop.var.name: (loop.kind, loop.lanes) for loop in _loops(kernel)}
    assert kinds["rx"] == (LoopKind.UNROLLED, 3)
    assert kinds["ry"][0] is LoopKind.SERIAL


def test_half_output_accumulates_in_a_float32_local_buffer() -> None:
    options = LoweringOptions(register_level="registers", vector_lanes=16)
    kernel = lower_compute(_gemm(5, 7, 3, "float16"), options)
    (alloc,) = [s for s in _statements(kernel.body) if isinstance(s, Allocate)]
    assert alloc.buffer.dtype is DType.FLOAT32 and alloc.buffer.level == "registers"
    assert alloc.buffer.shape == (7,)
    final = _stores(kernel)[-1]
    assert final.buffer.name == "C" and final.value.dtype is DType.FLOAT16
    assert isinstance(final.value, te.Cast)
    # too big for the register level: the accumulator goes to the parameter level
    small = LoweringOptions(register_level="registers", register_bytes=16)
    kernel = lower_compute(_gemm(5, 7, 3, "float16"), small)
    (alloc,) = [s for s in _statements(kernel.body) if isinstance(s, Allocate)]
    assert alloc.buffer.level == "global"


def test_guard_protected_loads_are_clamped_and_others_are_not() -> None:
    kernel = lower_compute(_conv(), OPTIONS)
    loads = [n for s in _stores(kernel) for n in walk_expr(s.value) if isinstance(n, BufferLoad)]
    by_name = {load.buffer.name: load for load in loads}
    assert _clamped(by_name["X"]) == ["", "", "both", "both"]
    assert _clamped(by_name["W"]) == ["", "", "", ""]

    A = te.placeholder((8,), name="A")
    shifted = te.compute((8,), lambda i: te.select(i >= 1, A[i - 1], 0.0) + A[i], name="S")
    loads = [n for n in walk_expr(_stores(lower_compute(shifted, OPTIONS))[0].value)
             if isinstance(n, BufferLoad)]
    assert [_clamped(load) for load in loads] == [["max"], [""]]


def test_clamped_loads_never_read_out_of_bounds_in_either_branch() -> None:
    # evaluating both sides of every select (as vector code does) stays inside the buffers
    kernel = lower_compute(_conv(), OPTIONS)
    x, w = np.ones((1, 3, 6, 6), np.float32), np.ones((2, 3, 3, 3), np.float32)
    out = run_kernels([kernel], {"X": x, "W": w})["Y"]
    assert out[0, 0, 0, 0] == 12.0 and out[0, 0, 2, 2] == 27.0


# explicit schedules, built with the primitives -------------------------------------------------

def test_explicit_schedule_reorders_and_fuses_axes() -> None:
    C = _gemm(6, 10, 7)
    s = create_schedule(C, OPTIONS)
    i, j = s[C].axes
    s[C].parallel(s[C].fuse(i, j, name="i_j"))
    s[C].unroll(s[C].reduce_axes[0])
    (kernel,) = s.lower(OPTIONS)
    assert [(loop.var.name, loop.kind) for loop in _loops(kernel)] == [
        ("i_j", LoopKind.PARALLEL), ("k", LoopKind.UNROLLED)]
    assert kernel.attrs["schedule"] == "C: i_j: parallel(60) > k: unrolled(7)"
    a = np.arange(42, dtype=np.float32).reshape(6, 7)
    b = np.arange(70, dtype=np.float32).reshape(7, 10) / 10
    out = run_kernels([kernel], {"A": a, "B": b})["C"]
    np.testing.assert_allclose(out, a @ b, rtol=1e-5)


def test_explicit_schedule_with_reduce_outermost_and_a_local_accumulator() -> None:
    C = _gemm(4, 5, 6)
    s = create_schedule(C, OPTIONS)
    local = s.cache_write(C, "global")
    i, j = s[local].axes
    s[local].reorder(s[local].reduce_axes[0], i, j)
    s[local].vectorize(j, lanes=4)
    (kernel,) = s.lower(OPTIONS)
    (alloc,) = [st for st in _statements(kernel.body) if isinstance(st, Allocate)]
    assert alloc.buffer.shape == (4, 5) and alloc.buffer.dtype is DType.FLOAT32
    a = np.random.default_rng(1).standard_normal((4, 6)).astype(np.float32)
    b = np.random.default_rng(2).standard_normal((6, 5)).astype(np.float32)
    out = run_kernels([kernel], {"A": a, "B": b})["C"]
    np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-6)


def test_bound_loops_from_a_schedule() -> None:
    C = _gemm(4, 8, 3)
    s = create_schedule(C)
    i, j = s[C].axes
    s[C].bind(i, "blockIdx.x")
    s[C].bind(j, "threadIdx.x")
    (kernel,) = s.lower(OPTIONS)
    assert [loop.axis for loop in _loops(kernel)[:2]] == ["blockIdx.x", "threadIdx.x"]
    a, b = np.ones((4, 3), np.float32), np.ones((3, 8), np.float32)
    assert (run_kernels([kernel], {"A": a, "B": b})["C"] == 3.0).all()


# graphs, options, errors -------------------------------------------------------------------------

def test_lower_graph_orders_kernels_and_params() -> None:
    X = te.placeholder((3, 4), name="X")
    Y = te.placeholder((4,), name="Y")
    T = te.compute((3, 4), lambda i, j: X[i, j] + Y[j], name="T")
    U = te.compute((3, 4), lambda i, j: Y[j] * T[i, j] + X[i, j], name="U")
    kernels = lower_graph(Graph.from_outputs([U]), OPTIONS)
    assert [k.name for k in kernels] == ["T", "U"]
    assert [b.name for b in kernels[1].params] == ["Y", "T", "X", "U"]


def test_placeholder_and_duplicate_names_cannot_be_lowered() -> None:
    X = te.placeholder((3,), name="X")
    with pytest.raises(LoweringError, match="not a compute"):
        lower_compute(X, OPTIONS)
    other = te.placeholder((3,), name="X")
    Z = te.compute((3,), lambda i: X[i] + other[i], name="Z")
    with pytest.raises(LoweringError, match="both named 'X'"):
        lower_compute(Z, OPTIONS)


def test_options_from_a_duck_typed_spec() -> None:
    levels = (SimpleNamespace(name="DRAM", size_bytes=None),
              SimpleNamespace(name="L1", size_bytes=48 * 1024),
              SimpleNamespace(name="registers", size_bytes=2048))
    spec = SimpleNamespace(
        name="toy", memory=SimpleNamespace(levels=levels),
        compute=SimpleNamespace(cores=4, vector_bits=256,
                                lanes=lambda dtype: 256 // DType.parse(dtype).bits),
        primitives=("split", "vectorize", "unroll"),
        loop_kinds=(LoopKind.SERIAL, LoopKind.VECTOR, LoopKind.UNROLLED))
    options = LoweringOptions.from_spec(spec)
    assert options.param_level == "DRAM" and options.register_level == "registers"
    assert options.register_bytes == 2048 and options.cores == 4
    assert options.lanes("float32") == 8 and options.lanes(DType.INT8) == 32
    assert options.parallel is False and options.vectorize is True and options.unroll_limit > 0
    kernel = lower_compute(_gemm(5, 9, 3), options)
    assert {loop.kind for loop in _loops(kernel)} <= {LoopKind.SERIAL, LoopKind.VECTOR,
                                                      LoopKind.UNROLLED}
    assert kernel.params[0].level == "DRAM"
    assert LoweringOptions.from_spec(spec, vectorize=False).vectorize is False


def test_options_from_a_real_target_spec() -> None:
    spec_module = pytest.importorskip("tilecraft.target.spec")
    spec = spec_module.load_spec({
        "name": "toy", "api_version": 1, "version": "0.1",
        "memory": {"levels": [
            {"name": "DRAM", "size_bytes": None, "bandwidth_bytes_per_cycle": 8, "kind": "dram"},
            {"name": "SRAM", "size_bytes": 65536, "bandwidth_bytes_per_cycle": 64}]},
        "compute": {"cores": 2, "frequency_hz": 1e9, "vector_bits": 256},
        "primitives": ["split", "reorder", "vectorize", "parallel"],
        "loop_kinds": ["serial", "vector", "parallel"],
        "evaluation": "estimate",
        "capabilities": {"models_performance": True}})
    options = LoweringOptions.from_spec(spec)
    assert (options.param_level, options.register_level) == ("DRAM", "SRAM")
    assert options.lanes("float32") == 8 and options.parallel and options.vectorize
    C = _gemm(16, 9, 3, "float16")
    kernel = lower_compute(C, options)
    a = np.ones((16, 3), np.float16)
    b = np.full((3, 9), 0.5, np.float16)
    out = run_kernels([kernel], {"A": a, "B": b})["C"]
    assert (out == 1.5).all()
    np.testing.assert_array_equal(out, tc.reference.run(C, A=a, B=b))


def test_loop_variables_never_share_a_name_with_a_buffer() -> None:
    # source-level code generators use both as identifiers: a loop `w` next to a weight `w`
    X = te.placeholder((4, 6), name="x")
    W = te.placeholder((6,), name="w")
    out = te.compute((4, 6), lambda x, w: X[x, w] * W[w], name="out")
    assert [a.name for a in out.axes] == ["x", "w"]
    kernel = lower_compute(out, OPTIONS)
    assert [loop.var.name for loop in _loops(kernel)] == ["x1", "w1"]
    assert "for w1 in vector(6, lanes=16):" in str(kernel)
