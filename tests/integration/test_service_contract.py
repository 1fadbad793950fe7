"""The service's contract and sharing rules against a real `fleetval serve` (uvicorn on
loopback, in a subprocess; an API replica: --no-executor, so nothing needs Ray)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from fleetval.api.db import ServiceDB
from fleetval.api.executor import CLUSTER_KEY
from fleetval.store.dataset import Store
from fleetval.store.records import Run
from tests.helpers.service import start_serve

TINY = {
    "name": "tiny",
    "placement": {"world_sizes": [2], "gpus_per_rank": 0},
    "steps": [{"check": "collectives", "collectives": ["barrier"], "size": 64}],
}
# POST /v1/runs: an inline suite's cross-field rules (unique step names, collective_s <
# step_s, fault ranks), the service's limits and the cluster's capacity cannot be said in
# JSON Schema, so a schema-valid suite may still be refused with 422 naming the field.
# POST /v1/schedules: the same suite, and a cron expression (a string in the schema).
# POST /v1/attribute: `last` past the service's max_attribute_runs is 422 naming it.
# POST /v1/stragglers: whether a file holds a dump or a step log is not JSON Schema's to say;
# files with nothing in them to read are 422 naming `files`.
# The stateful phase: scenarios of at most 6 calls, linked by the OpenAPI links and the ones
# schemathesis infers (e.g. GET /v1/baselines -> PUT /v1/baselines/{name} with the returned
# fields), `--max-examples` scenarios per starting operation: it keeps the test near 2 min.
# GET /v1/runs/{id}/events: a queued run's stream lasts until the run ends, never here (no
# executor); schemathesis reads a stream for the request timeout (10 s by default), so 1 s.
SCHEMATHESIS_CONFIG = """
[phases.stateful]
max-steps = 6

[[operations]]
include-operation-id = "submit_run"
checks.positive_data_acceptance.expected-statuses = ["2xx", "409", "422", "429"]

[[operations]]
include-operation-id = "create_schedule"
checks.positive_data_acceptance.expected-statuses = ["2xx", "409", "422", "429"]

[[operations]]
include-operation-id = "attribute"
checks.positive_data_acceptance.expected-statuses = ["2xx", "409", "422", "429"]

[[operations]]
include-operation-id = "judge_stragglers"
checks.positive_data_acceptance.expected-statuses = ["2xx", "422", "429"]

[[operations]]
include-operation-id = "get_events"
request-timeout = 1.0
"""


def fleetval(*args: str) -> str:
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    res = subprocess.run(
        [sys.executable, "-m", "fleetval.cli", *args],
        env=env, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    return res.stdout.strip()


@pytest.fixture(scope="module")
def replica(tmp_path_factory) -> Iterator[tuple[str, Path, dict[str, str]]]:
    data = tmp_path_factory.mktemp("replica")
    limits = data / "limits.yaml"
    limits.write_text("max_iterations: 1000\nmax_active_per_owner: 50\n")
    tokens = {
        who: fleetval("token", "create", "--scope", scope, "--name", who, "--data", str(data))
        for who, scope in (("alice", "submit"), ("bob", "submit"), ("root", "admin"))
    }
    serving = start_serve(
        data, "--no-executor", "--no-access-log", "--limits", str(limits), timeout_s=60
    )
    try:
        yield serving.url, data, tokens
    finally:
        serving.stop(timeout_s=30)


def client(url: str, token: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30)


def test_owners_tokens_limits_and_the_plan(replica):
    url, data, tokens = replica
    alice, bob = client(url, tokens["alice"]), client(url, tokens["bob"])
    run_id = alice.post("/v1/runs", json={"suite": TINY, "submission_id": "nightly-9"}).json()[
        "run_id"
    ]
    assert bob.post(f"/v1/runs/{run_id}/cancel").status_code == 403
    assert (
        bob.post("/v1/runs", json={"suite": TINY, "submission_id": "nightly-9"}).status_code == 409
    )
    assert alice.post(f"/v1/runs/{run_id}/cancel").status_code == 202

    over = {**TINY, "steps": [{"check": "bandwidth", "iters": 10**12}]}
    r = alice.post("/v1/runs", json={"suite": over})
    assert r.status_code == 422 and "max_iterations = 1000" in r.json()["detail"]

    db = ServiceDB(data)  # the cluster as an executor elsewhere published it
    db.set_meta(CLUSTER_KEY, [{"name": "n0", "cpus": 2.0, "gpus": 0.0}])
    db.close()
    wide = {**TINY, "placement": {"world_sizes": [4], "gpus_per_rank": 0}}
    r = alice.post("/v1/runs", json={"suite": wide})
    assert r.status_code == 422 and "the cluster has 0 GPUs and 2 CPUs" in r.json()["detail"]

    token_id = next(t["id"] for t in fleetval_tokens(data) if t["name"] == "bob")
    fleetval("token", "revoke", token_id, "--data", str(data))
    r = bob.get("/v1/runs")
    assert r.status_code == 401 and "revoked" in r.json()["detail"]


def fleetval_tokens(data: Path) -> list[dict]:
    import json

    return json.loads(fleetval("token", "list", "--json", "--data", str(data)))


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_schemathesis_finds_nothing(replica, tmp_path):
    """Every check, every phase (stateful included: submit -> get / cancel / results /
    events by the OpenAPI links, and the links schemathesis infers, such as a stored
    baseline fed back into PUT), a bounded number of examples per operation (~70 s)."""
    url, data, tokens = replica
    # a stored run, so that baselines resolve and the stateful phase feeds a stored one back
    Store(data).write_run(
        Run(run_id="20240101-000000-feed00", suite="nightly", status="pass",
                  started_at=_now(), labels={"nightly": "true"})
    )  # fmt: skip
    (tmp_path / "schemathesis.toml").write_text(SCHEMATHESIS_CONFIG)
    cmd = [
        sys.executable, "-m", "schemathesis.cli", "run", f"{url}/openapi.json",
        "--checks", "all", "--phases", "examples,coverage,fuzzing,stateful",
        "--max-examples", "25", "--workers", "1", "--seed", "1",
        "-H", f"Authorization: Bearer {tokens['root']}",
        # NOTE: revoking tokens would revoke the run's own credentials; tested above
        "--exclude-operation-id", "revoke_token",
    ]  # fmt: skip
    res = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=540)
    (Path(os.environ.get("FLEETVAL_ST_LOG", tmp_path)) / "schemathesis.txt").write_text(res.stdout)
    assert res.returncode == 0, res.stdout[-6000:] + res.stderr[-2000:]


def test_a_corrupt_file_leaves_other_runs_readable(replica):
    url, data, tokens = replica
    store = Store(data)
    start = Run(run_id="x", suite="s", status="pass", started_at=_now()).started_at
    for run_id in ("20250101-000000-aaaaaa", "20250101-000000-bbbbbb"):
        store.write_run(Run(run_id=run_id, suite="cli", status="pass", started_at=start))
    bad = "20250101-000000-bbbbbb"
    (data / "runs" / f"{bad}.parquet").write_bytes(b"torn")
    (data / "index" / "runs" / f"{bad}.json").write_text("{torn")
    c = client(url, tokens["root"])
    listed = c.get("/v1/runs", params={"suite": "cli"})
    assert listed.status_code == 200 and len(listed.json()["runs"]) == 2  # from the run index
    assert c.get("/v1/runs/20250101-000000-aaaaaa").json()["status"] == "pass"
    results = c.get(f"/v1/runs/{bad}/results")
    assert results.status_code == 200 and results.json()["rows"] == []


def _now():
    from datetime import UTC, datetime

    return datetime.now(UTC)
