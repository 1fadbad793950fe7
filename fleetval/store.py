"""The Parquet store: runs/, nodes/ and results/ under one data directory.

Layout (any Arrow reader can glob it; see docs/schema.md):

    runs/<run_id>.parquet               one row, written when the run ends
    nodes/<run_id>.parquet              one row per node
    results/<run_id>/<part>.parquet     one file per finished step
    summaries/<run_id>/<part>.parquet   the same step reduced per identity and node
    lateness/<run_id>/<part>.parquet    the same step's lateness per rank

Every file is written once, atomically (temp file + rename), and never rewritten, so a
crash leaves no torn file and results measured before it stay readable. A run that has
results but no runs/ record was cut off; it is listed as `incomplete`.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from fleetval.metrics import MetricDecl
from fleetval.reduction import LATENESS_READ_COLS, arrow, np_col, rank_lateness, summarize
from fleetval.results import (
    LATENESS_SCHEMA,
    NODES_SCHEMA,
    RESULTS_SCHEMA,
    RUNS_SCHEMA,
    SCHEMA_VERSION,
    SUMMARIES_SCHEMA,
    Row,
    rows_to_table,
)

DEFAULT_DATA = "fleetval-data"
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class StoreError(ValueError):
    """Bad input to the store: an unknown run, an unsafe name, a file that exists already."""


def default_data_dir() -> Path:
    return Path(os.environ.get("FLEETVAL_DATA") or DEFAULT_DATA)


def new_run_id(now: datetime | None = None) -> str:
    """Sortable by start time, unique without coordination: 20261122-183000-3f9a1c."""
    now = now or datetime.now(UTC)
    return f"{now:%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"


@dataclass(frozen=True, kw_only=True)
class RunRecord:
    run_id: str
    suite: str
    status: str  # pass / fail / cancelled / error; "incomplete" when read back without a record
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


def parquet_options(schema: pa.Schema) -> dict[str, Any]:
    """How the store encodes a table: dictionaries for strings only; floats (and float
    lists, the per-iteration samples) byte-stream-split, which zstd then compresses and
    which decodes ~40% faster than the default for timing data."""
    floats, strings = [], []
    for f in schema:
        if pa.types.is_floating(f.type):
            floats.append(f.name)
        elif pa.types.is_list(f.type) and pa.types.is_floating(f.type.value_type):
            floats.append(f"{f.name}.list.element")
        elif pa.types.is_string(f.type):
            strings.append(f.name)
    return {"compression": "zstd", "use_dictionary": strings, "use_byte_stream_split": floats}


def read_parquet(
    files: list[Path],
    schema: pa.Schema,
    *,
    columns: list[str] | None = None,
    dictionary: tuple[str, ...] = (),
    having: str | None = None,
) -> pa.Table:
    """Files of one table as `schema` (columns an older file lacks are null), projected to
    `columns`, the `dictionary` string columns kept dictionary-encoded. With `having`, only
    the row groups where that column has a value (the files' statistics say which): a
    superset of the rows where it is not null, for callers that drop the rest anyway.

    NOTE: file by file with pyarrow.parquet, not pyarrow.dataset: importing the dataset
    module imports pandas (~0.4 s), and the store-reading commands must start fast.
    """
    fields = [
        pa.field(f.name, pa.dictionary(pa.int32(), f.type)) if f.name in dictionary else f
        for f in schema
    ]
    target = pa.schema(fields)
    if columns is not None:
        target = pa.schema([target.field(c) for c in columns])
    tables = []
    for f in files:
        pf = pq.ParquetFile(f, read_dictionary=[c for c in dictionary if c in target.names])
        have = set(pf.schema_arrow.names)
        read = [c for c in target.names if c in have]
        if having is not None:
            groups = _row_groups_having(pf, having)
            if not groups:
                continue
            t = pf.read_row_groups(groups, columns=read, use_threads=True)
        else:
            t = pf.read(columns=read, use_threads=True)
        for col in target:
            if col.name not in have:
                t = t.append_column(col, pa.nulls(len(t), col.type))
        tables.append(t.select(target.names).cast(target))
    if not tables:  # NOTE: not schema.empty_table(), which imports pandas
        return pa.Table.from_batches([], schema=target)
    return pa.concat_tables(tables)


def _row_groups_having(pf: pq.ParquetFile, column: str) -> list[int]:
    """Row groups of a file whose `column` is not all null (all of them without statistics)."""
    names = pf.schema_arrow.names
    if column not in names:
        return []  # an older file without the column: null throughout
    meta, j = pf.metadata, pf.schema.names.index(column)
    out = []
    for i in range(meta.num_row_groups):
        rg = meta.row_group(i)
        stats = rg.column(j).statistics
        if stats is None or not stats.has_null_count or stats.null_count < rg.num_rows:
            out.append(i)
    return out


def _pylist(table: pa.Table) -> list[dict[str, Any]]:
    """Rows as dicts; timestamps converted here, since pyarrow imports pandas (~0.4 s) to
    convert a zoned timestamp column."""
    stamps = [f.name for f in table.schema if pa.types.is_timestamp(f.type)]
    micros = {c: pc.cast(table[c], pa.int64()).to_pylist() for c in stamps}
    rows = table.drop_columns(stamps).to_pylist()
    for c, values in micros.items():
        for row, us in zip(rows, values, strict=True):
            row[c] = None if us is None else _EPOCH + timedelta(microseconds=us)
    return rows


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _write_table(table: pa.Table, path: Path) -> Path:
    options = parquet_options(table.schema)
    return atomic_write(path, lambda f: pq.write_table(table, f, **options))


def _check_name(kind: str, name: str) -> str:
    if not SAFE_NAME.match(name):
        raise StoreError(f"{kind} {name!r}: use letters, digits, '.', '_' and '-' only")
    return name


class Store:
    """One data directory. Cheap to construct; every read scans the files on disk."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    # -- writing -----------------------------------------------------------------------

    def write_results(self, run_id: str, part: str, rows: list[Row]) -> Path:
        return self.write_results_table(run_id, part, rows_to_table(rows))

    def write_results_table(self, run_id: str, part: str, table: pa.Table) -> Path:
        """A step's rows, then their summary and their ranks' lateness: compare and trend
        read those, never the samples.

        NOTE: results first: a crash between the writes leaves a part without its summary
        or lateness, which `summaries` and `lateness` recompute from the results; never a
        reduction without its rows.
        """
        _check_name("run", run_id)
        path = self.root / "results" / run_id / f"{_check_name('part', part)}.parquet"
        _write_table(table, path)
        _write_table(summarize(table), self.root / "summaries" / run_id / f"{part}.parquet")
        _write_table(rank_lateness(table), self.root / "lateness" / run_id / f"{part}.parquet")
        return path

    def write_nodes(self, run_id: str, nodes: list[dict[str, Any]]) -> Path:
        recs = [{**n, "run_id": run_id} for n in nodes]
        table = pa.Table.from_pylist(recs, schema=NODES_SCHEMA)
        return _write_table(table, self.root / "nodes" / f"{_check_name('run', run_id)}.parquet")

    def write_artifact(self, run_id: str, name: str, data: bytes) -> Path:
        """A run's raw evidence (e.g. an NCCL Flight Recorder dump) under artifacts/<run_id>/."""
        path = self.root / "artifacts" / _check_name("run", run_id) / _check_name("artifact", name)
        return atomic_write(path, lambda f: f.write(data))

    def write_run(self, record: RunRecord) -> Path:
        table = pa.Table.from_pylist([record.to_record()], schema=RUNS_SCHEMA)
        return _write_table(
            table, self.root / "runs" / f"{_check_name('run', record.run_id)}.parquet"
        )

    # -- reading -----------------------------------------------------------------------

    def _read(self, files: list[Path], schema: pa.Schema) -> pa.Table:
        return read_parquet(files, schema)

    def runs(self) -> list[RunRecord]:
        """All runs, oldest first; runs cut off before their record was written are `incomplete`."""
        table = self._read(sorted((self.root / "runs").glob("*.parquet")), RUNS_SCHEMA)
        records = {r["run_id"]: RunRecord.from_record(r) for r in _pylist(table)}
        for d in (self.root / "results").glob("*"):
            if d.is_dir() and d.name not in records:
                started = datetime.fromtimestamp(d.stat().st_mtime, UTC)
                records[d.name] = RunRecord(
                    run_id=d.name,
                    suite="?",
                    status="incomplete",
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

    def results(
        self,
        run_ids: list[str] | None = None,
        *,
        columns: list[str] | None = None,
        dictionary: tuple[str, ...] = (),
        having: str | None = None,
    ) -> pa.Table:
        """Result rows of the given runs (all runs when None); `columns` projects (only those
        are decoded), `dictionary` names string columns to keep dictionary-encoded, `having`
        skips row groups where that column is null throughout (see `read_parquet`)."""
        base = self.root / "results"
        dirs = [base / _check_name("run", r) for r in run_ids] if run_ids is not None else [base]
        files = sorted(f for d in dirs for f in d.rglob("*.parquet"))
        return read_parquet(
            files, RESULTS_SCHEMA, columns=columns, dictionary=dictionary, having=having
        )

    def summaries(self, run_ids: list[str]) -> pa.Table:
        """Run summaries (SUMMARIES_SCHEMA) of the given runs, dictionary-encoded strings.

        A results part without its summary (a store written before summaries existed, or a
        crash between the two writes) is summarised from its rows here.
        """
        files, parts = [], []
        for run_id in run_ids:
            base = self.root / "summaries" / _check_name("run", run_id)
            for part in sorted((self.root / "results" / run_id).glob("*.parquet")):
                summary = base / part.name
                if summary.exists():
                    files.append(summary)
                else:
                    parts.append(summarize(read_parquet([part], RESULTS_SCHEMA)))
        strings = tuple(f.name for f in SUMMARIES_SCHEMA if pa.types.is_string(f.type))
        table = read_parquet(files, SUMMARIES_SCHEMA, dictionary=strings)
        if parts:
            table = pa.concat_tables([table, *(t.cast(table.schema) for t in parts)])
        return table.unify_dictionaries().combine_chunks()

    def lateness(self, run_id: str) -> pa.Table:
        """Each rank's lateness in one run (LATENESS_SCHEMA): `rank_lateness` of all its rows,
        ordered as that orders them (by rank, then world size).

        Read from what was stored with each part; a part without it (a store written before
        schema version 3, or a crash between the writes) is computed from its rows here. A
        rank's lateness is a median over its rows, which does not combine across parts, so
        parts that measured the same collective (check, collective, world size; e.g. one
        check at two sizes in two steps) are computed together from their rows.
        """
        parts = sorted((self.root / "results" / _check_name("run", run_id)).glob("*.parquet"))
        stored = self.root / "lateness" / run_id
        tables = {
            part: read_parquet([stored / part.name], LATENESS_SCHEMA)
            if (stored / part.name).exists()
            else self._lateness_from_rows([part])
            for part in parts
        }
        owner: dict[tuple, Path] = {}
        joint: set[Path] = set()
        for part, t in tables.items():
            cols = (t[c].to_pylist() for c in ("check", "collective", "world_size"))
            keys = zip(*cols, strict=True)
            for key in set(keys):
                if owner.setdefault(key, part) != part:
                    joint |= {part, owner[key]}
        out = [t for part, t in tables.items() if part not in joint]
        if joint:
            out.append(self._lateness_from_rows(sorted(joint)))
        if not out:
            return pa.Table.from_batches([], schema=LATENESS_SCHEMA)
        table = pa.concat_tables(out)
        rank, world = (np_col(table[c], null=-1) for c in ("rank", "world_size"))
        return table.take(arrow(np.lexsort((world, rank))))

    @staticmethod
    def _lateness_from_rows(parts: list[Path]) -> pa.Table:
        strings = ("run_id", "check", "collective", "op", "dtype", "node", "metric", "status")
        rows = read_parquet(parts, RESULTS_SCHEMA, columns=LATENESS_READ_COLS, dictionary=strings)
        return rank_lateness(rows.unify_dictionaries().combine_chunks())

    def nodes(self, run_ids: list[str] | None = None) -> pa.Table:
        base = self.root / "nodes"
        if run_ids is None:
            files = sorted(base.glob("*.parquet"))
        else:
            files = [base / f"{_check_name('run', r)}.parquet" for r in run_ids]
            files = [f for f in files if f.exists()]
        return self._read(files, NODES_SCHEMA)

    def write_schema_note(self) -> None:
        """A VERSION file so a reader without fleetval knows which schema it is looking at."""
        note = self.root / "SCHEMA_VERSION"
        if not note.exists():
            self.root.mkdir(parents=True, exist_ok=True)
            note.write_text(f"{SCHEMA_VERSION}\n")
