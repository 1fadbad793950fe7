"""Each run's event log, and the transitions that write an event with the run's new state in
one transaction: progress, its end, cancelling a queued run, interrupting a running one, and
pruning finished runs with their events."""

from __future__ import annotations

import json
from typing import Required, TypedDict

from fleetval.api.db.connection import now
from fleetval.api.db.counters import Counters
from fleetval.api.db.submissions import ACTIVE, Submission, SubmissionQueue
from fleetval.jsontypes import JsonObject
from fleetval.vocab import EventKind, QueueStatus


class EventJson(TypedDict, total=False):
    """A run's progress event as the executor records it and the stream sends it: its
    `kind` (an EventKind value) and, once logged, its `seq`; run_start its `attempt`; a
    step's events where the run is (`job`, `step`, `index` of `total`, `percent`, `detail`),
    step_end the step's `outcome` as execution recorded it; run_end the run's `status` and
    `message`."""

    kind: Required[str]
    seq: int
    attempt: int
    job: int
    step: str
    index: int
    total: int
    percent: float
    detail: str
    outcome: JsonObject
    status: str
    message: str


class EventLog(SubmissionQueue, Counters):
    """The `events` table, written together with the submission it belongs to."""

    def record_event(
        self,
        run_id: str,
        event: EventJson,
        *,
        progress: JsonObject | None = None,
        steps: list[JsonObject] | None = None,
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

    def _append(self, run_id: str, event: EventJson) -> int:
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
                    end = EventJson(
                        kind=EventKind.RUN_END, status=QueueStatus.CANCELLED.value, message=message
                    )
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

    def events(self, run_id: str, after: int = 0) -> list[EventJson]:
        rows = self._query(
            "SELECT data FROM events WHERE run_id = ? AND seq > ? ORDER BY seq", (run_id, after)
        )
        return [json.loads(r[0]) for r in rows]
