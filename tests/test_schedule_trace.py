"""Schedules as data: the trace is JSON, replay rebuilds the same kernels, apply_config turns
a search-space point into primitives."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tilecraft import ops, te
from tilecraft.graph import Graph
from tilecraft.kernel_ir.nodes import Allocate, For, LoopKind, Seq, Stmt
from tilecraft.lower import LoweringOptions, lower_graph
from tilecraft.schedule import apply_config, create_schedule, replay
from tilecraft.schedule.trace import apply_step
from tilecraft.schedule.verify import check_schedule

OPTIONS = LoweringOptions(vector_lanes=8, register_level="register", register_bytes=4096)


def _rand(seed: int, *shape: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _matmul(m: int = 13, n: int = 10, k: int = 7):
    A = te.placeholder((m, k), name="A")
    B = te.placeholder((k, n), name="B")
    C = ops.matmul(A, B, name="C")
    return C, {"A": _rand(0, m, k), "B": _rand(1, k, n)}


def _loops(stmt: Stmt) -> list[For]:
    found = []
    if isinstance(stmt, For):
        found.append(stmt)
        found += _loops(stmt.body)
    elif isinstance(stmt, Seq):
        for part in stmt.stmts:
            found += _loops(part)
    elif isinstance(stmt, Allocate):
        found += _loops(stmt.body)
    elif hasattr(stmt, "then_body"):
        found += _loops(stmt.then_body)
    return found


def _texts(schedule) -> list[str]:
    return [str(kernel) for kernel in schedule.lower(OPTIONS)]


def _everything(C: te.Tensor):
    """A schedule using most primitives on a matmul followed by relu."""
    R = ops.relu(C, name="R")
    s = create_schedule(R)
    A = C.inputs[0]
    AL = s.cache_read(A, "register")
    i, j = s[R].axes
    io, jo, ii, ji = s[R].tile(i, j, 4, 4)
    fused = s[R].fuse(io, jo)
    s[R].parallel(fused)
    s[R].vectorize(ji)
    s[C].compute_at(s[R], fused)
    ci, cj = s[C].axes
    (k,) = s[C].reduce_axes
    ko, ki = s[C].split(k, nparts=2)
    s[C].reorder(ko, ci, ki, cj)
    s[AL].compute_at(s[C], ko)
    s[C].unroll(ki)
    s[C].vectorize(cj)
    return s, R


def test_trace_is_json_and_replays_to_identical_kernels() -> None:
    C, inputs = _matmul()
    s, R = _everything(C)
    steps = s.trace
    assert [step["primitive"] for step in steps] == [
        "cache_read", "tile", "fuse", "parallel", "vectorize", "compute_at", "split",
        "reorder", "compute_at", "unroll", "vectorize"]
    again = replay(R, json.loads(json.dumps(steps)))
    assert _texts(again) == _texts(s)
    assert again.trace == steps
    check_schedule(again, inputs, OPTIONS)


def test_replay_on_a_fresh_program_of_the_same_shape() -> None:
    C, inputs = _matmul()
    s, _ = _everything(C)
    fresh, _ = _matmul()
    rebuilt = replay(ops.relu(fresh, name="R"), s.trace)
    assert _texts(rebuilt) == _texts(s)
    check_schedule(rebuilt, inputs, OPTIONS)


def test_trace_lists_every_primitive_with_its_arguments() -> None:
    A = te.placeholder((8, 8), name="A")
    B = te.compute((8, 8), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((8, 8), lambda i, j: B[i, j] + B[j, i], name="C")
    s = create_schedule(C)
    s[B].compute_inline()
    s[C].split("i", nparts=2, names=("x", "y"))
    s[C].bind("x", "blockIdx.x")
    s[C].pipeline("j", initiation_interval=3)
    s[C].buffer("BRAM")
    s[C].partition(1, "block", 4)
    s[B].compute_root()
    assert s.trace == [
        {"primitive": "compute_inline", "stage": "B"},
        {"primitive": "split", "stage": "C", "loop": "i", "factor": None, "nparts": 2,
         "names": ["x", "y"]},
        {"primitive": "bind", "stage": "C", "loop": "x", "thread_axis": "blockIdx.x"},
        {"primitive": "pipeline", "stage": "C", "loop": "j", "initiation_interval": 3},
        {"primitive": "buffer", "stage": "C", "level": "BRAM", "tensors": ["C"]},
        {"primitive": "partition", "stage": "C", "dim": 1, "kind": "block", "factor": 4},
        {"primitive": "compute_root", "stage": "B"},
    ]
    assert _texts(replay(C, s.trace)) == _texts(s)


def test_replay_continues_an_existing_schedule() -> None:
    C, _ = _matmul()
    s = create_schedule(C)
    step = {"primitive": "split", "stage": "C", "loop": "j", "factor": 3}
    assert replay(s, [step]) is s
    assert [loop.name for loop in s[C].leaf_loops] == ["i", "j.outer", "j.inner", "k"]


# apply_config ----------------------------------------------------------------------------
CONFIGS = [
    {},
    {"split": {"i": [4, 4], "j": [2, 5], "k": [7]}},
    {"split": {"i": [2, 2, 4], "j": [1, 2, 5], "k": [2, 4]},
     "reorder": ["i.0", "j.0", "k.0", "i.1", "j.1", "k.1", "i.2", "j.2"],
     "fuse_parallel": 2, "unroll": 16, "vectorize": True},
    {"split": {"i": [13, 1], "j": [1, 10], "k": [7, 1]},
     "reorder": ["i.0", "k.0", "j.0", "k.1", "i.1", "j.1"], "fuse_parallel": 1,
     "vectorize": True},
    {"split": {"i": [4, 4], "j": [2, 5], "k": [3, 3]},
     "reorder": ["i.0", "j.0", "k.0", "i.1", "k.1", "j.1"], "fuse_parallel": 2,
     "unroll": 4, "vectorize": True, "cache_write": "register"},
    {"split": {"i": [2, 7], "j": [5, 2]}, "cache_write": "global", "vectorize": True},
    {"reorder": ["k.0", "i.0", "j.0"], "cache_write": "register"},
]


@pytest.mark.parametrize("config", CONFIGS)
def test_apply_config_on_matmul(config: dict) -> None:
    C, inputs = _matmul()
    s = create_schedule(C)
    stage = apply_config(s, C, config)
    check_schedule(s, inputs, OPTIONS)
    assert _texts(replay(C, s.trace)) == _texts(s)
    if config.get("cache_write"):
        assert stage.cache == "write" and stage.level == config["cache_write"]
    kernel = s.lower(OPTIONS)[0]
    kinds = [loop.kind for loop in _loops(kernel.body)]
    assert (LoopKind.PARALLEL in kinds) == bool(config.get("fuse_parallel"))
    assert (LoopKind.VECTOR in kinds) == bool(config.get("vectorize"))


def test_apply_config_shapes_the_loops_as_asked() -> None:
    C, inputs = _matmul(16, 12, 8)
    s = create_schedule(C)
    apply_config(s, C, {"split": {"i": [2, 2, 4], "j": [3, 4], "k": [2, 4]},
                        "reorder": ["i.0", "j.0", "k.0", "i.1", "k.1", "i.2", "j.1"],
                        "fuse_parallel": 2, "unroll": 16, "vectorize": True})
    assert s[C].describe() == ("i.0.j.0.fused: parallel(6) > k.0: serial(2) > "
                               "i.1: serial(2) > k.1: unrolled(4) > i.2: unrolled(4) > "
                               "j.1: vector(4)")
    check_schedule(s, inputs, OPTIONS)


def test_apply_config_with_cache_write_splits_the_work_between_the_stages() -> None:
    C, inputs = _matmul(16, 12, 8)
    s = create_schedule(C)
    cached = apply_config(s, C, {"split": {"i": [4, 4], "j": [3, 4], "k": [2, 4]},
                                 "reorder": ["i.0", "j.0", "k.0", "i.1", "k.1", "j.1"],
                                 "fuse_parallel": 2, "unroll": 4, "vectorize": True,
                                 "cache_write": "register"})
    assert s[C].describe() == "i.0.j.0.fused: parallel(12) > i.1: serial(4) > j.1: vector(4)"
    assert cached.describe() == ("k.0: serial(2) > i: serial(16) > k.1: unrolled(4) > "
                                 "j: vector(12); at C.i.0.j.0.fused")
    (kernel,) = s.lower(OPTIONS)
    locals_ = [st.buffer for st in _allocs(kernel.body)]
    assert [(b.name, b.shape, b.level) for b in locals_] == [("C_register", (4, 4),
                                                              "register")]
    check_schedule(s, inputs, OPTIONS)


def _allocs(stmt: Stmt) -> list[Allocate]:
    found = []
    if isinstance(stmt, Allocate):
        found.append(stmt)
        found += _allocs(stmt.body)
    elif isinstance(stmt, For):
        found += _allocs(stmt.body)
    elif isinstance(stmt, Seq):
        for part in stmt.stmts:
            found += _allocs(part)
    return found


def test_apply_config_inlines_and_schedules_conv_and_softmax() -> None:
    x = te.placeholder((1, 3, 7, 6), name="x")
    w = te.placeholder((4, 3, 3, 3), name="w")
    y = ops.conv2d(x, w, padding=1, name="y")
    s = create_schedule(y)
    apply_config(s, y, {"split": {"n": [1], "k": [2, 2], "h": [3, 3], "w": [2, 3],
                                  "rc": [3], "rh": [3], "rw": [3]},
                        "fuse_parallel": 2, "vectorize": True, "unroll": 3,
                        "inline": {"y_pad": True}})
    assert len(s.lower(OPTIONS)) == 1
    check_schedule(s, {"x": _rand(2, 1, 3, 7, 6), "w": _rand(3, 4, 3, 3, 3)}, OPTIONS)
    xs = te.placeholder((4, 11), name="x")
    sm = ops.softmax(xs, name="sm")
    s = create_schedule(sm)
    apply_config(s, sm, {"split": {"i0": [2, 2], "i1": [3, 4]}, "fuse_parallel": 1,
                         "vectorize": True, "inline": {"sm_sub": True, "sm_exp": True,
                                                       "sm_max": False}})
    assert [k.name for k in s.lower(OPTIONS)] == ["sm_max", "sm_sum", "sm"]
    check_schedule(s, {"x": _rand(4, 4, 11)}, OPTIONS)


def test_apply_config_on_batch_matmul_with_size_one_axes() -> None:
    a = te.placeholder((1, 9, 5), name="a")
    b = te.placeholder((1, 5, 1), name="b")
    c = ops.batch_matmul(a, b, name="c")
    s = create_schedule(c)
    apply_config(s, c, {"split": {"b": [1], "i": [3, 3], "j": [1], "k": [5]},
                        "reorder": ["b.0", "i.0", "j.0", "k.0", "i.1"], "fuse_parallel": 2,
                        "vectorize": True, "cache_write": "register"})
    check_schedule(s, {"a": _rand(5, 1, 9, 5), "b": _rand(6, 1, 5, 1)}, OPTIONS)


# the default schedule is a schedule like any other ------------------------------------------
def _ops_for_default():
    x = te.placeholder((2, 3, 7, 6), name="x")
    w = te.placeholder((4, 3, 3, 3), name="w")
    yield ops.conv2d(x, w, padding=1, name="y"), {"x": _rand(10, 2, 3, 7, 6),
                                                  "w": _rand(11, 4, 3, 3, 3)}
    xs = te.placeholder((5, 19), name="x")
    yield ops.softmax(xs, name="sm"), {"x": _rand(12, 5, 19)}
    a = te.placeholder((3, 9, 4), name="a")
    b = te.placeholder((3, 4, 17), name="b")
    yield ops.batch_matmul(a, b, name="c"), {"a": _rand(13, 3, 9, 4), "b": _rand(14, 3, 4, 17)}


@pytest.mark.parametrize("case", range(3))
def test_default_schedule_is_a_trace_that_replays_to_the_same_kernels(case: int) -> None:
    out, inputs = list(_ops_for_default())[case]
    options = LoweringOptions(vector_lanes=8, cores=2, unroll_limit=4,
                              register_level="register", register_bytes=4096)
    default = lower_graph(Graph.from_outputs([out]), options)
    s = create_schedule(out, options)
    for kernel in default:
        assert kernel.attrs["strategy"] == "cpu" and kernel.attrs["trace"]
        for step in kernel.attrs["trace"]:
            apply_step(s, json.loads(json.dumps(step)))
    assert [str(k) for k in s.lower(options)] == [str(k) for k in default]
    check_schedule(s, inputs, options)


def test_bound_pipelined_and_unrolled_loops_through_the_primitives() -> None:
    C, inputs = _matmul(6, 5, 4)
    s = create_schedule(C)
    (i, j), (k,) = s[C].axes, s[C].reduce_axes
    s[C].reorder(j, k, i)
    s[C].bind(j, "threadIdx.x")
    s[C].pipeline(k, initiation_interval=2)
    s[C].unroll(i, factor=2)
    assert s[C].describe() == "j: bound(5, axis=threadIdx.x) > k: pipelined(4, II=2) > " \
                              "i: unrolled(6, factor=2)"
    check_schedule(s, inputs, OPTIONS)
