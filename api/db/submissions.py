"""The submission queue: runs queued, claimed, cancelled and paged through, with the
per-owner quota checked in the insert's own transaction."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Any

from pydantic import ConfigDict

from fleetval.api.db.connection import Connection, now
from fleetval.store.records import JsonObject, RunFilter, RunHeader
from fleetval.vocab import QueueStatus

ACTIVE = (QueueStatus.QUEUED, QueueStatus.RUNNING)


class Submission(RunHeader):
    """A run in the queue: the run's header (`RunHeader`: id, suite, status, message,
    labels, submitter; declared with `Run` in fleetval/store/records.py) and what only the
    queue holds: its place, the submission that made it and its attempts, the suite to run,
    its times and live progress. `status` is a QueueStatus value."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    seq: int
    submission_id: str | None
    suite_json: str
    retries: int
    planned_s: float
    attempt: int
    retry_of: str | None
    retried_as: str | None
    steps: list[JsonObject]  # the verdicts of the steps ended, as execution recorded them
    progress: JsonObject  # the last progress event, as the executor recorded it
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
class Quota:
    """What one owner may have queued and running at once (checked in the insert's own
    transaction, so two submissions cannot both pass a check that only one fits)."""

    max_active: int
    max_planned_s: float


class QuotaExceeded(Exception):
    """A submission the owner's quota has no room for; the message names the limit."""


class SubmissionQueue(Connection):
    """The `submissions` table: what is queued, running and finished."""

    def _one(self, sql: str, args: tuple = ()) -> Submission | None:
        rows = self._query(sql, args)
        return Submission.from_row(rows[0]) if rows else None

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

    def running(self) -> list[Submission]:
        rows = self._query(
            "SELECT * FROM submissions WHERE status = ? ORDER BY seq", (QueueStatus.RUNNING.value,)
        )
        return [Submission.from_row(r) for r in rows]
