"""Every schedule primitive preserves what a program computes: reference(program) ==
interpret(lower(schedule)), on matmul, conv2d with its pad producer, the softmax chain, an
elementwise chain and batch_matmul, with awkward shapes (primes, size 1, non-divisible
splits)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

from tilecraft import ops, te
from tilecraft.kernel_ir.nodes import (
    Allocate,
    Copy,
    For,
    IfThenElse,
    Kernel,
    LoopKind,
    Seq,
    Stmt,
    Store,
)
from tilecraft.lower import LoweringOptions
from tilecraft.schedule import Schedule, create_schedule
from tilecraft.schedule.verify import check_schedule

OPTIONS = LoweringOptions(vector_lanes=8, register_level="register", register_bytes=4096)


@dataclass
class Program:
    outputs: list[te.Tensor]
    tensors: dict[str, te.Tensor]
    inputs: dict[str, np.ndarray]

    def schedule(self) -> Schedule:
        return create_schedule(self.outputs)

    def __getitem__(self, name: str) -> te.Tensor:
        return self.tensors[name]


def _rand(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def matmul(m: int = 13, n: int = 11, k: int = 7) -> Program:
    rng = np.random.default_rng(m * 100 + n * 10 + k)
    A = te.placeholder((m, k), name="A")
    B = te.placeholder((k, n), name="B")
    C = ops.matmul(A, B, name="C")
    return Program([C], {"C": C}, {"A": _rand(rng, m, k), "B": _rand(rng, k, n)})


def conv() -> Program:
    rng = np.random.default_rng(1)
    x = te.placeholder((1, 3, 7, 5), name="x")
    w = te.placeholder((4, 3, 3, 3), name="w")
    y = ops.conv2d(x, w, padding=1, name="y")
    pad = y.inputs[0]
    return Program([y], {"y": y, "pad": pad}, {"x": _rand(rng, 1, 3, 7, 5),
                                               "w": _rand(rng, 4, 3, 3, 3)})


def softmax() -> Program:
    rng = np.random.default_rng(2)
    x = te.placeholder((5, 13), name="x")
    y = ops.softmax(x, name="y")
    graph_tensors = {t.name: t for t in create_schedule(y).graph.computes}
    return Program([y], graph_tensors, {"x": _rand(rng, 5, 13)})


def chain() -> Program:
    rng = np.random.default_rng(3)
    A = te.placeholder((6, 10), name="A")
    B = te.compute((6, 10), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((6, 10), lambda i, j: te.max(B[i, j] + 1.0, 0.0), name="C")
    D = te.compute((6, 9), lambda i, j: C[i, j] - C[i, j + 1] + A[i, j], name="D")
    return Program([D], {"B": B, "C": C, "D": D}, {"A": _rand(rng, 6, 10)})


def batch_matmul() -> Program:
    rng = np.random.default_rng(4)
    a = te.placeholder((3, 5, 6), name="a")
    b = te.placeholder((3, 6, 7), name="b")
    c = ops.batch_matmul(a, b, name="c")
    return Program([c], {"c": c}, {"a": _rand(rng, 3, 5, 6), "b": _rand(rng, 3, 6, 7)})


def check(program: Program, schedule: Schedule, target=OPTIONS) -> list[Kernel]:
    check_schedule(schedule, program.inputs, target)
    return schedule.lower(target)


def statements(stmt: Stmt) -> list[Stmt]:
    found = [stmt]
    if isinstance(stmt, Seq):
        for part in stmt.stmts:
            found += statements(part)
    elif isinstance(stmt, (For, Allocate)):
        found += statements(stmt.body)
    elif isinstance(stmt, IfThenElse):
        found += statements(stmt.then_body)
    return found


def accumulation_loops(stmt: Stmt, path: tuple[str, ...] = ()) -> tuple[str, ...] | None:
    """The loop variables around the first accumulating store, outermost first."""
    if isinstance(stmt, Store) and stmt.accumulate is not None:
        return path
    if isinstance(stmt, For):
        return accumulation_loops(stmt.body, path + (stmt.var.name,))
    children = stmt.stmts if isinstance(stmt, Seq) else \
        (stmt.body,) if isinstance(stmt, Allocate) else \
        (stmt.then_body,) if isinstance(stmt, IfThenElse) else ()
    for child in children:
        found = accumulation_loops(child, path)
        if found is not None:
            return found
    return None


def loops(kernel: Kernel) -> list[For]:
    return [s for s in statements(kernel.body) if isinstance(s, For)]


def kinds(kernel: Kernel) -> dict[str, LoopKind]:
    return {loop.var.name: loop.kind for loop in loops(kernel)}


# the untransformed schedule ------------------------------------------------------------------
@pytest.mark.parametrize("build", [matmul, conv, softmax, chain, batch_matmul])
def test_untransformed_schedule_matches_reference(build: Callable[[], Program]) -> None:
    program = build()
    kernels = check(program, program.schedule())
    assert [k.name for k in kernels] == [t.name for t in program.schedule().graph.computes]


def test_size_one_axes_get_no_loop() -> None:
    program = matmul(1, 9, 1)
    kernel = check(program, program.schedule())[0]
    assert [loop.var.name for loop in loops(kernel)] == ["j"]


# split ------------------------------------------------------------------------------------
@pytest.mark.parametrize("factor", [1, 2, 4, 13, 16])
def test_split_spatial_by_any_factor(factor: int) -> None:
    program = matmul()
    s = program.schedule()
    C = program["C"]
    outer, inner = s[C].split(s[C].axes[0], factor=factor)
    kernel = check(program, s)[0]
    extents = {loop.var.name: int(loop.extent.value) for loop in loops(kernel)}
    assert extents.get("i_outer", 1) == -(-13 // factor)
    assert extents.get("i_inner", 1) == factor
    guards = [s for s in statements(kernel.body) if isinstance(s, IfThenElse)]
    assert bool(guards) == (13 % factor != 0)


@pytest.mark.parametrize("nparts", [1, 3, 5, 20])
def test_split_by_nparts(nparts: int) -> None:
    program = batch_matmul()
    s = program.schedule()
    c = program["c"]
    outer, inner = s[c].split(s[c].axes[2], nparts=nparts)
    assert outer.extent == nparts and inner.extent == -(-7 // nparts)
    check(program, s)


def test_split_reduce_axis_with_tail_and_nested_splits() -> None:
    program = matmul(5, 4, 11)
    s = program.schedule()
    C = program["C"]
    ko, ki = s[C].split(s[C].reduce_axes[0], factor=4)
    kio, kii = s[C].split(ki, factor=3)
    s[C].reorder(ko, kio, s[C].axes[0], kii)
    check(program, s)


def test_split_of_pad_producer_and_softmax_rows() -> None:
    program = conv()
    s = program.schedule()
    pad = program["pad"]
    s[pad].split(s[pad].axes[2], factor=4)
    check(program, s)
    program = softmax()
    s = program.schedule()
    s["y_exp"].split(s["y_exp"].axes[1], factor=5)
    s["y_sum"].split(s["y_sum"].reduce_axes[0], factor=6)
    check(program, s)


# fuse / reorder / tile ----------------------------------------------------------------------
def test_fuse_spatial_loops_and_split_parts() -> None:
    program = batch_matmul()
    s = program.schedule()
    c = program["c"]
    b, i, j = s[c].axes
    fused = s[c].fuse(b, i)
    assert fused.extent == 15
    jo, ji = s[c].split(j, factor=3)
    s[c].fuse(fused, jo)
    check(program, s)


def test_fuse_reduce_loops_of_conv() -> None:
    program = conv()
    s = program.schedule()
    y = program["y"]
    rc, rh, rw = s[y].reduce_axes
    fused = s[y].fuse(rc, rh, rw)
    assert fused.extent == 27
    check(program, s)


def test_fuse_split_parts_with_tails_clamps_only_what_cannot_be_proven() -> None:
    program = matmul(13, 11, 7)
    s = program.schedule()
    C = program["C"]
    io, jo, ii, ji = s[C].tile(*s[C].axes, 4, 3)
    s[C].fuse(io, jo)
    check(program, s)


@pytest.mark.parametrize("order", [(2, 0, 1), (1, 2, 0), (0, 1, 2)])
def test_reorder_reduce_loops_anywhere(order: tuple[int, ...]) -> None:
    program = matmul()
    s = program.schedule()
    C = program["C"]
    nest = [*s[C].axes, *s[C].reduce_axes]
    s[C].reorder(*(nest[p] for p in order))
    kernel = check(program, s)[0]
    assert accumulation_loops(kernel.body) == tuple(nest[p].name for p in order)


def test_reorder_keeps_unnamed_loops_in_place() -> None:
    program = batch_matmul()
    s = program.schedule()
    c = program["c"]
    b, i, j = s[c].axes
    (k,) = s[c].reduce_axes
    s[c].reorder(k, b)
    assert [loop.name for loop in s[c].leaf_loops] == ["k", "i", "j", "b"]
    check(program, s)


@pytest.mark.parametrize("factors", [(4, 4), (5, 2), (1, 11), (13, 11)])
def test_tile(factors: tuple[int, int]) -> None:
    program = matmul()
    s = program.schedule()
    C = program["C"]
    xo, yo, xi, yi = s[C].tile(*s[C].axes, *factors)
    assert [loop.name for loop in s[C].leaf_loops][:4] == [xo.name, yo.name, xi.name, yi.name]
    check(program, s)


# annotations ----------------------------------------------------------------------------
def test_unroll_vectorize_parallel_on_matmul() -> None:
    program = matmul(16, 19, 6)
    s = program.schedule()
    C = program["C"]
    i, j = s[C].axes
    (k,) = s[C].reduce_axes
    io, ii = s[C].split(i, factor=4)
    s[C].reorder(io, k, ii, j)
    s[C].parallel(io)
    s[C].unroll(ii)
    s[C].vectorize(j)
    kernel = check(program, s)[0]
    found = kinds(kernel)
    assert found["i_outer"] is LoopKind.PARALLEL and found["i_inner"] is LoopKind.UNROLLED
    assert found["j"] is LoopKind.VECTOR
    assert isinstance(kernel.body, For) and kernel.body.kind is LoopKind.PARALLEL
    vector = next(loop for loop in loops(kernel) if loop.kind is LoopKind.VECTOR)
    assert vector.lanes == 8


def test_unroll_with_factor_and_vector_with_lanes() -> None:
    program = chain()
    s = program.schedule()
    D = program["D"]
    i, j = s[D].axes
    s[D].unroll(i, factor=2)
    s[D].vectorize(j, lanes=4)
    kernel = check(program, s)[-1]
    by_name = {loop.var.name: loop for loop in loops(kernel)}
    assert by_name["i"].lanes == 2 and by_name["j"].lanes == 4


def test_vectorized_reduction_of_softmax_and_gemv() -> None:
    program = softmax()
    s = program.schedule()
    for name in ("y_max", "y_sum"):
        s[name].vectorize(s[name].reduce_axes[0])
    kernels = check(program, s)
    assert any(loop.kind is LoopKind.VECTOR for loop in loops(kernels[0]))
    rng = np.random.default_rng(5)
    A = te.placeholder((3, 37), name="A")
    x = te.placeholder((37,), name="x")
    y = ops.gemv(A, x, name="y")
    s = create_schedule(y)
    ko, ki = s[y].split(s[y].reduce_axes[0], factor=8)
    s[y].vectorize(ki)
    check_schedule(s, {"A": _rand(rng, 3, 37), "x": _rand(rng, 37)}, OPTIONS)


def test_parallel_fused_batch_loops() -> None:
    program = batch_matmul()
    s = program.schedule()
    c = program["c"]
    b, i, j = s[c].axes
    s[c].reorder(s[c].reduce_axes[0], j)
    s[c].parallel(s[c].fuse(b, i))
    s[c].vectorize(j)
    kernel = check(program, s)[0]
    assert kernel.body.kind is LoopKind.PARALLEL and int(kernel.body.extent.value) == 15


# inline ---------------------------------------------------------------------------------
def test_inline_pad_into_conv() -> None:
    program = conv()
    s = program.schedule()
    s[program["pad"]].compute_inline()
    kernels = check(program, s)
    assert [k.name for k in kernels] == ["y"]
    assert [b.name for b in kernels[0].params] == ["x", "w", "y"]


def test_inline_elementwise_chain_and_softmax_steps() -> None:
    program = chain()
    s = program.schedule()
    s[program["B"]].compute_inline()
    s[program["C"]].compute_inline()
    kernels = check(program, s)
    assert [k.name for k in kernels] == ["D"]
    program = softmax()
    s = program.schedule()
    s["y_sub"].compute_inline()
    s["y_exp"].compute_inline()
    assert [k.name for k in check(program, s)] == ["y_max", "y_sum", "y"]


def test_inline_rounds_half_precision_producers_as_storing_would() -> None:
    A = te.placeholder((4, 5), "float16", name="A")
    P = te.compute((4, 5), lambda i, j: A[i, j] * 3.3, name="P")
    Q = te.compute((4, 5), lambda i, j: P[i, j] + 1.1, name="Q")
    s = create_schedule(Q)
    s[P].compute_inline()
    values = np.linspace(-3, 3, 20, dtype=np.float16).reshape(4, 5)
    check_schedule(s, {"A": values}, OPTIONS, rtol=0, atol=0)


# compute_at -----------------------------------------------------------------------------
@pytest.mark.parametrize("loop", ["n", "k", "h.outer", "h.inner", "w", "rc"])
def test_compute_pad_at_each_conv_loop(loop: str) -> None:
    program = conv()
    s = program.schedule()
    y, pad = program["y"], program["pad"]
    s[y].split(s[y].axes[2], factor=3)
    s[pad].compute_at(s[y], loop)
    kernels = check(program, s)
    assert [k.name for k in kernels] == ["y"]
    allocs = [st.buffer for st in statements(kernels[0].body) if isinstance(st, Allocate)]
    (local,) = [b for b in allocs if b.name == pad.name]
    assert local.size <= pad.size


def test_compute_at_infers_a_sliding_window_region() -> None:
    program = chain()
    s = program.schedule()
    C, D = program["C"], program["D"]
    i, j = s[D].axes
    jo, ji = s[D].split(j, factor=4)
    s[C].compute_at(s[D], jo)
    kernels = check(program, s)
    allocs = [st.buffer for st in statements(kernels[-1].body) if isinstance(st, Allocate)]
    assert [b.shape for b in allocs if b.name == "C"] == [(1, 5)]  # 4 columns and one more


def test_compute_at_chains_and_reduction_producers() -> None:
    program = chain()
    s = program.schedule()
    B, C, D = program["B"], program["C"], program["D"]
    s[C].compute_at(s[D], s[D].axes[0])
    s[B].compute_at(s[C], s[C].axes[1])
    assert [k.name for k in check(program, s)] == ["D"]
    program = matmul(6, 10, 5)
    C = program["C"]
    R = ops.relu(C, name="R")
    program = Program([R], {"C": C, "R": R}, program.inputs)
    s = program.schedule()
    i, j = s[R].axes
    jo, ji = s[R].split(j, factor=4)
    s[C].compute_at(s[R], jo)
    s[C].reorder(s[C].reduce_axes[0], s[C].axes[1])
    s[C].vectorize(s[C].axes[1])
    assert [k.name for k in check(program, s)] == ["R"]


def test_softmax_in_one_kernel_with_siblings_at_the_same_loop() -> None:
    program = softmax()
    s = program.schedule()
    s["y_sub"].compute_inline()
    s["y_exp"].compute_inline()
    row = s["y"].axes[0]
    s["y_max"].compute_at(s["y"], row)
    s["y_sum"].compute_at(s["y"], row)
    s["y"].parallel(row)
    (kernel,) = check(program, s)
    shapes = {st.buffer.name: st.buffer.shape for st in statements(kernel.body)
              if isinstance(st, Allocate)}
    assert shapes == {"y_max": (1,), "y_sum": (1,)}


def test_compute_at_with_fused_attach_loop_and_tails() -> None:
    program = batch_matmul()
    a = te.placeholder((3, 5, 6), name="a")
    b = te.placeholder((3, 6, 7), name="b")
    scaled = te.compute((3, 5, 6), lambda n, i, k: a[n, i, k] * 0.5, name="scaled")
    c = ops.batch_matmul(scaled, b, name="c")
    program = Program([c], {"c": c, "scaled": scaled}, program.inputs)
    s = program.schedule()
    n, i, j = s[c].axes
    io, ii = s[c].split(i, factor=2)
    fused = s[c].fuse(n, io)
    s[scaled].compute_at(s[c], fused)
    check(program, s)


# cache_read / cache_write -----------------------------------------------------------------
def test_cache_read_tiles_at_a_reduce_loop() -> None:
    program = matmul(13, 11, 7)
    s = program.schedule()
    C = program["C"]
    A = C.inputs[0]
    AL = s.cache_read(A, "register")
    BL = s.cache_read(C.inputs[1], "register")
    i, j = s[C].axes
    (k,) = s[C].reduce_axes
    io, jo, ii, ji = s[C].tile(i, j, 4, 4)
    ko, ki = s[C].split(k, factor=3)
    s[C].reorder(io, jo, ko, ii, ji, ki)
    s[AL].compute_at(s[C], ko)
    s[BL].compute_at(s[C], ko)
    kernel = check(program, s)[0]
    shapes = {st.buffer.name: st.buffer.shape for st in statements(kernel.body)
              if isinstance(st, Allocate)}
    assert shapes[AL.name] == (4, 3) and shapes[BL.name] == (3, 4)
    assert [b.name for b in kernel.params] == ["A", "B", "C"]


def test_cache_read_without_compute_at_copies_at_the_top() -> None:
    program = chain()
    s = program.schedule()
    s.cache_read(program["C"], "register", readers=[program["D"]])
    kernel = check(program, s)[-1]
    assert isinstance(kernel.body, Allocate) and kernel.body.buffer.shape == (6, 10)


@pytest.mark.parametrize("build", [matmul, batch_matmul, conv])
def test_cache_write_accumulates_locally(build: Callable[[], Program]) -> None:
    program = build()
    s = program.schedule()
    out = program.outputs[0]
    cached = s.cache_write(out, "register")
    axes = s[out].axes
    inner_split = s[out].split(axes[-1], factor=3)
    s[cached].compute_at(s[out], inner_split[0])
    kernels = check(program, s)
    assert kernels[-1].name == out.name


def test_cache_write_at_the_root_and_half_precision() -> None:
    program = matmul(4, 3, 9)
    s = program.schedule()
    s.cache_write(program["C"], "global")
    check(program, s)
    rng = np.random.default_rng(6)
    A = te.placeholder((5, 17), "bfloat16", name="A")
    k = te.reduce_axis(17, name="k")
    S = te.compute((5,), lambda i: te.sum(A[i, k], axis=k), name="S")
    s = create_schedule(S)
    SL = s.cache_write(S, "register")
    s[SL].compute_at(s[S], s[S].axes[0])
    assert s[SL].tensor.dtype.value == "float32"
    values = rng.standard_normal((5, 17)).astype(np.float32).astype(A.dtype.numpy)
    check_schedule(s, {"A": values}, OPTIONS, rtol=1e-2, atol=1e-2)


# buffer / partition (targets with on-chip buffers) ---------------------------------------
def test_buffer_reads_and_writes_through_copies() -> None:
    program = chain()
    s = program.schedule()
    D = program["D"]
    s[D].buffer("BRAM", tensors=[D, program["C"], "A"])
    kernel = check(program, s)[-1]
    copies = [st for st in statements(kernel.body) if isinstance(st, Copy)]
    assert sorted(c.dst.buffer.name for c in copies) == ["A_BRAM", "C_BRAM", "D"]


def test_buffer_places_an_attached_stage_and_partition_annotates_it() -> None:
    program = chain()
    s = program.schedule()
    C, D = program["C"], program["D"]
    s[C].compute_at(s[D], s[D].axes[0])
    s[C].buffer("BRAM")
    s[C].partition(1, "cyclic", 2)
    s[C].partition(0, "complete")
    kernel = check(program, s)[-1]
    (local,) = [st.buffer for st in statements(kernel.body)
                if isinstance(st, Allocate) and st.buffer.name == "C"]
    assert local.level == "BRAM"
    assert [(p.dim, p.kind.value, p.factor) for p in local.partitions] == \
        [(1, "cyclic", 2), (0, "complete", 1)]


# several outputs -----------------------------------------------------------------------------
def test_program_with_two_outputs_and_shared_producer() -> None:
    rng = np.random.default_rng(7)
    A = te.placeholder((7, 3), name="A")
    P = te.compute((7, 3), lambda i, j: A[i, j] + 1.0, name="P")
    X = te.compute((7, 3), lambda i, j: P[i, j] * 2.0, name="X")
    Y = te.compute((3, 7), lambda i, j: P[j, i] - 1.0, name="Y")
    s = create_schedule([X, Y])
    s[P].compute_inline()
    s[Y].tile(*s[Y].axes, 2, 4)
    check_schedule(s, {"A": _rand(rng, 7, 3)}, OPTIONS)
