"""The Kernel IR interpreter on hand-built kernels: every node kind, the numeric semantics
(shared with the reference interpreter), the vector fast path against sequential execution,
barriers, streams, and bad input."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from tilecraft import te
from tilecraft.dtypes import DType
from tilecraft.errors import IndexBoundsError, InputError, LoweringError, TargetError
from tilecraft.kernel_ir.interpreter import compile_kernel, run_kernel, run_kernels
from tilecraft.kernel_ir.nodes import (
    Allocate,
    Barrier,
    Buffer,
    BufferLoad,
    Copy,
    For,
    IfThenElse,
    IntrinsicCall,
    Kernel,
    LoopKind,
    MicroKernelCall,
    Region,
    Seq,
    Store,
    Stream,
    StreamPop,
    StreamPush,
)
from tilecraft.kernel_ir.printer import stmt_to_str
from tilecraft.reference.numerics import erf as reference_erf
from tilecraft.te import Var, const

F32, F16, BF16, I8, I32 = (DType.FLOAT32, DType.FLOAT16, DType.BFLOAT16, DType.INT8,
                           DType.INT32)
KINDS = [LoopKind.SERIAL, LoopKind.VECTOR, LoopKind.UNROLLED, LoopKind.PARALLEL]


def loop(var: Var, extent: int, body, kind: LoopKind = LoopKind.SERIAL, **extra) -> For:
    lanes = extra.pop("lanes", 8 if kind in (LoopKind.VECTOR, LoopKind.UNROLLED) else 0)
    if kind is LoopKind.PIPELINED:
        extra.setdefault("initiation_interval", 1)
    return For(var, const(extent), kind, body, lanes=lanes, **extra)


def load(buffer: Buffer, *indices) -> BufferLoad:
    return BufferLoad(buffer, tuple(te.as_expr(i) for i in indices))


def store(buffer: Buffer, indices, value, accumulate=None) -> Store:
    return Store(buffer, tuple(te.as_expr(i) for i in indices), te.as_expr(value, buffer.dtype),
                 accumulate)


def elementwise_kernel(n: int, dtype: DType, fn, kind: LoopKind = LoopKind.VECTOR,
                       in_dtype: DType | None = None) -> Kernel:
    A = Buffer("A", (n,), in_dtype or dtype)
    B = Buffer("B", (n,), dtype)
    i = Var("i")
    return Kernel("ew", (A, B), ("B",), loop(i, n, store(B, (i,), fn(load(A, i), i)), kind))


def run_elementwise(kernel: Kernel, a: np.ndarray) -> np.ndarray:
    out = np.zeros(kernel.param("B").shape, kernel.param("B").dtype.numpy)
    run_kernel(kernel, {"A": a, "B": out})
    return out


# numeric semantics -----------------------------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_int8_arithmetic_wraps(kind: LoopKind) -> None:
    a = np.array([1, 64, -100, 127, -128], np.int8)
    kernel = elementwise_kernel(5, I8, lambda x, i: x + x, kind)
    assert run_elementwise(kernel, a).tolist() == [2, -128, 56, -2, 0]


@pytest.mark.parametrize("kind", KINDS)
def test_integer_floor_division_and_modulo(kind: LoopKind) -> None:
    a = np.array([-7, -6, -1, 0, 5, 7], np.int32)
    div = run_elementwise(elementwise_kernel(6, I32, lambda x, i: x // 3, kind), a)
    mod = run_elementwise(elementwise_kernel(6, I32, lambda x, i: x % 3, kind), a)
    assert div.tolist() == [-3, -2, -1, 0, 1, 2]
    assert mod.tolist() == [2, 0, 2, 0, 2, 1]
    by_zero = run_elementwise(elementwise_kernel(6, I32, lambda x, i: x // (x - x), kind), a)
    assert by_zero.tolist() == [0] * 6


@pytest.mark.parametrize("kind", KINDS)
def test_half_types_compute_in_float32_and_round_on_store(kind: LoopKind) -> None:
    a = np.array([1.0, 2049.0, 0.1, -3.3], np.float16)
    kernel = elementwise_kernel(4, F16, lambda x, i: x * 3.0 + 1.0, kind)
    expected = (a.astype(np.float32) * np.float32(3.0) + np.float32(1.0)).astype(np.float16)
    np.testing.assert_array_equal(run_elementwise(kernel, a), expected)
    b = np.array([1.0, 1.00390625, 3.3, 7.0], ml_dtypes.bfloat16)
    kernel = elementwise_kernel(4, BF16, lambda x, i: x / 3.0, kind)
    expected = (b.astype(np.float32) / np.float32(3.0)).astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(run_elementwise(kernel, b), expected)


@pytest.mark.parametrize("kind", KINDS)
def test_casts_saturate_truncate_and_wrap(kind: LoopKind) -> None:
    a = np.array([1e10, -2.7, 2.7, -1e10, 300.0], np.float32)
    kernel = elementwise_kernel(5, I8, lambda x, i: x.astype("int8"), kind, in_dtype=F32)
    assert run_elementwise(kernel, a).tolist() == [127, -2, 2, -128, 127]
    b = np.array([300, -129, 5, 255, 128], np.int32)
    kernel = elementwise_kernel(5, I8, lambda x, i: x.astype("int8"), kind, in_dtype=I32)
    assert run_elementwise(kernel, b).tolist() == [44, 127, 5, -1, -128]
    kernel = elementwise_kernel(5, F32, lambda x, i: x.astype("float16").astype("float32"),
                                kind, in_dtype=F32)
    c = np.array([1.0004, 300.7, 0.1, 65519.0, -2.0], np.float32)
    np.testing.assert_array_equal(run_elementwise(kernel, c),
                                  c.astype(np.float16).astype(np.float32))


@pytest.mark.parametrize("kind", KINDS)
def test_transcendental_functions(kind: LoopKind) -> None:
    a = np.linspace(-4, 4, 17).astype(np.float32)
    cases = {
        te.erf: reference_erf(a.astype(np.float64)).astype(np.float32),
        te.sigmoid: (1 / (1 + np.exp(-a))).astype(np.float32),
        te.tanh: np.tanh(a), te.exp: np.exp(a), abs: np.abs(a),
        lambda x: te.sqrt(abs(x)): np.sqrt(np.abs(a)), lambda x: te.log(abs(x) + 1.0):
        np.log(np.abs(a) + 1),
    }
    for fn, expected in cases.items():
        kernel = elementwise_kernel(17, F32, lambda x, i, fn=fn: fn(x), kind)
        np.testing.assert_allclose(run_elementwise(kernel, a), expected, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("kind", KINDS)
def test_guarded_out_of_bounds_load_is_never_used(kind: LoopKind) -> None:
    # no clamp: the select guard alone keeps the load in bounds where it is taken
    A, B = Buffer("A", (6,), F32), Buffer("B", (6,), F32)
    i = Var("i")
    body = loop(i, 6, store(B, (i,), te.select(i >= 1, load(A, i - 1), -1.0)), kind)
    arrays = {"A": np.arange(6, dtype=np.float32), "B": np.zeros(6, np.float32)}
    run_kernel(Kernel("guarded", (A, B), ("B",), body), arrays)
    assert arrays["B"].tolist() == [-1.0, 0.0, 1.0, 2.0, 3.0, 4.0]


def test_buffer_that_is_no_parameter_is_rejected() -> None:
    stray = Buffer("A", (6,), F32)
    kernel = elementwise_kernel(6, F32, lambda x, i: load(stray, i), LoopKind.SERIAL)
    with pytest.raises(LoweringError, match="A is neither a parameter nor allocated"):
        run_elementwise(kernel, np.zeros(6, np.float32))


# loops, allocations, conditions -----------------------------------------------------------------

@pytest.mark.parametrize("kind", [LoopKind.SERIAL, LoopKind.VECTOR, LoopKind.UNROLLED,
                                  LoopKind.PIPELINED, LoopKind.STAGE])
def test_sequential_semantics_of_every_loop_kind(kind: LoopKind) -> None:
    A, B = Buffer("A", (7,), F32), Buffer("B", (7,), F32)
    S = Buffer("S", (1,), F32)
    i, j, k = Var("i"), Var("j"), Var("k")
    body = Seq((
        loop(i, 7, store(B, (i,), te.select(i >= 1, load(B, te.max(i - 1, 0)), 0.0)
                         + load(A, i)), kind),       # prefix sum: reads the previous result
        loop(j, 7, store(S, (0,), load(A, j) * 2.0, te.ReduceOp.SUM), kind),
        loop(k, 7, store(A, (k // 2,), load(A, k) + 100.0), kind),  # last write wins
    ))
    a = np.arange(1, 8, dtype=np.float32)
    arrays = {"A": a.copy(), "B": np.zeros(7, np.float32), "S": np.zeros(1, np.float32)}
    run_kernel(Kernel("seq", (A, B, S), ("A", "B", "S"), body), arrays)
    assert arrays["B"].tolist() == np.cumsum(a).tolist()
    assert arrays["S"].tolist() == [56.0]
    assert arrays["A"].tolist() == [102.0, 104.0, 106.0, 107.0, 5.0, 6.0, 7.0]


def test_vector_reduction_rounds_like_the_sequential_loop() -> None:
    values = np.random.default_rng(3).standard_normal(257).astype(np.float32) * 1e4
    for dtype, array in ((F32, values), (F16, values.astype(np.float16) / 8),
                         (BF16, values.astype(ml_dtypes.bfloat16))):
        A, S = Buffer("A", (257,), dtype), Buffer("S", (1,), dtype)
        results = []
        for kind in (LoopKind.SERIAL, LoopKind.VECTOR):
            r = Var("r")
            kernel = Kernel("sum", (A, S), ("S",),
                            loop(r, 257, store(S, (0,), load(A, r), te.ReduceOp.SUM), kind))
            out = np.zeros(1, dtype.numpy)
            run_kernel(kernel, {"A": array, "S": out})
            results.append(out[0])
        total = np.float32(0)
        for value in array:
            total = np.float32(dtype.numpy.type(total + np.float32(value)))
        assert results[0] == results[1] == dtype.numpy.type(total)


def test_allocate_is_zero_initialised_each_time() -> None:
    A, B = Buffer("A", (3, 4), F32), Buffer("B", (3,), F32)
    T = Buffer("T", (1,), F32, level="registers")
    i, j = Var("i"), Var("j")
    body = loop(i, 3, Allocate(T, Seq((
        loop(j, 4, store(T, (0,), load(A, i, j), te.ReduceOp.SUM), LoopKind.VECTOR),
        store(B, (i,), load(T, 0))))), LoopKind.PARALLEL)
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    arrays = {"A": a, "B": np.zeros(3, np.float32)}
    run_kernel(Kernel("rowsum", (A, B), ("B",), body), arrays)
    assert arrays["B"].tolist() == a.sum(axis=1).tolist()


@pytest.mark.parametrize("lockstep", [False, True])
def test_allocate_not_zeroed_poisons_a_read_before_write(lockstep: bool) -> None:
    # a lowering that marks a buffer not zeroed promises to write before reading; where it
    # does not, the interpreter's NaN (the integer maximum) shows in the result
    A, B, C = Buffer("A", (4,), F32), Buffer("B", (4,), F32), Buffer("C", (4,), I32)
    T, U = Buffer("T", (4,), F32, level="shared"), Buffer("U", (4,), I32, level="shared")
    i = Var("i")
    writes_first = Seq((store(T, (i,), load(A, i) * 2.0), store(B, (i,), load(T, i))))
    reads_first = Seq((store(U, (i,), load(U, i) + 1), store(C, (i,), load(U, i))))
    inner = Seq((writes_first, Barrier("block"))) if lockstep else writes_first
    axis = {"axis": "threadIdx.x"} if lockstep else {}
    kind = LoopKind.BOUND if lockstep else LoopKind.SERIAL
    body = Allocate(T, Allocate(U, Seq((loop(i, 4, inner, kind, **axis),
                                        loop(i, 4, reads_first, kind, **axis))),
                                zeroed=False), zeroed=False)
    arrays = {"A": np.arange(4, dtype=np.float32), "B": np.zeros(4, np.float32),
              "C": np.zeros(4, np.int32)}
    run_kernel(Kernel("k", (A, B, C), ("B", "C"), body), arrays)
    assert arrays["B"].tolist() == [0.0, 2.0, 4.0, 6.0]
    assert (arrays["C"] == np.iinfo(np.int32).min).all()   # the maximum plus one wraps
    zeroed = Allocate(U, Seq((loop(i, 4, reads_first, kind, **axis),)))
    run_kernel(Kernel("k", (A, B, C), ("B", "C"), Allocate(T, zeroed)), arrays)
    assert arrays["C"].tolist() == [1, 1, 1, 1]
    assert "(not zeroed)" in stmt_to_str(body)


def test_if_then_else_and_symbolic_extents() -> None:
    A = Buffer("A", (4, 4), I32)
    i, j = Var("i"), Var("j")
    body = loop(i, 4, For(j, i + 1, LoopKind.SERIAL, IfThenElse(
        te.eq(j, i), store(A, (i, j), const(1)), store(A, (i, j), i * 10 + j))))
    out = np.full((4, 4), -1, np.int32)
    run_kernel(Kernel("tri", (A,), ("A",), body), {"A": out})
    assert out.tolist() == [[1, -1, -1, -1], [10, 1, -1, -1], [20, 21, 1, -1],
                            [30, 31, 32, 1]]


def test_a_twenty_cube_gemm_runs_serial_and_vector() -> None:
    A, B, C = Buffer("A", (20, 20), F32), Buffer("B", (20, 20), F32), Buffer("C", (20, 20), F32)
    a = np.random.default_rng(0).standard_normal((20, 20)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal((20, 20)).astype(np.float32)
    for kind in (LoopKind.SERIAL, LoopKind.VECTOR):
        i, j, k = Var("i"), Var("j"), Var("k")
        body = loop(i, 20, loop(k, 20, loop(j, 20, store(
            C, (i, j), load(A, i, k) * load(B, k, j), te.ReduceOp.SUM), kind)),
            LoopKind.PARALLEL)
        program = compile_kernel(Kernel("gemm", (A, B, C), ("C",), body))
        for _ in range(2):  # compiled once, run twice
            out = np.zeros((20, 20), np.float32)
            program({"A": a, "B": b, "C": out})
            np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)


# copies, calls, barriers, streams -------------------------------------------------------------

def test_copy_of_strided_regions_converts_dtype() -> None:
    A = Buffer("A", (4, 6), F32)
    B = Buffer("B", (2, 3), F16)
    L = Buffer("L", (6,), F16, level="L1")
    body = Allocate(L, Seq((
        Copy(Region(L, (const(0),), (6,)), Region(A, (const(1), const(0)), (2, 3), (2, 2))),
        Copy(Region(B, (const(0), const(0)), (2, 3)), Region(L, (const(0),), (6,))))))
    a = np.arange(24, dtype=np.float32).reshape(4, 6) + 0.1
    out = np.zeros((2, 3), np.float16)
    run_kernel(Kernel("copy", (A, B), ("B",), body), {"A": a, "B": out})
    np.testing.assert_array_equal(out, a[1:4:2, 0:6:2].astype(np.float16))


def test_intrinsic_and_micro_kernel_calls_use_registered_semantics() -> None:
    A, B, C = Buffer("A", (8, 4), F32), Buffer("B", (4, 8), F32), Buffer("C", (8, 8), F32)
    io, jo = Var("io"), Var("jo")
    mma = IntrinsicCall("mma_4x4x4", (Region(C, (io * 4, jo * 4), (4, 4)),
                                      Region(A, (io * 4, const(0)), (4, 4)),
                                      Region(B, (const(0), jo * 4), (4, 4))))
    scale = MicroKernelCall("scale", (Region(C, (const(0), const(0)), (8, 8)),),
                            params=(("factor", 0.5),))
    body = Seq((loop(io, 2, loop(jo, 2, mma)), scale))
    kernel = Kernel("tiles", (A, B, C), ("C",), body)
    calls: list[str] = []

    def mma_4x4x4(c, a, b):
        calls.append("mma")
        c += a @ b

    def scale_fn(c, factor):
        c *= factor

    a = np.random.default_rng(4).standard_normal((8, 4)).astype(np.float32)
    b = np.random.default_rng(5).standard_normal((4, 8)).astype(np.float32)
    out = np.zeros((8, 8), np.float32)
    run_kernel(kernel, {"A": a, "B": b, "C": out},
               semantics={"mma_4x4x4": mma_4x4x4, "scale": scale_fn})
    np.testing.assert_allclose(out, (a @ b) * 0.5, rtol=1e-5, atol=1e-6)
    assert calls == ["mma"] * 4
    with pytest.raises(TargetError, match="no semantics for it.*semantics=\\{'scale'"):
        run_kernel(kernel, {"A": a, "B": b, "C": out}, semantics={"mma_4x4x4": mma_4x4x4})


def test_barrier_makes_threads_advance_in_lockstep() -> None:
    # each thread writes shared memory, then reads another thread's element: without lockstep
    # execution thread 0 would read before thread 7 wrote
    A, B = Buffer("A", (2, 8), F32), Buffer("B", (2, 8), F32)
    shared = Buffer("tile", (8,), F32, level="shared")
    bx, tx = Var("bx"), Var("tx")
    body = loop(bx, 2, Allocate(shared, loop(tx, 8, Seq((
        store(shared, (tx,), load(A, bx, tx) * 10.0),
        Barrier("block"),
        store(B, (bx, tx), load(shared, 7 - tx)),
    )), LoopKind.BOUND, axis="threadIdx.x")), LoopKind.BOUND, axis="blockIdx.x")
    a = np.arange(16, dtype=np.float32).reshape(2, 8)
    arrays = {"A": a, "B": np.zeros((2, 8), np.float32)}
    run_kernel(Kernel("reverse", (A, B), ("B",), body), arrays)
    assert arrays["B"].tolist() == (a[:, ::-1] * 10).tolist()


def test_barriers_inside_a_uniform_loop_of_thread_code() -> None:
    # a tiled row sum: per tile, threads stage a value into shared memory, sync, thread 0 adds
    A, S = Buffer("A", (12,), F32), Buffer("S", (1,), F32)
    shared = Buffer("stage", (4,), F32, level="shared")
    local = Buffer("acc", (1,), F32, level="registers")
    tx, ko, t = Var("tx"), Var("ko"), Var("t")
    body = Allocate(shared, loop(tx, 4, Allocate(local, Seq((
        loop(ko, 3, Seq((
            store(shared, (tx,), load(A, ko * 4 + tx)),
            Barrier(),
            IfThenElse(te.eq(tx, 0), loop(t, 4, store(local, (0,), load(shared, t),
                                                      te.ReduceOp.SUM))),
            Barrier(),
        ))),
        IfThenElse(te.eq(tx, 0), store(S, (0,), load(local, 0))),
    ))), LoopKind.BOUND, axis="threadIdx.x"))
    a = np.arange(12, dtype=np.float32)
    arrays = {"A": a, "S": np.zeros(1, np.float32)}
    run_kernel(Kernel("tiled_sum", (A, S), ("S",), body), arrays)
    assert arrays["S"].tolist() == [66.0]


def test_barrier_under_a_divergent_condition_is_an_error() -> None:
    A = Buffer("A", (4,), F32)
    tx = Var("tx")
    body = loop(tx, 4, IfThenElse(tx < 2, Seq((Barrier(), store(A, (tx,), 1.0)))),
                LoopKind.BOUND, axis="threadIdx.x")
    with pytest.raises(LoweringError, match="differs between threads"):
        run_kernel(Kernel("diverge", (A,), ("A",), body), {"A": np.zeros(4, np.float32)})


def test_streams_connect_dataflow_stages() -> None:
    A, B = Buffer("A", (5,), I32), Buffer("B", (5,), I32)
    fifo = Stream("fifo", I32, depth=2)
    i, j, s1, s2 = Var("i"), Var("j"), Var("s1"), Var("s2")
    producer = loop(s1, 1, loop(i, 5, StreamPush(fifo, load(A, i) * 3), LoopKind.PIPELINED,
                                initiation_interval=1), LoopKind.STAGE)
    consumer = loop(s2, 1, loop(j, 5, StreamPop(fifo, B, (j,)), LoopKind.PIPELINED,
                                initiation_interval=1), LoopKind.STAGE)
    arrays = {"A": np.arange(5, dtype=np.int32), "B": np.zeros(5, np.int32)}
    run_kernel(Kernel("dataflow", (A, B), ("B",), Seq((producer, consumer))), arrays)
    assert arrays["B"].tolist() == [0, 3, 6, 9, 12]
    with pytest.raises(LoweringError, match="stream fifo is popped while empty"):
        run_kernel(Kernel("dataflow", (A, B), ("B",), Seq((consumer, producer))), arrays)


# errors -----------------------------------------------------------------------------------------

def test_out_of_bounds_access_names_buffer_index_and_loop_values() -> None:
    A, B = Buffer("A", (5,), F32), Buffer("B", (5,), F32)
    i = Var("i")
    for kind in KINDS:
        kernel = Kernel("shift", (A, B), ("B",), loop(i, 5, store(B, (i,), load(A, i + 1)), kind))
        with pytest.raises(IndexBoundsError, match=r"kernel shift: load A\[\(i \+ 1\)\]: "
                           r"index \(5\) is outside A of shape \[5\] \(with i=4\)"):
            run_kernel(kernel, {"A": np.zeros(5, np.float32), "B": np.zeros(5, np.float32)})


def test_array_validation() -> None:
    kernel = elementwise_kernel(4, F32, lambda x, i: x + 1.0)
    good = {"A": np.zeros(4, np.float32), "B": np.zeros(4, np.float32)}
    cases = [
        ({"A": good["A"]}, "no array given for parameter\\(s\\) B"),
        ({**good, "C": good["A"]}, "unknown array name\\(s\\) C"),
        ({**good, "A": np.zeros(5, np.float32)}, "array A has shape \\(5,\\) but the parameter "
         "has shape \\(4,\\)"),
        ({**good, "A": np.zeros(4, np.float64)}, "array A has dtype float64 but the parameter "
         "is float32"),
        ({**good, "A": [0.0] * 4}, "must be a numpy array, got list"),
    ]
    for arrays, message in cases:
        with pytest.raises(InputError, match=message):
            run_kernel(kernel, arrays)
    frozen = np.zeros(4, np.float32)
    frozen.setflags(write=False)
    with pytest.raises(InputError, match="output array B is read-only"):
        run_kernel(kernel, {"A": good["A"], "B": frozen})


def test_kernels_left_in_te_form_are_rejected_before_running() -> None:
    X = te.placeholder((4,), name="X")
    B = Buffer("B", (4,), F32)
    i = Var("i")
    kernel = Kernel("raw", (B,), ("B",), loop(i, 4, store(B, (i,), X[0])))
    with pytest.raises(LoweringError, match="te node X\\[0\\] \\(Load\\) is not Kernel IR"):
        run_kernel(kernel, {"B": np.zeros(4, np.float32)})


def test_run_kernels_allocates_intermediates_and_outputs() -> None:
    A, T, U = Buffer("A", (3,), F32), Buffer("T", (3,), F32), Buffer("U", (3,), F32)
    i, j = Var("i"), Var("j")
    first = Kernel("T", (A, T), ("T",), loop(i, 3, store(T, (i,), load(A, i) + 1.0)))
    second = Kernel("U", (T, U), ("U",), loop(j, 3, store(U, (j,), load(T, j) * 2.0)))
    arrays = run_kernels([first, second], {"A": np.arange(3, dtype=np.float32)})
    assert arrays["T"].tolist() == [1.0, 2.0, 3.0] and arrays["U"].tolist() == [2.0, 4.0, 6.0]
