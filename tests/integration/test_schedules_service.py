"""A schedule in a real `fleetval serve` (uvicorn on loopback, the session's Ray cluster):
it fires while the service runs, a second service process on the same database fires
nothing twice, a restart neither repeats a firing nor makes a backlog, and /metrics shows
it all."""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers.service import BARRIER, Server, cli, make_server, start_serve, wait_for

EVERY_3S = "* * * * * */3"  # seconds resolution: a sixth field, written last


def start_replica(data: Path) -> tuple[subprocess.Popen, str]:
    """A second service process on the same data: an API replica whose scheduler races the
    first one's."""
    serving = start_serve(
        data, "--no-executor", "--no-access-log", "--limits", str(data / "limits.yaml"),
        log=data / "replica.log", timeout_s=60,
    )  # fmt: skip
    return serving.proc, serving.url


def fired_runs(server: Server) -> list[dict]:
    runs = server.client().get("/v1/runs", params={"label": "schedule=tick", "limit": 1000})
    return runs.json()["runs"]


def wait_fired(server: Server, at_least: int, timeout_s: float = 30) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        schedule = server.client("read").get("/v1/schedules/tick").json()
        if schedule["fired"] >= at_least:
            return schedule
        time.sleep(0.3)
    raise AssertionError(f"schedule fired {schedule['fired']} times, not {at_least}")


def metric(text: str, name: str) -> float:
    found = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    assert found, f"{name} not in /metrics"
    return float(found.group(1))


def assert_each_fire_time_once(server: Server) -> list[str]:
    """One run per fire time, and the schedule's counter agrees with the runs.

    NOTE: the schedule goes on firing while this reads, and a firing submits its run before
    it counts it: the runs and the counter are read again (within 10 s, three fire times)
    until both readings fall between two firings."""
    end = time.monotonic() + 10
    while True:
        times = [r["labels"]["fire_time"] for r in fired_runs(server)]
        fired = server.client("read").get("/v1/schedules/tick").json()["fired"]
        if fired == len(times) or time.monotonic() > end:
            break
        time.sleep(0.1)
    assert len(times) == len(set(times)), sorted(times)
    assert fired == len(times), (fired, sorted(times))
    return sorted(times)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_schedule_fires_survives_a_restart_and_shows_in_metrics(ray_cluster, tmp_path):
    (tmp_path / "limits.yaml").write_text("min_schedule_interval_s: 1\nmax_active_per_owner: 100\n")
    server = make_server(tmp_path, ray_cluster)
    server.args = ("--limits", str(tmp_path / "limits.yaml"), "--no-access-log")
    server.start()
    replica, _ = start_replica(tmp_path)
    try:
        suite = tmp_path / "tiny.yaml"
        suite.write_text(json.dumps(BARRIER))
        add = cli(
            "schedule", "add", "tick", str(suite), "--cron", EVERY_3S, "--label", "team=net",
            "--server", server.url, "--token", server.tokens["submit"], data=tmp_path,
        )  # fmt: skip
        assert add.returncode == 0, add.stdout + add.stderr

        # it fires while the service runs; the run it queued runs and passes
        wait_fired(server, 2)
        first = min(fired_runs(server), key=lambda r: r["labels"]["fire_time"])
        assert first["submitter"] == "ci-submit" and first["labels"]["team"] == "net"
        assert wait_for(server.client(), first["run_id"])["status"] == "pass"
        before = assert_each_fire_time_once(server)  # two schedulers raced on every one

        # both processes stop; fire times pass; the service comes back on the same data
        replica.terminate()
        replica.wait(30)
        server.stop()
        stopped = time.time()
        # Down 9 s: at least two fire times come due while nothing runs, and the latest of them
        # lies more than 6 s after the stop whatever the restart costs (the 3 s grid's last
        # point before the restart); down 7 s, a quick restart caught up a fire time 5.2 s
        # after it, which the assertion below could not tell from the first one after it.
        time.sleep(9)
        server.start()
        after_restart = wait_fired(server, len(before) + 2)
        times = assert_each_fire_time_once(server)
        assert times[: len(before)] == before  # nothing refired
        # catchup once: the fire times missed while down make one run, for the latest of
        # them (a backlog would start with the first fire time after the stop)
        first_back = min(t for t in times if _epoch(t) > stopped)
        assert _epoch(first_back) > stopped + 6, (stopped, times)

        # /metrics: the counter and the fire times, as the database keeps them
        text = server.client("read").get("/metrics").text
        fired = metric(text, 'fleetval_schedule_fires_total{outcome="fired",schedule="tick"}')
        assert fired >= after_restart["fired"]
        last = metric(text, 'fleetval_schedule_last_fire_timestamp_seconds{schedule="tick"}')
        nxt = metric(text, 'fleetval_schedule_next_fire_timestamp_seconds{schedule="tick"}')
        assert last >= _epoch(times[-1]) and nxt > last and nxt % 3 == 0

        listed = cli("schedule", "list", "--json", "--server", server.url,
                     "--token", server.tokens["read"], data=tmp_path)  # fmt: skip
        assert [s["name"] for s in json.loads(listed.stdout)] == ["tick"]
        gone = cli("schedule", "delete", "tick", "--server", server.url,
                   "--token", server.tokens["submit"], data=tmp_path)  # fmt: skip
        assert gone.returncode == 0, gone.stderr
        again = cli("schedule", "delete", "tick", "--server", server.url,
                    "--token", server.tokens["submit"], data=tmp_path)  # fmt: skip
        assert again.returncode == 2 and "no schedule 'tick'" in again.stderr
    finally:
        if replica.poll() is None:
            replica.terminate()
            replica.wait(30)
        server.stop()


def _epoch(stamp: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(stamp).timestamp()
