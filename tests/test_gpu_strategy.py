"""The GPU strategy's row reductions and vector accesses, on the scaffolded GPU spec (warps of
32, 1024 threads per block, 8 cores) and the mali plugin's (subgroups of 8, work-groups of
384, 256-bit vectors): a long row reduces on a block of subgroups whose totals meet in shared
memory behind a block barrier; a short one on one subgroup; an elementwise kernel whose
innermost axis walks memory gives each thread a vector of the spec's lanes. Every kernel is
verified against its spec and interpreted against numpy on awkward shapes."""

from __future__ import annotations

import tempfile
from dataclasses import replace
from functools import cache
from pathlib import Path

import numpy as np
import pytest

import tilecraft as tc
from tilecraft import te
from tilecraft.errors import TargetError
from tilecraft.kernel_ir import Allocate, Barrier, For, Kernel, LoopKind, SubgroupReduce, walk_stmts
from tilecraft.kernel_ir.interpreter import run_kernels
from tilecraft.lower import LoweringOptions, lower_compute
from tilecraft.scaffold import render_target_package
from tilecraft.schedule import create_schedule
from tilecraft.schedule.strategies.gpu import row_threads
from tilecraft.schedule.strategies.gpu_vectors import vector_lanes
from tilecraft.target.spec import TargetSpec


@cache
def _gpu_spec() -> TargetSpec:
    directory = Path(tempfile.mkdtemp(prefix="tilecraft-scaffold-gpu-"))
    render_target_package("toy_gpu", directory, "gpu")
    return TargetSpec.from_yaml(directory / "toy_gpu" / "tilecraft_toy_gpu" / "spec.yaml")


def _mali_spec() -> TargetSpec:
    from tilecraft.target.registry import get_target

    try:
        return get_target("mali").spec
    except TargetError:
        pytest.skip("the mali plugin is not installed")


def _options(spec: TargetSpec | None = None) -> LoweringOptions:
    return LoweringOptions.from_spec(spec or _gpu_spec())


def _row_reduction(rows: int, n: int, op: str = "sum", dtype: str = "float32") -> te.Tensor:
    A = te.placeholder((rows, n), dtype, name="A")
    k = te.reduce_axis(n, name="k")
    reduce = te.sum if op == "sum" else te.max
    return te.compute((rows,), lambda i: reduce(A[i, k], axis=k), name="S")


def _of(kernel: Kernel, kind: type) -> list:
    return [stmt for stmt in walk_stmts(kernel.body) if isinstance(stmt, kind)]


def _vector_loops(kernel: Kernel) -> list[For]:
    return [loop for loop in _of(kernel, For) if loop.kind is LoopKind.VECTOR]


# row reductions -----------------------------------------------------------------------------

@pytest.mark.parametrize(("rows", "n", "threads"), [
    (7, 13, 16),        # a short row: one subgroup, no wider than the row
    (3, 70, 32),        # one subgroup
    (3, 600, 64),       # two subgroups: 600 elements are more than 32 threads x 16
    (3, 5000, 512),     # few long rows: 16 subgroups
    (1, 4097, 512),
    (64, 5000, 128),    # 64 rows fill 4 of the cores' 256 resident subgroups each
    (4096, 5000, 32),   # the rows alone fill the cores: one subgroup a row
])
def test_row_threads_grow_with_the_row_and_shrink_with_the_rows(rows, n, threads) -> None:
    assert row_threads(_row_reduction(rows, n), _options()) == threads


def test_row_threads_stay_one_subgroup_without_shared_memory_or_barriers() -> None:
    options = _options()
    bare = replace(options, threads=options.threads.model_copy(
        update={"shared_level": None}))
    assert row_threads(_row_reduction(3, 5000), bare) == 32
    bare = replace(options, threads=options.threads.model_copy(update={"barrier_scopes": ()}))
    assert row_threads(_row_reduction(3, 5000), bare) == 32


@pytest.mark.parametrize(("rows", "n", "op", "dtype"), [
    (3, 5000, "sum", "float32"), (1, 4097, "max", "float32"), (2, 1009, "sum", "float32"),
    (1, 4097, "sum", "float16"), (5, 2, "max", "float32"), (2, 997, "max", "float16")])
def test_long_rows_reduce_on_a_block_of_subgroups(rows, n, op, dtype) -> None:
    S = _row_reduction(rows, n, op, dtype)
    options = _options()
    kernel = lower_compute(S, options)
    width = row_threads(S, options)
    assert kernel.launch is not None
    assert (kernel.launch.grid, kernel.launch.block) == ((rows,), (width,))
    reduces = _of(kernel, SubgroupReduce)
    shared = [s.buffer for s in _of(kernel, Allocate) if s.buffer.level == "shared"]
    if width > 32:
        # subgroup totals in shared memory, one block barrier, then one more subgroup
        # reduction over the totals: every thread holds the row's total
        assert [r.width for r in reduces] == [32, width // 32]
        assert [(b.shape, b.dtype.value) for b in shared] == [((width // 32,), "float32")]
        assert [b.scope for b in _of(kernel, Barrier)] == ["block"]
    else:
        assert [r.width for r in reduces] == [width] and not shared
        assert not _of(kernel, Barrier)
    a = np.random.default_rng(rows * n).standard_normal((rows, n)).astype(dtype)
    got = run_kernels([kernel], {"A": a})["S"]
    want = tc.reference.run(tc.Graph.of(S), inputs={"A": a})
    if op == "max":
        np.testing.assert_array_equal(got, want)
    else:
        tolerance = 2e-3 if dtype == "float16" else 1e-5
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                                   rtol=tolerance, atol=tolerance * np.sqrt(n))


def test_softmax_and_layer_norm_of_long_rows_match_the_reference() -> None:
    x = te.placeholder((2, 4097), name="x")
    gamma = te.placeholder((4097,), name="gamma")
    for graph_output in (tc.ops.softmax(x, name="y"),
                         tc.ops.layer_norm(x, gamma, name="y")):
        graph = tc.Graph.of(graph_output)
        kernels = [lower_compute(tensor, _options()) for tensor in graph.computes]
        assert any(len(_of(k, SubgroupReduce)) == 2 for k in kernels)  # block reductions
        rng = np.random.default_rng(5)
        arrays = {"x": rng.standard_normal((2, 4097)).astype(np.float32),
                  "gamma": rng.standard_normal(4097).astype(np.float32)}
        arrays = {p.name: arrays[p.name] for p in graph.inputs}
        got = run_kernels(kernels, arrays)["y"]
        np.testing.assert_allclose(got, tc.reference.run(graph, inputs=arrays),
                                   rtol=1e-4, atol=1e-5)


def test_a_block_reducing_several_rows_ends_each_with_a_barrier() -> None:
    """Rows in a serial loop around the lanes: the next row's subgroup totals would overwrite
    those still being read, so a second barrier closes each reduction."""
    S = _row_reduction(4, 300)
    s = create_schedule(S, _gpu_spec())
    (i,), (k,) = s[S].axes, s[S].reduce_axes
    ko, ki = s[S].split(k, factor=128)
    s[S].reorder(i, ki, ko)
    s[S].bind(ki, "threadIdx.x")
    (kernel,) = s.lower(_gpu_spec())
    assert len(_of(kernel, Barrier)) == 2 and [r.width for r in _of(kernel, SubgroupReduce)] \
        == [32, 4]
    a = np.random.default_rng(2).standard_normal((4, 300)).astype(np.float32)
    np.testing.assert_allclose(run_kernels([kernel], {"A": a})["S"], a.sum(axis=1),
                               rtol=1e-5, atol=1e-4)


def test_mali_rows_reduce_on_work_groups_of_its_subgroups() -> None:
    spec = _mali_spec()
    S = _row_reduction(3, 5000)
    kernel = lower_compute(S, _options(spec))  # verified against mali's limits
    # subgroups of 8: at most 8 of them combine in one more subgroup reduction
    assert kernel.launch is not None and kernel.launch.block == (64,)
    assert [r.width for r in _of(kernel, SubgroupReduce)] == [8, 8]
    assert {s.buffer.level for s in _of(kernel, Allocate)} >= {"local"}
    assert [b.scope for b in _of(kernel, Barrier)] == [spec.threads.barrier_scopes[0]]
    a = np.random.default_rng(9).standard_normal((3, 5000)).astype(np.float32)
    np.testing.assert_allclose(run_kernels([kernel], {"A": a})["S"], a.sum(axis=1),
                               rtol=1e-5, atol=1e-3)


def test_column_sums_and_pooling_keep_one_output_per_thread() -> None:
    """A reduce axis that does not walk memory: threads own output elements, whose loads of
    neighbouring threads are neighbouring elements (no shuffles, no shared memory)."""
    A = te.placeholder((5000, 3), name="A")
    k = te.reduce_axis(5000, name="k")
    S = te.compute((3,), lambda j: te.sum(A[k, j], axis=k), name="S")
    kernel = lower_compute(S, _options())
    assert not _of(kernel, SubgroupReduce) and not _of(kernel, Barrier)
    a = np.random.default_rng(4).standard_normal((5000, 3)).astype(np.float32)
    np.testing.assert_allclose(run_kernels([kernel], {"A": a})["S"], a.sum(axis=0),
                               rtol=1e-4, atol=1e-3)


# vector accesses --------------------------------------------------------------------------

def test_elementwise_threads_take_whole_vectors_of_the_specs_width() -> None:
    A = te.placeholder((3, 12), name="A")
    b = te.placeholder((12,), name="b")
    C = te.compute((3, 12), lambda i, j: A[i, j] * 2.0 + b[j], name="C")
    kernel = lower_compute(C, _options())
    # 128-bit vectors: 4 float32 lanes per thread, 9 threads of one warp
    assert [(loop.extent.value, loop.lanes) for loop in _vector_loops(kernel)] == [(4, 4)]
    assert kernel.launch is not None and kernel.launch.block == (32,)
    rng = np.random.default_rng(6)
    a, bb = rng.standard_normal((3, 12)).astype(np.float32), rng.standard_normal(12)
    bb = bb.astype(np.float32)
    np.testing.assert_allclose(run_kernels([kernel], {"A": a, "b": bb})["C"], a * 2 + bb,
                               rtol=1e-6)


@pytest.mark.parametrize(("spec_name", "dtype", "lanes"), [
    ("scaffold", "float32", 4), ("scaffold", "float16", 8), ("mali", "float32", 8)])
def test_the_lanes_come_from_the_specs_vector_width(spec_name, dtype, lanes) -> None:
    spec = _gpu_spec() if spec_name == "scaffold" else _mali_spec()
    A = te.placeholder((5, 16), dtype, name="A")
    C = te.compute((5, 16), lambda i, j: A[i, j] + A[i, j], name="C")
    assert vector_lanes(C, _options(spec)) == lanes
    kernel = lower_compute(C, _options(spec))
    assert [loop.lanes for loop in _vector_loops(kernel)] == [lanes]
    a = np.random.default_rng(8).standard_normal((5, 16)).astype(dtype)
    np.testing.assert_array_equal(run_kernels([kernel], {"A": a})["C"], a + a)


def _vectors_of(make) -> int:
    return vector_lanes(make(), _options())


def test_no_vectors_where_an_access_is_not_a_whole_aligned_vector() -> None:
    A = te.placeholder((12, 13), name="A")
    B = te.placeholder((12, 12), name="B")
    H = te.placeholder((12, 12), "float16", name="H")
    cases = {
        "transpose": lambda: te.compute((12, 12), lambda i, j: A[j, i], name="T"),
        "ragged row": lambda: te.compute((12, 13), lambda i, j: A[i, j] + 1.0, name="R"),
        "shifted": lambda: te.compute((12, 12), lambda i, j: A[i, j + 1], name="S"),
        "rows of 13": lambda: te.compute((12, 12), lambda i, j: A[i, j], name="W"),
        "strided": lambda: te.compute((12, 6), lambda i, j: B[i, j * 2], name="D"),
        "halved": lambda: te.compute((12, 12), lambda i, j: B[i, j // 2], name="U"),
        "mixed widths": lambda: te.compute((12, 12), lambda i, j: B[i, j] + H[i, j].astype(
            "float32"), name="M"),
        "reduction": lambda: _row_reduction(12, 12),
    }
    assert {name: _vectors_of(make) for name, make in cases.items()} == \
        dict.fromkeys(cases, 1)
    # a broadcast row value and a whole-vector shift are fine
    assert _vectors_of(lambda: te.compute((12, 8), lambda i, j: B[i, j + 4] * B[i, 0],
                                          name="F")) == 4


@pytest.mark.parametrize("shape", [(1, 4), (7, 4096), (2, 4100), (1, 1), (13, 17)])
def test_vectorised_elementwise_matches_numpy_on_awkward_shapes(shape) -> None:
    A = te.placeholder(shape, name="A")
    b = te.placeholder(shape[-1:], name="b")
    C = te.compute(shape, lambda i, j: A[i, j] - b[j], name="C")
    kernel = lower_compute(C, _options())
    assert bool(_vector_loops(kernel)) == (shape[-1] % 4 == 0)
    rng = np.random.default_rng(sum(shape))
    a = rng.standard_normal(shape).astype(np.float32)
    bb = rng.standard_normal(shape[-1:]).astype(np.float32)
    np.testing.assert_array_equal(run_kernels([kernel], {"A": a, "b": bb})["C"], a - bb)


# barriers and shuffles are reached by every thread --------------------------------------------

def _guarded_sync(sync: str, on_thread: bool) -> Kernel:
    from tilecraft.dtypes import DType
    from tilecraft.kernel_ir import Buffer, BufferLoad, IfThenElse, Seq, Store
    from tilecraft.te import Var, const

    A = Buffer("A", (4, 64), DType.FLOAT32)
    b, t = Var("b"), Var("t")
    value = BufferLoad(A, (b, t))
    stmt = Barrier() if sync == "barrier" else SubgroupReduce(A, (b, t), value, t, 32)
    guard = IfThenElse((t if on_thread else b) < 2, stmt)
    body = For(b, const(4), LoopKind.BOUND, For(t, const(64), LoopKind.BOUND, Seq((
        Store(A, (b, t), value * 2.0), guard)), axis="threadIdx.x"), axis="blockIdx.x")
    return Kernel("k", (A,), ("A",), body)


@pytest.mark.parametrize("sync", ["barrier", "subgroup"])
def test_the_verifier_refuses_a_sync_under_a_thread_dependent_condition(sync) -> None:
    from tilecraft.errors import LoweringError
    from tilecraft.kernel_ir.verify import verify_kernel

    verify_kernel(_guarded_sync(sync, on_thread=False), _gpu_spec())  # uniform in a block
    with pytest.raises(LoweringError, match=r"sits under `if \(t < 2\)`, which differs between "
                                            "the threads of a block"):
        verify_kernel(_guarded_sync(sync, on_thread=True), _gpu_spec())
