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

One run is found by its file names, never by a scan (`Catalog.run`). For readers that page
through many runs (the service), `index/runs.sqlite` (`RunIndex`) keeps one row per run,
written with each JSON entry and built from the files the first time it is opened: a page
is one indexed query, whatever the history's length.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import sqlite3
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

from fleetval.metrics import MetricDecl
from fleetval.store.base import ENV_COLUMNS as ENV_COLUMNS
from fleetval.store.base import CorruptFile as CorruptFile
from fleetval.store.base import RunNotFound as RunNotFound
from fleetval.store.base import StoreError as StoreError
from fleetval.vocab import RunStatus

DEFAULT_DATA = "fleetval-data"
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
INDEX = "index"
# The timestamp columns of each indexed table: ISO 8601 text in the JSON.
TIMESTAMPS = {"runs": ("started_at", "finished_at"), "nodes": ()}


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


def parse_pairs(pairs: list[str], option: str) -> dict[str, str]:
    """KEY=VALUE strings (labels, filters) into a dict; a malformed one is bad input."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise StoreError(f"{option} {pair!r}: expected KEY=VALUE")
        out[key.strip()] = value.strip()
    return out


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
                records[d.name] = _incomplete(d)
        return sorted(records.values(), key=lambda r: r.run_id)

    def run(self, run_id: str) -> RunRecord:
        """One run, found by its file names (no scan): RunNotFound when there is none,
        CorruptFile when its record cannot be read from the index or from Parquet."""
        if not SAFE_NAME.match(run_id):
            raise RunNotFound(run_id, self.root)
        record = self.root / "runs" / f"{run_id}.parquet"
        if record.exists():
            return RunRecord.from_record(self._rows("runs", [record])[0])
        results = self.root / "results" / run_id
        if results.is_dir():
            return _incomplete(results)
        raise RunNotFound(run_id, self.root)

    def find_runs(self, run_ids: list[str]) -> dict[str, RunRecord]:
        """The runs among `run_ids` that exist, by id: one query of the run index; an id the
        index lacks is looked up by its file names (never a scan). Absent ids are left out;
        a corrupt record raises CorruptFile."""
        found = self.run_index().get_many(list(dict.fromkeys(run_ids)))
        for run_id in run_ids:
            if run_id not in found:
                with contextlib.suppress(RunNotFound):
                    found[run_id] = self.run(run_id)
        return found

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
        """The index entry of `table`/<run_id>.parquet, whose rows are `rows` (and, for a
        run, its row in the SQLite run index)."""
        text = _index_json(rows)
        with contextlib.suppress(OSError):  # NOTE: best effort: readers fall back to Parquet
            atomic_write(self.index_path(table, run_id), lambda f: f.write(text), replace=True)
        if table == "runs" and rows:
            with contextlib.suppress(OSError, sqlite3.Error):  # NOTE: best effort, as above
                self.run_index().put(rows[0])

    def run_index(self) -> RunIndex:
        """The SQLite index of this store's runs, opened once per Catalog (built on first use)."""
        if getattr(self, "_run_index", None) is None:
            self._run_index = RunIndex.open(self)
        return self._run_index

    def _rows(self, table: str, files: list[Path]) -> list[dict[str, Any]]:
        """The rows of a table's files (<run_id>.parquet), in file order: from the index,
        else from Parquet (indexing the file on the way). A corrupt index entry is read
        from Parquet and rewritten; a corrupt Parquet file raises CorruptFile."""
        rows = []
        for f in files:
            try:
                rows += _rows_from_json(table, self.index_path(table, f.stem).read_text())
            except (FileNotFoundError, ValueError, KeyError, TypeError):
                file_rows = _rows_from_parquet(table, [f])  # CorruptFile when unreadable
                self.write_index(table, f.stem, file_rows)
                rows += file_rows
        return rows


def _incomplete(results: Path) -> RunRecord:
    """A run with results but no record: cut off before it ended."""
    return RunRecord(
        run_id=results.name,
        suite="?",
        status=RunStatus.INCOMPLETE.value,
        started_at=datetime.fromtimestamp(results.stat().st_mtime, UTC),
        message="no run record: the run was cut off; its finished steps are kept",
    )


RUN_INDEX = "runs.sqlite"
RUN_INDEX_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,                 -- sortable by start: keyset pages order by it
    suite TEXT NOT NULL,
    status TEXT NOT NULL,
    labels TEXT NOT NULL,                    -- JSON object, for label filters
    record TEXT NOT NULL,                    -- the run's index entry (one row, JSON)
    listing TEXT                             -- RunRecord.listing() as JSON, served as it is
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS built (done INTEGER NOT NULL);  -- a row once built from the files
"""


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


class RunIndex:
    """One row per run in `index/runs.sqlite`: a run by id and a page of runs (newest first,
    keyset cursor) in one indexed query each. Written beside every JSON entry
    (`Catalog.write_index`); on first open built from the store's files, so a store written
    before it is indexed once. Readers that need the files' exact state use `Catalog`.

    Each row also keeps the run's listing as JSON text, so a reader that serves runs (the
    service) sends those bytes as they are: no parsing or model building per request."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._conn.execute("PRAGMA busy_timeout=5000")
        with contextlib.suppress(sqlite3.OperationalError):  # another process set it already
            self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.executescript(RUN_INDEX_SCHEMA)
        self._add_listings()

    def _add_listings(self) -> None:
        """An index written before listings were kept: the column added, filled once."""
        with self._lock:
            have = {r[1] for r in self._conn.execute("PRAGMA table_info(runs)")}
            if "listing" not in have:
                self._conn.execute("ALTER TABLE runs ADD COLUMN listing TEXT")
            rows = self._conn.execute(
                "SELECT run_id, record FROM runs WHERE listing IS NULL"
            ).fetchall()
            self._conn.executemany(
                "UPDATE runs SET listing = ? WHERE run_id = ?",
                [(json.dumps(_record(rec).listing()), run_id) for run_id, rec in rows],
            )

    @classmethod
    def open(cls, catalog: Catalog) -> RunIndex:
        index = cls(catalog.root / INDEX / RUN_INDEX)
        if not index._built():
            index._build(catalog)
        return index

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def put(self, row: dict[str, Any]) -> None:
        """A run's row (as its Parquet file reads back), replacing any older one."""
        labels = dict(row["labels"] or [])
        self.put_many([(row["run_id"], row["suite"], row["status"], labels, _index_json([row]))])

    def put_many(self, rows: list[tuple[str, str, str, dict[str, str], bytes]]) -> None:
        """(run id, suite, status, labels, index entry) per run; listings made from the entries."""
        values = [
            (r, s, st, json.dumps(lb), rec.decode(), json.dumps(_record(rec.decode()).listing()))
            for r, s, st, lb, rec in rows
        ]
        with self._lock:
            self._conn.executemany(
                "INSERT OR REPLACE INTO runs (run_id, suite, status, labels, record, listing)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                values,
            )

    def get(self, run_id: str) -> RunRecord | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT record FROM runs WHERE run_id = ?", (run_id,)
            ).fetchone()
        return _record(row[0]) if row else None

    def listing(self, run_id: str) -> str | None:
        """The run's listing as stored (JSON text), or None when the index lacks the run."""
        with self._lock:
            row = self._conn.execute(
                "SELECT listing FROM runs WHERE run_id = ?", (run_id,)
            ).fetchone()
        return row[0] if row else None

    def get_many(self, run_ids: list[str]) -> dict[str, RunRecord]:
        """The indexed runs among `run_ids`, in one query."""
        found: dict[str, RunRecord] = {}
        for i in range(0, len(run_ids), 500):  # NOTE: under SQLite's bound-parameter limit
            chunk = run_ids[i : i + 500]
            with self._lock:
                rows = self._conn.execute(
                    f"SELECT run_id, record FROM runs WHERE run_id IN ({','.join('?' * len(chunk))})",
                    chunk,
                ).fetchall()
            found.update((r[0], _record(r[1])) for r in rows)
        return found

    def page(self, where: RunFilter, *, before: str | None, limit: int) -> list[RunRecord]:
        """Up to `limit` runs matching `where`, newest first, with run ids below `before`."""
        return [_record(rec) for rec in self._page("record", where, before, limit).values()]

    def page_listings(self, where: RunFilter, *, before: str | None, limit: int) -> dict[str, str]:
        """As `page`, each run's listing as stored (JSON text), by run id in page order."""
        return self._page("listing", where, before, limit)

    def _page(
        self, column: str, where: RunFilter, before: str | None, limit: int
    ) -> dict[str, str]:
        sql, args = where.sql()
        terms = [t for t in (sql, "run_id < ?" if before is not None else "") if t]
        if before is not None:
            args.append(before)
        clause = f"WHERE {' AND '.join(terms)}" if terms else ""
        with self._lock:
            rows = self._conn.execute(
                f"SELECT run_id, {column} FROM runs {clause} ORDER BY run_id DESC LIMIT ?",
                (*args, limit),
            ).fetchall()
        return {r[0]: r[1] for r in rows}

    def count(self) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0])

    def _built(self) -> bool:
        with self._lock:
            return self._conn.execute("SELECT 1 FROM built").fetchone() is not None

    def _build(self, catalog: Catalog) -> None:
        """Every run the files hold (one scan, once per store)."""
        rows = []
        for rec in catalog.runs():
            entry = rec.to_record()
            rows.append((rec.run_id, rec.suite, rec.status, rec.labels, _index_json([entry])))
        self.put_many(rows)
        with self._lock:
            self._conn.execute("INSERT INTO built (done) VALUES (1)")


def _record(text: str) -> RunRecord:
    return RunRecord.from_record(_rows_from_json("runs", text)[0])
