"""One suite's ranks run with the same settings through `run_suite` and through a real
`fleetval serve`, however the service was started (issue 44 §5): not a timing test, the
settings each node's fingerprint recorded from inside its ranks.

The service runs on its embedded Ray, started as a service manager may start it (niced,
pinned to one CPU, another OMP_NUM_THREADS): Ray's workers inherit all three from it, so
before the ranks set their own (fleetval.run.ranksettings) these differed from a run's.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx

from fleetval.run.execute import run_suite
from fleetval.run.ranksettings import RANK_NICENESS
from fleetval.store.dataset import Store
from fleetval.suite import parse_suite
from tests.helpers.service import BARRIER, cli, executor_up, start_serve, wait_for

SERVICE_NICE = 5 if os.geteuid() == 0 else 0  # only root may raise a niced process again


def _settings(data: Path) -> list[dict[str, object]]:
    """Per node of the store's one run: what its ranks ran with."""
    out = []
    for node in Store(data).nodes().to_pylist():
        extra = json.loads(node["extra"])
        out.append(
            {
                "niceness": extra["niceness"],
                "threads": extra["threads"],
                "cpus_allowed": extra["cpus_allowed"],
                "OMP_NUM_THREADS": extra["env"].get("OMP_NUM_THREADS"),
            }
        )
    return out


def test_ranks_run_alike_through_run_suite_and_a_service_started_otherwise(
    tmp_path: Path, ray_session: object
) -> None:
    run_suite(parse_suite(BARRIER, "tiny"), Store(tmp_path / "run"))
    direct = _settings(tmp_path / "run")

    data = tmp_path / "svc"
    data.mkdir()
    token = cli("token", "create", "--scope", "submit", "--name", "ci", data=data).stdout.strip()

    def as_a_service_manager_starts_it() -> None:
        os.nice(SERVICE_NICE)
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})

    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_worker_niceness")}
    serving = start_serve(
        data,
        "--no-access-log",
        env={**env, "OMP_NUM_THREADS": "3", "PYTHONPATH": os.getcwd()},
        ready=executor_up,
        preexec=as_a_service_manager_starts_it,
        timeout_s=180,
    )
    try:
        with httpx.Client(
            base_url=serving.url, headers={"Authorization": f"Bearer {token}"}, timeout=30
        ) as c:
            run_id = c.post("/v1/runs", json={"suite": BARRIER}).json()["run_id"]
            assert wait_for(c, run_id, timeout_s=180)["status"] == "pass"
    finally:
        serving.stop()
    served = _settings(data)

    assert direct and served
    assert {json.dumps(s, sort_keys=True) for s in direct + served} == {
        json.dumps(direct[0], sort_keys=True)
    }, f"run_suite: {direct}; the service: {served}"
    assert direct[0]["niceness"] == RANK_NICENESS
    assert direct[0]["threads"] == 1 and direct[0]["OMP_NUM_THREADS"] == "1"
