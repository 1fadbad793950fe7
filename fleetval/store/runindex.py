"""The run index: `index/runs.sqlite`, one row per run the store's files hold, so a list of
runs, a page of them or a run by id is one indexed query whatever the history's length.

It is a cache of the directory, never the record (docs/schema.md). Opened, it is synced
with runs/ and results/: runs added, runs whose files are gone removed, cut-off runs that
got their record re-read. Rows are read straight from each run's JSON entry or Parquet file
(`read_run_rows`), never through the catalog that answers from the index, so building it
cannot come back to itself. It is re-synced when those directories change. A write that
fails (SQLite busy, disk full) leaves a difference that the next sync finds and repairs; an
index that cannot be written at all (a read-only store) is kept in memory, built from the
files. Temp files that a killed writer left behind are removed when the index is opened.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fleetval.store.base import CorruptFile, create_private_file
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
from fleetval.vocab import RunStatus

log = logging.getLogger(__name__)

RUN_INDEX = "runs.sqlite"
BUSY_TIMEOUT_MS = 5000
BATCH = 1000  # runs read and written per transaction: progress kept, the write lock held briefly
# NOTE: a directory's mtime moves in coarse clock ticks (a few ms), so one this young may
# change again without moving: it is not trusted until it is older (git's "racy" entries)
RACY_NS = 100_000_000
# NOTE: a write is a temp file renamed within seconds; one this old has no live writer
TMP_AGE_S = 3600.0
REQUIRED = ("run_id", "suite", "status", "started_at")  # what a listing cannot do without
TABLES = ("runs", "results")  # the directories whose entries are the store's runs
SWEPT = ("runs", "nodes", "baselines", f"{INDEX}/runs", f"{INDEX}/nodes")
PER_RUN = ("results", "summaries", "lateness", "artifacts")
SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,                 -- sortable by start: keyset pages order by it
    suite TEXT NOT NULL,
    status TEXT NOT NULL,
    labels TEXT NOT NULL,                    -- JSON object, for label filters
    record TEXT NOT NULL,                    -- the run's index entry (one row, JSON)
    listing TEXT                             -- Run.listing() as JSON, served as it is
) WITHOUT ROWID;
"""


class IndexBuilding(RuntimeError):
    """The run index is being built from the files by another thread (the service answers 503)."""

    def __init__(self, root: Path) -> None:
        super().__init__(f"the run index of {root} is being built from its files; retry shortly")


class RunIndex:
    """One row per run: a run by id and a page of runs (newest first, keyset cursor) in one
    indexed query each. Each row also keeps the run's listing as JSON text, so a reader that
    serves runs (the service) sends those bytes as they are.

    `open` syncs it with a store's files; `refresh` re-syncs when they changed. `unreadable`
    names the runs whose record could not be read (left out, retried at the next sync)."""

    def __init__(self, path: Path | str) -> None:
        """The index at `path` (":memory:": one kept in this process only)."""
        if path != ":memory:":
            create_private_file(Path(path))  # with its WAL and SHM: 0600
        self.path = path
        self.unreadable: dict[str, CorruptFile] = {}
        self._generation: tuple[int, ...] | None = None
        self._connections = 1  # a switch to memory starts a connection's counters anew
        self._lock = threading.Lock()  # the connection
        self._syncing = threading.Lock()  # one sync at a time
        self._conn = _connect(path)
        self._add_listings()

    @classmethod
    def open(cls, root: Path) -> RunIndex:
        """The store's index synced with its files, and the store's stale temp files removed:
        on disk, else (index/ cannot be written: read-only, full) in memory for this process."""
        sweep_tmp(root)
        try:
            index = cls(root / INDEX / RUN_INDEX)
            index.sync(root)
        except (OSError, sqlite3.Error) as err:
            log.warning("run index of %s not written (%s): kept in memory", root, err)
            index = cls(":memory:")
            index.sync(root)
        return index

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    # -- keeping it synced with the files ------------------------------------------------

    def refresh(self, root: Path) -> None:
        """Sync again when runs/ or results/ changed since the last sync (two stats else), or
        a write to the index failed. A sync already under way in another thread is not waited for."""
        if self._generation is None or self._generation != generation(root):
            self.sync(root, wait=False)

    def invalidate(self) -> None:
        """A write to the index failed: the next `refresh` syncs with the files."""
        self._generation = None

    def sync(self, root: Path, *, wait: bool = True) -> None:
        """Add the runs the files hold that the index lacks (or holds as cut off while their
        record now exists, or the reverse), remove those whose files are gone."""
        if not self._syncing.acquire(blocking=wait):
            return
        try:
            self._sync(root)
        except (OSError, sqlite3.Error) as err:
            if self.path == ":memory:":
                raise
            # NOTE: a disk index that cannot take the rows (full disk, EFBIG, I/O error): this
            # process goes on from memory, built from the files, rather than answer its
            # readers with the error or without the runs; the next open repairs the file.
            log.warning("run index of %s not written (%s): kept in memory", root, err)
            self._to_memory()
            self._sync(root)
        finally:
            self._syncing.release()

    def _to_memory(self) -> None:
        with self._lock:
            with contextlib.suppress(sqlite3.Error):
                self._conn.close()
            self.path, self._conn = ":memory:", _connect(":memory:")
            self._connections += 1

    def _sync(self, root: Path) -> None:
        seen = generation(root)  # NOTE: before the scan: a change during it moves it again
        files = scan(root)
        have = self.states()
        self.remove([r for r in have if r not in files and not _exists(root, r)])
        todo = sorted(r for r, record in files.items() if have.get(r) != record)
        for i in range(0, len(todo), BATCH):
            self.put_rows(self._read(root, todo[i : i + BATCH], files))
        self._generation = seen

    def _read(self, root: Path, run_ids: list[str], files: dict[str, bool]) -> list[StoredRow]:
        """The runs' rows: records from the files, cut-off runs made from their results."""
        records = [r for r in run_ids if files[r]]
        rows, unreadable = read_run_rows(root, records)
        self.unreadable = {k: v for k, v in self.unreadable.items() if k not in records}
        self.unreadable |= unreadable
        for run_id in run_ids:
            if not files[run_id]:
                with contextlib.suppress(FileNotFoundError):  # removed since the scan
                    rows.append(incomplete_run(root / "results" / run_id).to_record())
        return rows

    # -- writing -----------------------------------------------------------------------

    def put(self, row: StoredRow) -> None:
        """A run's row (as its Parquet file reads back), replacing any older one."""
        self.put_rows([row])

    def put_rows(self, rows: list[StoredRow]) -> None:
        """Runs' rows (as their Parquet files read back) in one transaction, replacing older ones."""
        values = [Run.from_record(row).index_row(index_json([row]).decode()) for row in rows]
        with self._lock, self._transaction():
            self._conn.executemany(
                "INSERT OR REPLACE INTO runs (run_id, suite, status, labels, record, listing)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                values,
            )

    def remove(self, run_ids: list[str]) -> None:
        if run_ids:
            with self._lock, self._transaction():
                self._conn.executemany("DELETE FROM runs WHERE run_id = ?", [(r,) for r in run_ids])

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        """One transaction (isolation_level=None autocommits each statement otherwise)."""
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")

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

    # -- reading -----------------------------------------------------------------------

    def states(self) -> dict[str, bool]:
        """Every indexed run: whether it has its record (False: cut off, from its results)."""
        with self._lock:
            rows = self._conn.execute("SELECT run_id, status FROM runs").fetchall()
        return {r: status != RunStatus.INCOMPLETE.value for r, status in rows}

    def all(self) -> list[Run]:
        """Every run, oldest first."""
        with self._lock:
            rows = self._conn.execute("SELECT record FROM runs ORDER BY run_id").fetchall()
        return [_record(r[0]) for r in rows]

    def get(self, run_id: str) -> Run | None:
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

    def get_many(self, run_ids: list[str]) -> dict[str, Run]:
        """The indexed runs among `run_ids`, in one query."""
        found: dict[str, Run] = {}
        for i in range(0, len(run_ids), 500):  # NOTE: under SQLite's bound-parameter limit
            chunk = run_ids[i : i + 500]
            with self._lock:
                rows = self._conn.execute(
                    f"SELECT run_id, record FROM runs WHERE run_id IN ({','.join('?' * len(chunk))})",
                    chunk,
                ).fetchall()
            found.update((r[0], _record(r[1])) for r in rows)
        return found

    def page(self, where: RunFilter, *, before: str | None, limit: int) -> list[Run]:
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

    def version(self) -> tuple[int, int, int]:
        """Moves whenever a read may answer differently: a commit by another connection to
        the file (another process, another RunIndex: SQLite's `data_version`), a row this
        connection changed (a sync, a run written here), a switch to memory. Cheap (no
        table read): readers key what they keep by it."""
        with self._lock:
            moved = self._conn.execute("PRAGMA data_version").fetchone()[0]
            return self._connections, moved, self._conn.total_changes

    def count(self) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0])


class IndexKeeper:
    """A thread that builds a store's run index and re-syncs it every `period_s`, so readers
    (the service's requests) never wait on a scan: until it is built they get IndexBuilding."""

    def __init__(self, root: Path, period_s: float) -> None:
        self.root, self.period_s = root, period_s
        self.index: RunIndex | None = None
        self.built = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fleetval-run-index", daemon=True)
        self._thread.start()

    def get(self) -> RunIndex:
        if self.index is None:
            raise IndexBuilding(self.root)
        return self.index

    def stop(self, timeout_s: float = 30.0) -> None:
        self._stop.set()
        self._thread.join(timeout_s)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                if self.index is None:
                    self.index = RunIndex.open(self.root)
                    self.built.set()
                else:
                    self.index.refresh(self.root)
            except Exception:  # NOTE: kept alive: the next period tries again
                log.exception("run index of %s: sync failed; retrying", self.root)
            self._stop.wait(self.period_s)


def read_run_rows(root: Path, run_ids: list[str]) -> tuple[list[StoredRow], dict[str, CorruptFile]]:
    """The runs/ rows of runs whose record exists: from each JSON entry, else its Parquet
    file. A record that cannot be read, or is not one row naming its run, suite, status and
    start, is left out, its error returned."""
    rows, parquet = [], []
    for run_id in run_ids:
        try:
            rows += rows_from_json("runs", (root / INDEX / "runs" / f"{run_id}.json").read_text())
        except (OSError, ValueError, KeyError, TypeError):  # absent, unreadable or torn
            parquet.append(root / "runs" / f"{run_id}.parquet")
    read, errors = _read_records(parquet)
    return rows + read, errors


def _read_records(paths: list[Path]) -> tuple[list[StoredRow], dict[str, CorruptFile]]:
    """Run records from Parquet, many at once: files of one Arrow schema are joined and cast
    to RUNS_SCHEMA together (cast file by file, the casts cost more than the reads)."""
    # NOTE: imported here: pyarrow costs ~0.2 s, paid only when files lack an index entry
    import pyarrow as pa
    import pyarrow.parquet as pq

    groups: dict[tuple, list[tuple[Path, pa.Table]]] = {}  # by column names and types
    errors: dict[str, CorruptFile] = {}
    for path in paths:
        try:
            table = pq.ParquetFile(path).read(use_threads=False)  # NOTE: one row: no threads
        except (OSError, pa.ArrowException) as err:
            errors[path.stem] = CorruptFile(path, err)
            continue
        if table.num_rows != 1:
            errors[path.stem] = CorruptFile(path, f"{table.num_rows} rows; a record is one row")
            continue
        key = tuple(zip(table.column_names, map(str, table.schema.types), strict=True))
        groups.setdefault(key, []).append((path, table))
    rows = []
    for members in groups.values():
        try:
            rows += _records(members)
        except (CorruptFile, pa.ArrowException):  # NOTE: file by file, to name the bad ones
            for path, table in members:
                try:
                    rows += _records([(path, table)])
                except pa.ArrowException as err:
                    errors[path.stem] = CorruptFile(path, err)
                except CorruptFile as err:
                    errors[path.stem] = err
    return rows, errors


def _records(members: list[tuple[Path, Any]]) -> list[StoredRow]:
    """One-row tables of one schema, read from their files, as RUNS_SCHEMA rows, each
    checked against its file: CorruptFile unless it names its run and has what a listing needs."""
    import pyarrow as pa

    from fleetval.store.parquet import table_rows
    from fleetval.store.schema import RUNS_SCHEMA

    table = pa.concat_tables([t for _, t in members])
    for col in RUNS_SCHEMA:  # NOTE: columns an older or foreign writer left out are null
        if col.name not in table.column_names:
            table = table.append_column(col, pa.nulls(len(table), col.type))
    rows = table_rows(table.select(RUNS_SCHEMA.names).cast(RUNS_SCHEMA))
    for (path, _), row in zip(members, rows, strict=True):
        if row["run_id"] != path.stem:
            raise CorruptFile(path, f"its row is run {row['run_id']!r}, not {path.stem!r}")
        missing = [c for c in REQUIRED if row[c] is None]
        if missing:
            raise CorruptFile(path, f"no {', '.join(missing)}")
    return rows


def scan(root: Path) -> dict[str, bool]:
    """The runs the files hold: run id -> whether its record (runs/<id>.parquet) exists;
    a results/<id>/ folder without one is a run cut off before it ended."""
    runs: dict[str, bool] = {}
    for entry in _entries(root / "results"):
        if entry.is_dir() and SAFE_NAME.match(entry.name):
            runs[entry.name] = False
    for entry in _entries(root / "runs"):
        stem, dot, ext = entry.name.rpartition(".")
        if dot and ext == "parquet" and SAFE_NAME.match(stem):
            runs[stem] = True
    return runs


def generation(root: Path) -> tuple[int, ...] | None:
    """What changes when a run is added or removed: the mtimes of runs/ and results/;
    None while one is too recent to tell a later change in the same clock tick."""
    stamps = []
    for name in TABLES:
        try:
            stamps.append(os.stat(root / name).st_mtime_ns)
        except FileNotFoundError:
            stamps.append(0)
    return None if time.time_ns() - max(stamps) < RACY_NS else tuple(stamps)


def sweep_tmp(root: Path, age_s: float = TMP_AGE_S) -> list[Path]:
    """Remove the temp files (`.<name>.*.tmp`, `atomic_write`) older than `age_s` that killed
    writers left in the store's tables and index, and in the folders of cut-off runs (a run
    that ended wrote every file). Returns what it removed."""
    cut_off = [r for r, record in scan(root).items() if not record]
    folders = [root / d for d in SWEPT] + [root / t / r for t in PER_RUN for r in cut_off]
    oldest = time.time() - age_s
    removed = []
    for folder in folders:
        for entry in _entries(folder):
            if entry.name.startswith(".") and entry.name.endswith(".tmp") and entry.is_file():
                with contextlib.suppress(FileNotFoundError):  # another sweeper was first
                    if entry.stat().st_mtime < oldest:
                        os.unlink(entry.path)
                        removed.append(Path(entry.path))
    if removed:
        log.info("removed %d temp files left by killed writers under %s", len(removed), root)
    return removed


def _entries(folder: Path) -> list[os.DirEntry]:
    try:
        with os.scandir(folder) as it:
            return list(it)
    except (FileNotFoundError, NotADirectoryError):
        return []


def _exists(root: Path, run_id: str) -> bool:
    """Checked again before a run leaves the index: a writer may have added it since the scan."""
    return (root / "runs" / f"{run_id}.parquet").exists() or (root / "results" / run_id).is_dir()


def _connect(path: Path | str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    with contextlib.suppress(sqlite3.OperationalError):  # another process set it already
        conn.execute("PRAGMA journal_mode=WAL")
    conn.executescript(SCHEMA)
    return conn


def _record(text: str) -> Run:
    return Run.from_record(rows_from_json("runs", text)[0])
