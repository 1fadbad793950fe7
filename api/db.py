"""The service's durable state: the submission queue and the API tokens, in one SQLite file.

WAL journal with synchronous=FULL: a submission is on disk before its 201 returns, and a
`kill -9` (or power loss) never loses one. One connection per process behind a lock: every
statement is short, and the lock makes claim / cancel / finish atomic in the process;
SQLite's own locking does the same across uvicorn workers. Progress and events live here
too (not in memory), so any worker can serve them and they survive a restart.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import sqlite3
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

from fleetval.vocab import QueueStatus  # one vocabulary: a finished one is its run's status

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
CREATE TABLE IF NOT EXISTS events (
    run_id TEXT NOT NULL,
    seq INTEGER NOT NULL,                    -- from 1 per run: the SSE event id
    data TEXT NOT NULL,                      -- JSON, with a `kind`
    PRIMARY KEY (run_id, seq)
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
    name TEXT NOT NULL,
    scope TEXT NOT NULL,
    created_at TEXT NOT NULL
);
"""


ACTIVE = (QueueStatus.QUEUED, QueueStatus.RUNNING)


class Scope(StrEnum):
    """What a token may do; each scope includes the ones before it."""

    READ = "read"  # list and read runs, results, baselines, compare, metrics
    SUBMIT = "submit"  # submit and cancel runs
    ADMIN = "admin"  # set and delete baselines


SCOPE_RANK = {Scope.READ: 0, Scope.SUBMIT: 1, Scope.ADMIN: 2}


@dataclass(frozen=True, kw_only=True)
class Submission:
    seq: int
    run_id: str
    submission_id: str | None
    suite: str
    suite_json: str
    labels: dict[str, str]
    submitter: str
    retries: int
    attempt: int
    retry_of: str | None
    retried_as: str | None
    status: str
    message: str
    steps: list[dict[str, Any]]
    progress: dict[str, Any]
    cancel_requested: int
    submitted_at: str
    started_at: str | None
    finished_at: str | None

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> Submission:
        rec = dict(row)
        rec["labels"] = json.loads(rec["labels"])
        rec["steps"] = json.loads(rec["steps"])
        rec["progress"] = json.loads(rec["progress"])
        return cls(**rec)

    @property
    def finished(self) -> bool:
        return self.status not in ACTIVE


@dataclass(frozen=True)
class Token:
    name: str
    scope: Scope


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def hash_token(token: str) -> str:
    # NOTE: tokens are 256-bit random, so a plain sha256 cannot be brute-forced; no salt needed.
    return hashlib.sha256(token.encode()).hexdigest()


class ServiceDB:
    """The queue and the tokens of one data directory."""

    def __init__(self, data_dir: Path) -> None:
        data_dir.mkdir(parents=True, exist_ok=True)
        self.path = data_dir / DB_NAME
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._conn.row_factory = sqlite3.Row
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=FULL")
        self._conn.execute("PRAGMA busy_timeout=5000")
        self._conn.executescript(SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def _one(self, sql: str, args: tuple = ()) -> Submission | None:
        with self._lock:
            row = self._conn.execute(sql, args).fetchone()
        return Submission.from_row(row) if row else None

    # -- submissions -------------------------------------------------------------------

    def add(
        self,
        *,
        run_id: str,
        submission_id: str | None,
        suite: str,
        suite_json: str,
        labels: dict[str, str],
        submitter: str,
        retries: int,
        attempt: int = 1,
        retry_of: str | None = None,
    ) -> tuple[Submission, bool]:
        """Queue a run (committed on return); for a known `submission_id`, the run it made."""
        with self._lock:
            try:
                self._conn.execute(
                    "INSERT INTO submissions (run_id, submission_id, suite, suite_json, labels,"
                    " submitter, retries, attempt, retry_of, status, submitted_at)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        run_id,
                        submission_id,
                        suite,
                        suite_json,
                        json.dumps(labels),
                        submitter,
                        retries,
                        attempt,
                        retry_of,
                        QueueStatus.QUEUED.value,
                        now(),
                    ),
                )
                created = True
            except sqlite3.IntegrityError:
                if submission_id is None:
                    raise
                created = False
        sub = self.get(run_id) if created else self.find_submission(submission_id)
        assert sub is not None
        return sub, created

    def find_submission(self, submission_id: str | None) -> Submission | None:
        """The run a submission id made: its latest attempt, if it was requeued."""
        sub = self._one("SELECT * FROM submissions WHERE submission_id = ?", (submission_id,))
        return self.latest_attempt(sub) if sub else None

    def latest_attempt(self, sub: Submission) -> Submission:
        """Follow requeues after interruptions to the attempt that stands for the submission."""
        while sub.retried_as:
            nxt = self.get(sub.retried_as)
            if nxt is None:
                break
            sub = nxt
        return sub

    def get(self, run_id: str) -> Submission | None:
        return self._one("SELECT * FROM submissions WHERE run_id = ?", (run_id,))

    def submissions(self) -> list[Submission]:
        with self._lock:
            rows = self._conn.execute("SELECT * FROM submissions ORDER BY seq").fetchall()
        return [Submission.from_row(r) for r in rows]

    def counts(self) -> dict[str, int]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT status, COUNT(*) FROM submissions GROUP BY status"
            ).fetchall()
        return {r[0]: r[1] for r in rows}

    def queue_position(self, sub: Submission) -> int | None:
        """How many queued runs go before this one (0: next), None when not queued."""
        if sub.status != QueueStatus.QUEUED:
            return None
        with self._lock:
            row = self._conn.execute(
                "SELECT COUNT(*) FROM submissions WHERE status = ? AND seq < ?",
                (QueueStatus.QUEUED.value, sub.seq),
            ).fetchone()
        return int(row[0])

    def claim_next(self) -> Submission | None:
        """The oldest queued run, now marked running."""
        with self._lock:
            row = self._conn.execute(
                "SELECT run_id FROM submissions WHERE status = ? ORDER BY seq LIMIT 1",
                (QueueStatus.QUEUED.value,),
            ).fetchone()
            if row is None:
                return None
            self._conn.execute(
                "UPDATE submissions SET status = ?, started_at = ? WHERE run_id = ?",
                (QueueStatus.RUNNING.value, now(), row[0]),
            )
        return self.get(row[0])

    def cancel_queued(self, run_id: str) -> bool:
        """Cancel a run that has not started; False when it is no longer queued."""
        with self._lock:
            cur = self._conn.execute(
                "UPDATE submissions SET status = ?, message = ?, finished_at = ?"
                " WHERE run_id = ? AND status = ?",
                (
                    QueueStatus.CANCELLED.value,
                    "cancelled before it started",
                    now(),
                    run_id,
                    QueueStatus.QUEUED.value,
                ),
            )
        return cur.rowcount == 1

    def request_cancel(self, run_id: str) -> None:
        with self._lock:
            self._conn.execute(
                "UPDATE submissions SET cancel_requested = 1 WHERE run_id = ?", (run_id,)
            )

    def cancel_requested(self, run_id: str) -> bool:
        with self._lock:
            row = self._conn.execute(
                "SELECT cancel_requested FROM submissions WHERE run_id = ?", (run_id,)
            ).fetchone()
        return bool(row and row[0])

    def record_event(
        self,
        run_id: str,
        event: dict[str, Any],
        *,
        progress: dict[str, Any] | None = None,
        steps: list[dict[str, Any]] | None = None,
        finish: tuple[str, str] | None = None,
    ) -> int:
        """Append an event (and the run's new progress, or its end: status and message) in
        one transaction, so a reader never sees the end without its event; its number."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                row = self._conn.execute(
                    "SELECT COALESCE(MAX(seq), 0) + 1 FROM events WHERE run_id = ?", (run_id,)
                ).fetchone()
                seq = int(row[0])
                self._conn.execute(
                    "INSERT INTO events (run_id, seq, data) VALUES (?, ?, ?)",
                    (run_id, seq, json.dumps({**event, "seq": seq}, default=str)),
                )
                if progress is not None:
                    self._conn.execute(
                        "UPDATE submissions SET progress = ? WHERE run_id = ?",
                        (json.dumps(progress, default=str), run_id),
                    )
                if steps is not None:
                    self._conn.execute(
                        "UPDATE submissions SET steps = ? WHERE run_id = ?",
                        (json.dumps(steps, default=str), run_id),
                    )
                if finish is not None:
                    self._conn.execute(
                        "UPDATE submissions SET status = ?, message = ?, finished_at = ?"
                        " WHERE run_id = ?",
                        (*finish, now(), run_id),
                    )
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
        return seq

    def events(self, run_id: str, after: int = 0) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT data FROM events WHERE run_id = ? AND seq > ? ORDER BY seq",
                (run_id, after),
            ).fetchall()
        return [json.loads(r[0]) for r in rows]

    def set_busbw(self, run_id: str, values: list[tuple[str, str, str, float]]) -> None:
        """(collective, size class, node, GB/s) measured by a run: the latest per key."""
        with self._lock:
            self._conn.executemany(
                "INSERT OR REPLACE INTO busbw (collective, size_class, node, gbps, run_id)"
                " VALUES (?, ?, ?, ?, ?)",
                [(*v, run_id) for v in values],
            )

    def busbw(self) -> list[tuple[str, str, str, float]]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT collective, size_class, node, gbps FROM busbw"
            ).fetchall()
        return [tuple(r) for r in rows]  # type: ignore[misc]

    def mark_retried(self, run_id: str, retried_as: str) -> None:
        with self._lock:
            self._conn.execute(
                "UPDATE submissions SET retried_as = ? WHERE run_id = ?", (retried_as, run_id)
            )

    def running(self) -> list[Submission]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT * FROM submissions WHERE status = ? ORDER BY seq",
                (QueueStatus.RUNNING.value,),
            ).fetchall()
        return [Submission.from_row(r) for r in rows]

    # -- tokens --------------------------------------------------------------------------

    def create_token(self, scope: Scope, name: str) -> str:
        """A new random token; only its hash is stored, so it is shown once."""
        token = "fv_" + secrets.token_urlsafe(32)
        with self._lock:
            self._conn.execute(
                "INSERT INTO tokens (hash, name, scope, created_at) VALUES (?, ?, ?, ?)",
                (hash_token(token), name, scope.value, now()),
            )
        return token

    def lookup_token(self, token: str) -> Token | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT name, scope FROM tokens WHERE hash = ?", (hash_token(token),)
            ).fetchone()
        return Token(row["name"], Scope(row["scope"])) if row else None
