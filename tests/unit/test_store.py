"""The Parquet store: atomic, written once, readable without fleetval."""

from __future__ import annotations

from datetime import UTC, datetime

import duckdb
import pandas as pd
import pytest

from fleetval.store.dataset import Store, StoreError, new_run_id
from fleetval.store.records import Run
from fleetval.store.schema import RESULTS_SCHEMA, Row

RESULT_COLUMNS = [
    "run_id",
    "job",
    "step",
    "check",
    "collective",
    "op",
    "dtype",
    "size_bytes",
    "world_size",
    "rank",
    "node",
    "device",
    "iters",
    "time_us_median",
    "time_us_p99",
    "algbw_gbps",
    "busbw_gbps",
    "wrong",
    "status",
    "message",
]


def record(run_id: str, **over) -> Run:
    return Run(
        run_id=run_id, suite="smoke", status="pass", started_at=datetime.now(UTC), **over
    )


def test_row_fields_match_the_arrow_schema():
    import dataclasses

    assert [f.name for f in dataclasses.fields(Row)] == RESULTS_SCHEMA.names
    assert set(RESULT_COLUMNS) <= set(RESULTS_SCHEMA.names)


def test_round_trip_and_foreign_readers(tmp_path):
    store = Store(tmp_path)
    rid = new_run_id()
    rows = [
        Row(run_id=rid, rank=r, collective="all_reduce", samples_us=(1.0, 2.0, 3.0), busbw_gbps=1.5)
        for r in range(2)
    ]
    store.write_results(rid, "job0-bw", rows)
    store.write_nodes(rid, [{"node": "n0", "gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": 8}])
    store.write_run(
        record(rid, labels={"rocm": "6.1"}, faults=[{"kind": "delay", "rank": 1, "ms": 20}])
    )

    got = store.run(rid)
    assert got.labels == {"rocm": "6.1"} and got.faults[0]["ms"] == 20
    assert store.results([rid]).num_rows == 2

    df = pd.read_parquet(tmp_path / "results")
    assert list(df["samples_us"].iloc[0]) == [1.0, 2.0, 3.0]
    [(n,)] = duckdb.sql(
        f"select count(*) from read_parquet('{tmp_path}/results/*/*.parquet') where busbw_gbps = 1.5"
    ).fetchall()
    assert n == 2
    [(labels,)] = duckdb.sql(
        f"select labels from read_parquet('{tmp_path}/runs/*.parquet')"
    ).fetchall()
    assert labels == {"rocm": "6.1"}
    [(model,)] = duckdb.sql(
        f"select gpu_model from read_parquet('{tmp_path}/nodes/*.parquet')"
    ).fetchall()
    assert model.startswith("NVIDIA H100")


def test_files_are_never_rewritten(tmp_path):
    store = Store(tmp_path)
    rid = new_run_id()
    store.write_results(rid, "job0-a", [Row(run_id=rid)])
    with pytest.raises(StoreError, match="never rewritten"):
        store.write_results(rid, "job0-a", [Row(run_id=rid, wrong=5)])
    assert store.results([rid]).column("wrong").to_pylist() == [0]
    assert not list(tmp_path.rglob("*.tmp"))


def test_cut_off_run_is_listed_incomplete_with_its_results(tmp_path):
    store = Store(tmp_path)
    rid = new_run_id()
    store.write_results(rid, "job0-a", [Row(run_id=rid)])
    (run,) = store.runs()
    assert (run.run_id, run.status) == (rid, "incomplete")
    assert store.results([rid]).num_rows == 1


def test_bad_names_and_unknown_runs(tmp_path):
    store = Store(tmp_path)
    with pytest.raises(StoreError, match="letters, digits"):
        store.write_results("../evil", "p", [])
    with pytest.raises(StoreError, match="no run 'nope'"):
        store.run("nope")
    with pytest.raises(StoreError, match="no runs"):
        store.latest_run()


def test_run_ids_sort_by_time():
    early = new_run_id(datetime(2026, 1, 1, tzinfo=UTC))
    late = new_run_id(datetime(2026, 1, 2, tzinfo=UTC))
    assert early < late and early.startswith("20260101-000000-")
