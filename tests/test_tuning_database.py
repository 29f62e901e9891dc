"""The tuning database: records, best-K, resume, JSON Lines, merge, concurrency, crashes, and
refusing foreign, corrupt or newer files."""

from __future__ import annotations

import json
import multiprocessing
import os
import sqlite3
from pathlib import Path

import pytest

from tilecraft.tuning import ErrorKind, TuningDatabase, TuningRecord, workload_key
from tilecraft.tuning.database import TuningDatabaseError


def _record(tile: int, cost: float | None, key: str = "gemm", **extra) -> TuningRecord:
    return TuningRecord(workload_key=key, target="x86_avx512", hardware="host",
                        schedule={"tile": tile}, costs=() if cost is None else (cost,), **extra)


def test_best_k_ignores_failures_and_orders_by_median() -> None:
    db = TuningDatabase(":memory:")
    db.add_many([_record(8, 3.0), _record(16, 1.0), _record(32, 2.0),
                 _record(64, None, error_kind=ErrorKind.TIMEOUT, error_message="hung")])
    assert [r.schedule["tile"] for r in db.best("gemm", "x86_avx512", k=2)] == [16, 32]
    assert db.count() == 4 and db.count(ErrorKind.TIMEOUT) == 1
    assert db.best("other", "x86_avx512") == []


def test_failed_records_are_kept_not_dropped() -> None:
    db = TuningDatabase(":memory:")
    db.add(_record(1, None, error_kind=ErrorKind.BUILD, error_message="ptxas died"))
    (stored,) = db.records()
    assert stored.error_kind is ErrorKind.BUILD and stored.error_message == "ptxas died"


def test_identical_records_are_stored_once() -> None:
    db = TuningDatabase(":memory:")
    rec = _record(8, 1.0)
    assert db.add(rec) is True
    assert db.add(rec) is False
    assert len(db) == 1


def test_resume_knows_tried_schedules(tmp_path: Path) -> None:
    path = tmp_path / "tune.db"
    with TuningDatabase(path) as db:
        db.add_many([_record(8, 1.0), _record(16, None, error_kind=ErrorKind.RUN)])
    with TuningDatabase(path) as again:
        tried = again.tried_schedules("gemm", "x86_avx512")
    assert tried == {'{"tile":8}', '{"tile":16}'}


def test_jsonl_round_trip_and_merge(tmp_path: Path) -> None:
    a = TuningDatabase(tmp_path / "a.db")
    a.add_many([_record(t, float(t)) for t in (1, 2, 3)])
    assert a.export_jsonl(tmp_path / "a.jsonl") == 3
    b = TuningDatabase(":memory:")
    assert b.import_jsonl(tmp_path / "a.jsonl") == 3
    assert b.import_jsonl(tmp_path / "a.jsonl") == 0
    c = TuningDatabase(":memory:")
    c.add(_record(4, 0.5))
    assert c.merge(b) == 3 and len(c) == 4
    assert c.best("gemm", "x86_avx512")[0].schedule == {"tile": 4}


def test_bad_jsonl_line_is_named_and_nothing_is_imported(tmp_path: Path) -> None:
    good = json.dumps(_record(1, 1.0).model_dump(mode="json"))
    path = tmp_path / "bad.jsonl"
    path.write_text(good + "\n" + '{"workload_key": "x"}\n')
    db = TuningDatabase(":memory:")
    with pytest.raises(TuningDatabaseError, match="line 2"):
        db.import_jsonl(path)
    assert len(db) == 0


def test_foreign_file_is_refused_and_untouched(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_text("my precious notes")
    with pytest.raises(TuningDatabaseError, match="not a tilecraft tuning database"):
        TuningDatabase(path)
    assert path.read_text() == "my precious notes"


def test_other_sqlite_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE customers (name TEXT)")
    conn.commit()
    conn.close()
    with pytest.raises(TuningDatabaseError, match="another program"):
        TuningDatabase(path)


def test_newer_schema_is_refused_not_migrated(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    TuningDatabase(path).close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    with pytest.raises(TuningDatabaseError, match="newer tilecraft"):
        TuningDatabase(path)
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone() == ("99",)


def test_corrupt_file_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "corrupt.db"
    with TuningDatabase(path) as db:
        db.add_many([_record(t, 1.0 + t) for t in range(200)])
    data = bytearray(path.read_bytes())
    for offset in range(4096, min(len(data), 4096 * 3)):  # smash pages after the header page
        data[offset] = 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(TuningDatabaseError, match="corrupt"):
        db = TuningDatabase(path)
        db.records()


def _writer(path: str, worker: int, count: int) -> None:
    db = TuningDatabase(path)
    for index in range(count):
        db.add(_record(worker * 1000 + index, 1.0 + index, key=f"w{worker}"))
    db.close()


def test_two_concurrent_writers_lose_nothing(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.db")
    TuningDatabase(path).close()
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, w, 60)) for w in (1, 2)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(60)
        assert proc.exitcode == 0
    db = TuningDatabase(path)
    assert len(db) == 120
    assert len(db.records("w1")) == 60 and len(db.records("w2")) == 60


def _crash_mid_transaction(path: str) -> None:
    db = TuningDatabase(path)
    db.add(_record(1, 1.0, key="committed"))
    conn = db._conn
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("INSERT INTO records (content_hash, workload_key, target, target_options, "
                 "hardware, median_cost, error_kind, timestamp, body) VALUES "
                 "('x', 'half', 't', '{}', '', 1.0, NULL, 0, '{}')")
    os._exit(17)  # dies without committing or closing


def test_crash_mid_write_keeps_committed_records(tmp_path: Path) -> None:
    path = str(tmp_path / "crash.db")
    ctx = multiprocessing.get_context("spawn")
    proc = ctx.Process(target=_crash_mid_transaction, args=(path,))
    proc.start()
    proc.join(60)
    assert proc.exitcode == 17
    db = TuningDatabase(path)
    assert [r.workload_key for r in db.records()] == ["committed"]
    db.add(_record(2, 2.0, key="after"))
    assert len(db) == 2


def test_workload_key_is_canonical() -> None:
    assert workload_key({"b": 1, "a": [1, 2]}) == workload_key({"a": [1, 2], "b": 1})
    assert workload_key({"a": 1}) != workload_key({"a": 2})


def test_record_rejects_nonpositive_costs() -> None:
    with pytest.raises(ValueError, match="positive"):
        _record(1, -1.0)
