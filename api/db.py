"""The service's durable state: the submission queue, the API tokens and the schedules, in
one SQLite file.

WAL journal with synchronous=FULL: a submission is on disk before its 201 returns, and a
`kill -9` (or power loss) never loses one. One connection per process behind a lock: every
statement is short, and the lock makes claim / cancel / finish atomic in the process;
SQLite's own locking does the same across uvicorn workers. Progress and events live here
too (not in memory), so any worker can serve them and they survive a restart. Reads go
through a second connection: in WAL mode they never wait for a write's fsync.

What /metrics and /healthz report is kept as it changes (counters maintained by triggers
and at each run's end), so a scrape costs the same at 50 runs and at 50,000.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import sqlite3
import threading
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Any

from fleetval.store.catalog import RunFilter
from fleetval.vocab import (  # one vocabulary: a finished one is its run's status
    EventKind,
    QueueStatus,
)

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
STEP_BUCKETS = (1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0)
TOKEN_ID_CHARS = 12  # a token's public id: the start of its hash, for listing and revoking


ACTIVE = (QueueStatus.QUEUED, QueueStatus.RUNNING)


class Scope(StrEnum):
    """What a token may do; each scope includes the ones before it."""

    READ = "read"  # list and read runs, results, baselines, compare, metrics
    SUBMIT = "submit"  # submit and cancel runs
    ADMIN = "admin"  # set and delete baselines


SCOPE_RANK = {Scope.READ: 0, Scope.SUBMIT: 1, Scope.ADMIN: 2}


class TokenState(StrEnum):
    VALID = "valid"
    UNKNOWN = "unknown"
    REVOKED = "revoked"
    EXPIRED = "expired"


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
    planned_s: float
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


@dataclass(frozen=True, kw_only=True)
class Schedule:
    name: str
    cron: str
    suite: str | dict[str, Any]
    labels: dict[str, str]
    retries: int
    catchup: str
    owner: str
    created_at: str
    next_fire: str
    last_fire: str | None
    last_run_id: str | None
    last_error: str
    fired: int
    refused: int
    skipped: int

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> Schedule:
        rec = dict(row)
        rec["suite"] = json.loads(rec["suite"])
        rec["labels"] = json.loads(rec["labels"])
        return cls(**rec)


@dataclass(frozen=True)
class Quota:
    """What one owner may have queued and running at once (checked in the insert's own
    transaction, so two submissions cannot both pass a check that only one fits)."""

    max_active: int
    max_planned_s: float


class QuotaExceeded(Exception):
    """A submission the owner's quota has no room for; the message names the limit."""


class FireOutcome(StrEnum):
    """What a claimed look at a due schedule did; each has its counter."""

    FIRED = "fired"
    REFUSED = "refused"
    SKIPPED = "skipped"


@dataclass(frozen=True, kw_only=True)
class Token:
    id: str
    name: str  # the owner
    scope: Scope
    created_at: str = ""
    expires_at: str | None = None
    revoked_at: str | None = None

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> Token:
        return cls(
            id=row["hash"][:TOKEN_ID_CHARS],
            name=row["name"],
            scope=Scope(row["scope"]),
            created_at=row["created_at"],
            expires_at=row["expires_at"],
            revoked_at=row["revoked_at"],
        )

    def state(self, at: str) -> TokenState:
        if self.revoked_at is not None:
            return TokenState.REVOKED
        if self.expires_at is not None and self.expires_at <= at:
            return TokenState.EXPIRED
        return TokenState.VALID

    @property
    def admin(self) -> bool:
        return self.scope == Scope.ADMIN

    def owns(self, sub: Submission) -> bool:
        """A run belongs to the name of the token that submitted it; admin may act on any."""
        return self.admin or sub.submitter == self.name

    def owns_schedule(self, schedule: Schedule) -> bool:
        return self.admin or schedule.owner == self.name


def now(after_s: float = 0.0) -> str:
    """UTC, ISO 8601 to the millisecond: sorts as text in time order."""
    return (datetime.now(UTC) + timedelta(seconds=after_s)).isoformat(timespec="milliseconds")


def hash_token(token: str) -> str:
    # NOTE: tokens are 256-bit random, so a plain sha256 cannot be brute-forced; no salt needed.
    return hashlib.sha256(token.encode()).hexdigest()


class ServiceDB:
    """The queue, the tokens and the schedules of one data directory."""

    def __init__(self, data_dir: Path) -> None:
        data_dir.mkdir(parents=True, exist_ok=True)
        self.path = data_dir / DB_NAME
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

    def _query(self, sql: str, args: tuple | list = ()) -> list[sqlite3.Row]:
        """A read on the reading connection (never waits for a write's fsync)."""
        with self._read_lock:
            return self._read.execute(sql, args).fetchall()

    def _one(self, sql: str, args: tuple = ()) -> Submission | None:
        rows = self._query(sql, args)
        return Submission.from_row(rows[0]) if rows else None

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
        planned_s: float = 0.0,
        quota: Quota | None = None,
    ) -> tuple[Submission, bool]:
        """Queue a run (committed on return); for a known `submission_id`, the run it made.
        With `quota`, QuotaExceeded when the submitter's active runs leave no room: checked
        and inserted in one write transaction (across processes too)."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                if quota is not None:
                    self._check_quota(submitter, planned_s, quota)
                self._insert(
                    run_id=run_id, submission_id=submission_id, suite=suite,
                    suite_json=suite_json, labels=labels, submitter=submitter, retries=retries,
                    planned_s=planned_s, attempt=1, retry_of=None,
                )  # fmt: skip
                self._conn.execute("COMMIT")
                created = True
            except sqlite3.IntegrityError:
                self._conn.execute("ROLLBACK")
                if submission_id is None:
                    raise
                created = False
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
        sub = self.get(run_id) if created else self.find_submission(submission_id)
        assert sub is not None
        return sub, created

    def _check_quota(self, submitter: str, planned_s: float, quota: Quota) -> None:
        """Inside the insert's transaction: room for one more run of `planned_s`?"""
        row = self._conn.execute(
            "SELECT COUNT(*), COALESCE(SUM(planned_s), 0) FROM submissions"
            " WHERE submitter = ? AND status IN (?, ?)",
            (submitter, *[s.value for s in ACTIVE]),
        ).fetchone()
        active, planned = int(row[0]), float(row[1])
        if active >= quota.max_active:
            raise QuotaExceeded(
                f"{submitter!r} has {active} runs queued or running; this service allows "
                f"{quota.max_active} (max_active_per_owner)"
            )
        if planned + planned_s > quota.max_planned_s:
            raise QuotaExceeded(
                f"{submitter!r} has {planned:g} s of work queued or running and this run plans "
                f"{planned_s:g} s more; this service allows {quota.max_planned_s:g} s "
                "(max_planned_s_per_owner)"
            )

    def _insert(self, **fields: Any) -> None:
        self._conn.execute(
            "INSERT INTO submissions (run_id, submission_id, suite, suite_json, labels,"
            " submitter, retries, planned_s, attempt, retry_of, status, submitted_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                fields["run_id"],
                fields["submission_id"],
                fields["suite"],
                fields["suite_json"],
                json.dumps(fields["labels"]),
                fields["submitter"],
                fields["retries"],
                fields["planned_s"],
                fields["attempt"],
                fields["retry_of"],
                QueueStatus.QUEUED.value,
                now(),
            ),
        )

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

    def get_row(self, run_id: str, select: str = "*") -> sqlite3.Row | None:
        """One submission's `select` (SQL over its columns, e.g. JSON made by SQLite)."""
        rows = self._query(f"SELECT {select} FROM submissions WHERE run_id = ?", (run_id,))
        return rows[0] if rows else None

    def page(
        self, where: RunFilter, *, before: str | None, limit: int, select: str = "*"
    ) -> list[sqlite3.Row]:
        """`select` of up to `limit` submissions matching `where`, newest run id first, below
        `before`."""
        sql, args = where.sql()
        terms = [t for t in (sql, "run_id < ?" if before is not None else "") if t]
        if before is not None:
            args.append(before)
        clause = f"WHERE {' AND '.join(terms)}" if terms else ""
        rows = self._query(
            f"SELECT {select} FROM submissions {clause} ORDER BY run_id DESC LIMIT ?",
            (*args, limit),
        )
        return rows

    def known(self, run_ids: list[str]) -> set[str]:
        """Which of `run_ids` the service has a submission for (one query)."""
        if not run_ids:
            return set()
        marks = ",".join("?" * len(run_ids))
        rows = self._query(f"SELECT run_id FROM submissions WHERE run_id IN ({marks})", run_ids)
        return {r[0] for r in rows}

    def counts(self) -> dict[str, int]:
        """Submissions by status (kept by triggers: one small read)."""
        return {r[0]: r[1] for r in self._query("SELECT status, n FROM status_counts")}

    def queue_position(self, sub: Submission) -> int | None:
        """How many queued runs go before this one (0: next), None when not queued."""
        if sub.status != QueueStatus.QUEUED:
            return None
        row = self._query(
            "SELECT COUNT(*) FROM submissions WHERE status = ? AND seq < ?",
            (QueueStatus.QUEUED.value, sub.seq),
        )[0]
        return int(row[0])

    def claim_next(self) -> str | None:
        """The oldest queued run's id, now marked running (read it with `get`).

        NOTE: a write transaction even when the queue is empty: the claim is atomic across
        processes, and a database the executor cannot write raises here, idle or not (the
        supervisor reports it on /healthz)."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                row = self._conn.execute(
                    "SELECT run_id FROM submissions WHERE status = ? ORDER BY seq LIMIT 1",
                    (QueueStatus.QUEUED.value,),
                ).fetchone()
                if row is not None:
                    self._conn.execute(
                        "UPDATE submissions SET status = ?, started_at = ? WHERE run_id = ?",
                        (QueueStatus.RUNNING.value, now(), row[0]),
                    )
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
        return str(row[0]) if row is not None else None

    def request_cancel(self, run_id: str) -> None:
        with self._lock:
            self._conn.execute(
                "UPDATE submissions SET cancel_requested = 1 WHERE run_id = ?", (run_id,)
            )

    def cancel_requested(self, run_id: str) -> bool:
        rows = self._query("SELECT cancel_requested FROM submissions WHERE run_id = ?", (run_id,))
        return bool(rows and rows[0][0])

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
        one transaction, so a reader never sees the end without its event; its number.

        A run ends once: `finish` applies only to a queued or running submission. At its end
        the run's progress events are pruned (its step events stay, for a late reader) and
        its steps are added to the counters /metrics reports."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                seq = self._append(run_id, event)
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
                    self._finish(run_id, *finish)
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
        return seq

    def _append(self, run_id: str, event: dict[str, Any]) -> int:
        row = self._conn.execute(
            "SELECT COALESCE(MAX(seq), 0) + 1 FROM events WHERE run_id = ?", (run_id,)
        ).fetchone()
        seq = int(row[0])
        self._conn.execute(
            "INSERT INTO events (run_id, seq, data) VALUES (?, ?, ?)",
            (run_id, seq, json.dumps({**event, "seq": seq}, default=str)),
        )
        return seq

    def _finish(self, run_id: str, status: str, message: str) -> bool:
        """Inside a transaction: end an active run; False when it had ended already."""
        cur = self._conn.execute(
            "UPDATE submissions SET status = ?, message = ?, finished_at = ?"
            " WHERE run_id = ? AND status IN (?, ?)",
            (status, message, now(), run_id, *[s.value for s in ACTIVE]),
        )
        if cur.rowcount != 1:
            return False
        self._conn.execute(
            "DELETE FROM events WHERE run_id = ? AND json_extract(data, '$.kind') = ?",
            (run_id, EventKind.STEP_PROGRESS.value),
        )
        row = self._conn.execute("SELECT steps FROM submissions WHERE run_id = ?", (run_id,))
        self._count_steps(json.loads(row.fetchone()[0]))
        return True

    def _count_steps(self, steps: list[dict[str, Any]]) -> None:
        for step in steps:
            key, seconds = (step["check"], step["status"]), float(step["seconds"])
            buckets = [str(b) for b in STEP_BUCKETS if seconds <= b] + ["+Inf"]
            self._conn.executemany(
                "INSERT INTO step_stats (check_name, status, bucket, n) VALUES (?, ?, ?, 1)"
                " ON CONFLICT DO UPDATE SET n = n + 1",
                [(*key, b) for b in buckets],
            )
            self._conn.execute(
                "INSERT INTO step_sums (check_name, status, seconds) VALUES (?, ?, ?)"
                " ON CONFLICT DO UPDATE SET seconds = seconds + excluded.seconds",
                (*key, seconds),
            )
            for c in step.get("culprits", []):
                self._conn.execute(
                    "INSERT INTO culprit_counts (node, reason, n) VALUES (?, ?, 1)"
                    " ON CONFLICT DO UPDATE SET n = n + 1",
                    (c["node"], c["reason"]),
                )

    def cancel_queued(self, run_id: str) -> bool:
        """Cancel a run that has not started, with its end event; False when it is no
        longer queued."""
        message = "cancelled before it started"
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                cur = self._conn.execute(
                    "UPDATE submissions SET status = ?, message = ?, finished_at = ?"
                    " WHERE run_id = ? AND status = ?",
                    (QueueStatus.CANCELLED.value, message, now(), run_id, QueueStatus.QUEUED.value),
                )
                if cur.rowcount == 1:
                    end = {
                        "kind": EventKind.RUN_END,
                        "status": QueueStatus.CANCELLED.value,
                        "message": message,
                    }
                    self._append(run_id, end)
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
        return cur.rowcount == 1

    def interrupt(
        self, sub: Submission, message: str, *, retry_id: str | None
    ) -> Submission | None:
        """End a run the service died in as `interrupted` (`message` says so, and names the
        retry), and with `retry_id` queue its next attempt, in one transaction: recovery that dies halfway leaves the run `running` to
        be recovered again, never requeued twice. The new attempt, if any."""
        status = QueueStatus.INTERRUPTED.value
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                live = self._conn.execute(
                    "SELECT status FROM submissions WHERE run_id = ?", (sub.run_id,)
                ).fetchone()
                if live is None or live[0] not in {s.value for s in ACTIVE}:
                    self._conn.execute("ROLLBACK")
                    return None
                if retry_id is not None:
                    self._insert(
                        run_id=retry_id, submission_id=None, suite=sub.suite,
                        suite_json=sub.suite_json, labels=sub.labels, submitter=sub.submitter,
                        retries=sub.retries, planned_s=sub.planned_s, attempt=sub.attempt + 1,
                        retry_of=sub.run_id,
                    )  # fmt: skip
                    self._conn.execute(
                        "UPDATE submissions SET retried_as = ? WHERE run_id = ?",
                        (retry_id, sub.run_id),
                    )
                self._append(
                    sub.run_id, {"kind": EventKind.RUN_END, "status": status, "message": message}
                )
                self._finish(sub.run_id, status, message)
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
        return self.get(retry_id) if retry_id is not None else None

    def prune(self, before: str) -> int:
        """Delete the submissions that finished before `before`, and their events (the event
        log of runs no submission stands for any more too); how many submissions went. A
        pruned run is still served from the store, where the executor recorded it."""
        finished = "finished_at < ? AND status NOT IN (?, ?)"
        args = (before, *[s.value for s in ACTIVE])
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                self._conn.execute(
                    f"DELETE FROM events WHERE run_id IN (SELECT run_id FROM submissions"
                    f" WHERE {finished}) OR run_id NOT IN (SELECT run_id FROM submissions)",
                    args,
                )
                cur = self._conn.execute(f"DELETE FROM submissions WHERE {finished}", args)
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
        return cur.rowcount

    def events(self, run_id: str, after: int = 0) -> list[dict[str, Any]]:
        rows = self._query(
            "SELECT data FROM events WHERE run_id = ? AND seq > ? ORDER BY seq", (run_id, after)
        )
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
        rows = self._query("SELECT collective, size_class, node, gbps FROM busbw")
        return [tuple(r) for r in rows]  # type: ignore[misc]

    def step_stats(self) -> dict[tuple[str, str], tuple[dict[str, int], float]]:
        """(check, status) -> (count per bucket bound, sum of seconds): /metrics' histogram."""
        out: dict[tuple[str, str], tuple[dict[str, int], float]] = {}
        for r in self._query("SELECT check_name, status, seconds FROM step_sums"):
            out[(r[0], r[1])] = ({}, float(r[2]))
        for r in self._query("SELECT check_name, status, bucket, n FROM step_stats"):
            out.setdefault((r[0], r[1]), ({}, 0.0))[0][r[2]] = int(r[3])
        return out

    def culprit_counts(self) -> dict[tuple[str, str], int]:
        rows = self._query("SELECT node, reason, n FROM culprit_counts")
        return {(r[0], r[1]): int(r[2]) for r in rows}

    def running(self) -> list[Submission]:
        rows = self._query(
            "SELECT * FROM submissions WHERE status = ? ORDER BY seq", (QueueStatus.RUNNING.value,)
        )
        return [Submission.from_row(r) for r in rows]

    def set_meta(self, key: str, value: Any) -> None:
        with self._lock:
            self._conn.execute(
                "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, json.dumps(value))
            )

    def meta(self, key: str) -> Any:
        rows = self._query("SELECT value FROM meta WHERE key = ?", (key,))
        return json.loads(rows[0][0]) if rows else None

    # -- schedules -----------------------------------------------------------------------

    def add_schedule(
        self,
        *,
        name: str,
        cron: str,
        suite: str | dict[str, Any],
        labels: dict[str, str],
        retries: int,
        catchup: str,
        owner: str,
        next_fire: str,
    ) -> Schedule | None:
        """A new schedule (committed on return); None when the name is taken."""
        try:
            with self._lock:
                self._conn.execute(
                    "INSERT INTO schedules (name, cron, suite, labels, retries, catchup, owner,"
                    " created_at, next_fire) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (name, cron, json.dumps(suite), json.dumps(labels), retries, catchup, owner,
                     now(), next_fire),
                )  # fmt: skip
        except sqlite3.IntegrityError:
            return None
        return self.schedule(name)

    def schedule(self, name: str) -> Schedule | None:
        rows = self._query("SELECT * FROM schedules WHERE name = ?", (name,))
        return Schedule.from_row(rows[0]) if rows else None

    def schedules(self) -> list[Schedule]:
        return [Schedule.from_row(r) for r in self._query("SELECT * FROM schedules ORDER BY name")]

    def owner_schedules(self, owner: str) -> int:
        return int(self._query("SELECT COUNT(*) FROM schedules WHERE owner = ?", (owner,))[0][0])

    def delete_schedule(self, name: str) -> bool:
        with self._lock:
            cur = self._conn.execute("DELETE FROM schedules WHERE name = ?", (name,))
        return cur.rowcount == 1

    def due_schedules(self, at: str) -> list[Schedule]:
        rows = self._query("SELECT * FROM schedules WHERE next_fire <= ? ORDER BY next_fire", (at,))
        return [Schedule.from_row(r) for r in rows]

    def next_due(self) -> str | None:
        """The earliest next fire time of any schedule (how long the scheduler may sleep)."""
        return self._query("SELECT MIN(next_fire) FROM schedules")[0][0]

    def claim_firing(
        self,
        name: str,
        *,
        due: str,
        next_fire: str,
        outcome: FireOutcome,
        fired_at: str | None = None,
        run_id: str | None = None,
        error: str = "",
    ) -> bool:
        """Move a schedule from `due` to `next_fire` and count what the look did, in one
        statement: of two schedulers that looked at the same `due` (two processes, or one
        before and one after a restart), exactly one gets True."""
        counter = outcome.value  # NOTE: each outcome's counter column has its name
        sets = f"next_fire = ?, {counter} = {counter} + 1, last_error = ?"
        args: list[Any] = [next_fire, error]
        if fired_at is not None:
            sets += ", last_fire = ?, last_run_id = COALESCE(?, last_run_id)"
            args += [fired_at, run_id]
        with self._lock:
            cur = self._conn.execute(
                f"UPDATE schedules SET {sets} WHERE name = ? AND next_fire = ?",
                (*args, name, due),
            )
        return cur.rowcount == 1

    def can_submit(self, owner: str) -> bool:
        """Whether `owner` holds a valid token that may submit (a schedule's runs are theirs)."""
        rows = self._query("SELECT * FROM tokens WHERE name = ?", (owner,))
        at = now()
        return any(
            t.state(at) == TokenState.VALID and SCOPE_RANK[t.scope] >= SCOPE_RANK[Scope.SUBMIT]
            for t in map(Token.from_row, rows)
        )

    # -- tokens --------------------------------------------------------------------------

    def create_token(
        self, scope: Scope, name: str | None, *, expires_in_s: float | None = None
    ) -> str:
        """A new random token; only its hash is stored, so it is shown once. Without a
        `name` the token is its own owner (`<scope>-<id>`): two unnamed tokens never share
        runs."""
        token = "fv_" + secrets.token_urlsafe(32)
        digest = hash_token(token)
        expires = now(expires_in_s) if expires_in_s is not None else None
        with self._lock:
            self._conn.execute(
                "INSERT INTO tokens (hash, name, scope, created_at, expires_at)"
                " VALUES (?, ?, ?, ?, ?)",
                (digest, name or f"{scope.value}-{digest[:TOKEN_ID_CHARS]}", scope.value, now(),
                 expires),
            )  # fmt: skip
        return token

    def lookup_token(self, token: str) -> Token | None:
        """The token's record, revoked or expired ones included (the caller says which)."""
        rows = self._query("SELECT * FROM tokens WHERE hash = ?", (hash_token(token),))
        return Token.from_row(rows[0]) if rows else None

    def tokens(self) -> list[Token]:
        return [Token.from_row(r) for r in self._query("SELECT * FROM tokens ORDER BY created_at")]

    def revoke_token(self, token_id: str) -> Token | None:
        """Revoke the token with this public id (from now on it answers 401); None if unknown."""
        if len(token_id) != TOKEN_ID_CHARS or not all(c in "0123456789abcdef" for c in token_id):
            return None
        with self._lock:
            self._conn.execute(
                "UPDATE tokens SET revoked_at = COALESCE(revoked_at, ?) WHERE substr(hash, 1, ?) = ?",
                (now(), TOKEN_ID_CHARS, token_id),
            )
        rows = self._query(
            "SELECT * FROM tokens WHERE substr(hash, 1, ?) = ?", (TOKEN_ID_CHARS, token_id)
        )
        return Token.from_row(rows[0]) if rows else None
