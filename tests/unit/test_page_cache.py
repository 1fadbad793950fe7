"""The page cache of `GET /v1/runs` (api/cache.py, used by api/hot.py): a repeated page
is served from it, and every change to what a page shows (a run submitted, started,
finished, stored, deleted; by this process or another one) shows on the very next request.
A real app (TestClient) over a real store and service database, no executor."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from fleetval.api import Settings, create_app
from fleetval.api.cache import PageCache
from fleetval.api.db import Scope, ServiceDB
from fleetval.store.dataset import Store
from fleetval.store.records import Run, RunFilter
from fleetval.store.runindex import RunIndex

TINY = {
    "name": "tiny",
    "placement": {"world_sizes": [2], "gpus_per_rank": 0},
    "steps": [{"check": "collectives", "collectives": ["barrier"], "size": 64}],
}
START = datetime(2026, 1, 1, tzinfo=UTC)


def test_pages_are_kept_per_version_least_recently_used_first() -> None:
    made: list[str] = []

    def make(text: str):
        return lambda: made.append(text) or text.encode()

    pages = PageCache(max_pages=2, max_bytes=10)
    assert pages.get(1, "a", make("aaa")) == b"aaa"
    assert pages.get(1, "a", make("other")) == b"aaa" and (pages.hits, pages.misses) == (1, 1)
    pages.get(1, "b", make("bbb"))
    pages.get(1, "a", make("other"))  # a: the most recently used
    pages.get(1, "c", make("ccc"))  # three pages: b, the least recently used, goes
    assert pages.get(1, "b", make("BBB")) == b"BBB" and pages.get(1, "c", make("x")) == b"ccc"
    pages.get(1, "big", make("x" * 8))  # 3 + 3 + 8 bytes: over 10, the oldest two go
    assert pages.get(1, "b", make("b2")) == b"b2" and pages.get(1, "c", make("c2")) == b"c2"
    assert pages.get(2, "c", make("new")) == b"new"  # another version: nothing kept serves it
    assert pages.get(2, "huge", make("y" * 11)) == b"y" * 11
    assert pages.get(2, "huge", make("z")) == b"z"  # larger than the whole cache: not kept
    assert made == ["aaa", "bbb", "ccc", "BBB", "x" * 8, "b2", "c2", "new", "y" * 11, "z"]


def test_a_page_made_while_the_data_moved_is_not_kept() -> None:
    pages = PageCache()

    def make_while_another_reader_sees_version_2() -> bytes:
        pages.get(2, "other", lambda: b"v2")
        return b"made at 1 or later"

    pages.get(1, "a", make_while_another_reader_sees_version_2)
    assert pages.get(1, "a", lambda: b"again") == b"again"


def test_the_run_index_version_moves_on_every_write_and_only_then(tmp_path):
    index, other = RunIndex(tmp_path / "runs.sqlite"), RunIndex(tmp_path / "runs.sqlite")
    seen = [index.version()]
    index.page_listings(RunFilter(), before=None, limit=10)
    assert index.version() == seen[-1]  # a read moves nothing
    index.put(stored("20260101-000000-aaaaaa").to_record())  # this connection
    other.put(stored("20260101-000000-bbbbbb").to_record())  # another one (another process)
    seen.append(index.version())
    other.remove(["20260101-000000-aaaaaa"])
    seen.append(index.version())
    index.remove(["20260101-000000-bbbbbb"])
    seen.append(index.version())
    assert len(set(seen)) == 4
    index.close()
    other.close()


@pytest.fixture
def svc(tmp_path: Path) -> Iterator[tuple[TestClient, ServiceDB, dict[str, str]]]:
    app = create_app(Settings(data_dir=tmp_path, run_executor=False, run_scheduler=False))
    db: ServiceDB = app.state.db
    tokens = {who: db.create_token(Scope.SUBMIT, who) for who in ("alice", "bob")}
    with TestClient(app) as client:
        yield client, db, {k: f"Bearer {v}" for k, v in tokens.items()}


def page(client: TestClient, token: str, query: str = "limit=50") -> list[dict]:
    """The page's runs as the hot path answers it, checked against the route's bytes."""
    hot = client.get(f"/v1/runs?{query}", headers={"Authorization": token})
    routed = client.get(f"/v1/runs?{query}&via=route", headers={"Authorization": token})
    assert hot.status_code == 200 and hot.content == routed.content
    return hot.json()["runs"]


def stored(run_id: str) -> Run:
    return Run(run_id=run_id, suite="cli", status="pass", started_at=START)


def test_a_repeated_page_is_served_from_the_cache(svc, tmp_path):
    client, _, h = svc
    pages: PageCache = client.app.state.pages
    Store(tmp_path).write_run(stored("20260101-000000-aaaaaa"))
    first = page(client, h["bob"])
    assert (pages.hits, pages.misses) == (0, 1)
    assert page(client, h["bob"]) == first and page(client, h["alice"]) == first
    assert (pages.hits, pages.misses) == (2, 1)  # the token is checked; the page is kept
    page(client, h["bob"], "limit=1")
    page(client, h["bob"], "limit=1&cursor=20260101-000000-aaaaaa")
    assert (pages.hits, pages.misses) == (2, 3)  # another query: another page
    bad = client.get("/v1/runs?limit=50", headers={"Authorization": "Bearer nope"})
    assert bad.status_code == 401 and (pages.hits, pages.misses) == (2, 3)


def test_every_change_shows_on_the_next_request(svc, tmp_path):
    """Each change is made the way the service makes it, then one request must show it."""
    client, db, h = svc
    app_store: Store = client.app.state.store
    pages: PageCache = client.app.state.pages

    def statuses() -> dict[str, str]:
        runs = page(client, h["bob"])
        assert page(client, h["bob"]) == runs  # served again from the cache
        return {r["run_id"]: r["status"] for r in runs}

    assert statuses() == {}
    run_id = client.post("/v1/runs", json={"suite": TINY}, headers={"Authorization": h["alice"]})
    run_id = run_id.json()["run_id"]
    assert statuses() == {run_id: "queued"}  # this process's writer
    assert db.claim_next() == run_id
    assert statuses() == {run_id: "running"}
    db.record_event(run_id, {"kind": "run_end"}, finish=("pass", ""))
    assert statuses() == {run_id: "pass"}

    other = "20260101-000000-bbbbbb"  # another Store's write: another connection to the index
    Store(tmp_path).write_run(stored(other))
    assert statuses() == {run_id: "pass", other: "pass"}
    mine = "20260101-000001-cccccc"  # the service's own index connection: its row count moves
    app_store.write_run(stored(mine))
    assert statuses() == {run_id: "pass", other: "pass", mine: "pass"}

    (tmp_path / "runs" / f"{other}.parquet").unlink()  # deleted: gone once the index syncs
    app_store.run_index().sync(tmp_path)  # what its keeper thread does every second
    assert statuses() == {run_id: "pass", mine: "pass"}
    assert db.prune(before="9999") == 1  # the submission pruned
    assert statuses() == {mine: "pass"}
    assert pages.hits == 8


WRITER = """
import sys
from datetime import UTC, datetime
from pathlib import Path
from fleetval.api.db import ServiceDB
from fleetval.store.records import RunFilter
from fleetval.store.dataset import Store
from fleetval.store.records import Run
from fleetval.store.runindex import RunIndex

data, run_id, queued = Path(sys.argv[1]), *sys.argv[2:]
start = datetime(2026, 1, 1, tzinfo=UTC)
Store(data).write_run(Run(run_id=run_id, suite="cli", status="pass", started_at=start))
ServiceDB(data).add(run_id=queued, submission_id=None, suite="svc", suite_json="{}",
                    labels={}, submitter="elsewhere", retries=0)
"""


def test_another_process_s_writes_show_on_the_next_request(svc, tmp_path):
    """As another `fleetval serve` worker (or `fleetval run`) writes the shared data dir:
    its own connections to the service database and to the run index."""
    client, _, h = svc
    pages: PageCache = client.app.state.pages
    assert page(client, h["bob"]) == page(client, h["bob"]) == []
    assert pages.hits == 1
    ran, queued = "20260101-000000-dddddd", "20260102-000000-eeeeee"
    subprocess.run([sys.executable, "-c", WRITER, tmp_path, ran, queued], check=True, timeout=60)
    runs = page(client, h["bob"])
    assert [(r["run_id"], r["status"]) for r in runs] == [(queued, "queued"), (ran, "pass")]
    assert runs[0]["submitter"] == "elsewhere"
