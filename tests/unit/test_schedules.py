"""Schedules: fire times, the missed-fire policy, and one run per fire time when schedulers
race on one database (two connections, two threads) or die between submit and claim."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from fleetval.api.db import Scope, ServiceDB, Submission
from fleetval.api.executor import Executor
from fleetval.api.limits import Limits
from fleetval.api.scheduler import Scheduler, submission_id
from fleetval.api.schedules import (
    LATE_S,
    CronError,
    decide,
    latest_at,
    min_interval_s,
    next_after,
    stamp,
    validate,
)
from fleetval.store.dataset import Store
from fleetval.store.records import RunFilter
from fleetval.vocab import Catchup
from tests.helpers.app import app_client

T0 = datetime(2025, 3, 1, 2, 0, 0, tzinfo=UTC)
EVERY_10S = "* * * * * */10"
LIMITS = Limits(max_active_per_owner=1000, min_schedule_interval_s=1)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


# -- fire times ------------------------------------------------------------------------


def test_next_and_latest_fire_times():
    assert next_after("0 2 * * *", T0) == T0 + timedelta(days=1)  # strictly after
    assert next_after("0 2 * * *", at(-0.5)) == T0
    assert latest_at("0 2 * * *", T0) == T0  # at or before
    assert latest_at("0 2 * * *", at(-1)) == T0 - timedelta(days=1)
    assert next_after(EVERY_10S, at(3.7)) == at(10)
    assert latest_at(EVERY_10S, at(19.9)) == at(10)
    assert next_after("@hourly", T0) == at(3600)


def test_how_often_a_cron_may_fire():
    assert min_interval_s("0 2 * * *") == 60.0  # five fields: minutes apart at least
    assert min_interval_s("* * * * *") == 60.0
    assert min_interval_s("* * * * * 30") == 60.0  # one second of each minute
    assert min_interval_s(EVERY_10S) == 10.0
    assert min_interval_s("* * * * * 0,50") == 10.0  # across the minute: 50 -> 0
    assert min_interval_s("* * * * * *") == 1.0
    validate("0 2 * * *", 60)
    with pytest.raises(CronError, match=r"fires every 10 s.*min_schedule_interval_s"):
        validate(EVERY_10S, 60)
    for bad in ("bogus", "61 * * * *", "* * *", "0 2 * * mon-xyz"):
        with pytest.raises(CronError, match="not a cron expression"):
            validate(bad, 60)


# -- the missed-fire policy ------------------------------------------------------------


def test_a_due_fire_time_fires_on_time_and_a_little_late():
    on_time = decide(EVERY_10S, at(10), at(10), Catchup.SKIP)
    assert (on_time.fire_at, on_time.next_fire, on_time.missed) == (at(10), at(20), False)
    late = decide(EVERY_10S, at(10), at(10.9), Catchup.SKIP)  # one tick late
    assert late.fire_at == at(10) and not late.missed


def test_missed_firings_run_once_or_are_skipped_never_a_backlog():
    back = at(10 + 3600)  # down an hour: 360 fire times missed; back on one of them
    for catchup in Catchup:  # the one due now is on time: it fires; the 360 others never do
        firing = decide(EVERY_10S, at(10), back, catchup)
        assert (firing.fire_at, firing.next_fire, firing.missed) == (back, at(3620), True)
    # a daily schedule whose fire time passed while down, seen 2 h later
    daily = decide("0 2 * * *", T0, at(7200), Catchup.ONCE)
    assert daily.fire_at == T0 and daily.next_fire == T0 + timedelta(days=1)
    assert decide("0 2 * * *", T0, at(7200), Catchup.SKIP).fire_at is None
    # within LATE_S it fires whatever catchup says (a restart, a slow tick)
    assert decide("0 2 * * *", T0, at(LATE_S), Catchup.SKIP).fire_at == T0


# -- schedulers on a real database -----------------------------------------------------


def _scheduler(data: Path) -> Scheduler:
    db = ServiceDB(data)
    return Scheduler(db, Executor(db, Store(data), None), LIMITS)


def _add(db: ServiceDB, name: str, cron: str, due: datetime, catchup: str = "once") -> None:
    assert db.add_schedule(
        name=name, cron=cron, suite="smoke", labels={"team": "net"}, retries=0,
        catchup=catchup, owner="alice", next_fire=stamp(due),
    )  # fmt: skip


def _runs(db: ServiceDB, name: str) -> list[dict[str, str]]:
    return [s.labels for s in _subs(db, name, 1000)]


def _subs(db: ServiceDB, name: str, limit: int) -> list[Submission]:
    rows = db.page(RunFilter(labels={"schedule": name}), before=None, limit=limit)
    return [Submission.from_row(r) for r in rows]


def test_two_schedulers_racing_on_one_database_fire_each_time_once(tmp_path):
    """Two connections, two threads, the same `now` at each tick: one run per fire time,
    one winner per claim, and the counter agrees."""
    a, b = _scheduler(tmp_path), _scheduler(tmp_path)
    a.db.create_token(Scope.SUBMIT, "alice")
    _add(a.db, "race", EVERY_10S, at(0))
    ticks = 25
    barrier = threading.Barrier(2, timeout=30)
    won: dict[str, list[str]] = {"a": [], "b": []}

    def work(key: str, s: Scheduler) -> None:
        for k in range(ticks):
            barrier.wait()
            won[key] += s.tick(at(10 * k + 0.2))

    threads = [threading.Thread(target=work, args=kv) for kv in (("a", a), ("b", b))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    fired = [labels["fire_time"] for labels in _runs(a.db, "race")]
    assert sorted(fired) == [stamp(at(10 * k)) for k in range(ticks)]  # each once, none lost
    assert len(won["a"]) + len(won["b"]) == ticks
    schedule = b.db.schedule("race")
    assert (
        schedule is not None
        and schedule.fired == ticks
        and schedule.next_fire == stamp(at(10 * ticks))
    )
    assert schedule.last_fire == stamp(at(10 * (ticks - 1))) and schedule.last_error == ""


def test_a_scheduler_that_died_between_submit_and_claim_queues_nothing_twice(tmp_path):
    first = _scheduler(tmp_path)
    first.db.create_token(Scope.SUBMIT, "alice")
    _add(first.db, "nightly", "0 2 * * *", T0)
    schedule = first.db.schedule("nightly")
    assert schedule is not None
    firing = decide(schedule.cron, T0, at(1), Catchup.ONCE)
    run_id = first._submit(schedule, firing)  # ... and the process dies before its claim
    first.db.close()

    restarted = _scheduler(tmp_path)  # the same database, as after a restart
    assert restarted.tick(at(2)) == ["nightly"]
    assert restarted.tick(at(3)) == []  # claimed: due tomorrow
    runs = _subs(restarted.db, "nightly", 10)
    assert [r.run_id for r in runs] == [run_id]
    sub = runs[0]
    assert sub.submission_id == submission_id("nightly", T0) and sub.submitter == "alice"
    assert sub.labels == {"team": "net", "schedule": "nightly", "fire_time": stamp(T0)}
    schedule = restarted.db.schedule("nightly")
    assert schedule is not None and schedule.fired == 1 and schedule.last_run_id == run_id


@pytest.mark.parametrize(("catchup", "runs", "skipped"), [("once", 1, 0), ("skip", 0, 1)])
def test_downtime_policy_on_the_database(tmp_path, catchup, runs, skipped):
    s = _scheduler(tmp_path)
    s.db.create_token(Scope.SUBMIT, "alice")
    _add(s.db, "hourly", "0 * * * *", T0, catchup=catchup)
    back = at(5 * 3600 + 600)  # down for five fire times
    s.tick(back)
    s.tick(back + timedelta(seconds=1))
    labels = _runs(s.db, "hourly")
    assert len(labels) == runs
    if runs:
        assert labels[0]["fire_time"] == stamp(at(5 * 3600))  # the latest missed one
    schedule = s.db.schedule("hourly")
    assert schedule is not None and schedule.skipped == skipped and schedule.fired == runs
    assert schedule.next_fire == stamp(at(6 * 3600))


def test_a_firing_refused_by_submit_is_counted_and_the_schedule_moves_on(tmp_path):
    s = _scheduler(tmp_path)
    _add(s.db, "orphan", "0 2 * * *", T0)  # alice holds no token (revoked, or never had one)
    assert s.tick(at(1)) == ["orphan"]
    schedule = s.db.schedule("orphan")
    assert schedule is not None and schedule.refused == 1 and schedule.fired == 0
    assert "no valid token with scope submit" in schedule.last_error
    assert schedule.next_fire == stamp(T0 + timedelta(days=1)) and not _runs(s.db, "orphan")


# -- REST ------------------------------------------------------------------------------


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[TestClient, dict[str, dict[str, str]]]]:
    with app_client(
        tmp_path, alice=Scope.SUBMIT, bob=Scope.SUBMIT, reader=Scope.READ, root=Scope.ADMIN
    ) as served:
        yield served


def test_rest_scopes_ownership_and_problems(api):
    client, h = api
    body = {"name": "nightly", "cron": "0 2 * * *", "suite": "smoke", "labels": {"k": "v"}}
    assert client.post("/v1/schedules", json=body, headers=h["reader"]).status_code == 403
    made = client.post("/v1/schedules", json=body, headers=h["alice"])
    assert made.status_code == 201 and made.json()["owner"] == "alice"
    assert made.json()["next_fire"].endswith("T02:00:00+00:00")
    again = client.post("/v1/schedules", json=body, headers=h["bob"])
    assert again.status_code == 409 and again.json()["errors"][0]["loc"] == ["body", "name"]
    assert [s["name"] for s in client.get("/v1/schedules", headers=h["reader"]).json()] == [
        "nightly"
    ]
    assert client.get("/v1/schedules/nightly", headers=h["reader"]).json()["labels"] == {"k": "v"}
    skip = {**body, "name": "weekly", "cron": "@weekly", "catchup": "skip"}
    assert client.post("/v1/schedules", json=skip, headers=h["bob"]).json()["catchup"] == "skip"
    assert client.delete("/v1/schedules/weekly", headers=h["bob"]).status_code == 200
    assert client.delete("/v1/schedules/nightly", headers=h["reader"]).status_code == 403
    assert client.delete("/v1/schedules/nightly", headers=h["bob"]).status_code == 403
    assert client.delete("/v1/schedules/nightly", headers=h["root"]).status_code == 200
    missing = client.get("/v1/schedules/nightly", headers=h["reader"])
    assert (
        missing.status_code == 404 and missing.headers["content-type"] == "application/problem+json"
    )


@pytest.mark.parametrize(
    ("change", "loc"),
    [
        ({"cron": "every night"}, ["body", "cron"]),
        ({"cron": "* * * * * */5"}, ["body", "cron"]),  # over min_schedule_interval_s
        ({"suite": "no-such-suite"}, ["body", "suite"]),
        ({"suite": {"name": "x", "steps": [{"check": "bandwidth", "iters": 10**9}]}},
         ["body", "suite", "steps", "0", "iters"]),  # over max_iterations, as submit says
        ({"catchup": "backlog"}, ["body", "catchup"]),
        ({"name": "../etc"}, ["body", "name"]),
    ],
)  # fmt: skip
def test_invalid_schedules_are_422_naming_the_field(api, change, loc):
    client, h = api
    body = {"name": "n", "cron": "0 2 * * *", "suite": "smoke", **change}
    r = client.post("/v1/schedules", json=body, headers=h["alice"])
    assert r.status_code == 422, r.text
    assert r.json()["errors"][0]["loc"][: len(loc)] == loc
