"""Named baselines: stored as JSON beside the data, resolved at compare time, plain errors."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from fleetval.analysis.baselines import BaselineError, Baselines, UnknownBaseline
from fleetval.store.dataset import Store
from fleetval.store.records import Run
from fleetval.store.schema import Row


def _run(
    store: Store, i: int, *, rocm: str, labels: dict[str, str] | None = None, models=("MI300X",)
) -> str:
    started = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(days=i)
    run_id = f"{started:%Y%m%d}-000000-{i:06x}"
    store.write_results(run_id, "s", [Row(run_id=run_id, check="bandwidth", node="n0")])
    store.write_nodes(
        run_id,
        [{"node": f"n{j}", "gpu_model": m, "rocm_version": rocm} for j, m in enumerate(models)],
    )
    store.write_run(
        Run(run_id=run_id, suite="smoke", status="pass", started_at=started, labels=labels or {})
    )
    return run_id


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store(tmp_path)
    _run(s, 0, rocm="6.1.2", labels={"kind": "nightly"})
    _run(s, 1, rocm="6.1.3", labels={"kind": "nightly"})
    _run(s, 2, rocm="6.2.0", labels={"kind": "nightly"})
    _run(s, 3, rocm="6.1.3", labels={"kind": "adhoc"})
    return s


def test_by_run_ids_stored_as_json(store: Store) -> None:
    ids = [r.run_id for r in store.runs()][:2]
    resolved = Baselines(store).set("first", run_ids=ids, description="two runs")
    assert resolved.run_ids == tuple(ids)
    data = json.loads((store.root / "baselines" / "first.json").read_text())
    assert data["run_ids"] == ids and data["description"] == "two runs"
    assert not list((store.root / "baselines").glob(".*.tmp"))  # the temp file was renamed


def test_where_globs_labels_and_env_resolve_at_compare_time(store: Store) -> None:
    b = Baselines(store)
    assert len(b.set("rocm6.1", where={"rocm_version": "6.1.*"}).run_ids) == 3
    assert len(b.set("nightly61", where={"rocm_version": "6.1.*", "kind": "nightly"}).run_ids) == 2
    assert len(b.set("newest", where={"rocm_version": "6.1.*"}, last=1).run_ids) == 1
    new = _run(store, 4, rocm="6.1.4", labels={"kind": "nightly"})
    assert b.resolve("nightly61").run_ids[-1] == new  # a filter baseline stays current


def test_env_filter_needs_every_node_to_match(store: Store) -> None:
    _run(store, 5, rocm="6.1.3", models=("MI300X", "MI250X"))
    assert len(Baselines(store).set("mi300", where={"gpu_model": "MI300X"}).run_ids) == 4


def test_errors_are_plain(store: Store) -> None:
    b = Baselines(store)
    with pytest.raises(UnknownBaseline, match="none yet"):
        b.get("nope")
    b.set("a", run_ids=[store.runs()[0].run_id])
    with pytest.raises(UnknownBaseline, match="known: a"):
        b.resolve("nope")
    with pytest.raises(
        BaselineError, match=r"unknown filter key 'colour'.*labels in this store: kind"
    ):
        b.set("x", where={"colour": "red"})
    with pytest.raises(BaselineError, match=r"no run matches rocm_version=5\.\*"):
        b.set("x", where={"rocm_version": "5.*"})
    with pytest.raises(BaselineError, match="no run 20990101"):
        b.set("x", run_ids=["20990101-000000-000000"])
    with pytest.raises(BaselineError, match="not both or neither"):
        b.set("x")
    with pytest.raises(BaselineError, match="letters, digits"):
        b.set("../evil", run_ids=[store.runs()[0].run_id])
    assert b.names() == ["a"]  # nothing was written by a failed set


def test_list_show_delete(store: Store) -> None:
    b = Baselines(store)
    b.set("a", where={"kind": "adhoc"})
    b.set("b", run_ids=[store.runs()[0].run_id])
    assert [x.name for x in b.list()] == ["a", "b"]
    assert b.get("a").describe() == "kind=adhoc"
    b.delete("a")
    assert b.names() == ["b"]
    with pytest.raises(UnknownBaseline):
        b.delete("a")
