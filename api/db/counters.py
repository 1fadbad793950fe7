"""What /metrics and /healthz report, kept as it changes (counters maintained by triggers and
at each run's end), so a scrape costs the same at 50 runs and at 50,000; and the service's
small key-value facts (e.g. the cluster shape the executor sees)."""

from __future__ import annotations

import json
from typing import Any

from fleetval.api.db.connection import Connection
from fleetval.jsontypes import JsonObject

STEP_BUCKETS = (1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0)


class Counters(Connection):
    """Status counts, the step histogram, culprit counts, the latest bus bandwidth, meta."""

    def counts(self) -> dict[str, int]:
        """Submissions by status (kept by triggers: one small read)."""
        return {r[0]: r[1] for r in self._query("SELECT status, n FROM status_counts")}

    def _count_steps(self, steps: list[JsonObject]) -> None:
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

    def set_meta(self, key: str, value: Any) -> None:
        with self._lock:
            self._conn.execute(
                "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, json.dumps(value))
            )

    def meta(self, key: str) -> Any:
        rows = self._query("SELECT value FROM meta WHERE key = ?", (key,))
        return json.loads(rows[0][0]) if rows else None
