"""The run catalog: a data directory's runs and nodes, listed without pyarrow.

The store's two one-file-per-run tables get a JSON copy when written (`Store.write_run`,
`Store.write_nodes`):

    index/runs/<run_id>.json     the run's row, as its Parquet file reads back
    index/nodes/<run_id>.json    the run's node rows

Reading one run and filtering on the environment read these, so `fleetval show` and
`fleetval baseline ...` start without importing pyarrow (~0.2 s). The Parquet files stay
the record that any Arrow reader uses (docs/schema.md): a run is listed only when its
Parquet file exists. A file without an index entry (a store written before the index, by
another tool, or a crash between the two writes) is read from Parquet and its entry written
then, as Python writes a .pyc: the next reader finds it. Index writes are best effort: a
read-only store is read from Parquet, and a run's Parquet file is stored either way.

One run is found by its file names, never by a scan (`Catalog.run`). Lists and pages of
runs come from `index/runs.sqlite` (`fleetval.store.runindex`): one row per run, synced with
the files whenever they change, so a page is one indexed query whatever the history's length.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import sqlite3
import tempfile
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from fleetval.store.base import ENV_COLUMNS as ENV_COLUMNS
from fleetval.store.base import CorruptFile as CorruptFile
from fleetval.store.base import RunNotFound as RunNotFound
from fleetval.store.base import StoreError as StoreError
from fleetval.store.base import make_private_dir
from fleetval.store.records import (
    INDEX,
    SAFE_NAME,
    Run,
    RunFilter,
    StoredRow,
    incomplete_run,
    index_json,
    rows_from_json,
)

if TYPE_CHECKING:
    from fleetval.store.runindex import IndexKeeper, RunIndex

log = logging.getLogger(__name__)

DEFAULT_DATA = "fleetval-data"
# The timestamp columns of each indexed table: ISO 8601 text in the JSON.


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


def atomic_write(
    path: Path,
    write: Callable[[BinaryIO], object],
    *,
    replace: bool = False,
    durable: bool = True,
) -> Path:
    """Temp file in the same directory, fsync, rename: readers see the old file or the new
    one, never a torn one. Without `replace`, an existing file is refused (written once).
    Without `durable`, no fsync (a cache: a crash may leave it empty, which its reader
    detects and rebuilds). The file is 0600 (mkstemp's mode, kept by the rename), its
    folders made 0700."""
    if path.exists() and not replace:
        raise StoreError(f"{path} exists already; stored files are never rewritten")
    make_private_dir(path.parent)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _rows_from_parquet(table: str, files: list[Path]) -> list[StoredRow]:
    """Rows of files the index lacks."""
    # NOTE: imported here: pyarrow costs ~0.2 s, paid only for files without an index entry
    from fleetval.store.parquet import read_parquet, table_rows
    from fleetval.store.schema import NODES_SCHEMA, RUNS_SCHEMA

    schema = {"runs": RUNS_SCHEMA, "nodes": NODES_SCHEMA}[table]
    return table_rows(read_parquet(files, schema))


class Catalog:
    """The runs and nodes of one data directory: one run from its JSON index entry, lists
    and pages of runs from the run index (`fleetval.store.runindex`). Cheap to construct; the
    run index is opened (and synced with the files) on first use. `Store` adds the Parquet
    tables."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)
        self._index: RunIndex | None = None
        self._keeper: IndexKeeper | None = None
        self._index_lock = threading.Lock()

    def index_path(self, table: str, run_id: str) -> Path:
        """Where the index keeps `table`/<run_id>.parquet (run_id: checked, or a file's stem)."""
        return self.root / INDEX / table / f"{run_id}.json"

    def runs(self) -> list[Run]:
        """All runs, oldest first; runs cut off before their record was written are
        `incomplete`. CorruptFile names a run record that cannot be read."""
        index = self.run_index()
        if index.unreadable:
            raise next(iter(index.unreadable.values()))
        return index.all()

    def run(self, run_id: str) -> Run:
        """One run, found by its file names (no scan): RunNotFound when there is none,
        CorruptFile when its record cannot be read from the index or from Parquet."""
        if not SAFE_NAME.match(run_id):
            raise RunNotFound(run_id, self.root)
        record = self.root / "runs" / f"{run_id}.parquet"
        if record.exists():
            return Run.from_record(self._rows("runs", [record])[0])
        results = self.root / "results" / run_id
        if results.is_dir():
            return incomplete_run(results)
        raise RunNotFound(run_id, self.root)

    def find_runs(self, run_ids: list[str]) -> dict[str, Run]:
        """The runs among `run_ids` that exist, by id: one query of the run index; an id the
        index lacks is looked up by its file names (never a scan). Absent ids are left out;
        a corrupt record raises CorruptFile."""
        found = self.run_index().get_many(list(dict.fromkeys(run_ids)))
        for run_id in run_ids:
            if run_id not in found:
                with contextlib.suppress(RunNotFound):
                    found[run_id] = self.run(run_id)
        return found

    def latest_run(self) -> Run:
        newest = self.run_index().page(RunFilter(), before=None, limit=1)
        if not newest:
            raise StoreError(f"no runs in {self.root}")
        return newest[0]

    def node_rows(self, run_ids: list[str] | None = None) -> list[StoredRow]:
        """The nodes table's rows of the given runs (all when None): `Store.nodes(...).to_pylist()`."""
        return self._rows("nodes", self.node_files(run_ids))

    def node_files(self, run_ids: list[str] | None = None) -> list[Path]:
        """The nodes/ Parquet files of the given runs that exist (all when None)."""
        base = self.root / "nodes"
        if run_ids is None:
            return sorted(base.glob("*.parquet"))
        files = [base / f"{check_name('run', r)}.parquet" for r in run_ids]
        return [f for f in files if f.exists()]

    def write_index(self, table: str, run_id: str, rows: list[StoredRow]) -> None:
        """The index entry of `table`/<run_id>.parquet, just written, whose rows are `rows`;
        for a run, also its row in the run index (this Catalog's, else the one on disk, so
        that other processes' readers see it now). Best effort: a failed write leaves a
        difference that the next read (entry) or sync (run index) repairs."""
        self._write_entry(table, run_id, rows)
        if table == "runs" and rows:
            self._index_run(rows[0])

    def _index_run(self, row: StoredRow) -> None:
        from fleetval.store.runindex import RUN_INDEX, RunIndex  # NOTE: as in run_index

        index = self._index or (self._keeper and self._keeper.index)
        try:
            if index is not None:
                index.put(row)
                return
            on_disk = RunIndex(self.root / INDEX / RUN_INDEX)  # NOTE: a row, no sync
            try:
                on_disk.put(row)
            finally:
                on_disk.close()
        except (OSError, sqlite3.Error) as err:
            log.warning("run %s not in the run index (%s): synced later", row["run_id"], err)
            if index is not None:
                index.invalidate()

    def run_index(self) -> RunIndex:
        """The run index, synced with the files (again when they changed). Opened once per
        Catalog, or kept by `keep_index`: then IndexBuilding until it is built."""
        # NOTE: imported here: fleetval.store.runindex builds on this module
        from fleetval.store.runindex import RunIndex

        if self._keeper is not None:
            return self._keeper.get()
        with self._index_lock:
            if self._index is None:
                self._index = RunIndex.open(self.root)
            else:
                self._index.refresh(self.root)
            return self._index

    def keep_index(self, period_s: float = 1.0, wait_s: float = 0.0) -> None:
        """Build the run index in a thread and re-sync it every `period_s`, so that readers
        never wait for a scan (the service: it answers while a large store is indexed);
        returns once it is built or after `wait_s`, whichever comes first."""
        from fleetval.store.runindex import IndexKeeper  # NOTE: as in run_index

        if self._keeper is None:
            self._keeper = IndexKeeper(self.root, period_s)
        self._keeper.built.wait(wait_s)

    def stop_index(self) -> None:
        if self._keeper is not None:
            self._keeper.stop()

    def index_ready(self) -> bool:
        """Whether the run index answers without building it first."""
        return (self._keeper.index if self._keeper else self._index) is not None

    def _rows(self, table: str, files: list[Path]) -> list[StoredRow]:
        """The rows of a table's files (<run_id>.parquet), in file order: from the index
        entries, else from Parquet (writing the entry on the way, as Python writes a .pyc).
        A corrupt entry is read from Parquet and rewritten; a corrupt Parquet file raises
        CorruptFile. Never touches the run index, which is built from these files."""
        rows = []
        for f in files:
            try:
                rows += rows_from_json(table, self.index_path(table, f.stem).read_text())
            except (OSError, ValueError, KeyError, TypeError):  # absent, unreadable or torn
                file_rows = _rows_from_parquet(table, [f])  # CorruptFile when unreadable
                self._write_entry(table, f.stem, file_rows)
                rows += file_rows
        return rows

    def _write_entry(self, table: str, run_id: str, rows: list[StoredRow]) -> None:
        text = index_json(rows)
        with contextlib.suppress(OSError):  # NOTE: best effort: readers fall back to Parquet
            atomic_write(
                self.index_path(table, run_id), lambda f: f.write(text), replace=True, durable=False
            )
