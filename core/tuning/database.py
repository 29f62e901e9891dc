"""The tuning database: embedded SQLite, versioned schema, safe under concurrent writers.

Each record is committed in its own transaction (WAL journal), so two tuning processes can
write the same file and a crash loses nothing that was committed. A file that is not a tilecraft
tuning database, is corrupt, or was written by a newer schema version is refused with a
:class:`TuningDatabaseError` — never overwritten or migrated silently.

>>> db = TuningDatabase(":memory:")
>>> rec = TuningRecord(workload_key="w", target="x86_avx512", schedule={"tile": 8},
...                    costs=(0.5,))
>>> _ = db.add(rec)
>>> db.best("w", "x86_avx512")[0].schedule
{'tile': 8}
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from tilecraft.errors import TilecraftError
from tilecraft.tuning.record import ErrorKind, TuningRecord, canonical_json

SCHEMA_VERSION = 1
FORMAT_NAME = "tilecraft-tuning"
_SQLITE_MAGIC = b"SQLite format 3\x00"


class TuningDatabaseError(TilecraftError):
    """The tuning database file cannot be used as asked."""


_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS records (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    content_hash TEXT NOT NULL UNIQUE,
    workload_key TEXT NOT NULL,
    target TEXT NOT NULL,
    target_options TEXT NOT NULL,
    hardware TEXT NOT NULL,
    median_cost REAL,
    error_kind TEXT,
    timestamp REAL NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS records_by_workload ON records (workload_key, target, median_cost);
"""
_RECORD_COLUMNS = ("id", "content_hash", "workload_key", "target", "target_options", "hardware",
                   "median_cost", "error_kind", "timestamp", "body")


def _declared_size(header: bytes) -> int | None:
    """Bytes an SQLite file declares in its 100-byte header (page size x page count), or None
    when the header's page count is not known to be current (see sqlite.org/fileformat.html:
    valid only when the version-valid-for number equals the change counter)."""
    if len(header) < 100:
        return None
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    if pages == 0 or header[24:28] != header[92:96]:
        return None
    return page_size * pages


class TuningDatabase:
    """Records of tried schedules, keyed by workload and target.

    ``path`` is a file (created when missing) or ``":memory:"``.
    """

    def __init__(self, path: str | Path):
        self.path = str(path)
        if self.path != ":memory:":
            self._check_path(Path(self.path))
            self._check_existing_file(Path(self.path))
        try:
            self._conn = sqlite3.connect(self.path, timeout=60.0, isolation_level=None)
            self._conn.execute("PRAGMA busy_timeout = 60000")
            self._initialise()
            # only once the file is known to be ours: switching to WAL rewrites the header
            if self.path != ":memory:":
                self._conn.execute("PRAGMA journal_mode = WAL")
        except sqlite3.DatabaseError as err:
            self._close_quietly()
            raise TuningDatabaseError(
                f"tuning database {self.path} is corrupt or unreadable ({err}); move it aside "
                "and start a new file, or restore it from an exported .jsonl") from None
        except TuningDatabaseError:
            self._close_quietly()
            raise

    def _close_quietly(self) -> None:
        conn = getattr(self, "_conn", None)
        if conn is not None:
            with contextlib.suppress(sqlite3.Error):
                conn.close()

    # opening -------------------------------------------------------------------------------
    def _check_path(self, path: Path) -> None:
        if path.is_dir():
            raise TuningDatabaseError(f"tuning database {path} is a directory; pass a file path "
                                      f"such as {path / 'tuning.db'}")
        if not path.parent.is_dir():
            raise TuningDatabaseError(f"cannot create tuning database {path}: the directory "
                                      f"{path.parent} does not exist; create it first")

    def _check_existing_file(self, path: Path) -> None:
        if not path.exists() or path.stat().st_size == 0:
            return
        try:
            with path.open("rb") as handle:
                header = handle.read(100)
        except OSError as err:
            raise TuningDatabaseError(f"cannot read tuning database {path}: "
                                      f"{err.strerror or err}; check its permissions") from None
        if header[:len(_SQLITE_MAGIC)] != _SQLITE_MAGIC:
            raise TuningDatabaseError(
                f"{path} is not a tilecraft tuning database (not an SQLite file); it was left "
                "untouched — pass another path")
        expected = _declared_size(header)
        size = path.stat().st_size
        if expected is not None and size < expected:
            raise TuningDatabaseError(
                f"tuning database {path} is truncated: its header declares {expected} bytes but "
                f"the file has {size}; it was left untouched — restore it from a copy or an "
                "exported .jsonl, or move it aside")

    def _initialise(self) -> None:
        tables = {row[0] for row in self._conn.execute(
            "SELECT name FROM sqlite_master WHERE type='table'")}
        if tables and "meta" not in tables:
            raise TuningDatabaseError(
                f"{self.path} is an SQLite file of another program (tables: "
                f"{', '.join(sorted(tables))}); it was left untouched — pass another path")
        if "meta" in tables:
            meta = dict(self._conn.execute("SELECT key, value FROM meta"))
            if meta.get("format") != FORMAT_NAME:
                raise TuningDatabaseError(f"{self.path} is not a tilecraft tuning database "
                                          f"(format {meta.get('format')!r}); left untouched")
            try:
                version = int(meta.get("schema_version", "0"))
            except ValueError:
                raise TuningDatabaseError(
                    f"{self.path}: its schema_version {meta.get('schema_version')!r} is not a "
                    "number; the file is damaged — restore it from an exported .jsonl or move "
                    "it aside") from None
            if version > SCHEMA_VERSION:
                raise TuningDatabaseError(
                    f"{self.path} was written by a newer tilecraft (schema version {version}, "
                    f"this one reads up to {SCHEMA_VERSION}); upgrade tilecraft — the file is "
                    "not migrated")
            if version < SCHEMA_VERSION:
                raise TuningDatabaseError(
                    f"{self.path} has schema version {version}, older than {SCHEMA_VERSION}; "
                    "export it with the tilecraft that wrote it and import the .jsonl")
            check = self._conn.execute("PRAGMA quick_check").fetchone()[0]
            if check != "ok":
                raise TuningDatabaseError(f"tuning database {self.path} is corrupt ({check}); "
                                          "restore it from an exported .jsonl")
            self._check_columns()
            return
        with self._transaction():
            for statement in _SCHEMA.strip().split(";"):
                if statement.strip():
                    self._conn.execute(statement)
            self._conn.execute("INSERT OR IGNORE INTO meta VALUES ('format', ?)", (FORMAT_NAME,))
            self._conn.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)",
                               (str(SCHEMA_VERSION),))

    def _check_columns(self) -> None:
        """The records table has the columns of this schema version (a file edited by hand or
        by another program is refused before any query fails half-way)."""
        columns = {row[1] for row in self._conn.execute("PRAGMA table_info(records)")}
        missing = sorted(set(_RECORD_COLUMNS) - columns)
        if missing:
            raise TuningDatabaseError(
                f"tuning database {self.path} has no records table or lacks its columns "
                f"{', '.join(missing)}; the file is damaged — restore it from an exported .jsonl "
                "or move it aside")

    @contextlib.contextmanager
    def _guard(self, action: str) -> Iterator[None]:
        """An SQLite error while ``action`` becomes a TuningDatabaseError naming the file."""
        try:
            yield
        except sqlite3.Error as err:
            raise TuningDatabaseError(
                f"{action} tuning database {self.path} failed ({type(err).__name__}: {err}); "
                "if the file is damaged, restore it from an exported .jsonl or move it aside"
            ) from None

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        """BEGIN IMMEDIATE takes the write lock up front, so concurrent writers queue; any
        error rolls everything back, so a failing write leaves the file as it was."""
        with self._guard("writing to"):
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    # writing -------------------------------------------------------------------------------
    def add(self, record: TuningRecord) -> bool:
        """Store ``record``; False when an identical record is already there."""
        return self.add_many([record]) == 1

    def add_many(self, records: Iterable[TuningRecord]) -> int:
        """Store records in one transaction; returns how many were new."""
        added = 0
        with self._transaction():
            for record in records:
                cursor = self._conn.execute(
                    "INSERT OR IGNORE INTO records (content_hash, workload_key, target, "
                    "target_options, hardware, median_cost, error_kind, timestamp, body) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (record.content_hash(), record.workload_key, record.target,
                     record.target_options, record.hardware, record.median_cost,
                     record.error_kind.value if record.error_kind else None, record.timestamp,
                     canonical_json(record.model_dump(mode="json"))))
                added += cursor.rowcount
        return added

    # reading -------------------------------------------------------------------------------
    def _decode(self, body: str, row_id: int) -> TuningRecord:
        try:
            data = json.loads(body)
        except (TypeError, ValueError) as err:
            raise TuningDatabaseError(
                f"record {row_id} of {self.path} is not JSON ({err}); the database is damaged — "
                "restore it from an exported .jsonl or move it aside") from None
        try:
            return TuningRecord.model_validate(data)
        except ValidationError as err:
            unknown = sorted(str(e["loc"][0]) for e in err.errors()
                             if e["type"] == "extra_forbidden" and e["loc"])
            if unknown:
                raise TuningDatabaseError(
                    f"record {row_id} of {self.path} has fields this tilecraft does not know "
                    f"({', '.join(unknown)}): it was written by a newer tilecraft; upgrade "
                    "tilecraft to read it") from None
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'record'}: {e['msg']}"
                                 for e in err.errors())
            raise TuningDatabaseError(
                f"record {row_id} of {self.path} is not a valid tuning record ({problems}); the "
                "database is damaged — restore it from an exported .jsonl or move it aside"
            ) from None

    def _query(self, query: str, args: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        with self._guard("reading"):
            return self._conn.execute(query, args).fetchall()

    def records(self, workload_key: str | None = None,
                target: str | None = None) -> list[TuningRecord]:
        """All records, optionally of one workload and target, oldest first."""
        query, args = "SELECT id, body FROM records", []
        clauses = []
        if workload_key is not None:
            clauses.append("workload_key = ?")
            args.append(workload_key)
        if target is not None:
            clauses.append("target = ?")
            args.append(target)
        if clauses:
            query += " WHERE " + " AND ".join(clauses)
        query += " ORDER BY timestamp, id"
        return [self._decode(body, row_id) for row_id, body in self._query(query, args)]

    def best(self, workload_key: str, target: str, k: int = 1,
             hardware: str | None = None) -> list[TuningRecord]:
        """The ``k`` valid records of lowest median cost for a workload on a target."""
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise TuningDatabaseError(f"best(k={k!r}): k must be a positive int (SQLite reads a "
                                      "negative limit as no limit)")
        query = ("SELECT id, body FROM records WHERE workload_key = ? AND target = ? AND "
                 "error_kind IS NULL AND median_cost IS NOT NULL")
        args: list[object] = [workload_key, target]
        if hardware is not None:
            query += " AND hardware = ?"
            args.append(hardware)
        query += " ORDER BY median_cost, id LIMIT ?"
        args.append(k)
        return [self._decode(body, row_id) for row_id, body in self._query(query, args)]

    def tried_schedules(self, workload_key: str, target: str) -> set[str]:
        """Canonical JSON of every schedule already tried (to resume an interrupted run)."""
        return {canonical_json(r.schedule) for r in self.records(workload_key, target)}

    def count(self, error_kind: ErrorKind | None = None) -> int:
        if error_kind is None:
            return self._query("SELECT COUNT(*) FROM records")[0][0]
        return self._query("SELECT COUNT(*) FROM records WHERE error_kind = ?",
                           (error_kind.value,))[0][0]

    def __len__(self) -> int:
        return self.count()

    def __iter__(self) -> Iterator[TuningRecord]:
        return iter(self.records())

    # exchange ------------------------------------------------------------------------------
    def export_jsonl(self, path: str | Path) -> int:
        """Write every record as one JSON object per line; returns the count. The file is
        written beside its final name and renamed when complete: never half-written."""
        records = self.records()
        target = Path(path)
        partial = target.with_name(f".{target.name}.partial")
        try:
            with partial.open("w", encoding="utf-8") as handle:
                for record in records:
                    handle.write(canonical_json(record.model_dump(mode="json")) + "\n")
            os.replace(partial, target)
        except OSError as err:
            with contextlib.suppress(OSError):
                partial.unlink()
            raise TuningDatabaseError(f"cannot export {self.path} to {target}: "
                                      f"{err.strerror or err}; nothing was written") from None
        return len(records)

    def import_jsonl(self, path: str | Path) -> int:
        """Add the records of a JSON Lines file; a malformed line is an error naming the line
        (nothing of the file is imported then). Returns how many were new."""
        records = []
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
            raise TuningDatabaseError(f"cannot import {path}: {reason}; pass a .jsonl file "
                                      "written by export_jsonl — nothing was imported") from None
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                records.append(TuningRecord.model_validate(json.loads(line)))
            except (ValueError, ValidationError) as err:
                raise TuningDatabaseError(
                    f"{path}, line {number}: not a valid tuning record ({err}); fix or "
                    "remove the line — nothing was imported") from None
        return self.add_many(records)

    def merge(self, other: TuningDatabase) -> int:
        """Add every record of ``other``; returns how many were new."""
        return self.add_many(other.records())

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> TuningDatabase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
