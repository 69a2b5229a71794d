"""A local history of xferscope results in SQLite (`xferscope run` and `xferscope gl`), so they
can be listed, drawn again and (runs) compared.

One table, `runs`: a few columns to list and filter by (kind, host, GPUs, driver, mode, verdict
counts) and `document`, the result's JSON. The document is the source of truth: `get` rebuilds
a run from it alone; the other columns are copies for listing.

The file is marked as ours with PRAGMA application_id, and its layout carries a version in
PRAGMA user_version. Schema history (bump SCHEMA_VERSION and add a migration on any change):
  1  first version: table runs.
  2  column kind (run, gl): which command's result a row holds; version 1 files are migrated
     when opened for writing (their rows are runs) and read as they are.

Every write is one transaction, so a failed or interrupted append leaves the earlier runs as
they were. Every fault (not a database, corrupt, locked by another writer, read-only, a
directory that cannot be created) is raised as a HistoryError whose one-line message names the
file.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from ..core.closing import Closing
from ..core.errors import XferscopeError
from ..core.findings import ERROR, WARNING
from ..documents.envelope import dumps_document
from ..documents.files import special
from ..documents.reader import SchemaError
from .records import RunResult, run_from_dict, run_to_dict

SCHEMA_VERSION = 2
APPLICATION_ID = 0x58465343  # "XFSC": marks the file as an xferscope history
DEFAULT_TIMEOUT_S = 2.0  # how long to wait for another process's write before giving up

_CREATE = """
CREATE TABLE runs (
    id INTEGER PRIMARY KEY,
    created TEXT NOT NULL,
    hostname TEXT,
    gpus TEXT NOT NULL,
    driver TEXT,
    mode TEXT NOT NULL,
    simulated INTEGER NOT NULL,
    complete INTEGER NOT NULL,
    wall_s REAL NOT NULL,
    findings_warning INTEGER NOT NULL,
    findings_error INTEGER NOT NULL,
    document TEXT NOT NULL,
    kind TEXT NOT NULL DEFAULT 'run'
)
"""
_SUMMARY_COLUMNS = (
    "id, created, hostname, gpus, driver, mode, simulated, complete, wall_s, findings_warning, "
    "findings_error"
)
_MIGRATIONS = {1: "ALTER TABLE runs ADD COLUMN kind TEXT NOT NULL DEFAULT 'run'"}


class HistoryError(XferscopeError):
    """The run history cannot be read or written. The message names the file."""


class HistoryPathError(HistoryError):
    """The history's path is no regular file (a FIFO, a directory, a device): bad input."""

    exit_code = 2


class HistoryLocked(HistoryError):
    """Another process holds the history's lock (it is writing): try again later."""


@dataclass(frozen=True, slots=True)
class RunSummary:
    """One row of the history, without the document."""

    id: int
    created: str  # ISO 8601, UTC
    hostname: str | None
    gpus: str  # the GPUs' names, comma-separated, in the order of the run's machine record
    driver: str | None
    mode: str
    simulated: bool
    complete: bool
    wall_s: float
    findings_warning: int
    findings_error: int
    kind: str = "run"  # which command's result: run, gl


def default_path() -> Path:
    """$XFERSCOPE_HISTORY if set, else $XDG_DATA_HOME/xferscope/history.sqlite3 (the XDG
    default of $XDG_DATA_HOME is ~/.local/share; a relative value is ignored, as the XDG base
    directory specification asks)."""
    explicit = os.environ.get("XFERSCOPE_HISTORY")
    if explicit:
        return Path(explicit).expanduser()
    data = os.environ.get("XDG_DATA_HOME", "")
    base = Path(data) if data and os.path.isabs(data) else Path.home() / ".local" / "share"
    return base / "xferscope" / "history.sqlite3"


@dataclass(frozen=True, slots=True)
class Entry:
    """What one row holds: the result's kind and JSON document, and the columns to list it by,
    taken from the fields every result has."""

    kind: str  # run, gl
    document: dict[str, Any]
    mode: str  # the run's mode, or the command's preset
    complete: bool
    result: Any  # created, machine, simulated, wall_s, findings

    def columns(self) -> tuple[Any, ...]:
        r = self.result
        machine = r.machine if isinstance(r.machine, dict) else {}
        host = machine.get("host") or {}
        gpus = machine.get("gpus") or []
        return (
            r.created,
            host.get("hostname") if isinstance(host, dict) else None,
            ",".join(str(g.get("name", "?")) for g in gpus if isinstance(g, dict)),
            machine.get("driver"),
            self.mode,
            int(r.simulated),
            int(self.complete),
            float(r.wall_s),
            sum(1 for f in r.findings if f.severity == WARNING),
            sum(1 for f in r.findings if f.severity == ERROR),
        )


def run_entry(result: RunResult) -> Entry:
    return Entry("run", run_to_dict(result), result.mode, result.complete, result)


class History(Closing):
    """The run history in one SQLite file. Use as a context manager, or call close().

    Opening creates the file, its directory and the schema where they are missing, unless
    `readonly`: then the file must exist and is never written (append raises HistoryError).
    `timeout` is how long to wait for a lock held by another process.
    """

    def __init__(
        self, path: Path | str, *, readonly: bool = False, timeout: float = DEFAULT_TIMEOUT_S
    ) -> None:
        self.path = Path(path)
        self.readonly = readonly
        self.timeout = timeout
        self.version = SCHEMA_VERSION  # the file's, once opened (_prepare)
        self._conn: sqlite3.Connection | None = None
        self._conn = self._connect()
        try:
            self._prepare()
        except BaseException:
            self.close()
            raise

    # ---- opening -----------------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        path = self.path
        kind = special(path)
        if kind is not None:
            raise HistoryPathError(f"--history: {path} is {kind}, not a regular file")
        if self.readonly:
            if not path.exists():
                raise HistoryError(f"no history at {path}: no run has been recorded there")
            target, uri = path.resolve().as_uri() + "?mode=ro", True
        else:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                reason = exc.strerror or str(exc)
                raise HistoryError(
                    f"cannot create the directory {path.parent} for history {path}: {reason}"
                ) from exc
            target, uri = str(path), False
        try:
            # isolation_level=None: no implicit transactions; each write says BEGIN and COMMIT.
            return sqlite3.connect(target, timeout=self.timeout, isolation_level=None, uri=uri)
        except sqlite3.Error as exc:
            raise self._fault(exc, "open") from exc

    def _header(self) -> tuple[int, int, bool]:
        """(application_id, user_version, whether the file has any table)."""
        conn = self._db
        app = conn.execute("PRAGMA application_id").fetchone()[0]
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        return int(app), int(version), bool(tables)

    def _prepare(self) -> None:
        try:
            header = self._header()
            if header == (0, 0, False) and not self.readonly:
                # A new (empty) file. Re-read under the write lock: another process may be
                # creating the schema at the same moment.
                with self._transaction():
                    if self._header() == (0, 0, False):
                        self._db.execute(_CREATE)
                        self._db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                        self._db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                header = self._header()
        except sqlite3.Error as exc:
            raise self._fault(exc, "open") from exc
        app, version, tables = header
        if (app, version, tables) == (0, 0, False):  # only when readonly
            raise HistoryError(f"history {self.path} is empty: no run has been recorded there")
        if app != APPLICATION_ID:
            raise HistoryError(
                f"{self.path} is an SQLite database but not an xferscope history; "
                "move it aside or set XFERSCOPE_HISTORY to another file"
            )
        if version > SCHEMA_VERSION:
            raise HistoryError(
                f"history {self.path} has schema version {version}, newer than this xferscope "
                f"reads ({SCHEMA_VERSION}); upgrade xferscope"
            )
        self.version = version
        if version < SCHEMA_VERSION and not self.readonly:
            try:
                with self._transaction():
                    current = int(self._db.execute("PRAGMA user_version").fetchone()[0])
                    for step in range(current, SCHEMA_VERSION):
                        self._db.execute(_MIGRATIONS[step])
                    self._db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            except sqlite3.Error as exc:
                raise self._fault(exc, "upgrade") from exc
            self.version = SCHEMA_VERSION

    @property
    def _kind(self) -> str:
        """The kind column, or what it is in a version 1 file read as it is."""
        return "kind" if self.version >= 2 else "'run'"

    @property
    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            raise HistoryError(f"history {self.path} is closed")
        return self._conn

    def _transaction(self) -> _Transaction:
        return _Transaction(self._db)

    def _fault(self, exc: sqlite3.Error, doing: str) -> HistoryError:
        """A one-line message for an SQLite error, naming the file and what was being done."""
        text = str(exc)
        lowered = text.lower()
        path = self.path
        if isinstance(exc, sqlite3.OperationalError):
            if "locked" in lowered or "busy" in lowered:
                return HistoryLocked(
                    f"history {path} is locked by another process (waited {self.timeout:g} s); "
                    "try again when it has finished"
                )
            if "readonly" in lowered or "read-only" in lowered:
                return HistoryError(f"cannot {doing} history {path}: it is read-only")
            if "unable to open" in lowered:
                return HistoryError(
                    f"cannot {doing} history {path}: the file cannot be opened (check the "
                    "permissions of the file and its directory)"
                )
            return HistoryError(f"cannot {doing} history {path}: {text}")
        if type(exc) is sqlite3.DatabaseError:  # SQLITE_NOTADB, SQLITE_CORRUPT
            return HistoryError(
                f"history {path} is not a database or is corrupt ({text}); "
                "move it aside or set XFERSCOPE_HISTORY to another file"
            )
        return HistoryError(f"cannot {doing} history {path}: {text}")

    # ---- use ---------------------------------------------------------------------------------

    def append(self, result: RunResult | Entry) -> int:
        """Stores a run (or any result's entry) in one transaction and returns its id (ids only
        grow)."""
        entry = result if isinstance(result, Entry) else run_entry(result)
        try:
            document = dumps_document(entry.document, indent=None)
        except (TypeError, ValueError) as exc:
            raise HistoryError(
                f"cannot add the {entry.kind} to history {self.path}: it is not valid JSON ({exc})"
            ) from exc
        try:
            with self._transaction():
                cursor = self._db.execute(
                    "INSERT INTO runs (created, hostname, gpus, driver, mode, simulated, complete,"
                    " wall_s, findings_warning, findings_error, document, kind)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (*entry.columns(), document, entry.kind),
                )
        except sqlite3.Error as exc:
            raise self._fault(exc, "add the run to") from exc
        row_id = cursor.lastrowid
        assert row_id is not None
        return row_id

    def check_writable(self) -> None:
        """Takes the write lock and lets it go, writing nothing: a read-only file fails here
        (HistoryError) rather than after a run."""
        try:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                # A write that changes nothing, rolled back: BEGIN alone succeeds even on a
                # read-only file.
                self._db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            finally:
                self._db.execute("ROLLBACK")
        except sqlite3.Error as exc:
            raise self._fault(exc, "write to") from exc

    def list(self, limit: int | None = None) -> builtins.list[RunSummary]:
        """The runs, most recently added first; at most `limit` of them."""
        if limit is not None and limit < 0:
            raise ValueError(f"limit must be 0 or more, not {limit}")
        try:
            rows = self._db.execute(
                f"SELECT {_SUMMARY_COLUMNS}, {self._kind} FROM runs ORDER BY id DESC LIMIT ?",
                (-1 if limit is None else limit,),
            ).fetchall()
        except sqlite3.Error as exc:
            raise self._fault(exc, "list the runs of") from exc
        return [
            RunSummary(
                id=int(r[0]),
                created=r[1],
                hostname=r[2],
                gpus=r[3],
                driver=r[4],
                mode=r[5],
                simulated=bool(r[6]),
                complete=bool(r[7]),
                wall_s=float(r[8]),
                findings_warning=int(r[9]),
                findings_error=int(r[10]),
                kind=str(r[11]),
            )
            for r in rows
        ]

    def document(self, run_id: int) -> tuple[str, dict[str, Any]]:
        """The kind and JSON document stored under `run_id`."""
        if not 0 < run_id < 1 << 63:  # SQLite's ids; a larger number is none of them
            raise HistoryError(f"no run {run_id} in {self.path}")
        try:
            row = self._db.execute(
                f"SELECT {self._kind}, document FROM runs WHERE id = ?", (run_id,)
            ).fetchone()
        except sqlite3.Error as exc:
            raise self._fault(exc, f"read run {run_id} of") from exc
        if row is None:
            raise HistoryError(f"no run {run_id} in {self.path}")
        try:
            document = json.loads(row[1])
        except ValueError as exc:
            raise HistoryError(
                f"run {run_id} in {self.path} is damaged: {type(exc).__name__}: {exc}"
            ) from exc
        if not isinstance(document, dict):
            raise HistoryError(f"run {run_id} in {self.path} is damaged: not a JSON object")
        return str(row[0]), document

    def get(self, run_id: int) -> RunResult:
        """The run stored under `run_id`, rebuilt from its JSON document."""
        kind, document = self.document(run_id)
        if kind != "run":
            raise HistoryError(
                f"entry {run_id} in {self.path} is an `xferscope {kind}` result, not a run"
            )
        try:
            return run_from_dict(document)
        except SchemaError as exc:
            raise HistoryError(f"run {run_id} in {self.path} cannot be read: {exc}") from exc
        except (ValueError, KeyError, TypeError) as exc:
            raise HistoryError(
                f"run {run_id} in {self.path} is damaged: {type(exc).__name__}: {exc}"
            ) from exc

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT, rolled back on any exception (KeyboardInterrupt included).
    IMMEDIATE takes the write lock at once, so a second writer waits (up to the timeout) at the
    start instead of failing halfway."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def __enter__(self) -> None:
        self._conn.execute("BEGIN IMMEDIATE")

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc_type is None:
            try:
                self._conn.execute("COMMIT")
                return
            except BaseException:
                self._rollback()
                raise
        self._rollback()

    def _rollback(self) -> None:
        if self._conn.in_transaction:
            # SQLite rolls back by itself where it cannot; the earlier error is the news.
            with contextlib.suppress(sqlite3.Error):
                self._conn.execute("ROLLBACK")
