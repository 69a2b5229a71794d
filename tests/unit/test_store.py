"""The run history: round trips, ids, and every fault as a HistoryError that names the file."""

from __future__ import annotations

import dataclasses
import os
import sqlite3
import time
from pathlib import Path

import pytest

from xferscope.core.errors import XferscopeError
from xferscope.run.history import SCHEMA_VERSION, History, HistoryError, RunSummary, default_path

from .run_samples import sample_run


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "history.sqlite3"


def _two_runs(path: Path) -> list[int]:
    with History(path) as history:
        return [
            history.append(sample_run(gpus=2)),
            history.append(dataclasses.replace(sample_run(gpus=1), created="2026-11-22T06:00:00Z")),
        ]


def _assert_intact(path: Path, ids: list[int]) -> None:
    with History(path, readonly=True) as history:
        assert [s.id for s in history.list()] == sorted(ids, reverse=True)
        assert history.get(ids[0]) == sample_run(gpus=2)


def test_default_path_follows_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("XFERSCOPE_HISTORY", str(tmp_path / "h.db"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert default_path() == tmp_path / "h.db"
    monkeypatch.delenv("XFERSCOPE_HISTORY")
    assert default_path() == tmp_path / "data" / "xferscope" / "history.sqlite3"
    monkeypatch.setenv("XDG_DATA_HOME", "relative/dir")  # ignored, as XDG asks
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_path() == tmp_path / "home" / ".local/share/xferscope/history.sqlite3"
    monkeypatch.delenv("XDG_DATA_HOME")
    assert default_path() == tmp_path / "home" / ".local/share/xferscope/history.sqlite3"


def test_append_list_get_round_trip(db):
    first = sample_run(gpus=2, failed_gpu=1)
    second = dataclasses.replace(sample_run(gpus=1, simulated=False), mode="default")
    with History(db) as history:
        id1 = history.append(first)
        id2 = history.append(second)
        assert id2 > id1
        assert history.get(id1) == first
        assert history.get(id2) == second
        summaries = history.list()
    assert [s.id for s in summaries] == [id2, id1]  # newest first
    newest = summaries[0]
    assert isinstance(newest, RunSummary)
    assert newest == RunSummary(
        id=id2,
        created=second.created,
        hostname="simulated",
        gpus="Simulated H200-like GPU",
        driver=None,
        mode="default",
        simulated=False,
        complete=True,
        wall_s=12.5,
        findings_warning=1,
        findings_error=1,
    )
    assert summaries[1].gpus == "Simulated H200-like GPU,Simulated H200-like GPU"
    assert not summaries[1].complete and summaries[1].simulated
    with pytest.raises(dataclasses.FrozenInstanceError):
        newest.mode = "quick"  # type: ignore[misc]


def test_runs_persist_and_ids_keep_growing(db):
    ids = _two_runs(db)
    with History(db) as history:
        ids.append(history.append(sample_run(gpus=1)))
        assert [s.id for s in history.list(limit=2)] == [ids[2], ids[1]]
        assert history.list(limit=0) == []
        assert len(history.list()) == 3
    assert ids == sorted(ids) and len(set(ids)) == 3


def test_schema_is_versioned_and_created_once(db):
    _two_runs(db)
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    columns = [row[1] for row in conn.execute("PRAGMA table_info(runs)")]
    conn.close()
    assert columns == [
        "id",
        "created",
        "hostname",
        "gpus",
        "driver",
        "mode",
        "simulated",
        "complete",
        "wall_s",
        "findings_warning",
        "findings_error",
        "document",
        "kind",
    ]
    with History(db) as history:  # reopening neither recreates nor empties it
        assert len(history.list()) == 2
        assert [r.kind for r in history.list()] == ["run", "run"]


_V1_CREATE = """
CREATE TABLE runs (
    id INTEGER PRIMARY KEY, created TEXT NOT NULL, hostname TEXT, gpus TEXT NOT NULL,
    driver TEXT, mode TEXT NOT NULL, simulated INTEGER NOT NULL, complete INTEGER NOT NULL,
    wall_s REAL NOT NULL, findings_warning INTEGER NOT NULL, findings_error INTEGER NOT NULL,
    document TEXT NOT NULL
)
"""


def test_a_version_1_history_is_read_as_it_is_and_migrated_when_written(db, tmp_path):
    """A history written before results of other kinds were kept: its rows are runs."""
    import json

    from xferscope.run.history import APPLICATION_ID
    from xferscope.run.records import run_to_dict

    run = sample_run(gpus=1)
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute(_V1_CREATE)
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    conn.execute("PRAGMA user_version = 1")
    conn.execute(
        "INSERT INTO runs (created, hostname, gpus, driver, mode, simulated, complete, wall_s,"
        " findings_warning, findings_error, document) VALUES (?, 'h', 'g', 'd', 'quick', 1, 1,"
        " 1.0, 0, 0, ?)",
        (run.created, json.dumps(run_to_dict(run))),
    )
    conn.close()
    with History(db, readonly=True) as history:
        assert [r.kind for r in history.list()] == ["run"]
        assert history.get(1).created == run.created
    with History(db) as history:  # opened for writing: migrated
        history.append(run)
        assert [r.kind for r in history.list()] == ["run", "run"]
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 2
    conn.close()


def test_a_result_of_another_kind_is_kept_and_not_taken_for_a_run(db):
    from xferscope.run.history import Entry

    run = sample_run(gpus=1)
    with History(db) as history:
        row = history.append(Entry("gl", {"schema": "xferscope-gl"}, "survey", True, run))
        assert history.list()[0].kind == "gl" and history.list()[0].mode == "survey"
        assert history.document(row) == ("gl", {"schema": "xferscope-gl"})
        with pytest.raises(HistoryError, match="is an `xferscope gl` result, not a run"):
            history.get(row)


def test_missing_run_names_id_and_path(db):
    _two_runs(db)
    with History(db) as history, pytest.raises(HistoryError, match=f"no run 99 in {db}"):
        history.get(99)


def test_directory_is_created(tmp_path):
    path = tmp_path / "a" / "b" / "history.sqlite3"
    with History(path) as history:
        history.append(sample_run(gpus=1))
    assert path.is_file()


def test_directory_that_cannot_be_created(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    path = blocker / "xferscope" / "history.sqlite3"
    with pytest.raises(HistoryError, match="cannot create the directory") as info:
        History(path)
    assert str(path) in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    "content", [b"this is not a database\n" * 200, b"SQLite format 3\x00" + b"\xff" * 4000]
)
def test_garbage_file_is_a_clear_error(db, content):
    db.write_bytes(content)
    with pytest.raises(HistoryError, match="not a database or is corrupt") as info:
        History(db)
    assert str(db) in str(info.value) and "\n" not in str(info.value)
    assert isinstance(info.value, XferscopeError)
    assert db.read_bytes() == content  # left alone


def test_other_sqlite_database_is_refused(db):
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE runs (x)")
    conn.commit()
    conn.close()
    with pytest.raises(HistoryError, match="not an xferscope history"):
        History(db)


def test_newer_schema_is_refused(db):
    _two_runs(db)
    conn = sqlite3.connect(db)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.commit()
    conn.close()
    with pytest.raises(HistoryError, match="newer than this xferscope"):
        History(db)


def test_directory_as_path(tmp_path):
    with pytest.raises(HistoryError, match="is a directory"):
        History(tmp_path)


def test_readonly_history_refuses_append_and_keeps_runs(db):
    ids = _two_runs(db)
    with History(db, readonly=True) as history:
        with pytest.raises(HistoryError, match="read-only") as info:
            history.append(sample_run(gpus=1))
        assert str(db) in str(info.value)
        assert len(history.list()) == 2
    _assert_intact(db, ids)


def test_readonly_file_refuses_append_and_keeps_runs(db):
    ids = _two_runs(db)
    db.chmod(0o444)
    try:
        if os.access(db, os.W_OK):
            pytest.skip("running as root: file permissions do not stop writes")
        with History(db) as history, pytest.raises(HistoryError, match="read-only"):
            history.append(sample_run(gpus=1))
    finally:
        db.chmod(0o644)
    _assert_intact(db, ids)


def test_readonly_opening_of_missing_history(db):
    with pytest.raises(HistoryError, match="no history at"):
        History(db, readonly=True)
    assert not db.exists()  # looking never creates


def test_failed_append_leaves_earlier_runs(db):
    ids = _two_runs(db)
    conn = sqlite3.connect(db)  # the row is inserted, then the statement fails
    conn.execute("CREATE TRIGGER fail AFTER INSERT ON runs BEGIN SELECT RAISE(ABORT, 'boom'); END")
    conn.commit()
    conn.close()
    with History(db) as history:
        with pytest.raises(HistoryError, match="boom"):
            history.append(sample_run(gpus=1))
        assert len(history.list()) == 2
    _assert_intact(db, ids)


def test_interrupted_append_is_rolled_back(db, monkeypatch):
    ids = _two_runs(db)
    history = History(db)
    real = history._db  # the connection the append writes with

    class Interrupting:
        def execute(self, sql, *args):
            cursor = real.execute(sql, *args)
            if sql.startswith("INSERT"):
                raise KeyboardInterrupt
            return cursor

        @property
        def in_transaction(self):
            return real.in_transaction

    monkeypatch.setattr(History, "_db", property(lambda self: Interrupting()))
    with pytest.raises(KeyboardInterrupt):
        history.append(sample_run(gpus=1))
    monkeypatch.undo()
    assert not real.in_transaction
    history.close()
    _assert_intact(db, ids)


def test_unserialisable_run_is_a_clear_error(db):
    ids = _two_runs(db)
    bad = dataclasses.replace(sample_run(gpus=1), wall_s=float("nan"))
    with History(db) as history, pytest.raises(HistoryError, match="cannot add the run"):
        history.append(bad)
    _assert_intact(db, ids)


def test_damaged_document_is_a_clear_error(db):
    ids = _two_runs(db)
    conn = sqlite3.connect(db)
    conn.execute(
        'UPDATE runs SET document = \'{"schema": "xferscope-run"\' WHERE id = ?', (ids[1],)
    )
    conn.commit()
    conn.close()
    with History(db) as history, pytest.raises(HistoryError, match=f"run {ids[1]} in .* damaged"):
        history.get(ids[1])


def _lock(path: Path) -> sqlite3.Connection:
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    return holder


def test_locked_history_fails_quickly_on_append(db):
    ids = _two_runs(db)
    with History(db, timeout=0.2) as history:
        holder = _lock(db)
        try:
            started = time.monotonic()
            with pytest.raises(HistoryError, match="locked by another process") as info:
                history.append(sample_run(gpus=1))
            assert time.monotonic() - started < 1.5
            assert str(db) in str(info.value)
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        assert len(history.list()) == 2  # and usable again once the lock is gone
        history.append(sample_run(gpus=1))
    assert len(ids) == 2


def test_locked_history_fails_quickly_on_open(db):
    _two_runs(db)
    holder = _lock(db)
    try:
        started = time.monotonic()
        with pytest.raises(HistoryError, match="locked"):
            History(db, timeout=0.2)
        assert time.monotonic() - started < 1.5
    finally:
        holder.execute("ROLLBACK")
        holder.close()
