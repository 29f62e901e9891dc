"""The Kernel IR constructs of concurrent hardware: each correct kernel runs on the interpreter
and matches numpy; each illegal one is refused by the verifier (or, where only execution can
tell, by the interpreter) with a message naming the kernel and the statement."""

from __future__ import annotations

import numpy as np
import pytest

from tilecraft.dtypes import DType
from tilecraft.errors import LoweringError
from tilecraft.kernel_ir import (
    Allocate,
    AsyncCopy,
    AtomicUpdate,
    Barrier,
    Buffer,
    BufferLoad,
    CommitGroup,
    Dataflow,
    For,
    IfThenElse,
    Kernel,
    LaneReduce,
    LoopKind,
    Pipeline,
    Region,
    Seq,
    Store,
    Stream,
    StreamPop,
    StreamPush,
    SubgroupReduce,
    WaitGroup,
    stmt_to_str,
)
from tilecraft.kernel_ir.interpreter import run_kernel
from tilecraft.kernel_ir.verify import verify_kernel
from tilecraft.target.registry import get_target
from tilecraft.te import Var, const
from tilecraft.te.expr import ReduceOp

F32 = DType.FLOAT32
RNG = np.random.default_rng(20)


def _serial(var: Var, extent: int, body: object) -> For:
    return For(var, const(extent), LoopKind.SERIAL, body)


def _bound(var: Var, extent: int, body: object, axis: str = "threadIdx.x") -> For:
    return For(var, const(extent), LoopKind.BOUND, body, axis=axis)


# asynchronous copies --------------------------------------------------------------------------

def _staged_copy(wait: bool, pending: int = 0) -> Kernel:
    """Copy A into shared S asynchronously, then B[i] = S[i] * 2."""
    A, B = Buffer("A", (8,), F32), Buffer("B", (8,), F32)
    S = Buffer("S", (8,), F32, level="shared")
    i = Var("i")
    issue = [AsyncCopy(Region(S, (const(0),), (8,)), Region(A, (const(0),), (8,))),
             CommitGroup()]
    if wait:
        issue.append(WaitGroup(pending))
    use = _serial(i, 8, Store(B, (i,), BufferLoad(S, (i,)) * 2.0))
    tail = [] if wait and pending == 0 else [WaitGroup(0)]
    return Kernel("staged", (A, B), ("B",), Allocate(S, Seq((*issue, use, *tail))))


def test_async_copy_lands_at_its_wait() -> None:
    kernel = _staged_copy(wait=True)
    verify_kernel(kernel)
    a = RNG.standard_normal(8).astype(np.float32)
    out = np.zeros(8, np.float32)
    run_kernel(kernel, {"A": a, "B": out})
    np.testing.assert_array_equal(out, a * 2.0)
    assert "async_copy S[0 : 8] <- A[0 : 8]" in stmt_to_str(kernel.body)
    assert "wait_group(0)" in stmt_to_str(kernel.body)


@pytest.mark.parametrize("pending", [None, 1])
def test_read_before_wait_is_refused(pending: int | None) -> None:
    kernel = _staged_copy(wait=pending is not None, pending=pending or 0)
    with pytest.raises(LoweringError, match=r"kernel staged: .*S is read while the asynchronous "
                                            r"copy `async_copy S\[0 : 8\] <- A\[0 : 8\]`"):
        verify_kernel(kernel)


def test_copy_never_waited_is_refused() -> None:
    A = Buffer("A", (4,), F32)
    S = Buffer("S", (4,), F32, level="shared")
    body = Allocate(S, AsyncCopy(Region(S, (const(0),), (4,)), Region(A, (const(0),), (4,))))
    with pytest.raises(LoweringError, match="never waited for before the kernel ends"):
        verify_kernel(Kernel("lost", (A,), ("A",), body))


def _double_buffered(wait_pending: int) -> Kernel:
    """A manual two-stage cp.async pipeline: the copy of tile t+1 overlaps the use of tile t;
    ``wait_group(1)`` retires tile t's group (``wait_group(2)`` would retire none)."""
    tiles, width = 4, 8
    A = Buffer("A", (tiles, width), F32)
    B = Buffer("B", (tiles, width), F32)
    S = Buffer("S", (2, width), F32, level="shared")
    t, j = Var("t"), Var("j")

    def fetch(tile: object) -> Seq:
        return Seq((AsyncCopy(Region(S, (tile % 2, const(0)), (1, width)),
                              Region(A, (tile, const(0)), (1, width))), CommitGroup()))

    step = Seq((
        IfThenElse(t + 1 < tiles, fetch(t + 1), CommitGroup()),
        WaitGroup(wait_pending),
        _serial(j, width, Store(B, (t, j), BufferLoad(S, (t % 2, j)) + 1.0)),
    ))
    body = Allocate(S, Seq((fetch(const(0)), _serial(t, tiles, step), WaitGroup(0))))
    return Kernel("double_buffered", (A, B), ("B",), body)


def test_double_buffered_async_pipeline_matches_numpy() -> None:
    kernel = _double_buffered(1)
    verify_kernel(kernel)
    a = RNG.standard_normal((4, 8)).astype(np.float32)
    out = np.zeros((4, 8), np.float32)
    run_kernel(kernel, {"A": a, "B": out})
    np.testing.assert_array_equal(out, a + 1.0)


def test_waiting_for_too_few_groups_is_caught_when_run() -> None:
    # the slot being read is another region than the one in flight: only execution can tell
    kernel = _double_buffered(2)
    out = np.zeros((4, 8), np.float32)
    with pytest.raises(LoweringError, match=r"kernel double_buffered: S\[\(t % 2\), j\] reads S "
                                            r"while an asynchronous copy"):
        run_kernel(kernel, {"A": np.ones((4, 8), np.float32), "B": out})


# multi-stage pipelines ------------------------------------------------------------------------

def _pipeline(depth: int, stages: int = 3) -> Kernel:
    """copy-in / compute / copy-out of 6 rows through rotating UB buffers (Ascend style); the
    copy-out also reads X, which is therefore live across all three stages."""
    rows, width = 6, 16
    A, C = Buffer("A", (rows, width), F32, level="GM"), Buffer("C", (rows, width), F32, level="GM")
    X = Buffer("X", (depth, width), F32, level="UB")
    Y = Buffer("Y", (depth, width), F32, level="UB")
    r, j, k = Var("r"), Var("j"), Var("k")
    slot = r % depth
    copy_in = _serial(j, width, Store(X, (slot, j), BufferLoad(A, (r, j))))
    compute = _serial(j, width, Store(Y, (slot, j), BufferLoad(X, (slot, j)) * 3.0 + 1.0))
    copy_out = _serial(k, width, Store(C, (r, k), BufferLoad(Y, (slot, k)) +
                                       BufferLoad(X, (slot, k))))
    parts = (copy_in, compute, copy_out)[:stages]
    body = Allocate(X, Allocate(Y, Pipeline(r, const(rows), parts, depth=depth, buffers=(X, Y))))
    return Kernel("pipelined", (A, C), ("C",), body)


def test_double_buffered_pipeline_matches_numpy() -> None:
    kernel = _pipeline(depth=3)
    verify_kernel(kernel, get_target("ascend_npu").spec)
    a = RNG.standard_normal((6, 16)).astype(np.float32)
    out = np.zeros((6, 16), np.float32)
    run_kernel(kernel, {"A": a, "C": out})
    np.testing.assert_allclose(out, a * 4.0 + 1.0, rtol=1e-6)
    assert "pipeline r in range(6), depth=3 rotating X, Y:" in stmt_to_str(kernel.body)


def test_pipeline_with_too_few_buffers_is_refused_and_would_be_wrong() -> None:
    kernel = _pipeline(depth=2)
    with pytest.raises(LoweringError, match=r"rotating buffer X is used by stages 0 to 2, which "
                                            r"overlap 3 iterations, but the pipeline has depth 2"
                                            r".*use depth >= 3"):
        verify_kernel(kernel)
    # the interpreter shows why: the overlapped stages read overwritten copies
    from tilecraft.kernel_ir.interpreter import InterpretedKernel
    a = RNG.standard_normal((6, 16)).astype(np.float32)
    out = np.zeros((6, 16), np.float32)
    InterpretedKernel(kernel, {})({"A": a, "C": out})
    assert not np.allclose(out, a * 4.0 + 1.0)
    # Y alone spans two stages: with X not read by the copy-out, depth 2 is enough
    verify_kernel(_pipeline(depth=2, stages=2))


def test_rotating_buffer_indexed_without_the_rotation_is_refused() -> None:
    rows = 4
    A, C = Buffer("A", (rows,), F32), Buffer("C", (rows,), F32)
    X = Buffer("X", (2, 1), F32, level="shared")
    r = Var("r")
    stages = (Store(X, (const(0), const(0)), BufferLoad(A, (r,))),
              Store(C, (r,), BufferLoad(X, (const(0), const(0)))))
    kernel = Kernel("fixed_slot", (A, C), ("C",),
                    Allocate(X, Pipeline(r, const(rows), stages, depth=2, buffers=(X,))))
    with pytest.raises(LoweringError, match=r"rotating buffer X is indexed with 0 in its first "
                                            r"dimension; pick the stage's copy with "
                                            r"\(r \+ c\) % 2"):
        verify_kernel(kernel)


# dataflow regions -----------------------------------------------------------------------------

def _dataflow(pops: int = 8, consumer_first: bool = False) -> Kernel:
    A, C = Buffer("A", (8,), F32, level="DDR"), Buffer("C", (8,), F32, level="DDR")
    s1, s2 = Stream("s1", F32, depth=2), Stream("s2", F32, depth=2)
    T = Buffer("T", (1,), F32, level="BRAM")
    U = Buffer("U", (1,), F32, level="BRAM")
    i, j, k = Var("i"), Var("j"), Var("k")
    zero = (const(0),)
    read = For(i, const(8), LoopKind.STAGE, StreamPush(s1, BufferLoad(A, (i,))))
    compute = For(j, const(8), LoopKind.PIPELINED, Seq((
        StreamPop(s1, T, zero), StreamPush(s2, BufferLoad(T, zero) * BufferLoad(T, zero)))),
        initiation_interval=1)
    write = For(k, const(pops), LoopKind.STAGE, Seq((
        StreamPop(s2, U, zero), Store(C, (k,), BufferLoad(U, zero)))))
    stages = (read, write, compute) if consumer_first else (read, compute, write)
    body = Allocate(T, Allocate(U, Dataflow(stages, (s1, s2))))
    return Kernel("dataflow", (A, C), ("C",), body)


def test_dataflow_region_matches_numpy() -> None:
    kernel = _dataflow()
    verify_kernel(kernel, get_target("fpga_hls").spec)
    a = RNG.standard_normal(8).astype(np.float32)
    out = np.zeros(8, np.float32)
    run_kernel(kernel, {"A": a, "C": out})
    np.testing.assert_allclose(out, a * a, rtol=1e-6)
    assert "dataflow streams s1: float32 depth 2, s2: float32 depth 2:" in \
        stmt_to_str(kernel.body)


@pytest.mark.parametrize(("kernel", "message"), [
    (_dataflow(pops=6), "stream s2 is pushed 8 times but popped 6 times"),
    (_dataflow(consumer_first=True),
     "stream s2 is popped by stage 1 but pushed by stage 2; order the producer"),
])
def test_unbalanced_or_misordered_streams_are_refused(kernel: Kernel, message: str) -> None:
    with pytest.raises(LoweringError, match=f"kernel dataflow: .*{message}"):
        verify_kernel(kernel)


# atomics, subgroup and lane reductions --------------------------------------------------------

def _histogram(atomic: bool) -> Kernel:
    V = Buffer("V", (32,), DType.INT32)
    H = Buffer("H", (4,), DType.INT32)
    t = Var("t")
    bin_of = BufferLoad(V, (t,)) % 4
    update = AtomicUpdate(H, (bin_of,), const(1, DType.INT32)) if atomic else \
        Store(H, (bin_of,), const(1, DType.INT32), accumulate=ReduceOp.SUM)
    return Kernel("histogram", (V, H), ("H",), _bound(t, 32, update))


def test_atomic_histogram_matches_numpy() -> None:
    kernel = _histogram(atomic=True)
    verify_kernel(kernel, get_target("nvidia_tc").spec)
    values = RNG.integers(0, 100, 32).astype(np.int32)
    hist = np.zeros(4, np.int32)
    run_kernel(kernel, {"V": values, "H": hist})
    np.testing.assert_array_equal(hist, np.bincount(values % 4, minlength=4))


def test_plain_accumulation_shared_by_threads_is_a_race() -> None:
    with pytest.raises(LoweringError, match=r"kernel histogram: .*every thread of t \(axis "
                                            r"threadIdx.x\) accumulates into the same element "
                                            r"of H, a race; use AtomicUpdate"):
        verify_kernel(_histogram(atomic=False))


def _warp_sum(width: int) -> Kernel:
    A = Buffer("A", (2, 32), F32)
    R = Buffer("R", (2, 32), F32)
    w, lane = Var("w"), Var("lane")
    reduce = SubgroupReduce(R, (w, lane), BufferLoad(A, (w, lane)), lane, width)
    return Kernel("warp_sum", (A, R), ("R",),
                  _bound(w, 2, _bound(lane, 32, reduce), axis="blockIdx.x"))


def test_subgroup_reduction_gives_every_lane_its_group_sum() -> None:
    kernel = _warp_sum(16)
    verify_kernel(kernel, get_target("nvidia_tc").spec)
    a = RNG.standard_normal((2, 32)).astype(np.float32)
    out = np.zeros((2, 32), np.float32)
    run_kernel(kernel, {"A": a, "R": out})
    sums = a.reshape(2, 2, 16).sum(axis=2)
    np.testing.assert_allclose(out, np.repeat(sums, 16, axis=1), rtol=1e-5)


def test_subgroup_wider_than_the_warp_is_refused() -> None:
    spec = get_target("mali").spec  # subgroups of 8
    kernel = _warp_sum(16)
    with pytest.raises(LoweringError, match="width 16 exceeds the subgroup size 8 of mali"):
        verify_kernel(kernel, spec.model_copy(update={"threads": spec.threads.model_copy(
            update={"axes": get_target("nvidia_tc").spec.threads.axes,
                    "max_threads_per_block": 1024})}), check_bounds=False)


def test_vector_element_types_and_lane_reduction() -> None:
    """int8x4 dot products, as Mali's char4 and arm_dot: sum of lanes of a * b."""
    A = Buffer("A", (6,), DType.INT32, lanes=4)
    B = Buffer("B", (6,), DType.INT32, lanes=4)
    D = Buffer("D", (6,), DType.INT32)
    i = Var("i")
    product = BufferLoad(A, (i,)) * BufferLoad(B, (i,))
    kernel = Kernel("dot4", (A, B, D), ("D",),
                    _serial(i, 6, Store(D, (i,), LaneReduce(ReduceOp.SUM, product))))
    verify_kernel(kernel)
    a = RNG.integers(-9, 9, (6, 4)).astype(np.int32)
    b = RNG.integers(-9, 9, (6, 4)).astype(np.int32)
    out = np.zeros(6, np.int32)
    run_kernel(kernel, {"A": a, "B": b, "D": out})
    np.testing.assert_array_equal(out, (a * b).sum(axis=1))
    assert "kernel dot4(A: int32x4[6], B: int32x4[6], D: int32[6])" in str(kernel)
    unreduced = Kernel("dot4", (A, B, D), ("D",), _serial(i, 6, Store(D, (i,), product)))
    with pytest.raises(LoweringError, match="the value is a vector of 4 lanes but D holds "
                                            "int32; reduce it with LaneReduce"):
        verify_kernel(unreduced)


# names checked against the spec ---------------------------------------------------------------

def test_bound_axis_barrier_scope_and_level_are_checked_against_the_spec() -> None:
    spec = get_target("nvidia_tc").spec
    A = Buffer("A", (4,), F32)
    i = Var("i")
    store = Store(A, (i,), const(1.0))
    ok = Kernel("named", (A,), ("A",), _bound(i, 4, Seq((Barrier("block"), store))))
    verify_kernel(ok, spec)
    cases = [
        (_bound(i, 4, store, axis="get_local_id.0"),
         r"bound to axis 'get_local_id.0', which is not a bindable axis of nvidia_tc "
         r"\(blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x, threadIdx.y, threadIdx.z\)"),
        (For(i, const(4), LoopKind.BOUND, store, axis="threadIdx.z"), None),
        (_bound(i, 4, Seq((Barrier("work_group"), store))),
         r"barrier scope 'work_group' is not one of nvidia_tc's barrier scopes \(block, warp\)"),
    ]
    for body, message in cases:
        kernel = Kernel("named", (A,), ("A",), body)
        if message is None:
            verify_kernel(kernel, spec)
            continue
        with pytest.raises(LoweringError, match=f"kernel named: .*{message}"):
            verify_kernel(kernel, spec)
    big = Buffer("A", (128,), F32)
    too_many = Kernel("named", (big,), ("A",),
                      For(i, const(128), LoopKind.BOUND, Store(big, (i,), const(1.0)),
                          axis="threadIdx.z"))
    with pytest.raises(LoweringError, match="axis threadIdx.z of nvidia_tc allows at most 64"):
        verify_kernel(too_many, spec)
    x86 = get_target("x86_avx512").spec
    D = Buffer("A", (4,), F32, level="DRAM")
    with pytest.raises(LoweringError, match=r"barrier scope 'block' is not one of x86_avx512's "
                                            r"barrier scopes \(none"):
        verify_kernel(Kernel("named", (D,), ("A",), Seq((Barrier("block"),))), x86)


def test_x86_codegen_names_the_concurrent_construct_it_cannot_express() -> None:
    from tilecraft.errors import CodegenError

    A = Buffer("A", (8,), F32, level="DRAM")
    S = Buffer("S", (8,), F32, level="L1")
    copy = AsyncCopy(Region(S, (const(0),), (8,)), Region(A, (const(0),), (8,)))
    kernel = Kernel("staged", (A,), ("A",), Allocate(S, Seq((copy, CommitGroup(),
                                                              WaitGroup(0)))))
    with pytest.raises(CodegenError, match="x86_avx512 cannot generate AsyncCopy in kernel "
                                           "'staged': x86 has no asynchronous copy engine"):
        get_target("x86_avx512").codegen(kernel)


def _block_exchange(wait_before_read: bool) -> Kernel:
    """Each thread of a block copies one element into shared memory asynchronously, then reads
    the element its mirror thread copied: legal only after a wait and a barrier."""
    A, B = Buffer("A", (16,), F32), Buffer("B", (16,), F32)
    S = Buffer("S", (8,), F32, level="shared")
    b, t = Var("b"), Var("t")
    copy = AsyncCopy(Region(S, (t,), (1,)), Region(A, (b * 8 + t,), (1,)))
    read = Store(B, (b * 8 + t,), BufferLoad(S, (7 - t,)) * 2.0)
    steps = (copy, CommitGroup(), WaitGroup(0), Barrier("block"), read) if wait_before_read \
        else (copy, CommitGroup(), Barrier("block"), read, WaitGroup(0))
    body = _bound(b, 2, Allocate(S, _bound(t, 8, Seq(steps))), axis="blockIdx.x")
    return Kernel("exchange", (A, B), ("B",), body)


def test_threads_exchange_through_async_copies_after_wait_and_barrier() -> None:
    kernel = _block_exchange(wait_before_read=True)
    verify_kernel(kernel, get_target("nvidia_tc").spec)
    a = RNG.standard_normal(16).astype(np.float32)
    out = np.zeros(16, np.float32)
    run_kernel(kernel, {"A": a, "B": out})
    np.testing.assert_array_equal(out, a.reshape(2, 8)[:, ::-1].reshape(-1) * 2.0)


def test_reading_another_threads_copy_before_its_wait_is_caught() -> None:
    kernel = _block_exchange(wait_before_read=False)
    with pytest.raises(LoweringError, match=r"kernel exchange: S\[\(7 - t\)\] reads S while an "
                                            r"asynchronous copy into that element is still"):
        run_kernel(kernel, {"A": np.ones(16, np.float32), "B": np.zeros(16, np.float32)})
