"""Measuring candidates in worker processes: every error kind from a real failing candidate,
hard timeouts, a pool that survives, build-in-parallel / time-serially, estimate and both
modes, and real x86 candidates checked against the reference."""

from __future__ import annotations

import math
import pickle
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tilecraft.errors import TargetError
from tilecraft.lower import LoweringOptions, lower_graph
from tilecraft.schedule import create_schedule
from tilecraft.tuning import (
    ErrorKind,
    MeasureInput,
    Measurer,
    MeasureResult,
    MeasureSettings,
    Stage,
    TuningDatabase,
    TuningError,
    Workload,
    evaluate_in_process,
    flop_count,
    lower_trace,
)
from tilecraft.tuning import worker as worker_module
from tilecraft.tuning.workload import resolve_reference

HELPERS = Path(__file__).with_name("tuning_candidates.py")
helpers = sys.modules[resolve_reference(f"{HELPERS}:ref").__module__]
ref = helpers.ref

TIMEOUT_S = 1.5
SCALED = Workload(ref("scaled"), (37,), name="scaled37")
MEASURING = ref("measuring_target")
MISBEHAVING = ref("misbehaving_builder")


def candidate(mode: object = None, workload: Workload = SCALED, target: str = MEASURING,
              builder: str = MISBEHAVING) -> MeasureInput:
    return MeasureInput(workload, target, mode, builder=builder, label=str(mode))


@pytest.fixture(scope="module")
def measurer():
    settings = MeasureSettings(warmup=0, repeats=2, min_seconds=0.0005, timeout_s=TIMEOUT_S)
    with Measurer(n_workers=2, settings=settings) as m:
        yield m


# every error kind ------------------------------------------------------------------------------
#: mode -> (error kind, stage, a phrase the message must contain)
FAILURES = {
    "segfault": (ErrorKind.RUN, Stage.CHECK, "SIGSEGV"),
    "abort": (ErrorKind.RUN, Stage.CHECK, "SIGABRT"),
    "os-exit": (ErrorKind.RUN, Stage.CHECK, "exited with status 4"),
    "exit": (ErrorKind.RUN, Stage.CHECK, "sys.exit(3)"),
    "raise": (ErrorKind.RUN, Stage.CHECK, "RuntimeError: the kernel raised"),
    "hang": (ErrorKind.TIMEOUT, Stage.CHECK, f"within {TIMEOUT_S:g} s"),
    "wrong": (ErrorKind.WRONG_RESULT, Stage.CHECK, "37 of 37 elements differ"),
    "lower-raise": (ErrorKind.INVALID, Stage.LOWER, "LoweringError: this schedule splits"),
    "lower-crash": (ErrorKind.INVALID, Stage.LOWER, "SIGSEGV"),
    "lower-hang": (ErrorKind.TIMEOUT, Stage.LOWER, "stage lower"),
    "codegen-raise": (ErrorKind.BUILD, Stage.CODEGEN, "CodegenError"),
    "build-crash": (ErrorKind.BUILD, Stage.BUILD, "SIGSEGV"),
}


def test_every_error_kind_comes_from_a_real_failing_candidate_and_the_pool_goes_on(measurer):
    modes = [None, *FAILURES, None]
    extra = [candidate(None, builder=ref("not_kernels_builder")),
             candidate(None, workload=Workload(ref("broken_workload")))]
    restarts = measurer.restarts
    called: list[int] = []
    start = time.monotonic()
    results = measurer.measure([candidate(m) for m in modes] + extra,
                               on_result=lambda index, result: called.append(index))
    elapsed = time.monotonic() - start
    assert sorted(called) == list(range(len(modes) + len(extra)))
    for mode, result in zip(modes, results):
        if mode is None:
            assert result.ok and result.error_kind is None, result
            assert result.median > 0 and result.max_abs_error == 0.0
            assert len(result.costs) == 2 and result.flops == 37
            continue
        kind, stage, phrase = FAILURES[mode]
        assert (result.error_kind, result.stage) == (kind, stage), (mode, result)
        assert phrase in result.error_message, (mode, result.error_message)
        assert not result.ok and result.median is None and result.cost == math.inf
    not_kernels, broken = results[len(modes):]
    assert not_kernels.error_kind is ErrorKind.INVALID
    assert "non-empty list of Kernel IR kernels" in not_kernels.error_message
    assert (broken.error_kind, broken.stage) == (ErrorKind.INVALID, Stage.WORKLOAD)
    assert "cannot be built" in broken.error_message
    # timeouts are hard: a hang costs about the timeout, not forever
    for mode in ("hang", "lower-hang"):
        assert results[modes.index(mode)].total_seconds < TIMEOUT_S + 1.0
    assert elapsed < 20
    # crashes and timeouts replaced workers; sys.exit and exceptions did not kill one
    crashed = {"segfault", "abort", "os-exit", "hang", "lower-crash", "lower-hang", "build-crash"}
    assert measurer.restarts - restarts == len(crashed)
    # and the pool goes on
    again = measurer.measure([candidate(None), candidate("wrong"), candidate(None)])
    assert [r.ok for r in again] == [True, False, True]
    assert len(measurer.worker_pids) == 2


def test_a_candidate_that_crashes_its_worker_does_not_lose_candidates_built_there(measurer):
    # with one worker per candidate pair, a crash replaces a worker that holds a built
    # candidate: it is rebuilt before it is timed
    results = measurer.measure([candidate(None), candidate(None), candidate("segfault"),
                                candidate("abort"), candidate(None)])
    assert [r.ok for r in results] == [True, True, False, False, True]


def test_timing_runs_serially_while_building_runs_in_parallel(tmp_path, monkeypatch):
    log = tmp_path / "log.txt"
    monkeypatch.setenv(helpers.LOG_VARIABLE, str(log))
    settings = MeasureSettings(warmup=1, repeats=3, min_seconds=0.002, timeout_s=20)
    with Measurer(n_workers=2, settings=settings) as m:
        results = m.measure([candidate(None, target=ref("slow_building_target"))
                             for _ in range(4)])
    assert all(r.ok for r in results)
    rows = helpers.read_log(str(log))
    builds = [(pid, start, end) for event, pid, start, end in rows if event == "build"]
    assert len(builds) == 4 and len({pid for pid, _, _ in builds}) == 2
    overlapping = any(a[0] != b[0] and a[1] < b[2] and b[1] < a[2]
                      for a in builds for b in builds)
    assert overlapping, "two workers should build at the same time"
    seen: set[str] = set()
    timed = []
    for event, _pid, start, end in rows:
        if event.startswith("run-"):
            if event in seen:
                timed.append((start, end))
            seen.add(event)
    assert len(seen) == 4 and timed
    for start, end in timed:
        for _, build_start, build_end in builds:
            assert end <= build_start or start >= build_end, "a timed run overlapped a build"


# estimate and both ------------------------------------------------------------------------------
def test_estimate_mode_models_in_process_without_workers():
    target = ref("estimating_target")
    with Measurer() as m:
        good, bad = m.measure([candidate({"modelled_cost": 0.002}, target=target),
                               candidate("lower-raise", target=target)])
        assert m.worker_pids == []
    assert good.ok and good.estimated and good.costs == (0.002,) and good.estimate_seconds == 0.002
    assert good.gflops == pytest.approx(37 / 0.002 / 1e9)
    assert (bad.error_kind, bad.stage) == (ErrorKind.INVALID, Stage.LOWER)
    # the database marks both as the model's verdict, not a measurement
    good_record = good.to_record(candidate({"modelled_cost": 0.002}, target=target))
    bad_record = bad.to_record(candidate("lower-raise", target=target))
    assert good_record.estimated and bad_record.estimated and good_record.median_cost == 0.002
    assert not MeasureResult(costs=(0.001,)).to_record(candidate(None)).estimated


def test_both_mode_measures_only_the_best_estimated_fraction():
    target = ref("both_target")
    costs = [0.008, 0.001, 0.005, 0.003, 0.007, 0.002, 0.006, 0.004]
    settings = MeasureSettings(warmup=0, repeats=2, min_seconds=0.0005, measure_fraction=0.25)
    batch = [candidate({"modelled_cost": c}, target=target) for c in costs]
    batch.append(candidate("lower-raise", target=target))
    with Measurer(settings=settings) as m:
        results = m.measure(batch)
    measured = [i for i, r in enumerate(results[:-1]) if not r.pruned]
    assert measured == [1, 5]  # the two lowest estimates
    for index, result in enumerate(results[:-1]):
        assert result.estimate_seconds == costs[index]
        if index in measured:
            assert result.ok and not result.estimated and result.median > 0
        else:
            assert result.pruned and result.costs == () and not result.ok
    assert results[-1].error_kind is ErrorKind.INVALID


# real x86 candidates ------------------------------------------------------------------------------
def _x86_executes() -> bool:
    try:
        from tilecraft.target.registry import get_target

        return get_target("x86_avx512").available().execute
    except Exception:  # noqa: BLE001 - no plugin, no execution
        return False


x86 = pytest.mark.skipif(not _x86_executes(), reason="x86_avx512 cannot execute here")


@x86
def test_real_x86_candidates_are_checked_against_the_reference_and_timed():
    matmul = Workload.from_catalog("matmul[m13-k17-n19]")
    transposed = create_schedule(matmul.instantiate().graph)
    out = transposed["out"]
    out.reorder(out.axes[1], out.reduce_axes[0], out.axes[0])
    settings = MeasureSettings(warmup=1, repeats=3, min_seconds=0.001, timeout_s=30)
    with Measurer(settings=settings) as m:
        results = m.measure([
            MeasureInput(matmul, "x86_avx512"),
            MeasureInput(matmul, "x86_avx512", transposed.trace),
            MeasureInput(matmul, "x86_avx512", transposed),
            MeasureInput(matmul, "x86_avx512", [{"primitive": "split", "stage": "out",
                                                 "loop": "q", "factor": 2}]),
            MeasureInput(Workload(ref("scaled"), (101,)), "x86_avx512",
                         builder=ref("tripled_builder")),
        ])
    default, as_json, as_object, invalid, wrong = results
    for result in (default, as_json, as_object):
        assert result.ok, result
        assert result.median > 0 and result.gflops > 0
        assert result.flops == 2 * 13 * 17 * 19
        assert result.max_abs_error < 1e-4 and result.build_seconds > 0
    assert (invalid.error_kind, invalid.stage) == (ErrorKind.INVALID, Stage.LOWER)
    assert "no loop named 'q'" in invalid.error_message
    assert (wrong.error_kind, wrong.stage) == (ErrorKind.WRONG_RESULT, Stage.CHECK)
    assert "101 of 101 elements differ from the reference" in wrong.error_message
    assert wrong.max_abs_error > 0


# in process, records, bad input ------------------------------------------------------------------
def test_evaluate_in_process_gives_the_same_kinds():
    settings = MeasureSettings(warmup=0, repeats=2, min_seconds=0.0)
    good = evaluate_in_process(candidate(None), settings)
    assert good.ok and good.median > 0 and good.max_abs_error == 0.0
    assert evaluate_in_process(candidate("wrong"), settings).error_kind is ErrorKind.WRONG_RESULT
    raised = evaluate_in_process(candidate("raise"), settings)
    assert (raised.error_kind, raised.stage) == (ErrorKind.RUN, Stage.CHECK)
    exited = evaluate_in_process(candidate("exit"), settings)
    assert exited.error_kind is ErrorKind.RUN and "sys.exit(3)" in exited.error_message


def test_results_become_database_records(tmp_path):
    settings = MeasureSettings(warmup=0, repeats=2, min_seconds=0.0)
    ok_input, bad_input = candidate(None), candidate("raise")
    ok = evaluate_in_process(ok_input, settings)
    bad = evaluate_in_process(bad_input, settings)
    with TuningDatabase(tmp_path / "db.sqlite") as db:
        db.add(ok.to_record(ok_input, hardware="test"))
        db.add(bad.to_record(bad_input, hardware="test"))
        [best] = db.best(SCALED.key, "misbehaving")
        assert best.costs == ok.costs and best.schedule == {}
        assert db.count(ErrorKind.RUN) == 1
    with pytest.raises(TuningError, match="pruned"):
        MeasureResult(pruned=True).to_record(ok_input)


def test_an_unpicklable_schedule_fails_alone(measurer):
    results = measurer.measure([candidate(lambda: None), candidate(None)])
    assert results[0].error_kind is ErrorKind.INVALID
    assert "cannot be sent to a worker process" in results[0].error_message
    assert results[1].ok


def test_configuration_errors_are_raised_not_recorded(measurer, monkeypatch):
    with pytest.raises(TargetError, match="unknown target 'no_such_target'"):
        measurer.measure([candidate(None, target="no_such_target")])
    with pytest.raises(TuningError, match="has no attribute 'nothing'"):
        measurer.measure([candidate(None, target=ref("nothing"))])
    with pytest.raises(TuningError, match="n_workers=0"):
        Measurer(n_workers=0)
    with pytest.raises(TuningError, match="repeats=0"):
        MeasureSettings(repeats=0)
    with pytest.raises(TuningError, match="timeout_s=-1"):
        MeasureSettings(timeout_s=-1)
    monkeypatch.setattr(worker_module, "_LAUNCH", "import sys; sys.exit(5)")
    process = worker_module.WorkerProcess(startup_timeout_s=10)
    process.start()
    with pytest.raises(TuningError, match="failed to start: exited with status 5"):
        process.wait_ready()


def test_a_target_that_cannot_execute_is_refused(monkeypatch):
    from tilecraft.target.base import Availability
    from tilecraft.tuning.candidate import resolve_target

    target = resolve_target(MEASURING)
    monkeypatch.setattr(type(target), "available", lambda self: Availability(
        codegen=True, build=True, execute=False, reasons={"execute": "no device (test)"}))
    with Measurer() as m, pytest.raises(TargetError, match="no device"):
        m.measure([candidate(None)])


def test_submit_overlaps_with_the_caller(measurer):
    future = measurer.submit([candidate(None), candidate("raise")])
    other_work = sum(range(1000))  # the caller goes on (a search engine proposing more)
    results = future.result(timeout=30)
    assert other_work and results[0].ok and results[1].error_kind is ErrorKind.RUN


# workloads -------------------------------------------------------------------------------------
def test_workload_keys_follow_the_program_not_the_seed():
    assert Workload(ref("scaled"), (37,)).key == Workload(ref("scaled"), (37,), seed=5).key
    assert Workload(ref("scaled"), (37,)).key != Workload(ref("scaled"), (38,)).key
    assert Workload(ref("scaled"), kwargs={"n": 37}).key == SCALED.key
    copy = pickle.loads(pickle.dumps(SCALED))
    assert copy == SCALED and copy._cache == {}
    inputs = Workload(ref("scaled"), (5,), seed=1).instantiate().inputs["A"]
    again = Workload(ref("scaled"), (5,), seed=1).instantiate().inputs["A"]
    np.testing.assert_array_equal(inputs, again)


def test_workload_builders_may_return_arrays_and_tolerances():
    instance = Workload(ref("row_sums"), (3, 5)).instantiate()
    assert instance.inputs["A"][1, 0] == 5.0
    np.testing.assert_array_equal(instance.expected["out"], (np.arange(15) % 7)
                                  .reshape(3, 5).sum(axis=1))
    case = Workload.from_catalog("matmul[m13-k17-n19]").instantiate()
    assert case.rtol is not None and case.flops == flop_count(case.graph) == 2 * 13 * 17 * 19


@pytest.mark.parametrize("reference, phrase", [
    ("no_colon", "is not of the form"),
    ("no_such_module_xyz:f", "cannot import module 'no_such_module_xyz'"),
    ("tilecraft.tuning:nothing_here", "has no attribute 'nothing_here'"),
    ("/no/such/file.py:f", "no file /no/such/file.py"),
])
def test_bad_references_name_the_culprit(reference, phrase):
    with pytest.raises(TuningError, match=phrase.replace("(", r"\(")):
        resolve_reference(reference)


def test_bad_workloads_and_builders():
    with pytest.raises(TuningError, match="must be a reference"):
        Workload("not a reference")
    with pytest.raises(TuningError, match="returned int"):
        Workload("builtins:len", ((1, 2),)).instantiate()
    graph = SCALED.instantiate().graph
    target = resolve_reference(MEASURING)()
    with pytest.raises(TuningError, match="takes a schedule's trace"):
        lower_trace(graph, {"out": "parallel"}, target)


def test_a_schedule_is_measured_and_recorded_as_its_trace():
    graph = SCALED.instantiate().graph
    s = create_schedule(graph)
    outer, inner = s["out"].split(s["out"].axes[0], factor=8)
    s["out"].vectorize(inner)
    record = {"trace": s.trace}
    assert MeasureInput(SCALED, MEASURING, s).schedule_json() == record
    assert MeasureInput(SCALED, MEASURING, s.trace).schedule_json() == record
    target = resolve_reference(MEASURING)()
    for form in (s, s.trace, record):
        assert [str(k) for k in lower_trace(graph, form, target)] == \
            [str(k) for k in s.lower(target)]
    default = [str(k) for k in lower_trace(graph, None, target)]
    assert default == [str(k) for k in lower_graph(graph, LoweringOptions.from_spec(target.spec))]


def test_an_interrupted_batch_leaves_the_measurer_usable():
    settings = MeasureSettings(warmup=0, repeats=1, min_seconds=0.0, timeout_s=10)

    def stop(index: int, result: MeasureResult) -> None:
        raise KeyboardInterrupt

    with Measurer(settings=settings) as m:
        with pytest.raises(KeyboardInterrupt):
            m.measure([candidate(None), candidate(None), candidate(None)], on_result=stop)
        assert [r.ok for r in m.measure([candidate(None), candidate("raise")])] == [True, False]


def test_a_kernel_overwriting_its_inputs_does_not_change_later_candidates():
    settings = MeasureSettings(warmup=1, repeats=1, min_seconds=0.0)
    assert evaluate_in_process(candidate("scribble"), settings).ok
    assert evaluate_in_process(candidate(None), settings).max_abs_error == 0.0
    assert SCALED.instantiate().inputs["A"].max() <= 1.0
