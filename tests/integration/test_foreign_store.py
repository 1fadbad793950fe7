"""A store fleetval did not write or index (issue 24): 5,000 runs in the documented layout,
written straight with pyarrow (`fleetval.testing.foreign`), opened by `fleetval runs`,
`fleetval compare` and a real `fleetval serve` (uvicorn on loopback). Each test starts
without `index/`, the way such a store arrives. Before the run index read the files
directly, each of these ended in RecursionError (one stack frame per unindexed run).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from fleetval.testing.foreign import write_foreign_store
from tests.helpers.service import answers_at_all, start_serve

# NOTE: slow: the store of the size is written (10,000 files), then indexed three
# times (each test starts without index/); ~35 s on 2 quiet cores
pytestmark = pytest.mark.slow
RUNS = 5000


@pytest.fixture(scope="module")
def foreign(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    root = tmp_path_factory.mktemp("foreign") / "data"
    return root, write_foreign_store(root, RUNS)


@pytest.fixture
def unindexed(foreign: tuple[Path, list[str]]) -> tuple[Path, list[str]]:
    """The module's store as it arrives: whatever an earlier test indexed is deleted."""
    root, ids = foreign
    shutil.rmtree(root / "index", ignore_errors=True)
    return root, ids


def fleetval(*args: str, ok: tuple[int, ...] = (0,)) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(
        [sys.executable, "-m", "fleetval.cli", *args],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert res.returncode in ok, res.stderr[-3000:]
    return res


def test_runs_lists_every_run_of_a_store_without_index(unindexed):
    root, ids = unindexed
    res = fleetval("runs", "--data", str(root), "--json")
    listed = json.loads(res.stdout)
    assert [r["run_id"] for r in listed] == ids
    assert listed[0]["labels"] == {"nightly": "0", "tool": "foreign"}
    assert listed[0]["started_at"].startswith("2026-01-01 00:00:00")
    assert (root / "index" / "runs.sqlite").exists()  # the index, built on the way


def test_compare_against_a_baseline_with_history(unindexed):
    root, ids = unindexed
    data = ["--data", str(root)]
    base = [a for run_id in ids[-12:-7] for a in ("--run", run_id)]
    fleetval("baseline", "set", "foreign-base", *base, *data)
    res = fleetval("compare", "-b", "foreign-base", "--run", ids[-1], "--json", *data, ok=(0, 1))
    out = json.loads(res.stdout)
    assert out["baseline_runs"] == ids[-12:-7] and out["candidate_runs"] == [ids[-1]]
    verdicts = {r["verdict"] for r in out["results"]}
    assert verdicts and verdicts <= {"unchanged", "improvement", "regression", "noisy"}, verdicts
    # history: earlier runs of the suite, found by the run index, the baseline left out
    history = out["history_runs"]
    assert history and max(history) < ids[-1] and not set(history) & set(ids[-12:-7])


@pytest.fixture
def served(unindexed, tmp_path: Path) -> Iterator[tuple[httpx.Client, list[str], dict]]:
    """`fleetval serve` on the store, and what /healthz said first (as soon as it answered)."""
    root, ids = unindexed
    token = fleetval("token", "create", "--scope", "submit", "--name", "t", "--data", str(root))
    serving = start_serve(
        root, "--no-executor", "--no-scheduler", "--no-access-log",
        ready=answers_at_all, log=tmp_path / "server.log", timeout_s=60,
    )  # fmt: skip
    client = httpx.Client(
        base_url=serving.url,
        headers={"Authorization": f"Bearer {token.stdout.strip()}"},
        timeout=30,
    )
    health = {**serving.health.json(), "code": serving.health.status_code}
    try:
        yield client, ids, health
    finally:
        serving.stop(timeout_s=30)
        client.close()


def test_serve_answers_while_it_indexes_then_reads(served):
    client, ids, health = served
    assert health["code"] == 200 and health["index"] in ("building", "ready")
    # until the index is built, reads of runs say so (503, Retry-After), never wait on it
    deadline = time.monotonic() + 120
    while (r := client.get("/v1/runs", params={"limit": 50})).status_code == 503:
        assert "being built" in r.json()["detail"] and r.headers["retry-after"]
        assert client.get("/healthz").json()["index"] in ("building", "ready")
        assert time.monotonic() < deadline, "the run index was not built in 120 s"
        time.sleep(0.2)
    assert r.status_code == 200, r.text
    page = r.json()
    assert [x["run_id"] for x in page["runs"]] == ids[::-1][:50]  # newest first
    assert client.get("/healthz").json()["index"] == "ready"
    nxt = client.get("/v1/runs", params={"limit": 50, "cursor": page["next_cursor"]}).json()
    assert [x["run_id"] for x in nxt["runs"]] == ids[::-1][50:100]
    one = client.get(f"/v1/runs/{ids[2500]}")
    assert one.status_code == 200 and one.json()["status"] == "pass"
    labelled = client.get("/v1/runs", params={"limit": 1000, "label": "nightly=3"}).json()
    assert [x["run_id"] for x in labelled["runs"]] == ids[3::7][::-1]  # label nightly = i % 7
    assert client.get("/v1/runs/20990101-000000-nope00").status_code == 404
