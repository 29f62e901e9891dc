"""Search overlapped with execution (tilecraft.runtime.overlap, thesis §4.6.3): calls during
the background tuning return the reference's values while kernels are swapped; swaps are
events; errors of the background surface; sync mode waits for stages; close stops."""

from __future__ import annotations

import math
import threading

import numpy as np
import pytest

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.reference.interpreter import run as reference_run
from tilecraft.runtime.overlap import (
    BackgroundTuningError,
    OverlappedExecutable,
    isolate,
    tunable_computes,
)
from tilecraft.tuning.events import EventKind, read_events
from tilecraft.tuning.workload import TuningError

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")


def _program():
    # awkward sizes: primes, nothing divides the templates' tiles
    A = te.placeholder((37, 61), name="A")
    B = te.placeholder((61, 29), name="B")
    C = ops.matmul(A, B, name="C")
    D = te.compute(C.shape, lambda i, j: te.max(C[i, j], 0.0), name="D")
    rng = np.random.default_rng(3)
    arrays = {"A": rng.standard_normal((37, 61)).astype(np.float32),
              "B": rng.standard_normal((61, 29)).astype(np.float32)}
    graph = tc.Graph.from_outputs([D])
    return graph, arrays, reference_run(graph, arrays)


def _options(**extra):
    # a generous timeout: the machine may be loaded, and a timed-out candidate is no new best
    return {"preset": "quick", "trials": 4, "batch_size": 2, "progress": False,
            "timeout_s": 60.0, **extra}


@pytest.fixture
def always_swap(monkeypatch):
    """Running kernels count as infinitely slow, so every new best is swapped in (the
    mechanism under test, whatever the machine's timings)."""
    monkeypatch.setattr(OverlappedExecutable, "_time_running", lambda self, compute: math.inf)


def test_calls_during_swaps_equal_the_reference(always_swap, tmp_path):
    graph, arrays, expected = _program()
    events_file = tmp_path / "events.jsonl"
    exe = tc.compile(graph, target="x86_avx512", tuning=_options(events=str(events_file)),
                     overlap=True)
    assert isinstance(exe, OverlappedExecutable)
    failures, calls = [], [0]

    def caller():
        while not exe.tuning_done:
            got = exe(**arrays)
            calls[0] += 1
            if not np.allclose(got, expected, rtol=1e-4, atol=1e-4):
                failures.append(float(np.abs(got - expected).max()))

    threads = [threading.Thread(target=caller) for _ in range(2)]
    for thread in threads:
        thread.start()
    assert exe.wait(timeout=120)
    for thread in threads:
        thread.join()
    assert not failures
    assert calls[0] > 0
    np.testing.assert_allclose(exe(**arrays), expected, rtol=1e-4, atol=1e-4)
    swaps = [e for e in read_events(events_file) if e.kind is EventKind.KERNEL_SWAP]
    assert len(swaps) == len(exe.swaps) >= 1
    # every compute whose tuning measured a candidate swapped at least once
    measured = {task.compute for task in exe.tuning_result.tasks
                if math.isfinite(task.best_seconds)}
    assert measured and {s.task for s in swaps} == measured
    assert [s.data["swap"] for s in swaps] == list(range(1, len(swaps) + 1))
    for swap in exe.swaps:
        assert swap.cost < swap.previous_cost
        assert set(swap.kernels) <= set(exe.sources)


def test_a_background_error_surfaces_on_the_next_call_and_on_wait():
    graph, arrays, expected = _program()
    exe = tc.compile(graph, target="x86_avx512", tuning=_options(engine="no-such-engine"),
                     overlap="async")
    exe._done.wait(60)
    with pytest.raises(BackgroundTuningError, match="no-such-engine") as raised:
        exe(**arrays)
    assert isinstance(raised.value.__cause__, Exception)
    # raised once by calls; the executable goes on with its kernels
    np.testing.assert_allclose(exe(**arrays), expected, rtol=1e-4, atol=1e-4)
    with pytest.raises(BackgroundTuningError):
        exe.wait()


def test_sync_mode_calls_wait_for_search_stages(always_swap):
    graph, arrays, expected = _program()
    seen = []
    exe = tc.compile(graph, target="x86_avx512", tuning=_options(events=seen.append),
                     overlap="sync")
    calls = 0
    while not exe.tuning_done:
        np.testing.assert_allclose(exe(**arrays), expected, rtol=1e-4, atol=1e-4)
        calls += 1
    exe.wait()
    # a stage: a batch of two results of one task, or a task's end
    results = sum(e.kind is EventKind.CANDIDATE_RESULT for e in seen)
    ends = sum(e.kind is EventKind.TASK_END for e in seen)
    assert 1 <= calls <= results // 2 + ends + 1


@pytest.mark.slow
def test_close_stops_the_tuning_and_keeps_the_executable(always_swap):
    graph, arrays, expected = _program()
    first = threading.Event()
    exe = tc.compile(graph, target="x86_avx512",
                     tuning=_options(trials=10_000, seconds=600,
                                     events=lambda e: e.kind is EventKind.KERNEL_SWAP
                                     and first.set()), overlap=True)
    assert first.wait(60)
    exe.close()
    assert exe.tuning_done
    assert "stopped by close()" in exe.report.notes[-1]
    assert exe.wait(0)
    np.testing.assert_allclose(exe(**arrays), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_recorded_schedules_are_installed_at_once(always_swap, tmp_path):
    graph, arrays, expected = _program()
    database = str(tmp_path / "db.sqlite")
    with tc.compile(graph, target="x86_avx512", tuning=_options(database=database),
                    overlap=True) as exe:
        exe.wait()
    best = {s.compute: s.config for s in exe.swaps}  # the last swap of each compute
    seen = []
    # the same seed and trials: every point is known, nothing is measured again
    again = tc.compile(graph, target="x86_avx512", tuning=_options(events=seen.append),
                       database=database, overlap=True)
    for name, config in best.items():
        assert again._state.schedules[name].config == config
    again.wait()
    assert not any(e.kind is EventKind.CANDIDATE_RESULT for e in seen)
    np.testing.assert_allclose(again(**arrays), expected, rtol=1e-4, atol=1e-4)


def test_isolated_computes_read_placeholders():
    graph, _, _ = _program()
    names = [name for name, _ in tunable_computes_of(graph)]
    assert names == ["C", "D"]
    alone = isolate(graph, graph.outputs[0])
    assert [t.name for t in alone.computes] == ["D"]
    assert [t.name for t in alone.inputs] == ["C"]


def tunable_computes_of(graph):
    from tilecraft.pipeline import run_pipeline
    from tilecraft.target.registry import get_target

    # as compile(..., overlap=...) runs it: fusion groups with a tunable compute apart
    return tunable_computes(run_pipeline(graph, get_target("x86_avx512"), tunable_apart=True))


def test_a_gemm_fused_with_its_epilogue_runs_apart_where_tuning_swaps_it():
    """x86 fuses C's ReLU into C's kernel; a compile that tunes in the background keeps them
    apart (the fused kernel would take only the template's defaults), with a note."""
    from tilecraft.pipeline import run_pipeline
    from tilecraft.target.registry import get_target

    graph, _, _ = _program()
    fused = run_pipeline(graph, get_target("x86_avx512"))
    assert [g.computes for g in fused.groups if g.computes] == [("C", "D")]
    assert [g.tunable for g in fused.groups if g.computes] == ["C"]
    assert tunable_computes(fused) == []
    apart = run_pipeline(graph, get_target("x86_avx512"), tunable_apart=True)
    assert not [g for g in apart.groups if g.computes]
    assert any("C -> D run apart" in note for note in apart.schedule_notes)


@pytest.mark.parametrize("overlap", ["sideways", 3])
def test_bad_overlap_values_are_refused(overlap):
    graph, _, _ = _program()
    with pytest.raises(TuningError, match="overlap="):
        tc.compile(graph, target="x86_avx512", tuning="quick", overlap=overlap)


def test_overlap_needs_tuning():
    graph, _, _ = _program()
    with pytest.raises(TuningError, match="give tuning="):
        tc.compile(graph, target="x86_avx512", overlap=True)
