"""Late ranks, slow nodes and throttled ranks named on real runs (Ray + gloo), faults made
both by the suite and from outside fleetval (SIGSTOP/SIGCONT on a rank's process)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from fleetval.detect.lateness import late_ranks_in_step, lateness
from fleetval.run.execute import run_suite
from fleetval.run.pool import RankPool
from fleetval.store.dataset import Store
from fleetval.suite import parse_suite
from fleetval.testing.rayprocs import rank_pids, throttled

pytestmark = [pytest.mark.usefixtures("ray_session"), pytest.mark.multinode]

BANDWIDTH = {
    "name": "bw",
    "check": "bandwidth",
    "collectives": ["all_reduce"],
    "sizes": {"min": 1024, "max": 65536, "factor": 8},
    "warmup": 2,
    "iters": 12,
}
ISOLATE = {"check": "isolate", "size": 16384, "warmup": 2}
# 2 ranks on each of two simulated nodes: ranks 0,1 on node-a, ranks 2,3 on node-b.
TWO_NODES = {"world_sizes": [4], "gpus_per_rank": 0, "nodes": ["node-a", "node-b"]}


def run(
    tmp_path, pool: RankPool, steps: list[dict[str, Any]], faults=(), on_event=None
) -> list[dict[str, Any]]:
    spec = parse_suite(
        {"name": "late", "placement": TWO_NODES, "steps": steps, "faults": list(faults)}
    )
    store = Store(tmp_path)
    record = run_suite(spec, store, on_event=on_event, pool=pool)
    return store.results([record.run_id]).to_pylist()


def step_rows(rows: list[dict[str, Any]], step: str) -> list[dict[str, Any]]:
    return [r for r in rows if r["step"] == step]


def evidence(rows: list[dict[str, Any]]) -> str:
    """Each all_reduce size's lateness and noise (µs) and any row without samples: what a
    failed lateness assertion needs to say why."""
    by_size: dict[int, dict[int, list[float]]] = {}
    lines = []
    for r in rows:
        if r["samples_us"]:
            by_size.setdefault(r["size_bytes"], {})[r["rank"]] = r["samples_us"]
        else:
            lines.append(f"rank {r['rank']} {r['status']} {r['metric']}: {r['message']}")
    for size, per_rank in sorted(by_size.items()):
        found = lateness([per_rank[k] for k in sorted(per_rank)])
        lines.append(f"{size} B: lateness {found.lateness_us.round()} noise {found.noise_us:.0f}")
    return "\n".join(lines)


def flagged_by_isolation(rows: list[dict[str, Any]]) -> list[int]:
    verdicts = [r for r in step_rows(rows, "isolate") if r["metric"] == "isolated"]
    assert len(verdicts) == 4
    print("isolate:", verdicts[0]["details"])  # the evidence, shown when an assertion fails
    return sorted(r["rank"] for r in verdicts if r["status"] == "fail")


def test_clean_run_names_nobody(tmp_path, warm_pool):
    rows = run(
        tmp_path, warm_pool, [BANDWIDTH, {"check": "straggler", "iters": 20, "warmup": 2}, ISOLATE]
    )
    assert late_ranks_in_step(step_rows(rows, "bw")) == []
    assert late_ranks_in_step(step_rows(rows, "straggler")) == []
    assert flagged_by_isolation(rows) == []
    # Judged rows pass; the isolation groups' times are measurements, recorded only.
    assert {r["status"] for r in rows} == {"pass", "info"}
    assert all(r["metric"] == "isolate_group_time_us" for r in rows if r["status"] == "info")


def test_a_30ms_delay_on_rank_2_is_named_with_its_node(tmp_path, warm_pool):
    rows = run(tmp_path, warm_pool, [BANDWIDTH], faults=[{"kind": "delay", "rank": 2, "ms": 30}])
    (late,) = late_ranks_in_step(step_rows(rows, "bw"))
    assert (late.rank, late.node) == (2, "node-b")
    assert 25_000 < late.lateness_us < 40_000
    assert "node-b hosts ranks 2,3, late: 2" in late.detail


def test_a_slow_node_is_named_by_lateness_and_by_isolation(tmp_path, warm_pool):
    """NOTE: 30 ms for lateness, as for one rank, not 10: when a node's ranks are all late,
    how much their sleep oversleeps each iteration counts as noise, and on a loaded 2-core CI
    host a 10 ms node delay once went unnamed (stop 35; the message now shows each size's
    noise). Isolation needs no more than 10 ms (its groups time ~1 ms), and 30 ms there cost
    the test 15 s more.
    """
    rows = run(
        tmp_path,
        warm_pool,
        [BANDWIDTH, ISOLATE],
        faults=[
            {"kind": "delay", "node": "node-b", "ms": 30, "step": "bw"},
            {"kind": "delay", "node": "node-b", "ms": 10, "step": "isolate"},
        ],
    )
    bw = step_rows(rows, "bw")
    late = late_ranks_in_step(bw)
    found = sorted((lr.rank, lr.node) for lr in late)
    assert found == [(2, "node-b"), (3, "node-b")], evidence(bw)
    assert all("node late" in lr.detail for lr in late)
    assert flagged_by_isolation(rows) == [2, 3]


@pytest.mark.slow
def test_a_rank_throttled_from_outside_is_isolated(tmp_path, warm_pool):
    """Stopped 15 ms in every 20: the rank stalls its peers inside each collective, so
    arrival order barely shows it; timing each half of the ranks alone does.

    NOTE: 15 of 20, not 10 of 20: on a host with many more runnable processes than cores
    (this test machine), the scheduler lets a process that was stopped catch up when it
    resumes, so a 50% duty cycle costs it far less than half its speed.

    NOTE: on a spiky host `isolate` misses such a rank about 1 time in 10 (bench/RESULTS.md,
    "Confirmation, before and after": 21 of 200; a full test run missed it once in two), and
    never names another: the run is made again once where it named nobody, never where it
    named someone else.
    """
    for attempt in range(2):
        ready, pick = threading.Event(), []

        def on_event(e: Any, pick: list[int] = pick, ready: threading.Event = ready) -> None:
            if e.kind == "step_start" and not pick:
                pick.append(rank_pids(2, node="node-b")[0])  # one of node-b's two ranks
                ready.set()

        with throttled(ready, pick, stop_ms=15, period_ms=20) as stops:
            rows = run(tmp_path / str(attempt), warm_pool, [BANDWIDTH, ISOLATE], on_event=on_event)
        assert stops[0] > 100, f"the throttle stopped the rank only {stops[0]} times"
        pid_of = {r["rank"]: r["details"] for r in rows if r["metric"] == "isolated"}
        victim = next(rank for rank, d in pid_of.items() if f'"pid": {pick[0]}' in d)
        flagged = flagged_by_isolation(rows)
        assert flagged in ([], [victim]), f"isolate named {flagged}, the throttled rank is {victim}"
        if flagged:
            break
    assert flagged == [victim]
    verdict = next(r for r in rows if r["metric"] == "isolated" and r["rank"] == victim)
    assert f"rank {victim} on node-b" in verdict["message"] and "round 1" in verdict["message"]
    # Lateness may see part of it (stops that land between collectives), never someone else.
    assert {lr.rank for lr in late_ranks_in_step(step_rows(rows, "bw"))} <= {victim}
