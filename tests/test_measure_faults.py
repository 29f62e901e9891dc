"""Measurement under faults (issue 10, item 7): a candidate that segfaults, hangs, exhausts
memory or returns wrong numbers is recorded with its error kind and never ends the run; worker
processes run under a memory limit and are recycled after N candidates or when their memory
grows; a tuning run killed with SIGKILL resumes from its database without measuring again what
it recorded.

The candidates are the deliberately misbehaving ones of ``tests/tuning_candidates.py`` (Kernel
IR interpreter: any machine).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tilecraft.tuning import (
    ErrorKind,
    MeasureInput,
    Measurer,
    MeasureSettings,
    Stage,
    TuningDatabase,
    TuningError,
    TuningOptions,
    Workload,
)
from tilecraft.tuning.events import EventKind, read_events
from tilecraft.tuning.tuner import tune
from tilecraft.tuning.workload import resolve_reference

HELPERS = Path(__file__).with_name("tuning_candidates.py")
helpers = sys.modules[resolve_reference(f"{HELPERS}:ref").__module__]
ref = helpers.ref

SCALED = Workload(ref("scaled"), (37,), name="scaled37")
MEMORY_LIMIT = 1 << 30  # well under the 2 GiB the "allocate" mode asks for
FAST = {"warmup": 0, "repeats": 2, "min_seconds": 0.0005}


def candidate(mode: str | None) -> MeasureInput:
    return MeasureInput(SCALED, ref("measuring_target"), mode,
                        builder=ref("misbehaving_builder"), label=str(mode))


def _data_limit(pid: int) -> int | None:
    """The soft ``Max data size`` of process ``pid`` (None: unlimited)."""
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max data size"):
            soft = line.split()[3]
            return None if soft == "unlimited" else int(soft)
    raise AssertionError("no 'Max data size' line")


# a whole tuning run through every fault -------------------------------------------------------
#: mode -> (error kind, a phrase of the message); None: measured
EXPECTED = {
    "ok-1": None, "ok-2": None,
    "segfault": (ErrorKind.RUN, "SIGSEGV"),
    "hang": (ErrorKind.TIMEOUT, "did not finish within"),
    "wrong": (ErrorKind.WRONG_RESULT, "differ from the reference"),
    "allocate": (ErrorKind.OUT_OF_MEMORY, "ran out of memory in stage check"),
    "oom-killed": (ErrorKind.OUT_OF_MEMORY, "out-of-memory killer"),
    "raise": (ErrorKind.RUN, "RuntimeError: the kernel raised"),
}


def test_a_tuning_run_records_every_fault_with_its_kind_and_finishes(tmp_path):
    assert set(EXPECTED) == set(helpers.FAULT_MODES)
    database = tmp_path / "faults.db"
    stored_at_event: list[int] = []  # records in the database as each result is announced

    def on_event(event) -> None:
        if event.kind is EventKind.CANDIDATE_RESULT:
            with TuningDatabase(database) as db:
                stored_at_event.append(len(db))

    options = TuningOptions(preset="quick", trials=len(EXPECTED), engine="random",
                            database=database, timeout_s=1.5, progress=False, events=on_event,
                            memory_limit_bytes=MEMORY_LIMIT, **FAST)
    result = tune(helpers.scaled(37), helpers.faults_template_target(), options,
                  target_ref=ref("faults_template_target"))
    (task,) = result.tasks
    # every result is stored the moment it is final, not when its batch ends
    assert stored_at_event == list(range(1, len(EXPECTED) + 1))
    assert len(task.trials) == len(EXPECTED)
    assert task.best_config["mode"] in ("ok-1", "ok-2")
    with TuningDatabase(database) as db:
        records = db.records(task.workload_key)
    assert sorted(r.schedule["out"]["mode"] for r in records) == sorted(EXPECTED)
    for record in records:
        mode = record.schedule["out"]["mode"]
        if EXPECTED[mode] is None:
            assert record.ok and record.median_cost > 0, record
            continue
        kind, phrase = EXPECTED[mode]
        assert record.error_kind is kind, (mode, record)
        assert phrase in record.error_message, (mode, record.error_message)
        assert not record.costs


# memory limit ---------------------------------------------------------------------------------
def test_a_candidate_allocating_past_the_memory_limit_is_out_of_memory_and_the_worker_goes_on():
    settings = MeasureSettings(timeout_s=5.0, memory_limit_bytes=MEMORY_LIMIT, **FAST)
    with Measurer(n_workers=1, settings=settings) as measurer:
        results = measurer.measure([candidate(None), candidate("allocate"), candidate(None)])
        (pid,) = measurer.worker_pids
        assert _data_limit(pid) == MEMORY_LIMIT
        assert measurer.restarts == 0  # a MemoryError does not take the worker down
    ok, oom, after = results
    assert ok.ok and after.ok and after.worker_pid == ok.worker_pid == pid
    assert (oom.error_kind, oom.stage) == (ErrorKind.OUT_OF_MEMORY, Stage.CHECK)
    assert "MemoryError" in oom.error_message and "memory_limit_bytes" in oom.error_message


def test_the_automatic_memory_limit_shares_three_quarters_of_the_machine():
    settings = MeasureSettings(**FAST)
    with Measurer(n_workers=2, settings=settings) as measurer:
        physical = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        assert measurer.memory_limit_bytes == physical * 3 // 4 // 2
        assert measurer.recycle_rss_bytes == min(2 << 30, measurer.memory_limit_bytes // 2)
    with Measurer(settings=MeasureSettings(memory_limit_bytes=0, **FAST)) as measurer:
        [result] = measurer.measure([candidate(None)])
        assert result.ok and _data_limit(result.worker_pid) is None


@pytest.mark.parametrize("field, value, phrase", [
    ("memory_limit_bytes", -1, "memory_limit_bytes=-1"),
    ("recycle_after", 0, "recycle_after=0"),
    ("recycle_rss_bytes", 1.5, "recycle_rss_bytes=1.5"),
])
def test_bad_worker_settings_name_the_field(field, value, phrase):
    with pytest.raises(TuningError, match=phrase):
        MeasureSettings(**{field: value})
    with pytest.raises(TuningError, match=phrase):
        TuningOptions(**{field: value})


# recycling ------------------------------------------------------------------------------------
def test_workers_are_recycled_after_n_candidates():
    settings = MeasureSettings(recycle_after=3, **FAST)
    with Measurer(n_workers=1, settings=settings) as measurer:
        results = measurer.measure([candidate(None)] * 7)
        assert all(r.ok for r in results)
        pids = [r.worker_pid for r in results]
        # three candidates per process: 3 + 3 + 1
        assert pids[0] == pids[1] == pids[2] != pids[3] == pids[4] == pids[5] != pids[6]
        assert len(measurer.recycled) == 2 and measurer.restarts == 0
        assert all("recycle_after=3" in why for _, why in measurer.recycled)
        # a crash's replacement starts counting afresh
        again = measurer.measure([candidate("segfault"), candidate(None), candidate(None)])
        assert [r.ok for r in again] == [False, True, True] and measurer.restarts == 1


def test_a_worker_whose_resident_memory_grows_is_recycled():
    settings = MeasureSettings(**FAST)
    with Measurer(n_workers=1, settings=settings) as measurer:
        [first] = measurer.measure([candidate(None)])
        (worker,) = measurer._workers
        baseline = worker.resident_bytes()
        assert baseline and baseline > 10 << 20
        # each "leak" build keeps LEAK_BYTES; two of them pass the threshold, one does not
        measurer.recycle_rss_bytes = baseline + helpers.LEAK_BYTES * 3 // 2
        [leaked] = measurer.measure([candidate("leak")])
        assert leaked.ok and not measurer.recycled and worker.pid == first.worker_pid
        results = measurer.measure([candidate("leak"), candidate(None)])
        assert all(r.ok for r in results)
        assert len(measurer.recycled) == 1
        pid, why = measurer.recycled[0]
        assert pid == first.worker_pid and "resident memory grew" in why
        assert measurer.worker_pids and measurer.worker_pids[0] != pid
        assert worker.resident_bytes() < baseline + helpers.LEAK_BYTES
        [after] = measurer.measure([candidate(None)])
        assert after.ok and after.worker_pid != pid


# SIGKILL and resume ---------------------------------------------------------------------------
_RUN = """
import json, sys
from tilecraft.tuning.workload import resolve_reference
from tilecraft.tuning.tuner import tune
helpers = sys.modules[resolve_reference(sys.argv[1] + ":ref").__module__]
tune(helpers.scaled(37), helpers.slow_template_target(), json.loads(sys.argv[2]),
     target_ref=helpers.ref("slow_template_target"))
"""


def _measured(events: Path) -> list[str]:
    """The labels of the candidates a run measured (one event each, after its record)."""
    if not events.exists():
        return []
    return [e.data["label"] for e in read_events(events) if e.kind is EventKind.CANDIDATE_RESULT]


def test_a_run_killed_with_sigkill_resumes_without_measuring_again(tmp_path):
    database = tmp_path / "resume.db"
    first_events, second_events = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    options = {"preset": "quick", "trials": 16, "engine": "random", "seed": 3,
               "database": str(database), "progress": False, "timeout_s": 5.0, **FAST}
    process = subprocess.Popen(
        [sys.executable, "-c", _RUN, str(HELPERS),
         json.dumps({**options, "events": str(first_events)})],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while len(_measured(first_events)) < 2:
            assert process.poll() is None, process.stderr.read().decode()
            assert time.monotonic() < deadline, "the first run recorded nothing in 60 s"
            time.sleep(0.02)
        process.send_signal(signal.SIGKILL)
        assert process.wait(10) == -signal.SIGKILL
    finally:
        if process.poll() is None:
            process.kill()
        process.stderr.close()
    with TuningDatabase(database) as db:
        recorded = {json.dumps(r.schedule["out"], sort_keys=True, separators=(",", ":"))
                    for r in db}
    assert set(_measured(first_events)) <= recorded
    assert 2 <= len(recorded) < 16, "the run must be killed mid-way"

    result = tune(helpers.scaled(37), helpers.slow_template_target(),
                  {**options, "events": str(second_events)},
                  target_ref=ref("slow_template_target"))
    (task,) = result.tasks
    again = _measured(second_events)
    assert len(task.trials) == 16 and task.best_config is not None
    assert not recorded & set(again), "a recorded candidate was measured again"
    assert len(again) == 16 - len(recorded)
    with TuningDatabase(database) as db:
        assert len(db) == 16
