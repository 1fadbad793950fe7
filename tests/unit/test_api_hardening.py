"""Suites and requests written to hurt (issue 24 §5): each is refused with a 4xx naming the
field or the limit, never a 500, a stall, or another user's loss. TestClient over a
temporary data directory (no executor, no Ray)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from fleetval.api import Settings, create_app
from fleetval.api.db import Quota, QuotaExceeded, Scope, ServiceDB, now
from fleetval.api.limits import Limits
from fleetval.api.scheduler import Scheduler
from fleetval.cli import app as cli_app
from fleetval.store.dataset import Store
from fleetval.store.records import Run
from tests.helpers.app import app_client
from tests.helpers.service import serve_app

TINY = {
    "name": "tiny",
    "placement": {"world_sizes": [2], "gpus_per_rank": 0},
    "steps": [{"check": "collectives", "collectives": ["barrier"], "size": 64}],
}


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[TestClient, dict[str, dict[str, str]]]]:
    with app_client(tmp_path, alice=Scope.SUBMIT, bob=Scope.SUBMIT, root=Scope.ADMIN) as served:
        yield served


def with_gates(pattern: str) -> dict:
    minimum = {"gpu_model": pattern, "collective": "all_reduce", "min_busbw_gbps": 1}
    return {**TINY, "gates": {"busbw": {"minimums": [minimum]}}}


# -- 1. a suite's gpu_model pattern is checked when the suite is parsed -------------------


@pytest.mark.parametrize("pattern", ["(", r"(a)\1", "(?<=H)100", "x" * 200])
def test_a_bad_gpu_model_pattern_is_422_at_submit(api, pattern):
    client, h = api
    started = time.monotonic()
    r = client.post("/v1/runs", json={"suite": with_gates(pattern)}, headers=h["alice"])
    assert r.status_code == 422, r.text
    assert r.json()["errors"][0]["loc"][:7] == [
        "body", "suite", "gates", "busbw", "minimums", "0", "gpu_model",
    ]  # fmt: skip
    assert time.monotonic() - started < 5


def test_a_sane_gpu_model_pattern_is_accepted(api):
    client, h = api
    r = client.post("/v1/runs", json={"suite": with_gates("H100.*SXM|MI300X")}, headers=h["alice"])
    assert r.status_code == 201, r.text


def test_the_cli_exits_2_on_a_bad_gpu_model_pattern(tmp_path):
    import yaml

    suite = tmp_path / "bad.yaml"
    suite.write_text(yaml.safe_dump(with_gates(r"(a)\1")))
    res = CliRunner().invoke(cli_app, ["run", str(suite), "--data", str(tmp_path / "d")])
    assert res.exit_code == 2, res.output
    assert "gates.busbw.minimums.0.gpu_model" in res.output


# -- 2. a schedule's submission ids and labels are the scheduler's ----------------------


@pytest.mark.parametrize(
    "body, loc",
    [
        ({"submission_id": "schedule.nightly.20260101T000000Z"}, ["body", "submission_id"]),
        ({"labels": {"schedule": "nightly"}}, ["body", "labels", "schedule"]),
        ({"labels": {"fire_time": "2026-01-01T00:00:00+00:00"}}, ["body", "labels", "fire_time"]),
    ],
)
def test_a_client_cannot_claim_a_firing_or_pose_as_a_schedule(api, body, loc):
    client, h = api
    r = client.post("/v1/runs", json={"suite": TINY, **body}, headers=h["bob"])
    assert r.status_code == 422 and r.json()["errors"][0]["loc"] == loc, r.text


def test_a_firing_is_not_refused_by_a_client_that_knew_its_id(api):
    client, h = api
    client.post(
        "/v1/schedules",
        json={"name": "nightly", "cron": "0 3 * * *", "suite": TINY},
        headers=h["alice"],
    )
    app = client.app
    scheduler = Scheduler(app.state.db, app.state.executor, Limits())
    due = app.state.db.schedule("nightly").next_fire
    firing_id = f"schedule.nightly.{due[:19].replace('-', '').replace(':', '')}Z"
    taken = client.post(
        "/v1/runs", json={"suite": TINY, "submission_id": firing_id}, headers=h["bob"]
    )
    assert taken.status_code == 422
    from datetime import datetime

    assert scheduler.tick(datetime.fromisoformat(due)) == ["nightly"]
    fired = app.state.db.schedule("nightly")
    assert (fired.fired, fired.refused) == (1, 0)
    run = client.get(f"/v1/runs/{fired.last_run_id}", headers=h["bob"]).json()
    assert run["submitter"] == "alice" and run["labels"]["schedule"] == "nightly"


# -- 3. a ceiling on the total work of one suite and of one owner ------------------------


@pytest.mark.parametrize(
    "suite, limit",
    [
        ({**TINY, "placement": {"world_sizes": [2] * 50_000}}, "max_jobs"),
        (
            {
                **TINY,
                "steps": [
                    {"check": "collectives", "name": f"s{i}", "timeout_s": 21600} for i in range(64)
                ],
            },
            "max_planned_s",
        ),
    ],
)
def test_a_suite_asking_too_much_work_is_422_naming_the_limit(tmp_path, suite, limit):
    app = create_app(Settings(data_dir=tmp_path, run_executor=False, max_body_bytes=1 << 20))
    token = app.state.db.create_token(Scope.SUBMIT, "alice")
    with TestClient(app) as client:
        r = client.post(
            "/v1/runs", json={"suite": suite}, headers={"Authorization": f"Bearer {token}"}
        )
    assert r.status_code == 422 and limit in r.json()["detail"], r.text


def test_an_owners_planned_work_is_bounded_in_all(tmp_path):
    limits = Limits(max_planned_s_per_owner=3000)  # TINY plans 60 + 60 + 300 = 420 s
    app = create_app(Settings(data_dir=tmp_path, run_executor=False, limits=limits))
    tokens = {n: app.state.db.create_token(Scope.SUBMIT, n) for n in ("alice", "bob")}
    with TestClient(app) as client:
        codes = [
            client.post(
                "/v1/runs", json={"suite": TINY}, headers={"Authorization": f"Bearer {tokens[n]}"}
            )
            for n in ["alice"] * 8 + ["bob"]
        ]
    assert [r.status_code for r in codes] == [201] * 7 + [429, 201]
    assert "max_planned_s_per_owner" in codes[7].json()["detail"]


# -- 7. every unnamed token is its own owner --------------------------------------------


def test_two_unnamed_submit_tokens_have_different_owners(tmp_path):
    made = [
        CliRunner().invoke(
            cli_app, ["token", "create", "--scope", "submit", "--data", str(tmp_path)]
        )
        for _ in range(2)
    ]
    assert all(m.exit_code == 0 for m in made), [m.output for m in made]
    app = create_app(Settings(data_dir=tmp_path, run_executor=False))
    first, second = ({"Authorization": f"Bearer {m.output.strip()}"} for m in made)
    with TestClient(app) as client:
        run_id = client.post("/v1/runs", json={"suite": TINY}, headers=first).json()["run_id"]
        assert client.post(f"/v1/runs/{run_id}/cancel", headers=second).status_code == 403
        assert client.post(f"/v1/runs/{run_id}/cancel", headers=first).status_code == 202
        owners = {t.name for t in app.state.db.tokens()}
    assert len(owners) == 2 and all(o.startswith("submit-") for o in owners)


# -- 8. the per-owner quota is one atomic step --------------------------------------------


def test_concurrent_submissions_never_pass_the_quota_together(tmp_path):
    """Eight processes' worth of connections (as uvicorn workers have) submit at once."""
    dbs = [ServiceDB(tmp_path) for _ in range(8)]
    quota = Quota(max_active=3, max_planned_s=1e9)
    barrier, made, refused = threading.Barrier(len(dbs)), [], []

    def submit(db: ServiceDB, i: int) -> None:
        barrier.wait()
        for j in range(4):
            try:
                db.add(run_id=f"r{i}-{j}", submission_id=None, suite="s", suite_json="{}",
                       labels={}, submitter="alice", retries=0, quota=quota)  # fmt: skip
                made.append(i)
            except QuotaExceeded:
                refused.append(i)

    threads = [threading.Thread(target=submit, args=(db, i)) for i, db in enumerate(dbs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(made) == 3 and len(refused) == 29
    assert dbs[0].counts() == {"queued": 3}
    for db in dbs:
        db.close()


# -- 9. one error shape, and the status the contract says ---------------------------------


def test_a_baseline_filter_on_a_key_nothing_has_is_409_naming_the_key(api):
    client, h = api
    Store(client.app.state.store.root).write_run(
        Run(run_id="20260101-000000-aaaaaa", suite="s", status="pass", started_at=_t())
    )
    r = client.put("/v1/baselines/x", json={"where": {"nosuchkey": "v"}}, headers=h["root"])
    assert r.status_code == 409, r.text
    assert r.json()["errors"][0]["loc"] == ["body", "where", "nosuchkey"]
    r = client.put("/v1/baselines/x", json={"where": {"suite": "nothing*"}}, headers=h["root"])
    assert r.status_code == 409  # a known key that matches no run: a conflict with the store


def test_an_uncaught_exception_is_a_problem_not_plain_text(tmp_path):
    app = create_app(Settings(data_dir=tmp_path, run_executor=False))
    token = app.state.db.create_token(Scope.READ, "r")
    app.state.db.close()  # every read now raises sqlite3.ProgrammingError: a server fault
    with TestClient(app, raise_server_exceptions=False) as client:
        r = client.get("/v1/schedules", headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 500 and r.headers["content-type"] == "application/problem+json"
    body = r.json()
    assert body["status"] == 500 and body["title"] == "Internal Server Error"
    assert "ProgrammingError" in body["detail"]


# -- pruning: the event log and finished submissions do not grow for ever -----------------


def test_finished_submissions_and_their_events_are_pruned_by_age(tmp_path):
    db = ServiceDB(tmp_path)
    for run_id in ("old", "recent", "queued"):
        db.add(run_id=run_id, submission_id=None, suite="s", suite_json="{}", labels={},
               submitter="a", retries=0)  # fmt: skip
    for run_id in ("old", "recent"):
        db.claim_next()
        db.record_event(run_id, {"kind": "run_end"}, finish=("pass", ""))
    db.record_event("queued", {"kind": "run_start"})
    # "old" finished 31 days ago; the retention is 30
    db._conn.execute(
        "UPDATE submissions SET finished_at = ? WHERE run_id = 'old'", (now(-31 * 86400),)
    )
    scheduler = Scheduler(db, None, Limits(retain_finished_s=30 * 86400))  # type: ignore[arg-type]
    assert scheduler.prune() == 1
    assert db.get("old") is None and db.events("old") == []
    assert db.get("recent") is not None and db.events("recent") != []
    assert db.get("queued") is not None and db.events("queued") != []
    assert {k: n for k, n in db.counts().items() if n} == {"pass": 1, "queued": 1}
    db.close()


def _t():
    from datetime import UTC, datetime

    return datetime.now(UTC)


# -- 5. event streams: capped per token and in all; a revoked token stops streaming --------


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Any, dict[str, str]]]:
    """A real uvicorn on loopback (TestClient buffers a whole response; a stream never ends)."""
    limits = Limits(max_streams_per_token=2, max_streams=3)
    app = create_app(Settings(data_dir=tmp_path, run_executor=False, limits=limits))
    tokens = {n: app.state.db.create_token(Scope.SUBMIT, n) for n in ("alice", "bob")}
    with serve_app(app, start_s=30) as url:
        yield url, app, tokens


def _stream(url: str, token: str, run_id: str) -> Any:
    import httpx

    client = httpx.Client(
        base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=httpx.Timeout(10)
    )
    return client, client.stream("GET", f"/v1/runs/{run_id}/events")


def _wait(predicate: Any, seconds: float = 10) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_event_streams_are_capped_per_token_and_in_all(served):
    import httpx

    url, app, tokens = served
    auth = {"Authorization": f"Bearer {tokens['alice']}"}
    run_id = httpx.post(f"{url}/v1/runs", json={"suite": TINY}, headers=auth).json()["run_id"]
    opened = []

    def open_as(who: str) -> int:
        client, stream = _stream(url, tokens[who], run_id)
        response = stream.__enter__()
        opened.append((client, stream))
        return response.status_code

    try:
        assert [open_as("alice"), open_as("alice")] == [200, 200]
        assert open_as("alice") == 429  # two per token
        assert open_as("bob") == 200
        assert open_as("bob") == 429  # three in all
        assert app.state.streams.count() == 3
        client, stream = opened[0]
        stream.__exit__(None, None, None)  # one of alice's ends: its slot is free again
        client.close()
        assert _wait(lambda: app.state.streams.count() == 2)
        assert open_as("alice") == 200
    finally:
        for client, stream in opened:
            stream.__exit__(None, None, None)
            client.close()


def test_a_revoked_token_stops_streaming(served):
    import httpx

    url, app, tokens = served
    auth = {"Authorization": f"Bearer {tokens['alice']}"}
    run_id = httpx.post(f"{url}/v1/runs", json={"suite": TINY}, headers=auth).json()["run_id"]
    client, stream = _stream(url, tokens["alice"], run_id)
    with client, stream as response:
        assert response.status_code == 200
        token_id = app.state.db.lookup_token(tokens["alice"]).id
        app.state.db.revoke_token(token_id)
        started = time.monotonic()
        text = "".join(response.iter_text())  # ends: the server closes the stream
    assert "revoked" in text and time.monotonic() - started < 5
    assert _wait(lambda: app.state.streams.count() == 0)


# -- 4. a page with samples is bounded however large the run ---------------------------------


def test_a_results_page_with_samples_is_bounded_and_pages_through_everything(api, monkeypatch):
    import pyarrow as pa

    from fleetval.api.routes import results
    from fleetval.store.schema import RESULTS_SCHEMA

    MAX_PAGE_SAMPLES = 4000  # NOTE: the ceiling made small, so the run is small and fast
    monkeypatch.setattr(results, "MAX_PAGE_SAMPLES", MAX_PAGE_SAMPLES)
    client, h = api
    store = Store(client.app.state.store.root)
    run_id = "20260101-000000-bbbbbb"
    store.write_run(Run(run_id=run_id, suite="s", status="pass", started_at=_t()))
    per_row = MAX_PAGE_SAMPLES // 8  # 40 rows: five times what one page may carry
    for part in range(2):
        rows = [
            {"run_id": run_id, "job": part, "step": "bw", "check": "bandwidth", "rank": r,
             "node": "n0", "status": "pass", "samples_us": [float(part * 100 + r)] * per_row}
            for r in range(20)
        ]  # fmt: skip
        store.write_results_table(
            run_id, f"job{part}-bw", pa.Table.from_pylist(rows, RESULTS_SCHEMA)
        )
    seen, cursor, pages = [], None, 0
    while True:
        params = {"samples": "true", "limit": 10_000, **({"cursor": cursor} if cursor else {})}
        page = client.get(f"/v1/runs/{run_id}/results", params=params, headers=h["bob"]).json()
        assert sum(len(r["samples_us"]) for r in page["rows"]) <= MAX_PAGE_SAMPLES
        seen += [
            (r["job"], r["rank"], r["samples_us"][0], len(r["samples_us"])) for r in page["rows"]
        ]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert pages == 5
    assert seen == [(j, r, float(j * 100 + r), per_row) for j in range(2) for r in range(20)]
    one = client.get(
        f"/v1/runs/{run_id}/results", params={"samples": "true", "rank": 3, "step": "bw"},
        headers=h["bob"],
    ).json()  # fmt: skip
    assert [(r["job"], r["samples_us"][0]) for r in one["rows"]] == [(0, 3.0), (1, 103.0)]


# -- 6. baselines and compare read the store's listings once per generation ---------------


def _age(root: Path, seconds: float) -> None:
    """The store's directories as if last written `seconds` ago (past the racy window)."""
    import os

    old = time.time_ns() - int(seconds * 1e9)
    for name in ("runs", "results", "nodes"):
        if (root / name).exists():
            os.utime(root / name, ns=(old, old))


def test_a_filter_baseline_reads_the_store_once_per_generation(api, monkeypatch):
    client, h = api
    root = client.app.state.store.root
    store = Store(root)
    for run_id in ("20260101-000000-aaaaaa", "20260102-000000-aaaaaa"):
        store.write_run(Run(run_id=run_id, suite="nightly", status="pass", started_at=_t()))
    reads: list[str] = []
    real = Store.runs

    def counted(self: Store) -> list[Run]:
        reads.append("runs")  # NOTE: a spy: the real read still happens
        return real(self)

    # NOTE: the cache sits in front of Store.runs (the run index): count the reads behind it
    monkeypatch.setattr(Store, "runs", counted)
    _age(root, 10)
    put = client.put("/v1/baselines/b", json={"where": {"suite": "nightly"}}, headers=h["root"])
    assert put.status_code == 201 and put.json()["resolves_to"] == [
        "20260101-000000-aaaaaa", "20260102-000000-aaaaaa",
    ]  # fmt: skip
    first = reads.count("runs")
    for _ in range(5):
        assert client.get("/v1/baselines/b", headers=h["bob"]).status_code == 200
    assert reads.count("runs") == first  # the same generation: nothing read again
    store.write_run(
        Run(run_id="20260103-000000-aaaaaa", suite="nightly", status="pass", started_at=_t())
    )
    got = client.get("/v1/baselines/b", headers=h["bob"]).json()
    assert got["resolves_to"][-1] == "20260103-000000-aaaaaa"  # a new generation: read again
    assert reads.count("runs") == first + 1
