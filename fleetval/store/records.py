"""What the catalog and the run index share: a run's record, index entries as JSON, filters.

Apart from `catalog` so that `runindex` (which the catalog opens) builds on it without a cycle.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fleetval.metrics import MetricDecl
from fleetval.vocab import RunStatus

SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
INDEX = "index"
TIMESTAMPS = {"runs": ("started_at", "finished_at"), "nodes": ()}


@dataclass(frozen=True, kw_only=True)
class RunRecord:
    run_id: str
    suite: str
    status: str  # a RunStatus value; INCOMPLETE when read back without a record
    started_at: datetime
    finished_at: datetime | None = None
    labels: dict[str, str] = field(default_factory=dict)
    submitter: str = ""
    backend: str = ""
    faults: list[dict[str, Any]] = field(default_factory=list)
    suite_json: str = ""
    summary: dict[str, Any] = field(default_factory=dict)
    message: str = ""
    metrics: list[MetricDecl] = field(default_factory=list)  # declared by the checks run

    def to_dict(self) -> dict[str, Any]:
        """The record for tools (`--json`, the API): everything but the stored suite text."""
        out = {k: v for k, v in self.__dict__.items() if k != "suite_json"}
        out["metrics"] = [m.to_dict() for m in self.metrics]
        return out

    def listing(self) -> dict[str, Any]:
        """What a list of runs shows of this run (the service's view of a stored run): its
        ids, status, times and step verdicts; no suite text, no metric declarations."""
        return {
            "run_id": self.run_id,
            "suite": self.suite,
            "status": self.status,
            "message": self.message,
            "labels": self.labels,
            "submitter": self.submitter,
            "started_at": self.started_at.isoformat(),
            "finished_at": self.finished_at.isoformat() if self.finished_at else None,
            "steps": self.summary.get("steps", []),
        }

    def to_record(self) -> dict[str, Any]:
        return {
            **self.__dict__,
            "labels": list(self.labels.items()),
            "faults": json.dumps(self.faults),
            "summary": json.dumps(self.summary, default=str),
            "metrics": json.dumps([m.to_dict() for m in self.metrics]),
        }

    @classmethod
    def from_record(cls, rec: dict[str, Any]) -> RunRecord:
        return cls(
            **{
                **rec,
                "labels": dict(rec["labels"] or []),
                "faults": json.loads(rec["faults"] or "[]"),
                "summary": json.loads(rec["summary"] or "{}"),
                "metrics": [MetricDecl.from_dict(m) for m in json.loads(rec["metrics"] or "[]")],
            }
        )

    @property
    def injected(self) -> bool:
        """Faults were injected into this run: its numbers are not a release's."""
        return bool(self.faults)


def index_json(rows: list[dict[str, Any]]) -> bytes:
    """An index entry: a table's rows as JSON, timestamps as ISO 8601 text."""
    return json.dumps(rows, default=_iso).encode()


def _iso(value: object) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def rows_from_json(table: str, text: str) -> list[dict[str, Any]]:
    rows = json.loads(text)
    for row in rows:
        for col in TIMESTAMPS[table]:
            if row[col] is not None:
                row[col] = datetime.fromisoformat(row[col])
    return rows


def incomplete_run(results: Path) -> RunRecord:
    """A run with results but no record: cut off before it ended."""
    return RunRecord(
        run_id=results.name,
        suite="?",
        status=RunStatus.INCOMPLETE.value,
        started_at=datetime.fromtimestamp(results.stat().st_mtime, UTC),
        message="no run record: the run was cut off; its finished steps are kept",
    )


@dataclass(frozen=True, kw_only=True)
class RunFilter:
    """What a page of runs is filtered on; every field optional."""

    status: str | None = None
    suite: str | None = None
    labels: dict[str, str] = field(default_factory=dict)

    def sql(self) -> tuple[str, list[Any]]:
        """WHERE terms (joined with AND) and their arguments, over columns status, suite, labels."""
        terms, args = [], []
        if self.status is not None:
            terms.append("status = ?")
            args.append(self.status)
        if self.suite is not None:
            terms.append("suite = ?")
            args.append(self.suite)
        for key, value in self.labels.items():
            terms.append("json_extract(labels, ?) = ?")
            args += [label_path(key), value]
        return " AND ".join(terms), args


def label_path(key: str) -> str:
    """A JSON path naming one key of an object, any characters quoted."""
    return "$." + json.dumps(key)
