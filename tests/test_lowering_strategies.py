"""The core's lowering strategies, chosen from the spec: every operator of the catalog lowered
for a GPU-, an NPU- or an FPGA-like target (scaffolded with ``tilecraft new-target --kind
...``, and the nvidia_tc, mali, ascend_npu and fpga_hls plugins' specs) verifies against the
spec, runs in the Kernel IR interpreter to the reference interpreter's result, and has the
strategy's shape (loops bound to blocks and threads; output tiles computed in a unit's memory
levels; a read / compute / write dataflow region)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import numpy as np
import pytest

import tilecraft as tc
from tilecraft import te
from tilecraft.errors import TargetError
from tilecraft.kernel_ir import (
    Allocate,
    BufferLoad,
    Dataflow,
    For,
    Kernel,
    LoopKind,
    Stmt,
    Store,
    SubgroupReduce,
    walk_stmts,
)
from tilecraft.kernel_ir.interpreter import run_kernels
from tilecraft.kernel_ir.nodes import walk_expr
from tilecraft.lower import LoweringOptions, lower_compute
from tilecraft.ops import catalog
from tilecraft.scaffold import render_target_package
from tilecraft.schedule import ScheduleError, create_schedule
from tilecraft.schedule.strategies import strategy_for
from tilecraft.schedule.strategies.npu import operand_unit
from tilecraft.target.hierarchy import LaunchScope
from tilecraft.target.spec import TargetSpec

#: the strategy each scaffold kind and each non-x86 plugin's spec selects
SCAFFOLD_KINDS = {"gpu": "gpu", "npu": "npu", "fpga": "fpga"}
PLUGIN_STRATEGIES = {"nvidia_tc": "gpu", "mali": "gpu", "ascend_npu": "npu", "fpga_hls": "fpga"}


@cache
def _scaffold_spec(kind: str) -> TargetSpec:
    import tempfile

    directory = Path(tempfile.mkdtemp(prefix=f"tilecraft-scaffold-{kind}-"))
    render_target_package(f"toy_{kind}", directory, kind)
    return TargetSpec.from_yaml(directory / f"toy_{kind}" / f"tilecraft_toy_{kind}" / "spec.yaml")


@cache
def _plugin_spec(name: str) -> TargetSpec | None:
    from tilecraft.target.registry import get_target

    try:
        return get_target(name).spec
    except TargetError:
        return None


def _spec(source: str) -> TargetSpec:
    """``scaffold-<kind>`` or a plugin's name (skipped when the plugin is not installed)."""
    if source.startswith("scaffold-"):
        return _scaffold_spec(source.removeprefix("scaffold-"))
    spec = _plugin_spec(source)
    if spec is None:
        pytest.skip(f"the {source} plugin is not installed")
    return spec


def _expected_strategy(source: str) -> str:
    if source.startswith("scaffold-"):
        return SCAFFOLD_KINDS[source.removeprefix("scaffold-")]
    return PLUGIN_STRATEGIES[source]


#: loop iterations (output elements times reduction) above which interpreting a case is slow
SLOW_ITERATIONS = 20_000


def _iterations(case) -> int:
    graph, _ = case.build()
    return sum(math.prod(axis.extent for axis in (*tensor.axes, *tensor.reduce_axes))
               for tensor in graph.computes)


def _params() -> Iterator[object]:
    """Every catalog case on the scaffolded spec of each kind, the standard set on the
    plugins' specs; the whole catalog there, and the largest cases anywhere, are slow."""
    standard = {case.id for case in catalog.standard_set()}
    large = {case.id for case in catalog.cases() if _iterations(case) > SLOW_ITERATIONS}
    for kind in SCAFFOLD_KINDS:
        for case in catalog.cases():
            marks = (pytest.mark.slow,) if case.id in large else ()
            yield pytest.param(f"scaffold-{kind}", case, id=f"scaffold-{kind}-{case.id}",
                               marks=marks)
    for plugin in PLUGIN_STRATEGIES:
        for case in catalog.cases():
            marks = () if case.id in standard and case.id not in large else (pytest.mark.slow,)
            yield pytest.param(plugin, case, id=f"{plugin}-{case.id}", marks=marks)


# the strategies' shapes ---------------------------------------------------------------------

def _check_gpu_shape(kernel: Kernel, spec: TargetSpec, tensor: te.Tensor) -> None:
    """Elements on threads: a kernel with spatial axes has a loop bound to a block-scope axis
    and one to a grid-scope axis; a reduction on a subgroup reduces across lanes."""
    scopes = {axis.name: axis.scope for axis in spec.threads.axes}
    bound = [stmt for stmt in walk_stmts(kernel.body)
             if isinstance(stmt, For) and stmt.kind is LoopKind.BOUND]
    if tensor.axes:
        assert {scopes[loop.axis] for loop in bound} == {LaunchScope.GRID, LaunchScope.BLOCK}, \
            kernel
    if any(isinstance(stmt, SubgroupReduce) for stmt in walk_stmts(kernel.body)):
        assert tensor.reduce_axes


def _innermost_loops(stmt: Stmt) -> list[For]:
    loops = [s for s in walk_stmts(stmt) if isinstance(s, For)]
    return [loop for loop in loops
            if not any(isinstance(s, For) for s in walk_stmts(loop.body))]


def _check_fpga_shape(kernel: Kernel, spec: TargetSpec, tensor: te.Tensor) -> None:
    """One dataflow region of read / compute / write stage loops linked by streams, the
    innermost loops pipelined with II=1."""
    assert isinstance(kernel.body, Dataflow), kernel
    names = [stage.var.name for stage in kernel.body.stages]
    assert names in (["read", "compute", "write"], ["compute", "write"]), names
    for stage in kernel.body.stages:
        assert isinstance(stage, For) and stage.kind is LoopKind.STAGE
        for loop in _innermost_loops(stage.body):
            assert (loop.kind, loop.initiation_interval) == (LoopKind.PIPELINED, 1), kernel


def _check_npu_shape(kernel: Kernel, spec: TargetSpec, tensor: te.Tensor) -> None:
    """Every buffer the kernel allocates lives in an operand level of the unit computing it;
    the output is only written from such a buffer (computed there, copied out); tiles run on
    the grid of cores."""
    unit = operand_unit(tensor, spec.spatial.units)
    levels = set(unit.operand_levels.values())
    allocated = [s.buffer for s in walk_stmts(kernel.body) if isinstance(s, Allocate)]
    assert allocated and {buffer.level for buffer in allocated} <= levels, kernel
    params = {buffer.name for buffer in kernel.params}
    for store in (s for s in walk_stmts(kernel.body) if isinstance(s, Store)):
        read = {node.buffer.name for node in walk_expr(store.value)
                if isinstance(node, BufferLoad)}
        if store.buffer.name in params:
            assert not read & params, f"{store.buffer.name} written from a parameter"
        else:
            assert store.buffer.level in levels
    if tensor.axes:
        grid = {axis.name for axis in spec.threads.axes}
        assert any(isinstance(s, For) and s.axis in grid for s in walk_stmts(kernel.body))


SHAPE_CHECKS = {"gpu": _check_gpu_shape, "npu": _check_npu_shape, "fpga": _check_fpga_shape}


@pytest.mark.parametrize(("source", "case"), list(_params()))
def test_strategy_lowers_the_catalog_like_the_reference(source: str, case) -> None:
    spec = _spec(source)
    options = LoweringOptions.from_spec(spec)
    strategy = _expected_strategy(source)
    assert strategy_for(options).name == strategy
    graph, arrays = case.build()
    kernels = []
    for tensor in graph.computes:
        kernel = lower_compute(tensor, options)  # verified against the spec
        assert kernel.attrs["strategy"] == strategy
        SHAPE_CHECKS[strategy](kernel, spec, tensor)
        kernels.append(kernel)
    got = run_kernels(kernels, arrays)
    (output,) = graph.outputs
    want = tc.reference.run(graph, inputs=arrays)
    np.testing.assert_allclose(got[output.name].astype(np.float64), want.astype(np.float64),
                               rtol=case.rtol, atol=case.atol)


#: what the printed Kernel IR of each kind's kernels shows
KIND_MARKS = {"gpu": "axis=threadIdx.x", "npu": "in UB", "fpga": "for write in stage(1):"}


@pytest.mark.parametrize("kind", sorted(SCAFFOLD_KINDS))
def test_scaffolded_target_compiles_in_its_style_without_lowering_code(
        kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``tilecraft new-target --kind KIND``: the package's Target has no lower_compute, yet
    ``tc.compile`` gives the kind's Kernel IR, and the emulated result is the reference's."""
    import importlib
    import sys

    from tilecraft.cli import main

    assert main(["new-target", f"toy_{kind}", "--dir", str(tmp_path), "--kind", kind]) == 0
    monkeypatch.syspath_prepend(str(tmp_path / f"toy_{kind}"))
    module = importlib.import_module(f"tilecraft_toy_{kind}.target")
    try:
        target_class = getattr(module, f"Toy{kind.capitalize()}Target")
        assert "lower_compute" not in vars(target_class)
        target = target_class()
        for case_id in ("matmul[m13-k17-n19]", "softmax[7x13]", "conv2d[stride2-pad1-c3]"):
            graph, arrays = catalog.get(case_id).build()
            exe = tc.compile(graph, target=target)
            for source in exe.sources.values():
                assert KIND_MARKS[kind] in source.text, source.text
            np.testing.assert_allclose(exe(**arrays), tc.reference.run(graph, **arrays),
                                       rtol=1e-4, atol=1e-5)
    finally:
        for name in [n for n in sys.modules if n.startswith(f"tilecraft_toy_{kind}")]:
            del sys.modules[name]


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(SCAFFOLD_KINDS))
def test_scaffolded_package_tests_pass(kind: str, tmp_path: Path) -> None:
    """The rendered package's own tests, the conformance suite among them, pass for every
    kind as rendered."""
    import os
    import subprocess
    import sys

    render_target_package(f"toy_{kind}", tmp_path, kind)
    package = tmp_path / f"toy_{kind}"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(package), os.environ.get("PYTHONPATH", "")]))
    result = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "tests"],
                            cwd=package, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert " passed" in result.stdout.strip().splitlines()[-1]


def test_unknown_scaffold_kind_is_refused(tmp_path: Path) -> None:
    with pytest.raises(TargetError, match="unknown target kind 'tpu'; choose one of cpu, gpu"):
        render_target_package("toy", tmp_path, "tpu")


def test_x86_keeps_the_cpu_strategy() -> None:
    spec = _plugin_spec("x86_avx512")
    if spec is None:
        pytest.skip("the x86_avx512 plugin is not installed")
    assert strategy_for(LoweringOptions.from_spec(spec)).name == "cpu"
    assert strategy_for(LoweringOptions(vector_lanes=16)).name == "cpu"


# the GPU strategy in detail ---------------------------------------------------------------

def test_gpu_blocks_of_threads_within_the_limits() -> None:
    spec = _scaffold_spec("gpu")
    A = te.placeholder((3, 701), name="A")
    B = te.compute((3, 701), lambda i, j: A[i, j] + 1.0, name="B")
    kernel = lower_compute(B, LoweringOptions.from_spec(spec))
    # 2103 elements (rows of 701: no whole vectors): blocks of 256 threads (a multiple of the
    # warp), 9 blocks, a guard
    assert kernel.launch is not None
    assert (kernel.launch.grid, kernel.launch.block) == ((9,), (256,))
    text = str(kernel)
    assert "if (((i_j_block * 256) + i_j_thread) < 2103):" in text
    assert "vector" not in text


def test_gpu_reduction_accumulates_in_a_register_per_thread() -> None:
    spec = _scaffold_spec("gpu")
    A = te.placeholder((6, 5), name="A")
    B = te.placeholder((5, 4), name="B")
    k = te.reduce_axis(5, name="k")
    C = te.compute((6, 4), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    kernel = lower_compute(C, LoweringOptions.from_spec(spec))
    assert str(kernel).splitlines()[3:] == [
        "      alloc C_registers: float32[1, 1] in registers",
        "      if (i_j_thread < 24):",
        "        C_registers[0, 0] = 0.0",
        "        for k in serial(5):",
        "          C_registers[0, 0] sum= A[(i_j_thread // 4), k] * B[k, (i_j_thread % 4)]",
        "        C[i_j_thread // 4, i_j_thread % 4] = C_registers[0, 0]"]


def test_gpu_row_reduction_runs_on_a_subgroup() -> None:
    spec = _scaffold_spec("gpu")
    A = te.placeholder((3, 70), name="A")
    k = te.reduce_axis(70, name="k")
    S = te.compute((3,), lambda i: te.max(A[i, k], axis=k), name="S")
    kernel = lower_compute(S, LoweringOptions.from_spec(spec))
    assert kernel.launch is not None
    assert (kernel.launch.grid, kernel.launch.block) == ((3,), (32,))
    (reduce,) = [s for s in walk_stmts(kernel.body) if isinstance(s, SubgroupReduce)]
    assert (reduce.width, reduce.lane.name) == (32, "k_lane")
    a = np.random.default_rng(3).standard_normal((3, 70)).astype(np.float32)
    got = run_kernels([kernel], {"A": a})["S"]
    np.testing.assert_array_equal(got, a.max(axis=1))


# the NPU strategy in detail ---------------------------------------------------------------

def _allocations(kernel: Kernel) -> list[tuple[str, tuple[int, ...], str, str]]:
    return [(s.buffer.name, s.buffer.shape, s.buffer.dtype.value, s.buffer.level)
            for s in walk_stmts(kernel.body) if isinstance(s, Allocate)]


def test_npu_contraction_of_the_matrix_units_dtype_runs_in_its_levels() -> None:
    spec = _scaffold_spec("npu")
    A = te.placeholder((40, 50), "float16", name="A")
    B = te.placeholder((50, 20), "float16", name="B")
    C = tc.ops.matmul(A, B, name="C")
    kernel = lower_compute(C, LoweringOptions.from_spec(spec))
    # 16x16 output tiles on the cores, accumulated in L0C in float32, operands copied into
    # L0A / L0B one 16-deep chunk of the reduction at a time
    assert _allocations(kernel) == [("C_L0C", (16, 16), "float32", "L0C"),
                                    ("A_L0A", (16, 16), "float16", "L0A"),
                                    ("B_L0B", (16, 16), "float16", "L0B")]
    assert kernel.launch is not None and kernel.launch.grid == (6,)
    rng = np.random.default_rng(4)
    a = rng.standard_normal((40, 50)).astype(np.float16)
    b = rng.standard_normal((50, 20)).astype(np.float16)
    want = (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float16)
    np.testing.assert_allclose(run_kernels([kernel], {"A": a, "B": b})["C"], want,
                               rtol=4e-3, atol=2e-3)


def test_npu_other_computes_run_on_the_vector_unit() -> None:
    spec = _scaffold_spec("npu")
    A = te.placeholder((40, 50), name="A")
    B = te.placeholder((50, 20), name="B")
    C = tc.ops.matmul(A, B, name="C")  # float32: the matrix unit takes float16 and int8
    R = tc.ops.relu(A, name="R")
    assert {level for *_, level in _allocations(lower_compute(C, LoweringOptions.from_spec(
        spec)))} == {"UB"}
    kernel = lower_compute(R, LoweringOptions.from_spec(spec))
    assert _allocations(kernel) == [("R_UB", (1, 50), "float32", "UB"),
                                    ("A_UB", (1, 50), "float32", "UB")]
    vector = [s for s in walk_stmts(kernel.body)
              if isinstance(s, For) and s.kind is LoopKind.VECTOR]
    assert [(loop.extent.value, loop.lanes) for loop in vector] == [(50, 64)]


# binding a reduce loop: a cross-thread reduction ---------------------------------------------

def _row_sum(n: int = 40):
    A = te.placeholder((4, n), name="A")
    k = te.reduce_axis(n, name="k")
    return te.compute((4,), lambda i: te.sum(A[i, k], axis=k), name="S")


def test_bound_reduce_loop_must_run_a_power_of_two_within_the_subgroup() -> None:
    spec = _scaffold_spec("gpu")
    S = _row_sum()
    s = create_schedule(S, spec)
    (k,) = s[S].reduce_axes
    ko, ki = s[S].split(k, factor=12)
    with pytest.raises(ScheduleError, match="12 iterations; a cross-thread reduction runs on "
                                            "a power of two"):
        s[S].bind(ki, "threadIdx.x")
    s = create_schedule(S, spec)
    ko, ki = s[S].split(s[S].reduce_axes[0], factor=2048)
    with pytest.raises(ScheduleError, match="runs on at most 1024 threads \\(a subgroup has "
                                            "32\\)"):
        s[S].bind(ki, "threadIdx.x")
    s = create_schedule(S, spec)
    ko, ki = s[S].split(s[S].reduce_axes[0], factor=8)
    with pytest.raises(ScheduleError, match="blockIdx.x indexes blocks"):
        s[S].bind(ki, "blockIdx.x")


def test_bound_reduce_loop_needs_the_spatial_loops_outside() -> None:
    spec = _scaffold_spec("gpu")
    S = _row_sum()
    s = create_schedule(S, spec)
    (i,), (k,) = s[S].axes, s[S].reduce_axes
    ko, ki = s[S].split(k, factor=8)
    s[S].reorder(ki, i, ko)
    s[S].bind(ki, "threadIdx.x")
    with pytest.raises(ScheduleError, match="the spatial loop i runs inside it"):
        s.lower(spec)


def test_cross_thread_reduction_by_hand_matches_numpy() -> None:
    spec = _scaffold_spec("gpu")
    S = _row_sum(37)
    s = create_schedule(S, spec)
    (i,), (k,) = s[S].axes, s[S].reduce_axes
    ko, ki = s[S].split(k, factor=16)
    s[S].reorder(i, ki, ko)
    s[S].bind(i, "blockIdx.x")
    s[S].bind(ki, "threadIdx.x")
    (kernel,) = s.lower(spec)
    a = np.random.default_rng(1).standard_normal((4, 37)).astype(np.float32)
    np.testing.assert_allclose(run_kernels([kernel], {"A": a})["S"], a.sum(axis=1),
                               rtol=1e-5, atol=1e-6)


# the dataflow primitive (the FPGA strategy's) -------------------------------------------------

def test_dataflow_replays_from_its_trace_and_names_its_stages() -> None:
    from tilecraft.schedule import replay

    spec = _scaffold_spec("fpga")
    S = _row_sum(9)
    s = create_schedule(S, spec)
    s[S].dataflow(initiation_interval=2, depth=4)
    assert s[S].describe() == "i: serial(4) > k: serial(9); dataflow(II=2)"
    assert s.trace == [{"primitive": "dataflow", "stage": "S", "initiation_interval": 2,
                        "depth": 4}]
    (kernel,) = s.lower(spec)
    assert str(replay(S, s.trace, spec).lower(spec)[0]) == str(kernel)
    assert [stream.depth for stream in kernel.body.streams] == [4, 4]
    assert [loop.initiation_interval for loop in _innermost_loops(kernel.body)] == [2, 2, 2]


def test_dataflow_needs_reduce_loops_inside_and_a_stage_of_its_own() -> None:
    spec = _scaffold_spec("fpga")
    S = _row_sum(9)
    s = create_schedule(S, spec)
    (i,), (k,) = s[S].axes, s[S].reduce_axes
    s[S].reorder(k, i)
    s[S].dataflow()
    with pytest.raises(ScheduleError, match="dataflow on stage S, loop i: the spatial loop "
                                            "runs inside a reduce loop"):
        s.lower(spec)
    A = S.inputs[0]
    P = te.compute((4, 9), lambda i, j: A[i, j] * 2.0, name="P")
    k = te.reduce_axis(9, name="k")
    T = te.compute((4,), lambda i: te.sum(P[i, k], axis=k), name="T")
    s = create_schedule(T, spec)
    s[P].compute_at(s[T], s[T].axes[0])
    s[T].dataflow()
    with pytest.raises(ScheduleError, match="other stages are computed inside it"):
        s.lower(spec)


def test_dataflow_needs_stage_and_pipelined_loops() -> None:
    S = _row_sum(9)
    s = create_schedule(S)
    s[S].dataflow()
    with pytest.raises(ScheduleError, match="toy_gpu does not offer the pipeline primitive"):
        s.lower(_scaffold_spec("gpu"))
    with pytest.raises(ScheduleError, match="toy_npu cannot express stage loops, which a "
                                            "dataflow region's stages are made of"):
        s.lower(_scaffold_spec("npu"))
