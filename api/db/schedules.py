"""Schedules: cron entries that queue runs, each firing claimed by exactly one scheduler."""

from __future__ import annotations

import json
import sqlite3
from enum import StrEnum
from typing import Any

from fleetval.api.db.connection import Connection, now
from fleetval.api.db.submissions import QuotaExceeded
from fleetval.api.models import ScheduleOut
from fleetval.jsontypes import JsonObject

# A stored schedule is the API's model itself (api/models.py): one declaration of its fields.
Schedule = ScheduleOut


def schedule_from_row(row: sqlite3.Row) -> Schedule:
    rec = dict(row)
    rec["suite"] = json.loads(rec["suite"])
    rec["labels"] = json.loads(rec["labels"])
    return Schedule(**rec)


class FireOutcome(StrEnum):
    """What a claimed look at a due schedule did; each has its counter."""

    FIRED = "fired"
    REFUSED = "refused"
    SKIPPED = "skipped"


class ScheduleTable(Connection):
    """The `schedules` table."""

    def add_schedule(
        self,
        *,
        name: str,
        cron: str,
        suite: str | JsonObject,
        labels: dict[str, str],
        retries: int,
        catchup: str,
        owner: str,
        next_fire: str,
        max_per_owner: int | None = None,
    ) -> Schedule | None:
        """A new schedule (committed on return); None when the name is taken. With
        `max_per_owner`, QuotaExceeded when the owner has that many: counted and inserted in
        one write transaction (across processes too), as a submission's quota is."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                if max_per_owner is not None:
                    owned = self._conn.execute(
                        "SELECT COUNT(*) FROM schedules WHERE owner = ?", (owner,)
                    ).fetchone()[0]
                    if owned >= max_per_owner:
                        raise QuotaExceeded(
                            f"{owner!r} has {owned} schedules; this service allows "
                            f"{max_per_owner} (max_schedules_per_owner)"
                        )
                self._conn.execute(
                    "INSERT INTO schedules (name, cron, suite, labels, retries, catchup, owner,"
                    " created_at, next_fire) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (name, cron, json.dumps(suite), json.dumps(labels), retries, catchup, owner,
                     now(), next_fire),
                )  # fmt: skip
                self._conn.execute("COMMIT")
            except sqlite3.IntegrityError:
                self._conn.execute("ROLLBACK")
                return None
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
        return self.schedule(name)

    def schedule(self, name: str) -> Schedule | None:
        rows = self._query("SELECT * FROM schedules WHERE name = ?", (name,))
        return schedule_from_row(rows[0]) if rows else None

    def schedules(self) -> list[Schedule]:
        return [schedule_from_row(r) for r in self._query("SELECT * FROM schedules ORDER BY name")]

    def owner_schedules(self, owner: str) -> int:
        return int(self._query("SELECT COUNT(*) FROM schedules WHERE owner = ?", (owner,))[0][0])

    def delete_schedule(self, name: str) -> bool:
        with self._lock:
            cur = self._conn.execute("DELETE FROM schedules WHERE name = ?", (name,))
        return cur.rowcount == 1

    def due_schedules(self, at: str) -> list[Schedule]:
        rows = self._query("SELECT * FROM schedules WHERE next_fire <= ? ORDER BY next_fire", (at,))
        return [schedule_from_row(r) for r in rows]

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
