"""The service shared by many: owners, tokens, limits, plan checks, pages, faults of its data
(TestClient over a real store and database, no executor)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from fleetval.api import Settings, create_app
from fleetval.api.db import Scope, ServiceDB
from fleetval.api.executor import CLUSTER_KEY
from fleetval.api.limits import Limits
from fleetval.store.dataset import Store, new_run_id
from fleetval.store.records import Run
from fleetval.store.schema import Row

TINY = {
    "name": "tiny",
    "placement": {"world_sizes": [2], "gpus_per_rank": 0},
    "steps": [{"check": "collectives", "collectives": ["barrier"], "size": 64}],
}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def svc(tmp_path: Path) -> Iterator[tuple[TestClient, ServiceDB, dict[str, dict[str, str]]]]:
    limits = Limits(max_iterations=1000, max_active_per_owner=3)
    app = create_app(Settings(data_dir=tmp_path, run_executor=False, limits=limits))
    db: ServiceDB = app.state.db
    tokens = {
        "alice": db.create_token(Scope.SUBMIT, "alice"),
        "bob": db.create_token(Scope.SUBMIT, "bob"),
        "admin": db.create_token(Scope.ADMIN, "root"),
    }
    with TestClient(app) as client:
        yield client, db, {k: bearer(v) for k, v in tokens.items()}


def test_a_run_belongs_to_its_submitter(svc):
    client, _, h = svc
    run = client.post("/v1/runs", json={"suite": TINY, "submission_id": "a-1"}, headers=h["alice"])
    run_id = run.json()["run_id"]
    other = client.post(f"/v1/runs/{run_id}/cancel", headers=h["bob"])
    assert other.status_code == 403 and "alice" in other.json()["detail"]
    reused = client.post("/v1/runs", json={"suite": TINY, "submission_id": "a-1"}, headers=h["bob"])
    assert reused.status_code == 409
    assert reused.json()["errors"][0]["loc"] == ["body", "submission_id"]
    again = client.post(
        "/v1/runs", json={"suite": TINY, "submission_id": "a-1"}, headers=h["alice"]
    )
    assert again.status_code == 200 and again.json()["run_id"] == run_id
    by_admin = client.post(f"/v1/runs/{run_id}/cancel", headers=h["admin"])
    assert by_admin.status_code == 202 and by_admin.json()["status"] == "cancelled"


def test_tokens_are_listed_revoked_and_expire(svc, tmp_path):
    client, db, h = svc
    made = client.post(
        "/v1/tokens", json={"scope": "read", "name": "ci", "expires_in_s": 3600}, headers=h["admin"]
    )
    assert made.status_code == 201
    token, token_id = made.json()["token"], made.json()["id"]
    assert client.get("/v1/runs", headers=bearer(token)).status_code == 200
    listed = client.get("/v1/tokens", headers=h["admin"]).json()
    assert {t["name"] for t in listed} == {"alice", "bob", "root", "ci"}
    assert all("token" not in t for t in listed)
    assert client.delete(f"/v1/tokens/{token_id}", headers=h["admin"]).json()["revoked_at"]
    r = client.get("/v1/runs", headers=bearer(token))
    assert r.status_code == 401 and "revoked" in r.json()["detail"]
    assert client.delete("/v1/tokens/0123456789ab", headers=h["admin"]).status_code == 404

    expired = db.create_token(Scope.READ, "old", expires_in_s=1)
    with db._lock:  # NOTE: expiry is a stored time: set it in the past rather than sleep
        past = (datetime.now(UTC) - timedelta(seconds=5)).isoformat(timespec="milliseconds")
        db._conn.execute("UPDATE tokens SET expires_at = ? WHERE name = 'old'", (past,))
    r = client.get("/v1/runs", headers=bearer(expired))
    assert r.status_code == 401 and "expired" in r.json()["detail"]


def test_limits_quotas_and_the_plan_are_checked_at_submit(svc):
    client, db, h = svc
    big = {**TINY, "steps": [{"check": "bandwidth", "iters": 10**12, "sizes": {"max": "1PiB"}}]}
    r = client.post("/v1/runs", json={"suite": big}, headers=h["alice"])
    assert r.status_code == 422
    errors = {".".join(map(str, e["loc"])): e["msg"] for e in r.json()["errors"]}
    assert "max_iterations = 1000" in errors["body.suite.steps.0.iters"]
    assert "max_size_bytes" in errors["body.suite.steps.0.sizes.max"]

    db.set_meta(CLUSTER_KEY, [{"name": "node-a", "cpus": 4.0, "gpus": 0.0}])
    wide = {**TINY, "placement": {"world_sizes": [8], "gpus_per_rank": 0}}
    r = client.post("/v1/runs", json={"suite": wide}, headers=h["alice"])
    assert r.status_code == 422
    assert "world size 8 needs 8 bundles" in r.json()["detail"], r.json()
    assert r.json()["errors"][0]["loc"] == ["body", "suite", "placement", "world_sizes"]

    for _ in range(3):
        assert client.post("/v1/runs", json={"suite": TINY}, headers=h["alice"]).status_code == 201
    r = client.post("/v1/runs", json={"suite": TINY}, headers=h["alice"])
    assert r.status_code == 429 and "max_active_per_owner" in r.json()["detail"]
    assert r.headers["retry-after"]
    assert client.post("/v1/runs", json={"suite": TINY}, headers=h["bob"]).status_code == 201


def _stored_runs(store: Store, n: int) -> list[str]:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    ids = []
    for i in range(n):
        run_id = f"20260101-{i:06d}-cli000"
        store.write_run(
            Run(
                run_id=run_id, suite="cli", status="pass", started_at=start, labels={"i": str(i)}
            )
        )
        ids.append(run_id)
    return ids


def test_pages_merge_stored_and_submitted_runs(svc, tmp_path):
    client, _, h = svc
    ids = _stored_runs(Store(tmp_path), 7)
    submitted = [
        client.post("/v1/runs", json={"suite": TINY}, headers=h[who]).json()["run_id"]
        for who in ("alice", "bob", "admin")
    ]
    seen, cursor = [], None
    while True:
        q = {"limit": 3, **({"cursor": cursor} if cursor else {})}
        page = client.get("/v1/runs", params=q, headers=h["bob"]).json()
        seen += [r["run_id"] for r in page["runs"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == sorted(ids + submitted, reverse=True)
    one = client.get("/v1/runs", params={"label": "i=4"}, headers=h["bob"]).json()["runs"]
    assert [r["run_id"] for r in one] == [ids[4]]
    assert client.get(f"/v1/runs/{ids[2]}", headers=h["bob"]).json()["suite"] == "cli"


def test_results_pages_use_the_shared_filter(svc, tmp_path):
    client, _, h = svc
    store = Store(tmp_path)
    run_id = _stored_runs(store, 1)[0]
    rows = [Row(run_id=run_id, check="bandwidth", rank=r % 2, size_bytes=r) for r in range(25)]
    store.write_results(run_id, "bw", rows)
    got, cursor = [], None
    while True:
        q = {"rank": 1, "limit": 5, **({"cursor": cursor} if cursor else {})}
        page = client.get(f"/v1/runs/{run_id}/results", params=q, headers=h["bob"]).json()
        got += page["rows"]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert [r["size_bytes"] for r in got] == list(range(1, 25, 2))


def test_a_corrupt_file_affects_only_its_run(svc, tmp_path):
    client, _, h = svc
    store = Store(tmp_path)
    good, bad = _stored_runs(store, 2)
    store.write_results(bad, "bw", [Row(run_id=bad, check="bandwidth")])
    part = tmp_path / "results" / bad / "bw.parquet"
    part.write_bytes(b"not parquet at all")
    (tmp_path / "index" / "runs" / f"{good}.json").write_text("{torn")
    r = client.get(f"/v1/runs/{bad}/results", headers=h["bob"])
    # the file named within the store, never the data directory's own path (issue 40 §11)
    detail = r.json()["detail"]
    assert r.status_code == 500 and str(part.relative_to(tmp_path)) in detail
    assert str(tmp_path) not in detail
    assert r.headers["content-type"] == "application/problem+json"
    listed = client.get("/v1/runs", headers=h["bob"])
    assert listed.status_code == 200 and {good, bad} <= {x["run_id"] for x in listed.json()["runs"]}
    assert client.get(f"/v1/runs/{good}", headers=h["bob"]).json()["status"] == "pass"
    assert Store(tmp_path).run(good).status == "pass"  # the torn index entry: read from Parquet


def test_metrics_counters_follow_run_ends(svc):
    client, db, h = svc
    run_id = client.post("/v1/runs", json={"suite": TINY}, headers=h["alice"]).json()["run_id"]
    assert db.claim_next() == run_id
    step = {"check": "collectives", "status": "fail", "seconds": 3.0,
            "culprits": [{"node": "node-b", "reason": "hang"}]}  # fmt: skip
    db.record_event(run_id, {"kind": "step_progress"})
    db.record_event(run_id, {"kind": "step_end"}, steps=[step])
    db.record_event(run_id, {"kind": "run_end"}, finish=("fail", "1 step failed"))
    db.record_event(run_id, {"kind": "run_end"}, finish=("pass", ""))  # a run ends once
    text = client.get("/metrics", headers=h["bob"]).text
    assert (
        'fleetval_step_duration_seconds_bucket{check="collectives",le="5.0",status="fail"} 1.0'
        in text
    )
    assert (
        'fleetval_step_duration_seconds_bucket{check="collectives",le="1.0",status="fail"} 0.0'
        in text
    )
    assert 'fleetval_culprits_total{node="node-b",reason="hang"} 1.0' in text
    assert (
        'fleetval_runs{status="fail"} 1.0' in text and 'fleetval_runs{status="running"} 0.0' in text
    )
    kinds = [e["kind"] for e in db.events(run_id)]
    assert "step_progress" not in kinds and kinds.count("run_end") == 2
    assert client.get(f"/v1/runs/{run_id}", headers=h["bob"]).json()["status"] == "fail"


def test_openapi_declares_every_status_and_the_bearer_scheme(svc):
    client, _, _ = svc
    spec = client.get("/openapi.json").json()
    assert spec["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            codes = set(op["responses"])
            assert "422" in codes, (method, path)
            if op.get("security"):
                assert {"401", "403"} <= codes, (method, path)
            for code, resp in op["responses"].items():
                if code.startswith("4"):
                    assert list(resp["content"]) == ["application/problem+json"], (path, code)
    assert {"409", "429"} <= set(spec["paths"]["/v1/runs"]["post"]["responses"])
    assert json.dumps(spec).count("HTTPValidationError") == 0


def test_runs_served_as_stored_json_are_exactly_the_models(svc, tmp_path):
    """The hot reads splice stored JSON instead of building RunOut: the bytes must be the
    model's JSON, for a queued, a running (with progress and verdicts) and a stored run."""
    from fleetval.api.models import RunList, RunOut

    client, db, h = svc
    start = datetime(2026, 1, 2, tzinfo=UTC)
    stored = Run(
        run_id="20260102-000000-aaaaaa", suite="cli", status="fail", started_at=start,
        finished_at=start + timedelta(seconds=5), labels={"k": "v"}, submitter="me",
        summary={"steps": [{"step": "bw", "status": "fail"}]}, message="1 failed",
    )  # fmt: skip
    Store(tmp_path).write_run(stored)
    queued = [
        client.post("/v1/runs", json={"suite": TINY, "labels": {"n": str(i)}}, headers=h["alice"])
        for i in range(2)
    ]
    running = db.claim_next()
    progress = {"job": 0, "step": "c", "index": 1, "total": 2, "percent": 50.0, "detail": "",
                "culprits": [{"rank": 1, "node": "n"}]}  # fmt: skip
    db.record_event(running, {"kind": "step_end"}, progress=progress, steps=[{"step": "c"}])
    waiting = queued[1].json()["run_id"]
    for run_id in (running, waiting, stored.run_id):
        r = client.get(f"/v1/runs/{run_id}", headers=h["bob"])
        assert r.status_code == 200 and r.headers["content-type"] == "application/json"
        assert r.json() == RunOut.model_validate_json(r.content).model_dump(mode="json")
    assert client.get(f"/v1/runs/{waiting}", headers=h["bob"]).json()["queue_position"] == 0
    got = client.get(f"/v1/runs/{running}", headers=h["bob"]).json()
    assert got["progress"] == progress and got["steps"] == [{"step": "c"}]
    assert got["status"] == "running" and got["labels"] == {"n": "0"}
    assert client.get(f"/v1/runs/{stored.run_id}", headers=h["bob"]).json() == {
        **RunOut(run_id=stored.run_id, suite="cli", status="fail").model_dump(mode="json"),
        **json.loads(json.dumps(stored.listing())),
    }
    page = client.get("/v1/runs", params={"limit": 2}, headers=h["bob"])
    listed = RunList.model_validate_json(page.content)
    assert page.json() == listed.model_dump(mode="json")
    assert sorted(r.run_id for r in listed.runs) == sorted([waiting, running])
    assert listed.next_cursor == listed.runs[-1].run_id  # the stored run is on the next page


def test_progress_events_are_coalesced_while_a_run_executes(svc):
    """The engine reports progress twice a second; at most one a second is stored."""
    from fleetval.api.executor import PROGRESS_EVERY_S, _Tracker
    from fleetval.run.outcome import Event

    client, db, h = svc
    run_id = client.post("/v1/runs", json={"suite": TINY}, headers=h["alice"]).json()["run_id"]
    assert db.claim_next() == run_id
    tracker = _Tracker(db, run_id)
    for i in range(50):  # a burst well inside one coalescing interval
        tracker.on_event(Event("step_progress", 0, "s", 0, 1, f"iteration {i}"))
    tracker.on_event(Event("step_start", 0, "t", 1, 2))
    kinds = [e["kind"] for e in db.events(run_id)]
    assert kinds == ["step_progress", "step_start"] and PROGRESS_EVERY_S >= 1.0
    progress = client.get(f"/v1/runs/{run_id}", headers=h["bob"]).json()["progress"]
    assert progress["step"] == "t" and progress["percent"] == 50.0


def test_a_page_of_runs_is_answered_before_routing_as_the_route_does(svc, tmp_path):
    """`GET /v1/runs` with only `limit` and `cursor` is answered by api/hot.py with the
    route's bytes, made or kept in its page cache; a filter, a bad or repeated value, or a
    bad token reach the route."""
    import asyncio

    from fleetval.api.cache import PageCache
    from fleetval.api.hot import HotReads

    client, db, h = svc
    store = Store(tmp_path)
    for _ in range(3):
        client.post("/v1/runs", json={"suite": TINY}, headers=h["alice"])
    stored = _stored_runs(store, 4)
    pages = ["", "limit=2", f"limit=3&cursor={stored[-1]}", "limit=0", "limit=1001", "limit=x",
             "limit=%D9%A2", "limit=1&limit=2", "status=queued", "label=a=b", "cursor="]  # fmt: skip
    kept: PageCache = client.app.state.pages

    def same_as_the_route() -> None:
        for query in pages:
            for headers in (h["bob"], {}):
                hot = client.get(f"/v1/runs?{query}", headers=headers)
                routed = client.get(f"/v1/runs?{query}&via=route", headers=headers)
                assert (hot.status_code, hot.content) == (routed.status_code, routed.content), query

    same_as_the_route()
    assert (kept.hits, kept.misses) == (0, 4)  # "", limit=2, the cursor's page, cursor=
    same_as_the_route()  # now from the cache
    assert (kept.hits, kept.misses) == (4, 4)
    client.post("/v1/runs", json={"suite": TINY}, headers=h["bob"])
    store.write_run(
        Run(run_id=new_run_id(), suite="cli", status="pass", started_at=datetime.now(UTC))
    )
    same_as_the_route()  # made again: the data moved
    assert (kept.hits, kept.misses) == (4, 8)
    second = client.get("/v1/runs?limit=2", headers=h["bob"]).json()
    assert len(second["runs"]) == 2 and second["next_cursor"] == second["runs"][1]["run_id"]

    passed: list[bytes] = []

    async def app(scope, receive, send) -> None:
        passed.append(scope["query_string"])

    async def get(query: bytes) -> list[dict]:
        sent: list[dict] = []
        token = h["bob"]["Authorization"].split()[1]
        scope = {"type": "http", "method": "GET", "path": "/v1/runs", "query_string": query,
                 "headers": [(b"authorization", f"Bearer {token}".encode())]}  # fmt: skip

        async def keep(message: dict) -> None:
            sent.append(message)

        await HotReads(app, db, store, PageCache())(scope, None, keep)
        return sent

    assert json.loads(asyncio.run(get(b"limit=5"))[1]["body"])["runs"]
    assert asyncio.run(get(b"limit=5&suite=tiny")) == [] and passed == [b"limit=5&suite=tiny"]


def test_the_hot_read_answers_as_the_route_does(svc, tmp_path):
    """`GET /v1/runs/{id}` is answered before routing (api/hot.py) with the route's bytes and
    headers, and every request it cannot answer with success reaches the route, which answers
    its 401 or 404 as every route does."""
    import asyncio

    from fleetval.api.cache import PageCache
    from fleetval.api.hot import HotReads

    client, db, h = svc
    store = Store(tmp_path)
    submitted = client.post("/v1/runs", json={"suite": TINY}, headers=h["alice"]).json()["run_id"]
    (stored,) = _stored_runs(store, 1)
    revoked = db.create_token(Scope.READ, "carol")
    db.revoke_token(db.lookup_token(revoked).id)
    cases = [(submitted, h["bob"]), (stored, h["bob"]), ("nope", h["bob"]), (stored, {}),
             (stored, bearer(revoked)), (stored, {"Authorization": "Basic eDp5"})]  # fmt: skip
    for run_id, headers in cases:
        hot = client.get(f"/v1/runs/{run_id}", headers=headers)
        routed = client.get(f"/v1/runs/{run_id}", params={"via": "route"}, headers=headers)
        assert (hot.status_code, hot.headers.get("content-type"), hot.content) == (
            routed.status_code, routed.headers.get("content-type"), routed.content), run_id  # fmt: skip
    assert [client.get(f"/v1/runs/{r}", headers=hd).status_code for r, hd in cases] == [
        200, 200, 404, 401, 401, 401]  # fmt: skip

    passed: list[str] = []

    async def app(scope, receive, send) -> None:
        passed.append(scope["path"])

    async def get(path: str, token: str) -> list[dict]:
        sent: list[dict] = []
        scope = {"type": "http", "method": "GET", "path": path, "query_string": b"",
                 "headers": [(b"authorization", f"Bearer {token}".encode())]}  # fmt: skip
        await HotReads(app, db, store, PageCache())(scope, None, lambda m: _append(sent, m))
        return sent

    async def _append(sent: list[dict], message: dict) -> None:
        sent.append(message)

    read = h["bob"]["Authorization"].split()[1]
    answered = asyncio.run(get(f"/v1/runs/{stored}", read))
    assert answered[0]["status"] == 200 and json.loads(answered[1]["body"])["run_id"] == stored
    assert passed == []  # answered without the app
    for path, token in [("/v1/runs/nope", read), (f"/v1/runs/{stored}", revoked),
                        (f"/v1/runs/{stored}/results", read), ("/v1/runs/", read)]:  # fmt: skip
        assert asyncio.run(get(path, token)) == []
    assert passed == [
        "/v1/runs/nope",
        f"/v1/runs/{stored}",
        f"/v1/runs/{stored}/results",
        "/v1/runs/",
    ]


def test_every_view_of_a_run_takes_its_header_from_the_one_declaration() -> None:
    """`Run` is declared once (store/records.py): the queue's submission and the API body
    inherit its header instead of restating it, and a stored run's listing is RunOut's
    fields."""
    from fleetval.api.db import Submission
    from fleetval.api.models import RunOut
    from fleetval.store.records import RunHeader

    header = list(RunHeader.model_fields)
    for view in (Run, Submission, RunOut):
        assert issubclass(view, RunHeader) and list(view.model_fields)[: len(header)] == header
    listing = Run(run_id="r", suite="s", status="pass", started_at=datetime.now(UTC)).listing()
    assert set(listing) <= set(RunOut.model_fields)
    RunOut.model_validate(listing)
