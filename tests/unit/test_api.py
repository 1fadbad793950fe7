"""The REST API in process (TestClient, no executor, no Ray): validation, auth, statuses."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.routing import iter_route_contexts
from fastapi.testclient import TestClient

from fleetval.api import Settings, create_app
from fleetval.api.db import DB_NAME, Scope
from fleetval.testing.signoff import planted_regression

TINY = {
    "name": "tiny",
    "placement": {"world_sizes": [2]},
    "steps": [{"check": "collectives", "collectives": ["barrier"], "size": 64}],
}


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[TestClient, dict[str, dict[str, str]]]]:
    app = create_app(Settings(data_dir=tmp_path, run_executor=False, max_body_bytes=4096))
    tokens = {s.value: app.state.db.create_token(s, f"{s.value}-user") for s in Scope}
    headers = {k: {"Authorization": f"Bearer {v}"} for k, v in tokens.items()}
    with TestClient(app) as client:
        yield client, headers


def test_health_and_openapi_need_no_token(api):
    client, _ = api
    assert client.get("/healthz").json()["status"] == "ok"
    paths = client.get("/openapi.json").json()["paths"]
    assert "/v1/runs/{run_id}/events" in paths and "/v1/compare" in paths


# (method, path, body, least scope)
ROUTES = [
    ("POST", "/v1/runs", {"suite": "smoke"}, "submit"),
    ("GET", "/v1/runs", None, "read"),
    ("GET", "/v1/runs/x", None, "read"),
    ("GET", "/v1/runs/x/events", None, "read"),
    ("POST", "/v1/runs/x/cancel", None, "submit"),
    ("GET", "/v1/runs/x/results", None, "read"),
    ("GET", "/v1/runs/x/report", None, "read"),
    ("GET", "/v1/baselines", None, "read"),
    ("GET", "/v1/baselines/b", None, "read"),
    ("PUT", "/v1/baselines/b", {"runs": ["x"]}, "admin"),
    ("DELETE", "/v1/baselines/b", None, "admin"),
    ("POST", "/v1/compare", {"baseline": "b", "runs": ["x"]}, "read"),
    ("POST", "/v1/attribute", {"where": {"cluster": "x"}}, "read"),
    ("POST", "/v1/stragglers", {"files": [{"name": "rank0.log", "text": "step 1\n"}]}, "read"),
    ("GET", "/metrics", None, "read"),
    ("GET", "/v1/tokens", None, "admin"),
    ("POST", "/v1/tokens", {"scope": "read", "name": "x"}, "admin"),
    ("DELETE", "/v1/tokens/0123456789ab", None, "admin"),
    ("POST", "/v1/schedules", {"name": "s", "cron": "0 2 * * *", "suite": "smoke"}, "submit"),
    ("GET", "/v1/schedules", None, "read"),
    ("GET", "/v1/schedules/s", None, "read"),
    ("DELETE", "/v1/schedules/s", None, "submit"),
]
RANK = {"read": 0, "submit": 1, "admin": 2}
PUBLIC = {"/healthz", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"}


def test_the_route_table_is_every_route_of_the_app(tmp_path):
    """Each route of the app (but the public ones) is in ROUTES once, and ROUTES names no other:
    a new route cannot skip the token tests below."""
    app = create_app(Settings(data_dir=tmp_path, run_executor=False))
    served = [c for c in iter_route_contexts(app.routes) if c.path not in PUBLIC]
    tested = {(method, path) for method, path, _, _ in ROUTES}
    covered = {
        (method, c.path): [p for m, p in tested if m == method and c.route.path_regex.match(p)]
        for c in served
        for method in c.methods
    }
    assert {k: v for k, v in covered.items() if len(v) != 1} == {}, "untested or ambiguous"
    assert tested - {(m, p) for (m, _), [p] in covered.items()} == set(), "not a route"


@pytest.mark.parametrize(("method", "path", "body", "least"), ROUTES)
def test_every_route_checks_token_and_scope(api, method, path, body, least):
    client, headers = api
    assert client.request(method, path, json=body).status_code == 401
    bad = {"Authorization": "Bearer fv_not-a-token"}
    assert client.request(method, path, json=body, headers=bad).status_code == 401
    for scope, rank in RANK.items():
        status = client.request(method, path, json=body, headers=headers[scope]).status_code
        if rank < RANK[least]:
            assert status == 403, (scope, status)
        else:
            assert status not in (401, 403, 500), (scope, status)


def test_tokens_are_stored_only_as_hashes(api, tmp_path):
    _, headers = api
    raw = (tmp_path / DB_NAME).read_bytes()
    for h in headers.values():
        assert h["Authorization"].removeprefix("Bearer ").encode() not in raw


def test_submit_is_queued_and_idempotent_by_submission_id(api):
    client, h = api
    body = {"suite": TINY, "labels": {"driver": "580"}, "submission_id": "ci-42"}
    first = client.post("/v1/runs", json=body, headers=h["submit"])
    assert first.status_code == 201
    run = first.json()
    assert run["status"] == "queued" and run["queue_position"] == 0
    assert run["submitter"] == "submit-user" and run["labels"] == {"driver": "580"}
    again = client.post("/v1/runs", json=body, headers=h["submit"])
    assert again.status_code == 200 and again.json()["run_id"] == run["run_id"]
    listed = client.get("/v1/runs", headers=h["read"]).json()["runs"]
    assert [r["run_id"] for r in listed] == [run["run_id"]]
    # One run, three spellings of it made from one declaration (RunOut): the POST's model,
    # the JSON SQLite makes for a GET by id and for a page, field for field and in order.
    second = client.post("/v1/runs", json={"suite": TINY}, headers=h["submit"]).json()
    assert second["queue_position"] == 1
    for made in (run, second):
        got = client.get(f"/v1/runs/{made['run_id']}", headers=h["read"]).json()
        assert list(got.items()) == list(made.items())
    paged = client.get("/v1/runs", headers=h["read"]).json()["runs"]
    spelled = {r["run_id"]: list(r.items()) for r in paged}
    assert spelled == {m["run_id"]: list(m.items()) for m in (run, second)}


@pytest.mark.parametrize(
    ("suite", "field"),
    [
        ("no-such-suite", ["body", "suite"]),
        ("/etc/passwd", ["body", "suite"]),  # a path is never read on the server
        ("../suites/smoke.yaml", ["body", "suite"]),
        (
            {**TINY, "steps": [{"check": "collectives", "bogus": 1}]},
            ["body", "suite", "steps", "0", "bogus"],
        ),
        ({**TINY, "steps": [{"check": "nope"}]}, ["body", "suite", "steps", "0"]),
        (
            {**TINY, "placement": {"world_sizes": [0]}},
            ["body", "suite", "placement", "world_sizes", "0"],
        ),
        ({**TINY, "command": "rm -rf /"}, ["body", "suite", "command"]),
    ],
)
def test_invalid_suites_are_422_naming_the_field(api, suite, field):
    client, h = api
    r = client.post("/v1/runs", json={"suite": suite}, headers=h["submit"])
    assert r.status_code == 422
    body = r.json()
    assert r.headers["content-type"] == "application/problem+json" and body["status"] == 422
    assert any(d["loc"][: len(field)] == field for d in body["errors"]), body


def test_bad_request_fields_are_422(api):
    client, h = api
    for body in (
        {},
        {"suite": "smoke", "retries": -1},
        {"suite": "smoke", "submission_id": "has space"},
        {"suite": "smoke", "extra": 1},
        {"suite": 5},
    ):
        r = client.post("/v1/runs", json=body, headers=h["submit"])
        assert r.status_code == 422, body
        assert r.json()["errors"] and isinstance(r.json()["detail"], str)
    r = client.post(
        "/v1/runs",
        content=b"{not json",
        headers={**h["submit"], "Content-Type": "application/json"},
    )
    assert r.status_code == 422
    r = client.get("/v1/runs?label=nokey", headers=h["read"])
    assert r.status_code == 422 and r.json()["errors"][0]["loc"][:2] == ["query", "label"]
    assert client.get("/v1/runs?status=bogus", headers=h["read"]).status_code == 422
    assert client.get("/v1/runs?limit=0", headers=h["read"]).status_code == 422


def test_oversized_bodies_are_413(api):
    client, h = api
    big = {"suite": {**TINY, "description": "x" * 10_000}}
    assert client.post("/v1/runs", json=big, headers=h["submit"]).status_code == 413

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it streams in
        data = json.dumps(big).encode()
        for i in range(0, len(data), 1000):
            yield data[i : i + 1000]

    r = client.post(
        "/v1/runs", content=chunks(), headers={**h["submit"], "Content-Type": "application/json"}
    )
    assert r.status_code == 413 and "larger than 4096" in r.json()["detail"]


def test_unknown_things_are_404_and_finished_cancel_is_409(api):
    client, h = api
    for path in (
        "/v1/runs/nope",
        "/v1/runs/nope/results",
        "/v1/runs/nope/events",
        "/v1/runs/nope/report",
        "/v1/baselines/nope",
    ):
        r = client.get(path, headers=h["read"])
        assert r.status_code == 404 and r.json()["detail"], path
    assert client.post("/v1/runs/nope/cancel", headers=h["submit"]).status_code == 404
    assert client.delete("/v1/baselines/nope", headers=h["admin"]).status_code == 404
    r = client.post("/v1/compare", json={"baseline": "nope", "runs": ["x"]}, headers=h["read"])
    assert r.status_code == 404
    r = client.put("/v1/baselines/b", json={"runs": ["nope"]}, headers=h["admin"])
    assert r.status_code == 409 and "nope" in r.json()["detail"]  # well-formed; no such run now
    r = client.put("/v1/baselines/b", json={}, headers=h["admin"])
    assert r.status_code == 422

    run = client.post("/v1/runs", json={"suite": TINY}, headers=h["submit"]).json()
    r = client.post(f"/v1/runs/{run['run_id']}/cancel", headers=h["submit"])
    assert r.status_code == 202 and r.json()["status"] == "cancelled"
    again = client.post(f"/v1/runs/{run['run_id']}/cancel", headers=h["submit"])
    assert again.status_code == 409 and "cancelled" in again.json()["detail"]
    events = client.get(f"/v1/runs/{run['run_id']}/events", headers=h["read"])
    assert events.headers["content-type"].startswith("text/event-stream")
    assert "event: run_end" in events.text and '"cancelled"' in events.text


def test_list_filters_and_pages(api):
    client, h = api
    ids = []
    for i in range(5):
        body = {"suite": {**TINY, "name": f"s{i % 2}"}, "labels": {"n": str(i)}}
        ids.append(client.post("/v1/runs", json=body, headers=h["submit"]).json()["run_id"])
    get = lambda q: client.get(f"/v1/runs?{q}", headers=h["read"]).json()  # noqa: E731
    assert [r["run_id"] for r in get("suite=s1")["runs"]] == sorted([ids[1], ids[3]], reverse=True)
    assert [r["run_id"] for r in get("label=n=2")["runs"]] == [ids[2]]
    page1 = get("limit=2")
    page2 = get(f"limit=2&cursor={page1['next_cursor']}")
    page3 = get(f"limit=2&cursor={page2['next_cursor']}")
    seen = [r["run_id"] for p in (page1, page2, page3) for r in p["runs"]]
    assert seen == sorted(ids, reverse=True) and page3["next_cursor"] is None


def test_metrics_show_the_queue(api):
    client, h = api
    client.post("/v1/runs", json={"suite": TINY}, headers=h["submit"])
    text = client.get("/metrics", headers=h["read"]).text
    assert "fleetval_queue_depth 1.0" in text
    assert 'fleetval_runs{status="queued"} 1.0' in text


def test_report_is_html_by_default_markdown_or_json_by_accept(tmp_path):
    """The sign-off report over REST is the library's report (a planted 30% regression)."""
    store_dir = tmp_path / "store"
    planted_regression(store_dir)
    app = create_app(Settings(data_dir=store_dir, run_executor=False))
    auth = {"Authorization": f"Bearer {app.state.db.create_token(Scope.READ, 'r')}"}
    with TestClient(app) as client:
        html = client.get("/v1/runs/cand/report?baseline=old", headers=auth)
        assert html.status_code == 200 and html.headers["content-type"].startswith("text/html")
        assert "FAIL" in html.text and "all_reduce" in html.text
        md = client.get("/v1/runs/cand/report", headers={**auth, "Accept": "text/markdown"})
        assert md.headers["content-type"].startswith("text/markdown") and "#" in md.text
        js = client.get(
            "/v1/runs/cand/report?baseline=old", headers={**auth, "Accept": "application/json"}
        ).json()
        gates = {g["gate"]: g["status"] for g in js["gates"]}
        assert gates["regression"] == "FAIL" and js["verdict"] == "FAIL", gates
        missing = client.get("/v1/runs/cand/report?baseline=nope", headers=auth)
        assert missing.status_code == 404 and "nope" in missing.json()["detail"]
