"""The one store builder: synthetic runs in, a store out.

A `SyntheticRun` is what a recipe makes of a run: its `Run`, its results parts (rows,
or a table built column-wise where Row objects would dominate a bench) and its nodes.
`build_store` writes runs in one of two layouts:

- `Layout.FLEETVAL`: through `Store`, the product's one writer (results with their
  summaries and lateness, nodes, the run record and the index), as a fleetval run leaves them;
- `Layout.FOREIGN`: straight with pyarrow in the documented layout (docs/schema.md), as
  another tool, an older fleetval or a store whose `index/` was deleted leaves it (see
  `FOREIGN_RUNS`).

The recipes (`bandwidth`, `signoff`, `rollouts`, `sweeps`, `foreign`) each build
`SyntheticRun`s and call `build_store`; none writes a file itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from fleetval.store.dataset import Store
from fleetval.store.records import Run, StoredRow
from fleetval.store.schema import Row


class Layout(StrEnum):
    FLEETVAL = "fleetval"  # through `Store`
    FOREIGN = "foreign"  # pyarrow only: no index, no summaries, version-1 runs


@dataclass(frozen=True)
class SyntheticRun:
    """One run to write: `results` maps a part's name to its rows or its table (in the
    layout's results schema); `nodes` None writes no nodes file."""

    record: Run
    results: Mapping[str, Sequence[Row] | pa.Table] = field(default_factory=dict)
    nodes: list[StoredRow] | None = None


def build_store(
    target: Store | Path, runs: Iterable[SyntheticRun], *, layout: Layout = Layout.FLEETVAL
) -> list[str]:
    """Write `runs` into the store at `target` in `layout`; returns their ids, in order."""
    if layout is Layout.FOREIGN:
        runs = list(runs)
        _write_foreign(target.root if isinstance(target, Store) else target, runs)
        return [r.record.run_id for r in runs]
    store = target if isinstance(target, Store) else Store(target)
    ids = []
    for run in runs:  # one at a time: a recipe may make each run as it goes
        _write_fleetval(store, run)
        ids.append(run.record.run_id)
    return ids


def _write_fleetval(store: Store, run: SyntheticRun) -> None:
    run_id = run.record.run_id
    for part, rows in run.results.items():
        if isinstance(rows, pa.Table):
            store.write_results_table(run_id, part, rows)
        else:
            store.write_results(run_id, part, list(rows))
    if run.nodes is not None:
        store.write_nodes(run_id, run.nodes)
    store.write_run(run.record)


# docs/schema.md, as another tool reads it: the columns it names, in its types.
FOREIGN_RUNS = pa.schema(
    [
        ("run_id", pa.string()),
        ("suite", pa.string()),
        ("status", pa.string()),
        ("started_at", pa.timestamp("ms", tz="UTC")),
        ("finished_at", pa.timestamp("ms", tz="UTC")),
        ("labels", pa.map_(pa.string(), pa.string())),
        ("submitter", pa.string()),
        ("backend", pa.string()),
        ("faults", pa.string()),
        ("suite_json", pa.string()),
        ("summary", pa.string()),
        ("message", pa.string()),
    ]
)
FOREIGN_NODES = pa.schema(
    [
        ("run_id", pa.string()),
        ("node", pa.string()),
        ("hostname", pa.string()),
        ("gpu_model", pa.string()),
        ("gpu_count", pa.int32()),
        ("driver_version", pa.string()),
        ("rocm_version", pa.string()),
        ("rccl_version", pa.string()),
    ]
)
FOREIGN_RESULTS = pa.schema(
    [
        ("run_id", pa.string()),
        ("job", pa.int32()),
        ("step", pa.string()),
        ("check", pa.string()),
        ("collective", pa.string()),
        ("op", pa.string()),
        ("dtype", pa.string()),
        ("size_bytes", pa.int64()),
        ("world_size", pa.int32()),
        ("rank", pa.int32()),
        ("local_rank", pa.int32()),
        ("node", pa.string()),
        ("device", pa.string()),
        ("backend", pa.string()),
        ("iters", pa.int32()),
        ("time_us_median", pa.float64()),
        ("algbw_gbps", pa.float64()),
        ("busbw_gbps", pa.float64()),
        ("wrong", pa.int64()),
        ("status", pa.string()),
        ("message", pa.string()),
        ("samples_us", pa.list_(pa.float64())),
        ("details", pa.string()),
    ]
)
# How this other writer writes runs and nodes: uncompressed, no statistics (a small file per
# run); results parts with pyarrow's defaults (snappy).
FAST = {"compression": "none", "write_statistics": False}


def _write_foreign(root: Path, runs: list[SyntheticRun]) -> None:
    """Every run's runs/ file, its nodes/ file where it has nodes, then its results parts
    (`FOREIGN_RESULTS` tables): no fleetval writer, no `index/`, no summaries or lateness,
    no fleetval Arrow metadata, timestamps in milliseconds, no `runs.metrics` column."""
    for d in ("runs", "nodes", "results"):
        (root / d).mkdir(parents=True, exist_ok=True)
    (root / "SCHEMA_VERSION").write_text("1\n")
    # NOTE: each table made once and sliced per file: building 5,000 tiny tables costs more
    # than writing them
    records = pa.Table.from_pylist(
        [_foreign_record(r.record) for r in runs], schema=FOREIGN_RUNS
    )
    nodes = pa.Table.from_pylist(
        [{**n, "run_id": r.record.run_id} for r in runs for n in r.nodes or ()],
        schema=FOREIGN_NODES,
    )
    at = 0
    for i, run in enumerate(runs):
        run_id = run.record.run_id
        pq.write_table(records.slice(i, 1), root / "runs" / f"{run_id}.parquet", **FAST)
        if run.nodes is not None:
            count = len(run.nodes)
            pq.write_table(nodes.slice(at, count), root / "nodes" / f"{run_id}.parquet", **FAST)
            at += count
    for run in runs:
        if run.results:
            (root / "results" / run.record.run_id).mkdir()
        for part, table in run.results.items():
            assert isinstance(table, pa.Table), "a foreign store's parts are tables"
            pq.write_table(table, root / "results" / run.record.run_id / f"{part}.parquet")


def _foreign_record(record: Run) -> StoredRow:
    rec = record.to_record()
    return {name: rec[name] for name in FOREIGN_RUNS.names}
