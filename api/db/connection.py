"""The one SQLite file behind the service, and the connections every part of it shares.

WAL journal with synchronous=FULL: a submission is on disk before its 201 returns, and a
`kill -9` (or power loss) never loses one. One connection per process behind a lock: every
statement is short, and the lock makes claim / cancel / finish atomic in the process;
SQLite's own locking does the same across uvicorn workers. Reads go through a second
connection: in WAL mode they never wait for a write's fsync. The schema is one script, so
migrating a database written by an older release is done in one place.
"""

from __future__ import annotations

import contextlib
import sqlite3
import stat
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

from fleetval.store.base import FILE_MODE, create_private_file

DB_NAME = "service.sqlite"

SCHEMA = """
CREATE TABLE IF NOT EXISTS submissions (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,   -- queue order
    run_id TEXT NOT NULL UNIQUE,
    submission_id TEXT UNIQUE,               -- client-chosen idempotency key
    suite TEXT NOT NULL,
    suite_json TEXT NOT NULL,
    labels TEXT NOT NULL,                    -- JSON object
    submitter TEXT NOT NULL,
    retries INTEGER NOT NULL,                -- how often an interrupted run may be requeued
    planned_s REAL NOT NULL DEFAULT 0,       -- the longest it may hold the fleet (limits.planned_s)
    attempt INTEGER NOT NULL,                -- 1 for the first try
    retry_of TEXT,
    retried_as TEXT,
    status TEXT NOT NULL,
    message TEXT NOT NULL DEFAULT '',
    steps TEXT NOT NULL DEFAULT '[]',        -- JSON: the verdicts of the steps ended so far
    progress TEXT NOT NULL DEFAULT '{}',     -- JSON: job, step, index, total, percent, detail
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    submitted_at TEXT NOT NULL,
    started_at TEXT,
    finished_at TEXT
);
CREATE INDEX IF NOT EXISTS submissions_status ON submissions (status, seq);
CREATE INDEX IF NOT EXISTS submissions_owner ON submissions (submitter, status);
CREATE INDEX IF NOT EXISTS submissions_finished ON submissions (finished_at);
CREATE TABLE IF NOT EXISTS events (
    run_id TEXT NOT NULL,
    seq INTEGER NOT NULL,                    -- from 1 per run: the SSE event id
    data TEXT NOT NULL,                      -- JSON, with a `kind`
    PRIMARY KEY (run_id, seq)
);
CREATE TABLE IF NOT EXISTS status_counts (   -- submissions by status, kept by the triggers
    status TEXT PRIMARY KEY,
    n INTEGER NOT NULL
);
CREATE TRIGGER IF NOT EXISTS count_insert AFTER INSERT ON submissions BEGIN
    INSERT INTO status_counts (status, n) VALUES (NEW.status, 1)
        ON CONFLICT (status) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER IF NOT EXISTS count_update AFTER UPDATE OF status ON submissions
    WHEN OLD.status != NEW.status BEGIN
    UPDATE status_counts SET n = n - 1 WHERE status = OLD.status;
    INSERT INTO status_counts (status, n) VALUES (NEW.status, 1)
        ON CONFLICT (status) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER IF NOT EXISTS count_delete AFTER DELETE ON submissions BEGIN
    UPDATE status_counts SET n = n - 1 WHERE status = OLD.status;
END;
CREATE TABLE IF NOT EXISTS step_stats (      -- /metrics' step histogram, added to at each run's end
    check_name TEXT NOT NULL,
    status TEXT NOT NULL,
    bucket TEXT NOT NULL,                    -- an upper bound of STEP_BUCKETS, or '+Inf'
    n INTEGER NOT NULL,
    PRIMARY KEY (check_name, status, bucket)
);
CREATE TABLE IF NOT EXISTS step_sums (
    check_name TEXT NOT NULL,
    status TEXT NOT NULL,
    seconds REAL NOT NULL,
    PRIMARY KEY (check_name, status)
);
CREATE TABLE IF NOT EXISTS culprit_counts (
    node TEXT NOT NULL,
    reason TEXT NOT NULL,
    n INTEGER NOT NULL,
    PRIMARY KEY (node, reason)
);
CREATE TABLE IF NOT EXISTS meta (            -- e.g. the cluster shape the executor sees
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS busbw (          -- the latest bus bandwidth, for /metrics
    collective TEXT NOT NULL,
    size_class TEXT NOT NULL,
    node TEXT NOT NULL,
    gbps REAL NOT NULL,
    run_id TEXT NOT NULL,
    PRIMARY KEY (collective, size_class, node)
);
CREATE TABLE IF NOT EXISTS tokens (
    hash TEXT PRIMARY KEY,                   -- sha256 of the token; the token itself is never kept
    name TEXT NOT NULL,                      -- its owner: runs it submits belong to this name
    scope TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS schedules (
    name TEXT PRIMARY KEY,
    cron TEXT NOT NULL,
    suite TEXT NOT NULL,                     -- JSON: a shipped suite's name or an inline suite
    labels TEXT NOT NULL,                    -- JSON object
    retries INTEGER NOT NULL,
    catchup TEXT NOT NULL,                   -- once | skip: what a firing missed while down does
    owner TEXT NOT NULL,                     -- its runs are this token owner's
    created_at TEXT NOT NULL,
    next_fire TEXT NOT NULL,                 -- UTC, to the second: the claim compares it
    last_fire TEXT,
    last_run_id TEXT,
    last_error TEXT NOT NULL DEFAULT '',
    fired INTEGER NOT NULL DEFAULT 0,        -- runs queued; counters for /metrics
    refused INTEGER NOT NULL DEFAULT 0,      -- firings the submit checks refused
    skipped INTEGER NOT NULL DEFAULT 0       -- looks that found missed firings and ran none
);
CREATE INDEX IF NOT EXISTS schedules_due ON schedules (next_fire);
"""
# Columns added since the first release: (table, column, declaration), added when missing.
MIGRATIONS = (
    ("tokens", "expires_at", "TEXT"),
    ("tokens", "revoked_at", "TEXT"),
    ("submissions", "planned_s", "REAL NOT NULL DEFAULT 0"),
)


def now(after_s: float = 0.0) -> str:
    """UTC, ISO 8601 to the millisecond: sorts as text in time order."""
    return (datetime.now(UTC) + timedelta(seconds=after_s)).isoformat(timespec="milliseconds")


def _close_to_others(path: Path) -> None:
    """A database made by an older release (0644: token hashes, inline suites, labels) and
    what SQLite left beside it made 0600; one this user does not own is left as it is."""
    for f in (path, path.with_name(f"{path.name}-wal"), path.with_name(f"{path.name}-shm")):
        with contextlib.suppress(OSError):  # missing, or another user's
            if stat.S_IMODE(f.stat().st_mode) & ~FILE_MODE:
                f.chmod(FILE_MODE)


class Connection:
    """The writing and the reading connection of one data directory, and their locks."""

    def __init__(self, data_dir: Path) -> None:
        self.path = create_private_file(data_dir / DB_NAME)  # 0600, as SQLite's WAL and SHM
        _close_to_others(self.path)
        self._lock = threading.Lock()
        self._conn = self._connect()
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.executescript(SCHEMA)
        self._migrate()
        self._read_lock = threading.Lock()
        self._read = self._connect()

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("PRAGMA busy_timeout=5000")
        return conn

    def _migrate(self) -> None:
        for table, column, decl in MIGRATIONS:
            have = {r["name"] for r in self._conn.execute(f"PRAGMA table_info({table})")}
            if column not in have:
                self._conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {decl}")
        # NOTE: counters for a database written before they were kept: counted once
        if self._conn.execute("SELECT COUNT(*) FROM status_counts").fetchone()[0] == 0:
            self._conn.execute(
                "INSERT INTO status_counts (status, n)"
                " SELECT status, COUNT(*) FROM submissions GROUP BY status"
            )

    def close(self) -> None:
        with self._lock, self._read_lock:
            self._conn.close()
            self._read.close()

    def data_version(self) -> int:
        """Moves whenever a change was committed since the last call, by this process (its
        writing connection: this one only reads) or another: readers key what they keep by
        it (no table read)."""
        with self._read_lock:
            return self._read.execute("PRAGMA data_version").fetchone()[0]

    def _query(self, sql: str, args: tuple | list = ()) -> list[sqlite3.Row]:
        """A read on the reading connection (never waits for a write's fsync)."""
        with self._read_lock:
            return self._read.execute(sql, args).fetchall()
