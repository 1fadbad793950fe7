"""A run (`Run`, declared once), and what the catalog and the run index share: index
entries as JSON, filters.

Apart from `catalog` so that `runindex` (which the catalog opens) builds on it without a cycle.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from fleetval.jsontypes import JsonObject as JsonObject  # where the store's readers take it
from fleetval.metrics import MetricDecl
from fleetval.vocab import RunStatus

# A table's row as Arrow reads it back (`parquet.table_rows`) and its catalog entry holds it,
# typed by the table's Arrow schema (store/schema.py): the other true boundary of a run's
# data, beside the JSON objects one part writes and another reads back (`JsonObject`: a fault
# as the suite declared it, a run's summary, a step's verdict, a progress event).
StoredRow = dict[str, Any]

SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
INDEX = "index"
TIMESTAMPS = {"runs": ("started_at", "finished_at"), "nodes": ()}


class RunHeader(BaseModel):
    """What every view of a run begins with, whoever holds it: the stored run (`Run`), the
    queue's submission (`api/db/submissions.py`) and the API body (`RunOut`, api/models.py)
    take these fields from here rather than restating them."""

    run_id: str
    suite: str
    status: str  # a RunStatus value (a QueueStatus one while the service holds the run)
    message: str = ""
    labels: dict[str, str] = Field(default_factory=dict)
    submitter: str = ""


# A run's stored fields in the order of its row (RUNS_SCHEMA), which `to_dict` keeps.
ROW_ORDER = (
    "run_id", "suite", "status", "started_at", "finished_at", "labels", "submitter", "backend",
    "faults", "suite_json", "summary", "message", "metrics",
)  # fmt: skip
# What `Run.listing` shows of a run, in its order: its header, its times and step verdicts.
LISTED = (*RunHeader.model_fields, "started_at", "finished_at", "steps")
# Text columns an older or foreign writer may have left null: read as their default.
_TEXT = ("message", "submitter", "backend", "suite_json")


class Run(RunHeader):
    """A run, declared once. Every form of it derives from these fields:

    - its row (`to_record`, read back by `from_record`): the `runs/<id>.parquet` file and its
      JSON catalog entry `index/runs/<id>.json` (`index_json` of the row as Arrow reads it
      back), labels as pairs and faults, summary and metrics as JSON text: the stored
      formats, unchanged;
    - its run index row (`index_row`: store/runindex.py), which keeps its `listing` as JSON;
    - the API body (`RunOut`: the header's fields, `listing`'s times and steps, and the
      queue's own fields) and the report's header (`signoff/views.py`) read its fields.

    `faults` (each as the suite declared it) and `summary` (what execution recorded: steps,
    a sweep's verdict, a job's stragglers) are JSON documents: stored as JSON text, read by
    the parts that wrote them."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    started_at: datetime
    finished_at: datetime | None = None
    backend: str = ""
    faults: list[JsonObject] = Field(default_factory=list)
    suite_json: str = ""
    summary: JsonObject = Field(default_factory=dict)
    metrics: list[MetricDecl] = Field(default_factory=list)  # declared by the checks run

    def to_dict(self) -> JsonObject:
        """The record for tools (`--json`): everything but the stored suite text."""
        out = {k: getattr(self, k) for k in ROW_ORDER if k != "suite_json"}
        out["metrics"] = [m.to_dict() for m in self.metrics]
        return out

    def listing(self) -> JsonObject:
        """What a list of runs shows of this run (the service's view of a stored run): its
        header, times as ISO 8601 text and step verdicts (`LISTED`); no suite text, no metric
        declarations. `RunOut` declares the same fields."""
        header = {name: getattr(self, name) for name in RunHeader.model_fields}
        return {
            **header,
            "started_at": self.started_at.isoformat(),
            "finished_at": self.finished_at.isoformat() if self.finished_at else None,
            "steps": self.steps,
        }

    @property
    def steps(self) -> list[JsonObject]:
        """The verdicts of the steps that ended, as execution recorded them."""
        return self.summary.get("steps", [])

    def to_record(self) -> StoredRow:
        """Its row, as `runs/<id>.parquet` holds it."""
        return {
            **{k: getattr(self, k) for k in ROW_ORDER},
            "labels": list(self.labels.items()),
            "faults": json.dumps(self.faults),
            "summary": json.dumps(self.summary, default=str),
            "metrics": json.dumps([m.to_dict() for m in self.metrics]),
        }

    @classmethod
    def from_record(cls, rec: StoredRow) -> Run:
        """The run of a row as its Parquet file or its catalog entry reads back."""
        return cls(
            **{
                **rec,
                **{k: rec[k] or "" for k in _TEXT if k in rec},
                "labels": dict(rec["labels"] or []),
                "faults": json.loads(rec["faults"] or "[]"),
                "summary": json.loads(rec["summary"] or "{}"),
                "metrics": [MetricDecl.from_dict(m) for m in json.loads(rec["metrics"] or "[]")],
            }
        )

    def index_row(self, entry: str) -> tuple[str, str, str, str, str, str]:
        """Its row of the run index (run_id, suite, status, labels, record, listing), with
        `entry` its row's JSON as the catalog entry holds it."""
        listing = json.dumps(self.listing())
        return self.run_id, self.suite, self.status, json.dumps(self.labels), entry, listing

    @property
    def injected(self) -> bool:
        """Faults were injected into this run: its numbers are not a release's."""
        return bool(self.faults)


def index_json(rows: list[StoredRow]) -> bytes:
    """An index entry: a table's rows as JSON, timestamps as ISO 8601 text."""
    return json.dumps(rows, default=_iso).encode()


def _iso(value: object) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def rows_from_json(table: str, text: str) -> list[StoredRow]:
    rows = json.loads(text)
    for row in rows:
        for col in TIMESTAMPS[table]:
            if row[col] is not None:
                row[col] = datetime.fromisoformat(row[col])
    return rows


def incomplete_run(results: Path) -> Run:
    """A run with results but no record: cut off before it ended."""
    return Run(
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
