"""The tuning event stream (JSON Lines, callbacks) and the progress display."""

from __future__ import annotations

import io
import json
import math
import sys
import time
from pathlib import Path

import pytest

from tilecraft.tuning import (
    ErrorKind,
    EventKind,
    EventStream,
    JsonLinesWriter,
    MeasureInput,
    MeasureResult,
    MeasureSettings,
    ProgressDisplay,
    TuningError,
    TuningEvent,
    TuningOptions,
    Workload,
    evaluate_in_process,
    open_event_stream,
    read_events,
)
from tilecraft.tuning.workload import resolve_reference

HELPERS = Path(__file__).with_name("tuning_candidates.py")
helpers = sys.modules[resolve_reference(f"{HELPERS}:ref").__module__]


def strict_json(line: str) -> dict:
    """json.loads that refuses NaN and Infinity (not JSON)."""
    def refuse(constant: str) -> None:
        raise ValueError(f"{constant} is not JSON")

    return json.loads(line, parse_constant=refuse)


def run_task(stream: EventStream, task: str = "matmul", costs=(4e-6, None, 2e-6, 3e-6)) -> None:
    stream.task_start(task, workload_key="key", target="x86_avx512", flops=8000, trials=10,
                      seconds=60.0)
    for cost in costs:
        if cost is None:
            stream.candidate_result(task, error_kind="run", error_message="SIGSEGV")
        else:
            stream.candidate_result(task, cost=cost, label=f"c{cost}")
    stream.task_end(task, reason="trials")


# the stream --------------------------------------------------------------------------------------
def test_events_number_trials_track_the_best_and_count_errors():
    seen: list[TuningEvent] = []
    run_task(EventStream([seen.append]))
    kinds = [e.kind for e in seen]
    assert kinds == [EventKind.TASK_START, EventKind.CANDIDATE_RESULT, EventKind.NEW_BEST,
                     EventKind.CANDIDATE_RESULT, EventKind.CANDIDATE_RESULT, EventKind.NEW_BEST,
                     EventKind.CANDIDATE_RESULT, EventKind.TASK_END]
    results = [e.data for e in seen if e.kind is EventKind.CANDIDATE_RESULT]
    assert [r["trial"] for r in results] == [1, 2, 3, 4]
    assert [r["gflops"] for r in results] == [pytest.approx(2.0), None, pytest.approx(4.0),
                                              pytest.approx(8000 / 3e-6 / 1e9)]
    assert results[1]["error_kind"] == "run" and results[1]["cost"] is None
    assert [r["best_cost"] for r in results] == [4e-6, 4e-6, 2e-6, 2e-6]
    bests = [e.data for e in seen if e.kind is EventKind.NEW_BEST]
    assert [(b["trial"], b["cost"], b["label"]) for b in bests] == [(1, 4e-6, "c4e-06"),
                                                                    (3, 2e-6, "c2e-06")]
    end = seen[-1].data
    assert end["trials"] == 4 and end["best_trial"] == 3 and end["errors"] == {"run": 1}
    assert end["best_gflops"] == pytest.approx(4.0) and end["reason"] == "trials"
    assert seen[0].data["budget"] == {"trials": 10, "seconds": 60.0}
    times = [e.time for e in seen]
    assert times == sorted(times) and abs(times[0] - time.time()) < 60
    assert all(e.task == "matmul" for e in seen)


def test_measure_results_feed_the_stream():
    settings = MeasureSettings(warmup=0, repeats=2, min_seconds=0.0)
    workload = Workload(helpers.ref("scaled"), (37,))
    target, builder = helpers.ref("measuring_target"), helpers.ref("misbehaving_builder")
    ok = evaluate_in_process(MeasureInput(workload, target, None, builder), settings)
    wrong = evaluate_in_process(MeasureInput(workload, target, "wrong", builder), settings)
    seen: list[TuningEvent] = []
    stream = EventStream([seen.append])
    stream.task_start("scaled", flops=ok.flops)
    stream.candidate_result("scaled", ok)
    stream.candidate_result("scaled", wrong)
    stream.candidate_result("scaled", MeasureResult(pruned=True, estimate_seconds=1e-3))
    results = [e.data for e in seen if e.kind is EventKind.CANDIDATE_RESULT]
    assert results[0]["cost"] == ok.median and results[0]["gflops"] == pytest.approx(ok.gflops)
    assert results[1]["error_kind"] == ErrorKind.WRONG_RESULT.value == "wrong-result"
    assert "differ from the reference" in results[1]["error_message"]
    assert results[2]["pruned"] is True and results[2]["estimate"] == 1e-3
    assert results[2]["cost"] is None and results[2]["error_kind"] is None
    assert stream.tasks["scaled"].errors == {"wrong-result": 1}


def test_json_lines_are_strict_json_and_read_back(tmp_path):
    path = tmp_path / "events.jsonl"
    writer = JsonLinesWriter(path)
    stream = EventStream([writer])
    run_task(stream, "matmul")
    run_task(stream, "conv2d", costs=(None,))
    stream.close()
    lines = path.read_text().splitlines()
    assert len(lines) == 8 + 3
    for line in lines:
        raw = strict_json(line)
        assert raw["v"] == 1 and isinstance(raw["time"], float)
    conv_end = strict_json(lines[-1])
    assert conv_end["event"] == "task_end" and conv_end["best_cost"] is None  # inf -> null
    events = read_events(path)
    assert [e.kind.value for e in events] == [strict_json(line)["event"] for line in lines]
    assert events[1].data["trial"] == 1 and events[1].data["cost"] == 4e-6


def test_the_writer_appends_to_open_streams_without_closing_them():
    buffer = io.StringIO()
    stream = EventStream([JsonLinesWriter(buffer)])
    run_task(stream, costs=())
    stream.close()
    assert not buffer.closed and len(buffer.getvalue().splitlines()) == 2


@pytest.mark.parametrize("line, phrase", [
    ("not json", "not a JSON line"),
    ("[1, 2]", "a tuning event is a JSON object, got list"),
    ('{"event": "lunch", "v": 1}', "'event' is 'lunch'"),
    ('{"event": "new_best", "v": 2, "task": "t", "time": 1.0}', "schema version 2"),
    ('{"event": "new_best", "v": 1, "task": "t", "time": 1.0, "trial": 1}',
     "new_best event lacks cost, gflops, label, elapsed"),
    ('{"event": "task_end", "v": 1, "task": 3, "time": 1.0, "trials": 1, "best_cost": 1,'
     ' "best_gflops": 1, "best_trial": 1, "elapsed": 1, "reason": "", "errors": {}}',
     "'task' must be a string"),
])
def test_malformed_events_are_refused_with_the_reason(line, phrase):
    with pytest.raises(TuningError) as info:
        TuningEvent.from_json(line)
    assert phrase in str(info.value)


def test_a_bad_line_in_a_file_is_named(tmp_path):
    path = tmp_path / "events.jsonl"
    stream = EventStream([JsonLinesWriter(path)])
    run_task(stream, costs=())
    stream.close()
    with path.open("a") as handle:
        handle.write("\n{oops\n")
    with pytest.raises(TuningError, match=r"events.jsonl, line 4: not a JSON line"):
        read_events(path)


def test_results_of_a_task_that_never_started_are_refused():
    stream = EventStream()
    with pytest.raises(TuningError, match=r"task 'gemm' has not started; call task_start"):
        stream.candidate_result("gemm", cost=1.0)
    with pytest.raises(TuningError, match="has not started"):
        stream.task_end("gemm")


def test_options_open_the_stream_they_ask_for(tmp_path, capsys):
    path = tmp_path / "run.jsonl"
    seen: list[TuningEvent] = []
    stream = open_event_stream(TuningOptions(events=path, progress=True), [seen.append])
    run_task(stream)
    stream.close()
    assert len(read_events(path)) == len(seen) == 8
    assert "[matmul] done (trials)" in capsys.readouterr().err
    callback_stream = open_event_stream(TuningOptions(events=seen.append, progress=False))
    assert callback_stream.sinks == [seen.append]


# the progress display ----------------------------------------------------------------------------
def test_terminal_display_redraws_one_line_per_task():
    out = io.StringIO()
    stream = EventStream([ProgressDisplay(out, tty=True, min_interval_s=0.0)])
    run_task(stream, "matmul")
    run_task(stream, "conv2d", costs=(1e-3,))
    text = out.getvalue()
    lines = text.split("\n")
    assert len(lines) == 3 and lines[-1] == ""  # two finished lines
    last_matmul = lines[0].split("\r")[-1].rstrip()
    assert last_matmul.startswith("[matmul] done (trials): trials 4/10  best 4.00 GFLOP/s")
    assert "errors 1" in last_matmul
    assert lines[1].split("\r")[-1].startswith("[conv2d] done (trials): trials 1/10")
    assert "\r[matmul] trials 2/10  best 2.00 GFLOP/s (4.000 us)  errors 1" in lines[0]


def test_terminal_display_pads_over_a_longer_previous_line():
    out = io.StringIO()
    display = ProgressDisplay(out, tty=True, min_interval_s=0.0)
    stream = EventStream([display])
    stream.task_start("t", flops=0, trials=math.inf)
    stream.candidate_result("t", error_kind="timeout")
    stream.candidate_result("t", cost=1e-3)
    drawn = out.getvalue().split("\r")[1:]
    assert all(len(later) >= len(earlier.rstrip()) for earlier, later in zip(drawn, drawn[1:]))
    assert drawn[-1].startswith("[t] trials 2  best 1.000 ms  errors 1")
    display.close()
    assert out.getvalue().endswith("\n")


def test_terminal_display_is_throttled_but_shows_every_new_best():
    out = io.StringIO()
    stream = EventStream([ProgressDisplay(out, tty=True, min_interval_s=3600)])
    stream.task_start("t", flops=1000, trials=100)
    for trial in range(50):
        stream.candidate_result("t", cost=1.0 if trial else 0.5)
    # start, the first result's new best, nothing else for 49 results
    assert out.getvalue().count("\r") == 2


def test_plain_display_writes_lines_without_carriage_returns():
    out = io.StringIO()
    stream = EventStream([ProgressDisplay(out, tty=False, plain_interval_s=0.0)])
    run_task(stream)
    text = out.getvalue()
    assert "\r" not in text
    lines = text.splitlines()
    assert lines[0] == "[matmul] started on x86_avx512: budget 10 trials, 60 s"
    assert "[matmul] trial 1: new best 2.00 GFLOP/s (4.000 us)" in lines
    assert "[matmul] trial 3: new best 4.00 GFLOP/s (2.000 us)" in lines
    assert any(line.startswith("[matmul] trials 2/10") for line in lines)  # periodic status
    assert lines[-1].startswith("[matmul] done (trials): trials 4/10  best 4.00 GFLOP/s")


def test_display_without_flops_shows_times():
    out = io.StringIO()
    stream = EventStream([ProgressDisplay(out, tty=False)])
    stream.task_start("transpose", flops=0)
    stream.candidate_result("transpose", cost=2.5)
    stream.task_end("transpose", reason="space exhausted")
    lines = out.getvalue().splitlines()
    assert lines[0] == "[transpose] started on ?: budget unlimited"
    assert lines[1] == "[transpose] trial 1: new best 2.500 s"
    assert lines[2].startswith("[transpose] done (space exhausted): trials 1  best 2.500 s")
