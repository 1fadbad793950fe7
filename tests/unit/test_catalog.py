"""The run catalog's JSON index reads back exactly what the Parquet files hold."""

from __future__ import annotations

import os
import shutil
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa

from fleetval.metrics import BUSBW, LATENCY
from fleetval.store.catalog import ENV_COLUMNS, Catalog
from fleetval.store.dataset import Store
from fleetval.store.records import TIMESTAMPS, Run
from fleetval.store.schema import NODES_SCHEMA, RUNS_SCHEMA, Row


def _store(root: Path) -> Store:
    """Two finished runs (one with every record field set) and one cut off before its record."""
    store = Store(root)
    start = datetime(2026, 3, 1, 12, 30, 15, 123456, tzinfo=UTC)
    full = Run(
        run_id="20260301-123015-aaaaaa", suite="smoke", status="fail", started_at=start,
        finished_at=start + timedelta(minutes=3), labels={"rocm": "6.1", "nightly": "true"},
        submitter="ci", backend="nccl", faults=[{"kind": "delay", "rank": 1, "ms": 20}],
        suite_json='{"name": "smoke"}', summary={"steps": [{"step": "bw", "status": "fail"}]},
        message="1 step failed", metrics=[BUSBW, LATENCY],
    )  # fmt: skip
    bare = Run(
        run_id="20260302-000000-bbbbbb", suite="smoke", status="pass", started_at=start
    )
    for record in (full, bare):
        store.write_results(record.run_id, "bw", [Row(run_id=record.run_id)])
        store.write_nodes(
            record.run_id,
            [
                {"node": "n0", "gpu_model": "MI300X", "gpu_count": 8, "gpu_ids": ["a", "b"]},
                {"node": "n1", "rocm_version": "6.1.3", "extra": '{"x": 1}'},
            ],
        )
        store.write_run(record)
    store.write_results("20260303-000000-cccccc", "bw", [Row(run_id="20260303-000000-cccccc")])
    return store


def _from_parquet(store: Store) -> tuple[list[Run], list[dict]]:
    """What the store reads with no index at all (a store written before it)."""
    unindexed = Store(store.root.parent / "copy")
    shutil.copytree(store.root, unindexed.root, ignore=shutil.ignore_patterns("index"))
    return unindexed.runs(), unindexed.node_rows()


def test_the_index_reads_back_what_parquet_holds(tmp_path: Path) -> None:
    store = _store(tmp_path / "data")
    runs, nodes = store.runs(), store.node_rows()
    assert (runs, nodes) == _from_parquet(store)
    assert runs[0].started_at == datetime(2026, 3, 1, 12, 30, 15, 123456, tzinfo=UTC)
    assert runs[0].labels == {"rocm": "6.1", "nightly": "true"}
    assert runs[0].metrics == [BUSBW, LATENCY]
    assert [r.status for r in runs] == ["fail", "pass", "incomplete"]
    assert nodes == store.nodes().to_pylist()
    ids = ["20260302-000000-bbbbbb", "20260301-123015-aaaaaa"]
    assert store.node_rows(ids) == store.nodes(ids).to_pylist()  # in the order asked


def test_a_store_without_index_is_read_from_parquet_and_indexed(tmp_path: Path) -> None:
    store = _store(tmp_path / "data")
    expected = store.runs()
    shutil.rmtree(store.root / "index")
    assert Catalog(store.root).runs() == expected  # from Parquet, into the run index
    assert (store.root / "index" / "runs.sqlite").exists()
    assert Catalog(store.root).run(expected[1].run_id) == expected[1]
    entries = sorted(p.name for p in (store.root / "index" / "runs").iterdir())
    assert entries == ["20260302-000000-bbbbbb.json"]  # written by the read of one run
    assert Catalog(store.root).runs() == expected  # now from the run index


def test_a_store_whose_index_cannot_be_written_is_read_from_parquet(tmp_path: Path) -> None:
    store = _store(tmp_path / "data")
    expected = store.runs(), store.node_rows()
    shutil.rmtree(store.root / "index")
    (store.root / "index").write_text("not a folder")  # neither entries nor SQLite can be written
    fresh = Store(store.root)
    assert (fresh.runs(), fresh.node_rows()) == expected
    assert fresh.run_index().path == ":memory:"
    assert fresh.find_runs(["20260302-000000-bbbbbb"]) == {"20260302-000000-bbbbbb": expected[0][1]}


def test_a_run_is_listed_only_while_its_parquet_file_exists(tmp_path: Path) -> None:
    store = _store(tmp_path / "data")
    (store.root / "runs" / "20260302-000000-bbbbbb.parquet").unlink()
    (store.root / "nodes" / "20260302-000000-bbbbbb.parquet").unlink()
    statuses = {r.run_id: r.status for r in store.runs()}
    assert statuses["20260302-000000-bbbbbb"] == "incomplete"  # its results are kept; no record
    assert {n["run_id"] for n in store.node_rows()} == {"20260301-123015-aaaaaa"}


def test_catalog_constants_match_the_schemas() -> None:
    for name, schema in (("runs", RUNS_SCHEMA), ("nodes", NODES_SCHEMA)):
        stamps = tuple(f.name for f in schema if pa.types.is_timestamp(f.type))
        assert TIMESTAMPS[name] == stamps
    assert set(ENV_COLUMNS) <= set(NODES_SCHEMA.names)


def test_find_runs_is_one_index_query(tmp_path: Path) -> None:
    store = _store(tmp_path)
    ids = ["20260301-123015-aaaaaa", "20260302-000000-bbbbbb", "20260303-000000-cccccc"]
    settled = time.time() - 10  # NOTE: a folder changed this instant is re-scanned (racy)
    for folder in ("runs", "results"):
        os.utime(tmp_path / folder, (settled, settled))
    index = store.run_index()
    queries: list[str] = []
    index._conn.set_trace_callback(queries.append)
    found = store.find_runs([*ids, "20990101-000000-nope00", ids[0]])
    index._conn.set_trace_callback(None)
    assert sorted(found) == ids  # the unknown id left out, the repeated one found once
    assert found[ids[0]] == store.run(ids[0])
    assert found[ids[2]].status == "incomplete"  # no record: indexed from its results
    assert len([q for q in queries if q.startswith("SELECT")]) == 1


def test_runs_stored_by_earlier_versions_are_written_back_byte_for_byte() -> None:
    """The store in tests/data/store was written by an earlier fleetval: each run's catalog
    entry and Parquet row read back into one `Run`, and that run written again (through its
    Arrow row, as `Store.write_run` does) is the same entry, byte for byte."""
    from fleetval.store.parquet import read_parquet, table_rows
    from fleetval.store.records import index_json, rows_from_json

    data = Path(__file__).resolve().parent.parent / "data" / "store"
    entries = sorted((data / "index" / "runs").glob("*.json"))
    assert entries
    for entry in entries:
        text = entry.read_text()
        run = Run.from_record(rows_from_json("runs", text)[0])
        parquet = data / "runs" / f"{entry.stem}.parquet"
        if parquet.exists():
            assert Run.from_record(table_rows(read_parquet([parquet], RUNS_SCHEMA))[0]) == run
        written = pa.Table.from_pylist([run.to_record()], schema=RUNS_SCHEMA)
        assert index_json(table_rows(written)).decode() == text, entry.name

