"""Each compute is tuned as its own task (tilecraft.tuning.tasks): a candidate of a compute
deep in a graph runs that compute's kernels only, its flops and key do not depend on the depth,
and tuning, the database, compile and overlap use one key."""

from __future__ import annotations

import math

import numpy as np
import pytest

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.graph import Graph
from tilecraft.reference.interpreter import run as reference_run
from tilecraft.target.registry import get_target
from tilecraft.tuning import TuningDatabase, workload_key
from tilecraft.tuning.candidate import MeasureResult, resolve_reference
from tilecraft.tuning.runners.replay import ReplayRunner
from tilecraft.tuning.tasks import isolate, task_key
from tilecraft.tuning.tuner import best_configs, tune
from tilecraft.tuning.workload import describe_graph, flop_count

X86 = get_target("x86_avx512")


def _chain(depth: int, seed: int = 0):
    """``depth`` matmuls in a chain, awkward sizes; the second one's weight is a constant."""
    rng = np.random.default_rng(seed)
    sizes = [13, 17, 19, 23, 11, 7, 5, 3][:depth + 1]
    x = te.placeholder((5, sizes[0]), name="x")
    out, weights = x, {}
    for index in range(depth):
        shape = (sizes[index], sizes[index + 1])
        if index == 1:
            w = te.constant(rng.standard_normal(shape).astype(np.float32), name="W1")
        else:
            w = te.placeholder(shape, name=f"W{index}")
            weights[w.name] = rng.standard_normal(shape).astype(np.float32)
        out = ops.matmul(out, w, name=f"C{index}")
    return Graph.from_outputs([out]), weights


class _Lowering:
    """A replay evaluator: lowers each candidate (no build, no run) and notes what it would run;
    its cost is the flop count of the kernels' program."""

    seen: dict[str, list[tuple[list[str], list[str], int]]] = {}

    def __call__(self, candidate, settings):
        instance = candidate.workload.instantiate()
        builder = resolve_reference(candidate.builder)
        kernels = builder(instance.graph, candidate.schedule, X86)
        written = sorted({name for k in kernels for name in k.outputs})
        computes = [t.name for t in instance.graph.computes]
        self.seen.setdefault(candidate.label, []).append((computes, written, instance.flops))
        return MeasureResult(costs=(instance.flops * 1e-12,), flops=instance.flops)


@pytest.mark.parametrize("depth", [3, 6])
def test_a_candidate_computes_its_compute_alone(depth):
    graph, _ = _chain(depth)
    evaluator = _Lowering()
    evaluator.seen = {}
    result = tune(graph, X86, {"preset": "quick", "trials": 2, "engine": "random",
                               "progress": False}, runner=ReplayRunner(evaluator))
    assert [t.compute for t in result.tasks] == [f"C{i}" for i in range(depth)]
    second = graph.tensor("C1")
    own_flops = 2 * 5 * 17 * 19
    assert flop_count(isolate(second)) == own_flops
    for computes, written, flops in evaluator.seen["C1"]:
        assert computes == ["C1"] and "C0" not in written and flops == own_flops
    task = result.tasks[1]
    assert task.flops == own_flops and task.workload_key == task_key(second)
    assert all(cost == own_flops * 1e-12 for _, cost, _ in task.trials)


def test_task_key_does_not_depend_on_depth_or_producers():
    shallow, _ = _chain(3)
    deep, _ = _chain(6)
    assert task_key(shallow.tensor("C1")) == task_key(deep.tensor("C1"))
    assert task_key(shallow.tensor("C2")) == task_key(deep.tensor("C2"))
    alone = isolate(deep.tensor("C2"))
    assert [t.name for t in alone.inputs] == ["C1", "W2"] and not alone.constants
    kept = isolate(deep.tensor("C1"))  # the constant operand stays a constant
    assert [t.name for t in kept.constants] == ["W1"]
    assert kept.constants[0].constant_value is deep.tensor("W1").constant_value
    # isolating an isolated compute changes nothing
    assert task_key(alone.outputs[0]) == task_key(deep.tensor("C2"))


def test_old_whole_graph_keys_are_not_found(tmp_path):
    """Records keyed by the compute's whole producer graph (before tasks were isolated) are
    found only where that graph is the compute alone (it reads only inputs)."""
    from tilecraft.tuning.record import TuningRecord

    graph, _ = _chain(3)
    database = str(tmp_path / "old.db")
    with TuningDatabase(database) as db:
        for name in ("C0", "C2"):
            old = workload_key(describe_graph(Graph.from_outputs([graph.tensor(name)])))
            db.add(TuningRecord(workload_key=old, target=X86.name, schedule={name: {"MI": 2}},
                                costs=(1e-3,)))
    assert best_configs(graph, X86, database) == {"C0": {"MI": 2}}


@pytest.mark.skipif(not X86.available().execute, reason="x86_avx512 cannot execute here")
def test_tuned_schedules_are_compiled_and_read_by_overlap(tmp_path):
    """Measured on x86: every compute tuned alone (the constant operand's values reach the
    candidate's check), compile with the database takes each tuned config, the result equals
    the reference; overlap reads the same records."""
    from tilecraft.pipeline import run_pipeline
    from tilecraft.runtime.overlap import tunable_computes

    graph, weights = _chain(3)
    database = str(tmp_path / "t.db")
    result = tune(graph, X86, {"preset": "quick", "trials": 2, "engine": "random",
                               "database": database, "progress": False, "repeats": 1,
                               "timeout_s": 60.0})
    tuned = result.configs()
    assert sorted(tuned) == ["C0", "C1", "C2"]
    assert all(math.isfinite(t.best_seconds) for t in result.tasks)
    assert best_configs(graph, X86, database) == tuned
    state = run_pipeline(graph, X86, database=database)
    for name, config in tuned.items():
        choice = state.schedules[name]
        assert (choice.source, choice.config) == ("database", config)
    exe = tc.compile(graph, target="x86_avx512", database=database)
    assert sum("best known parameters" in note for note in exe.report.notes) == 3
    x = np.random.default_rng(5).standard_normal((5, 13)).astype(np.float32)
    expected = reference_run(graph, {"x": x, **weights})
    np.testing.assert_allclose(exe(x=x, **weights), expected, rtol=1e-4, atol=1e-4)
    keys = {name: workload_key(describe_graph(alone)) for name, alone in
            tunable_computes(state)}
    assert keys == {name: task_key(graph.tensor(name)) for name in tuned}


def _bias_relu_mirror():
    """A matmul, a bias add and a relu (both inlined by inline_elementwise), then a compute
    reading the relu twice, mirrored along j; odd sizes."""
    x = te.placeholder((5, 13), name="x")
    w = te.placeholder((13, 17), name="w")
    b = te.constant(np.arange(17, dtype=np.float32), name="b")
    c = ops.matmul(x, w, name="C")
    s = te.compute((5, 17), lambda i, j: c[i, j] + b[j], name="S")
    r = ops.relu(s, name="R")
    t = te.compute((5, 17), lambda i, j: r[i, j] * r[i, 16 - j], name="T")
    return Graph.from_outputs([t])


def test_tune_makes_the_tasks_compile_schedules_after_the_graph_passes(tmp_path):
    """tune() runs the graph passes compile runs (inline_elementwise folds S and R into T), so
    compile with the database finds a record for every compute it schedules; the graph as
    written (passes=False) has other computes and T under another key."""
    from tilecraft.pipeline import run_pipeline

    graph = _bias_relu_mirror()
    database = str(tmp_path / "t.db")
    options = {"preset": "quick", "trials": 2, "engine": "random", "progress": False,
               "database": database}
    result = tune(graph, X86, options, runner=ReplayRunner(_Lowering()))
    assert [t.compute for t in result.tasks] == ["C", "T"]
    state = run_pipeline(graph, X86, database=database)
    assert [t.name for t in state.graph.computes] == ["C", "T"]
    assert best_configs(state.graph, X86, database) == result.configs()
    for name, config in result.configs().items():
        choice = state.schedules[name]
        assert (choice.source, choice.config) == ("database", config)
    assert result.tasks[1].workload_key == task_key(state.graph.tensor("T"))
    assert task_key(graph.tensor("T")) != task_key(state.graph.tensor("T"))
    # as compile's passes= switches them
    written = tune(graph, X86, options, runner=ReplayRunner(_Lowering()), passes=False)
    assert [t.compute for t in written.tasks] == ["C", "S", "R", "T"]
    off = tune(graph, X86, options, runner=ReplayRunner(_Lowering()),
               passes={"inline_elementwise": False})
    assert [t.workload_key for t in off.tasks] == [t.workload_key for t in written.tasks]
    if X86.available().execute:
        exe = tc.compile(graph, target="x86_avx512", database=database)
        x = np.random.default_rng(4).standard_normal((5, 13)).astype(np.float32)
        w = np.random.default_rng(5).standard_normal((13, 17)).astype(np.float32)
        np.testing.assert_allclose(exe(x=x, w=w), reference_run(graph, {"x": x, "w": w}),
                                   rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(not X86.available().execute, reason="x86_avx512 cannot execute here")
def test_a_candidate_packs_its_constant_weight_once():
    """Timed runs of a candidate skip the kernels that read only constants (the packing of
    W1), as the Executable runs them once at load; the check runs them."""
    from tilecraft.tuning.builders import TEMPLATE_BUILDER
    from tilecraft.tuning.candidate import (
        MeasureInput,
        check_candidate,
        prepare_candidate,
    )
    from tilecraft.tuning.tuner import compute_workload, task_space

    graph, _ = _chain(3)
    template, builder = task_space(isolate(graph.tensor("C1")).outputs[0], X86)
    assert builder == TEMPLATE_BUILDER
    config = template.decode(template.space.random_point(np.random.default_rng(0)))
    candidate = MeasureInput(compute_workload(graph.tensor("C1")), "x86_avx512",
                             {"C1": config}, builder=TEMPLATE_BUILDER)
    prepared = prepare_candidate(candidate)
    packs = [i for i, k in enumerate(prepared.kernels) if "pack" in k.name]
    assert packs and prepared.once == frozenset(packs)
    calls = [0] * len(prepared.functions)

    def counted(index, function):
        def run(view):
            calls[index] += 1
            function(view)
        return run

    prepared.functions = [counted(i, f) for i, f in enumerate(prepared.functions)]
    assert check_candidate(prepared) is not None
    prepared.run()
    prepared.run()
    assert [calls[i] for i in packs] == [1] * len(packs)
    assert all(count == 3 for i, count in enumerate(calls) if i not in packs)
