"""The run index is a cache of the store's files (issue 24): built from them without going
back through the catalog, it follows them when runs are deleted, repairs a write that
failed, and removes the temp files of killed writers. Stores here are written straight
with pyarrow in the documented layout (`fleetval.testing.foreign`), without `index/`."""

from __future__ import annotations

import os
import shutil
import sqlite3
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from fleetval.analysis.baselines import Baselines
from fleetval.analysis.compare import compare_runs
from fleetval.store import runindex
from fleetval.store.catalog import Catalog, CorruptFile
from fleetval.store.dataset import Store
from fleetval.store.records import Run, RunFilter
from fleetval.testing.foreign import write_foreign_store

NEWEST = RunFilter()


def _ids(catalog: Catalog) -> list[str]:
    return [r.run_id for r in catalog.runs()]


def _paged(catalog: Catalog) -> list[str]:
    return [r.run_id for r in catalog.run_index().page(NEWEST, before=None, limit=10_000)]


def test_an_unindexed_store_of_many_runs_opens(tmp_path: Path) -> None:
    """Before: one stack frame per unindexed run (RecursionError beyond ~150 runs)."""
    ids = write_foreign_store(tmp_path, 250, with_results=0)
    catalog = Catalog(tmp_path)
    assert _ids(catalog) == ids
    assert _paged(catalog) == ids[::-1]
    assert catalog.latest_run().run_id == ids[-1]
    assert Catalog(tmp_path).run(ids[7]).labels == {"nightly": "0", "tool": "foreign"}


def test_a_deleted_run_leaves_listings_and_compare_history(tmp_path: Path) -> None:
    ids = write_foreign_store(tmp_path, 16, with_results=12)
    store = Store(tmp_path)  # NOTE: one store throughout, as the service keeps it
    Baselines(store).set("base", run_ids=ids[-12:-9])
    before = compare_runs(store, "base", [ids[-1]]).history_runs
    gone = before[-1]
    for path in ("runs", "nodes"):
        (tmp_path / path / f"{gone}.parquet").unlink()
    shutil.rmtree(tmp_path / "results" / gone)
    after = compare_runs(store, "base", [ids[-1]]).history_runs
    assert gone not in after and set(after) == set(before) - {gone}
    for catalog in (store, Catalog(tmp_path)):  # this process's index, and the next open
        assert gone not in _ids(catalog) and gone not in _paged(catalog)
        assert catalog.find_runs([gone]) == {}
    assert len(_ids(store)) == 15


def test_a_run_whose_record_was_deleted_is_listed_as_cut_off(tmp_path: Path) -> None:
    ids = write_foreign_store(tmp_path, 5, with_results=2)
    store = Store(tmp_path)
    assert store.run_index().get(ids[-1]).status == "pass"
    (tmp_path / "runs" / f"{ids[-1]}.parquet").unlink()
    assert store.run_index().get(ids[-1]).status == "incomplete"  # its results are kept
    assert store.run_index().get(ids[0]).status == "pass"


def test_an_index_write_that_failed_is_repaired(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = write_foreign_store(tmp_path, 5, with_results=0)
    monkeypatch.setattr(runindex, "BUSY_TIMEOUT_MS", 50)
    store = Store(tmp_path)
    assert _paged(store) == ids[::-1]
    holder = sqlite3.connect(tmp_path / "index" / "runs.sqlite", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # another writer holds the index: SQLite busy
    new = Run(run_id="20270101-000000-aaaaaa", suite="nightly", status="pass",
                    started_at=datetime(2027, 1, 1, tzinfo=UTC))  # fmt: skip
    store.write_run(new)  # the Parquet file is written; its index row is not
    assert Catalog(tmp_path).runs()[-1] == new  # meanwhile: read from the files, in memory
    holder.execute("ROLLBACK")
    holder.close()
    assert _paged(store)[0] == new.run_id  # retried by the next read of this process
    fresh = runindex.RunIndex(tmp_path / "index" / "runs.sqlite")
    assert fresh.get(new.run_id) == new  # and on disk, for the next process


def test_an_interrupted_build_is_finished_by_the_next_open(tmp_path: Path) -> None:
    ids = write_foreign_store(tmp_path, 30, with_results=0)
    index = runindex.RunIndex(tmp_path / "index" / "runs.sqlite")
    index.put_rows(runindex.read_run_rows(tmp_path, ids[:10])[0])  # a build cut off
    index.close()
    assert _paged(Catalog(tmp_path)) == ids[::-1]


def test_temp_files_of_killed_writers_are_removed(tmp_path: Path) -> None:
    ids = write_foreign_store(tmp_path, 4, with_results=1)
    cut_off = tmp_path / "results" / "20270101-000000-cccccc"  # results, no record
    cut_off.mkdir()
    shutil.copy(tmp_path / "results" / ids[-1] / "job0-bw.parquet", cut_off / "job0-bw.parquet")
    stale = [
        tmp_path / "runs" / ".20270101-000000-cccccc.parquet.x1.tmp",
        tmp_path / "nodes" / ".20270101-000000-cccccc.parquet.x2.tmp",
        tmp_path / "index" / "runs" / f".{ids[0]}.json.x3.tmp",
        cut_off / ".job1-bw.parquet.x4.tmp",
    ]
    live = tmp_path / "runs" / ".20270101-000000-dddddd.parquet.x5.tmp"  # a writer at work
    hour_ago = time.time() - runindex.TMP_AGE_S - 60
    for path in [*stale, live]:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"PAR1 half a file")
        if path != live:
            os.utime(path, (hour_ago, hour_ago))
    assert _ids(Catalog(tmp_path)) == [*ids, cut_off.name]
    assert [p for p in stale if p.exists()] == [] and live.exists()


def test_an_unreadable_record_is_named_and_the_others_listed(tmp_path: Path) -> None:
    ids = write_foreign_store(tmp_path, 6, with_results=0)
    (tmp_path / "runs" / f"{ids[2]}.parquet").write_bytes(b"torn")
    shutil.copy(tmp_path / "runs" / f"{ids[0]}.parquet", tmp_path / "runs" / f"{ids[3]}.parquet")
    catalog = Catalog(tmp_path)
    with pytest.raises(CorruptFile, match=f"{ids[2]}.parquet"):
        catalog.runs()  # `fleetval runs` exits 2 naming it
    assert set(catalog.run_index().unreadable) == {ids[2], ids[3]}
    assert "its row is run" in str(catalog.run_index().unreadable[ids[3]])
    assert _paged(catalog) == [ids[5], ids[4], ids[1], ids[0]]  # the service lists the rest


def test_the_service_keeper_never_makes_a_reader_wait(tmp_path: Path) -> None:
    ids = write_foreign_store(tmp_path, 200, with_results=0)
    store = Store(tmp_path)
    store.keep_index(period_s=0.05)
    try:
        deadline = time.monotonic() + 60
        while not store.index_ready():
            with pytest.raises(runindex.IndexBuilding):
                store.run_index()
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert _paged(store) == ids[::-1]
        (tmp_path / "runs" / f"{ids[-1]}.parquet").unlink()
        while ids[-1] in _paged(store):  # the keeper's next sync drops it
            assert time.monotonic() < deadline
            time.sleep(0.02)
    finally:
        store.stop_index()
