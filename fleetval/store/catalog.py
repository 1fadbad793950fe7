"""The run catalog: a data directory's runs and nodes, listed without pyarrow.

The store's two one-file-per-run tables get a JSON copy when written (`Store.write_run`,
`Store.write_nodes`):

    index/runs/<run_id>.json     the run's row, as its Parquet file reads back
    index/nodes/<run_id>.json    the run's node rows

Listing runs, resolving baselines and filtering on the environment read these, so
`fleetval runs` and `fleetval baseline ...` start without importing pyarrow (~0.2 s). The
Parquet files stay the record that any Arrow reader uses (docs/schema.md): a run is listed
only when its Parquet file exists. A file without an index entry (a store written before
the index, or a crash between the two writes) is read from Parquet and its entry written
then, as Python writes a .pyc: the next reader finds it. Index writes are best effort: a
read-only store is read from Parquet, and a run's Parquet file is stored either way.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

from fleetval.metrics import MetricDecl
from fleetval.vocab import RunStatus

DEFAULT_DATA = "fleetval-data"
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
INDEX = "index"
# The timestamp columns of each indexed table: ISO 8601 text in the JSON.
TIMESTAMPS = {"runs": ("started_at", "finished_at"), "nodes": ()}

# What a node runs and is: the columns of the nodes table that a baseline filter or an
# environment diff speaks of (fleetval.store.schema re-exports them beside NODES_SCHEMA).
ENV_COLUMNS = (
    "gpu_model", "driver_version", "cuda_version", "rocm_version", "hip_version",
    "nccl_version", "rccl_version", "torch_version", "ray_version", "python_version",
    "kernel", "cpu_model", "hostname",
)  # fmt: skip


class StoreError(ValueError):
    """Bad input to the store: an unknown run, an unsafe name, a file that exists already."""


def default_data_dir() -> Path:
    return Path(os.environ.get("FLEETVAL_DATA") or DEFAULT_DATA)


def new_run_id(now: datetime | None = None) -> str:
    """Sortable by start time, unique without coordination: 20261122-183000-3f9a1c."""
    now = now or datetime.now(UTC)
    return f"{now:%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"


def check_name(kind: str, name: str) -> str:
    if not SAFE_NAME.match(name):
        raise StoreError(f"{kind} {name!r}: use letters, digits, '.', '_' and '-' only")
    return name


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


def atomic_write(path: Path, write: Callable[[BinaryIO], object], *, replace: bool = False) -> Path:
    """Temp file in the same directory, fsync, rename: readers see the old file or the new
    one, never a torn one. Without `replace`, an existing file is refused (written once)."""
    if path.exists() and not replace:
        raise StoreError(f"{path} exists already; stored files are never rewritten")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _index_json(rows: list[dict[str, Any]]) -> bytes:
    """An index entry: a table's rows as JSON, timestamps as ISO 8601 text."""
    return json.dumps(rows, default=_iso).encode()


def _iso(value: object) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _rows_from_json(table: str, text: str) -> list[dict[str, Any]]:
    rows = json.loads(text)
    for row in rows:
        for col in TIMESTAMPS[table]:
            if row[col] is not None:
                row[col] = datetime.fromisoformat(row[col])
    return rows


def _rows_from_parquet(table: str, files: list[Path]) -> list[dict[str, Any]]:
    """Rows of files the index lacks."""
    # NOTE: imported here: pyarrow costs ~0.2 s, paid only for files without an index entry
    from fleetval.store.parquet import read_parquet, table_rows
    from fleetval.store.schema import NODES_SCHEMA, RUNS_SCHEMA

    schema = {"runs": RUNS_SCHEMA, "nodes": NODES_SCHEMA}[table]
    return table_rows(read_parquet(files, schema))


class Catalog:
    """The runs and nodes of one data directory, from the JSON index. Cheap to construct;
    every read scans the files on disk. `Store` adds the Parquet tables."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    def index_path(self, table: str, run_id: str) -> Path:
        """Where the index keeps `table`/<run_id>.parquet (run_id: checked, or a file's stem)."""
        return self.root / INDEX / table / f"{run_id}.json"

    def runs(self) -> list[RunRecord]:
        """All runs, oldest first; runs cut off before their record was written are `incomplete`."""
        rows = self._rows("runs", sorted((self.root / "runs").glob("*.parquet")))
        records = {r["run_id"]: RunRecord.from_record(r) for r in rows}
        for d in (self.root / "results").glob("*"):
            if d.is_dir() and d.name not in records:
                started = datetime.fromtimestamp(d.stat().st_mtime, UTC)
                records[d.name] = RunRecord(
                    run_id=d.name,
                    suite="?",
                    status=RunStatus.INCOMPLETE.value,
                    started_at=started,
                    message="no run record: the run was cut off; its finished steps are kept",
                )
        return sorted(records.values(), key=lambda r: r.run_id)

    def run(self, run_id: str) -> RunRecord:
        for r in self.runs():
            if r.run_id == run_id:
                return r
        raise StoreError(f"no run {run_id!r} in {self.root}; `fleetval runs` lists them")

    def latest_run(self) -> RunRecord:
        runs = self.runs()
        if not runs:
            raise StoreError(f"no runs in {self.root}")
        return runs[-1]

    def node_rows(self, run_ids: list[str] | None = None) -> list[dict[str, Any]]:
        """The nodes table's rows of the given runs (all when None): `Store.nodes(...).to_pylist()`."""
        return self._rows("nodes", self.node_files(run_ids))

    def node_files(self, run_ids: list[str] | None = None) -> list[Path]:
        """The nodes/ Parquet files of the given runs that exist (all when None)."""
        base = self.root / "nodes"
        if run_ids is None:
            return sorted(base.glob("*.parquet"))
        files = [base / f"{check_name('run', r)}.parquet" for r in run_ids]
        return [f for f in files if f.exists()]

    def write_index(self, table: str, run_id: str, rows: list[dict[str, Any]]) -> None:
        """The index entry of `table`/<run_id>.parquet, whose rows are `rows`."""
        text = _index_json(rows)
        with contextlib.suppress(OSError):  # NOTE: best effort: readers fall back to Parquet
            atomic_write(self.index_path(table, run_id), lambda f: f.write(text), replace=True)

    def _rows(self, table: str, files: list[Path]) -> list[dict[str, Any]]:
        """The rows of a table's files (<run_id>.parquet), in file order: from the index,
        else from Parquet (indexing the file on the way)."""
        rows = []
        for f in files:
            try:
                rows += _rows_from_json(table, self.index_path(table, f.stem).read_text())
            except FileNotFoundError:
                file_rows = _rows_from_parquet(table, [f])
                self.write_index(table, f.stem, file_rows)
                rows += file_rows
        return rows
