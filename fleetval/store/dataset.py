"""The Parquet store: runs/, nodes/ and results/ under one data directory.

Layout (any Arrow reader can glob it; see docs/schema.md):

    runs/<run_id>.parquet               one row, written when the run ends
    nodes/<run_id>.parquet              one row per node
    index/{runs,nodes}/<run_id>.json    JSON copies of runs/ and nodes/ (fleetval.store.catalog)
    results/<run_id>/<part>.parquet     one file per finished step
    summaries/<run_id>/<part>.parquet   the same step reduced per identity and node
    lateness/<run_id>/<part>.parquet    the same step's lateness per rank
    gpus/<run_id>/<part>.parquet        the GPU hardware the step read (health), one row a GPU

Every file is written once, atomically (temp file + rename), and never rewritten, so a
crash leaves no torn file and results measured before it stay readable. A run that has
results but no runs/ record was cut off; it is listed as `incomplete`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from fleetval.arrays import arrow, np_col

# NOTE: what needs no pyarrow lives in fleetval.store.catalog (runs and nodes are listed from its
# JSON index); the names the store's users know are re-exported here
from fleetval.store.catalog import Catalog, atomic_write
from fleetval.store.catalog import StoreError as StoreError
from fleetval.store.catalog import check_name as _check_name
from fleetval.store.catalog import default_data_dir as default_data_dir
from fleetval.store.catalog import new_run_id as new_run_id
from fleetval.store.parquet import parquet_options, read_parquet, table_rows, write_bounded
from fleetval.store.records import Run, StoredRow
from fleetval.store.schema import (
    GPUS_SCHEMA,
    LATENESS_SCHEMA,
    NODES_SCHEMA,
    RESULTS_SCHEMA,
    RUNS_SCHEMA,
    SCHEMA_VERSION,
    SUMMARIES_SCHEMA,
    Row,
    gpus_table,
    rows_to_table,
)
from fleetval.store.summaries import LATENESS_READ_COLS, rank_lateness, summarize

# Per-iteration samples in one row group of a results file (2 MiB of doubles): a read of
# one row's samples decodes at most this many, however many rows and iterations the step had.
GROUP_SAMPLES = 1 << 18


def _write_table(table: pa.Table, path: Path) -> Path:
    options = parquet_options(table.schema)
    return atomic_write(path, lambda f: pq.write_table(table, f, **options))


def _write_results(table: pa.Table, path: Path) -> Path:
    options = parquet_options(table.schema)
    return atomic_write(
        path,
        lambda f: write_bounded(
            table, f, list_column="samples_us", max_values=GROUP_SAMPLES, **options
        ),
    )


class Store(Catalog):
    """One data directory: the Parquet tables, and (Catalog) its runs and nodes listed from
    the JSON index. Cheap to construct; every read scans the files on disk."""

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
        _write_results(table, path)
        _write_table(summarize(table), self.root / "summaries" / run_id / f"{part}.parquet")
        _write_table(rank_lateness(table), self.root / "lateness" / run_id / f"{part}.parquet")
        if (gpus := gpus_table(table)).num_rows:
            _write_table(gpus, self.root / "gpus" / run_id / f"{part}.parquet")
        return path

    def write_nodes(self, run_id: str, nodes: list[StoredRow]) -> Path:
        recs = [{**n, "run_id": run_id} for n in nodes]
        table = pa.Table.from_pylist(recs, schema=NODES_SCHEMA)
        return self._write_indexed("nodes", run_id, table)

    def write_artifact(self, run_id: str, name: str, data: bytes) -> Path:
        """A run's raw evidence (e.g. an NCCL Flight Recorder dump) under artifacts/<run_id>/."""
        path = self.root / "artifacts" / _check_name("run", run_id) / _check_name("artifact", name)
        return atomic_write(path, lambda f: f.write(data))

    def write_run(self, record: Run) -> Path:
        table = pa.Table.from_pylist([record.to_record()], schema=RUNS_SCHEMA)
        return self._write_indexed("runs", record.run_id, table)

    def _write_indexed(self, name: str, run_id: str, table: pa.Table) -> Path:
        """A one-file-per-run table's Parquet file, then its index entry: the rows as they
        read back from that file (a crash between the two leaves the file unindexed, and
        its first reader indexes it)."""
        path = _write_table(table, self.root / name / f"{_check_name('run', run_id)}.parquet")
        self.write_index(name, run_id, table_rows(table))
        return path

    # -- reading -----------------------------------------------------------------------

    def _read(self, files: list[Path], schema: pa.Schema) -> pa.Table:
        return read_parquet(files, schema)

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

    def job_results(self, run_id: str, job: int) -> list[StoredRow]:
        """The result rows of one job of a run (its parts are named job<N>-<step>)."""
        folder = self.root / "results" / _check_name("run", run_id)
        files = sorted(folder.glob(f"job{job}-*.parquet"))
        return read_parquet(files, RESULTS_SCHEMA).to_pylist() if files else []

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

    def gpus(self, run_ids: list[str] | None = None) -> pa.Table:
        """GPU hardware readings (GPUS_SCHEMA) of the given runs (all runs when None)."""
        base = self.root / "gpus"
        dirs = [base / _check_name("run", r) for r in run_ids] if run_ids is not None else [base]
        return read_parquet(sorted(f for d in dirs for f in d.rglob("*.parquet")), GPUS_SCHEMA)

    def nodes(self, run_ids: list[str] | None = None) -> pa.Table:
        return self._read(self.node_files(run_ids), NODES_SCHEMA)

    def write_schema_note(self) -> None:
        """A VERSION file so a reader without fleetval knows which schema it is looking at."""
        note = self.root / "SCHEMA_VERSION"
        if not note.exists():
            atomic_write(note, lambda f: f.write(f"{SCHEMA_VERSION}\n".encode()), replace=True)
