"""The service for real: `fleetval serve` in a subprocess on loopback, driven with httpx.

The server joins the session's simulated cluster (`--address`), so Ray's state API here
sees its actors and placement groups.
"""

from __future__ import annotations

import io
import itertools
import json
import signal
import threading
import time
from collections.abc import Iterator
from subprocess import CompletedProcess

import httpx
import pandas as pd
import pytest

from fleetval.vocab import CulpritReason, Status
from tests.helpers.ray import assert_no_leaks, leftovers
from tests.helpers.service import (
    BARRIER,
    CPU,
    HANG,
    Server,
    cli,
    make_server,
    wait_for,
    wait_in_step,
)

BANDWIDTH = {
    "name": "bw",
    "placement": CPU,
    "steps": [
        {
            "check": "collectives",
            "collectives": ["all_reduce"],
            "dtypes": ["float32"],
            "repeats": 1,
        },
        {
            "check": "bandwidth",
            "collectives": ["all_reduce"],
            "sizes": {"min": 8, "max": 4096, "factor": 8},
            "warmup": 1,
            "iters": 3,
        },
    ],
}


def submit(server: Server, suite: str, *args: str, scope: str = "submit") -> CompletedProcess:
    """`fleetval submit SUITE ARGS` to the module's service, with its token of `scope`."""
    token = server.tokens[scope]
    return cli("submit", suite, "--server", server.url, "--token", token, *args, data=server.data)


@pytest.fixture(scope="module")
def server(ray_cluster, tmp_path_factory) -> Iterator[Server]:
    srv = make_server(tmp_path_factory.mktemp("service"), ray_cluster).start()
    try:
        yield srv
    finally:
        srv.stop()
    assert_no_leaks(30)


def events_of(client: httpx.Client, run_id: str) -> list[dict]:
    out = []
    with client.stream("GET", f"/v1/runs/{run_id}/events", timeout=120) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if line.startswith("data: "):
                out.append(json.loads(line[6:]))
    return out


def clean_or_only_late(step: dict) -> bool:
    """A step passed, or warned only because a rank arrived late: on a loaded 2-core box a
    rank can be late for real, which the step must say (a WARN naming it), never a FAIL."""
    culprits = step.get("culprits") or []
    if step["status"] == Status.PASS:
        return not culprits
    return (
        step["status"] == Status.WARN
        and bool(culprits)
        and all(c["reason"] in (CulpritReason.LATE, CulpritReason.SLOW) for c in culprits)
    )


def worst_of_steps(run: dict) -> str:
    return Status.WARN if any(s["status"] == Status.WARN for s in run["steps"]) else Status.PASS


def test_submit_events_results_compare_and_cli(server):
    c = server.client()
    first = c.post("/v1/runs", json={"suite": BANDWIDTH, "labels": {"rocm": "6.1"}})
    assert first.status_code == 201
    run_id = first.json()["run_id"]
    events = events_of(c, run_id)  # until the run ends
    kinds = [e["kind"] for e in events]
    assert kinds[0] == "run_start" and kinds[-1] == "run_end" and "step_start" in kinds
    ends = [e for e in events if e["kind"] == "step_end"]
    assert [e["step"] for e in ends] == ["collectives", "bandwidth"] and ends[-1][
        "percent"
    ] == 100.0
    run = c.get(f"/v1/runs/{run_id}").json()
    assert run["status"] == worst_of_steps(run) and all(map(clean_or_only_late, run["steps"])), run
    assert run["progress"]["percent"] == 100.0 and run["submitter"] == "ci-admin"

    rows = c.get(f"/v1/runs/{run_id}/results", params={"check": "bandwidth", "rank": 1}).json()[
        "rows"
    ]
    assert rows and all(r["rank"] == 1 and r["check"] == "bandwidth" for r in rows)
    assert all(r["busbw_gbps"] > 0 for r in rows if r["size_bytes"])
    parquet = c.get(
        f"/v1/runs/{run_id}/results", headers={"Accept": "application/vnd.apache.parquet"}
    )
    assert parquet.headers["content-type"] == "application/vnd.apache.parquet"
    frame = pd.read_parquet(io.BytesIO(parquet.content))
    assert (
        set(frame["rank"]) == {0, 1}
        and "samples_us" in frame.columns
        and (frame["run_id"] == run_id).all()
    )

    assert c.put("/v1/baselines/base", json={"runs": [run_id]}).status_code == 201
    assert c.put("/v1/baselines/base", json={"runs": [run_id]}).status_code == 200
    suite_file = server.data / "bw.yaml"
    suite_file.write_text(json.dumps(BANDWIDTH))
    res = submit(server, str(suite_file), "--wait", "--compare", "base", "--label", "rocm=6.2")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "pass" in res.stdout and "compare with base" in res.stdout
    second = c.get("/v1/runs", params={"label": "rocm=6.2"}).json()["runs"][0]["run_id"]
    verdicts = c.post("/v1/compare", json={"baseline": "base", "runs": [second]})
    assert verdicts.status_code == 200
    body = verdicts.json()
    assert (
        body["baseline_runs"] == [run_id] and body["candidate_runs"] == [second] and body["results"]
    )

    metrics = c.get("/metrics").text
    assert 'fleetval_busbw_gbps{collective="all_reduce",node=' in metrics
    assert 'fleetval_step_duration_seconds_count{check="bandwidth",status="pass"}' in metrics


def test_submit_cli_exits_2_on_bad_input_and_1_on_failure(server):
    bad = submit(server, "no-such-suite")
    assert bad.returncode == 2 and "no shipped suite" in bad.stderr
    denied = submit(server, "smoke", scope="read")
    assert denied.returncode == 2 and "403" in denied.stderr
    failing = {**HANG, "name": "fails", "timeouts": {"step_s": 3}}
    path = server.data / "fails.yaml"
    path.write_text(json.dumps(failing))
    res = submit(server, str(path), "--wait")
    assert res.returncode == 1, res.stdout + res.stderr
    assert "culprit: rank 1" in res.stdout


def test_retried_submission_id_makes_one_run(server):
    c = server.client("submit")
    body = {"suite": BARRIER, "submission_id": "ci-job-7"}
    with httpx.Client(base_url=server.url, headers=c.headers, timeout=30) as other:
        results: list[httpx.Response] = []
        threads = [
            threading.Thread(target=lambda: results.append(other.post("/v1/runs", json=body)))
            for _ in range(5)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert sorted(r.status_code for r in results) == [200, 200, 200, 200, 201]
    assert len({r.json()["run_id"] for r in results}) == 1
    wait_for(c, results[0].json()["run_id"])


def test_cancel_mid_run_kills_actors_and_removes_the_group(server):
    c = server.client("submit")
    run_id = c.post("/v1/runs", json={"suite": HANG}).json()["run_id"]
    assert wait_in_step(c, run_id)["progress"]["step"] == "collectives"
    r = c.post(f"/v1/runs/{run_id}/cancel")
    assert r.status_code == 202
    run = wait_for(c, run_id, timeout_s=30)
    assert run["status"] == "cancelled"
    assert_no_leaks(15)
    assert c.post(f"/v1/runs/{run_id}/cancel").status_code == 409


@pytest.mark.slow
@pytest.mark.timeout(900)  # 20 runs, each starting 2 rank actors: ~4 s idle, far more on a busy box
def test_twenty_concurrent_submissions_all_finish_in_order(server):
    c = server.client("submit")
    made: list[tuple[float, str]] = []
    lock = threading.Lock()

    def one(i: int) -> None:
        with httpx.Client(base_url=server.url, headers=c.headers, timeout=30) as own:
            r = own.post(
                "/v1/runs", json={"suite": BARRIER, "labels": {"batch": "twenty", "i": str(i)}}
            )
            assert r.status_code == 201
            with lock:
                made.append((time.monotonic(), r.json()["run_id"]))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(made) == 20
    runs = [wait_for(c, run_id, timeout_s=600) for _, run_id in made]
    assert all(r["status"] == "pass" for r in runs)
    listed = c.get("/v1/runs", params={"label": "batch=twenty"}).json()["runs"]
    assert len(listed) == 20
    # In order: taken by start, the submission times never go back (submissions within the
    # same millisecond may start either way round).
    by_start = sorted(runs, key=lambda r: r["started_at"])
    submitted = [r["submitted_at"] for r in by_start]
    assert submitted == sorted(submitted), submitted
    for before, after in itertools.pairwise(by_start):
        assert before["finished_at"] <= after["started_at"]  # one at a time


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_kill_9_mid_run_then_restart_accounts_for_everything(ray_cluster, tmp_path):
    other = leftovers()  # the module's server keeps its warm pool meanwhile
    srv = make_server(tmp_path / "killed", ray_cluster).start()
    c = srv.client("submit")
    hung = c.post(
        "/v1/runs", json={"suite": HANG, "retries": 1, "submission_id": "nightly-1"}
    ).json()["run_id"]
    queued = c.post("/v1/runs", json={"suite": BARRIER}).json()["run_id"]
    wait_in_step(c, hung)
    srv.stop(signal.SIGKILL)
    assert_no_leaks(60, besides=other)  # Ray reaps a dead driver's actors and groups

    srv.start()
    try:
        c = srv.client("submit")
        old = c.get(f"/v1/runs/{hung}").json()
        assert old["status"] == "interrupted" and old["retried_as"]
        assert "requeued" in old["message"]
        again = c.post("/v1/runs", json={"suite": HANG, "submission_id": "nightly-1"}).json()
        assert again["run_id"] == old["retried_as"] and again["attempt"] == 2
        assert wait_for(c, queued)["status"] == "pass"  # it was waiting before the retry
        stored = c.get("/v1/runs", params={"status": "interrupted"}).json()["runs"]
        assert [r["run_id"] for r in stored] == [hung]
        wait_for(c, again["run_id"], ("running",), timeout_s=60)
        srv.stop()  # graceful: the run is torn down and marked interrupted; no attempts left
        assert_no_leaks(30, besides=other)
        srv.start()
        c = srv.client("read")
        last = c.get(f"/v1/runs/{again['run_id']}").json()
        assert last["status"] == "interrupted" and last["retried_as"] is None
    finally:
        srv.stop()
    assert_no_leaks(30, besides=other)
