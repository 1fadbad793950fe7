"""Naming the culprit across ranks and nodes: stragglers, a lost node (fleet sweeps: test_sweep_fleet.py)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from fleetval.run.execute import run_suite
from fleetval.run.pool import RankPool
from fleetval.store.dataset import Store
from fleetval.suite import parse_suite

pytestmark = pytest.mark.usefixtures("ray_session")

STRAGGLER_STEP = {"check": "straggler", "iters": 30, "warmup": 3}


def straggler_rows(tmp_path, faults: list[dict[str, Any]], pool: RankPool) -> list[dict[str, Any]]:
    store = Store(tmp_path)
    spec = parse_suite(
        {
            "name": "s",
            "placement": {"world_sizes": [4], "gpus_per_rank": 0},
            "steps": [STRAGGLER_STEP],
            "faults": faults,
        }
    )
    record = run_suite(spec, store, pool=pool)
    return store.results([record.run_id]).to_pylist()


def test_delayed_rank_is_named_with_its_node(tmp_path, warm_pool):
    got = straggler_rows(tmp_path, [{"kind": "delay", "rank": 2, "ms": 20}], warm_pool)
    failing = [r for r in got if r["status"] == "fail"]
    assert [r["rank"] for r in failing] == [2]
    assert f"rank 2 on {failing[0]['node']} arrives last" in failing[0]["message"]
    assert failing[0]["value"] >= 0.9  # last in (nearly) every iteration
    scored = [r for r in got if r["metric"] == "straggler_last_fraction"]
    assert len(scored) == 4 and all('"stragglers": [2]' in r["details"] for r in scored)
    # The same late rank is also the step's (non-aborting) culprit, named from the samples.
    late = [r for r in got if r["metric"] == "step_outcome"]
    assert [(r["rank"], r["status"]) for r in late] == [(2, "warn")], late


def test_clean_run_names_nobody(tmp_path, warm_pool):
    got = straggler_rows(tmp_path, [], warm_pool)
    assert [r["status"] for r in got] == ["pass"] * 4
    assert all('"stragglers": []' in r["details"] for r in got)


@pytest.mark.multinode
def test_lost_node_fails_the_step_naming_rank_and_node(tmp_path, ray_cluster):
    doomed = ray_cluster.add_node(num_cpus=1, labels={"fleetval/node": "doomed"})
    ray_cluster.wait_for_nodes()
    spec = parse_suite(
        {
            "name": "lost",
            "placement": {
                "world_sizes": [2],
                "gpus_per_rank": 0,
                "strategy": "STRICT_SPREAD",
                "nodes": ["head", "doomed"],
            },
            "timeouts": {"step_s": 60},
            "steps": [
                {"name": "quick", "check": "collectives", "collectives": ["barrier"]},
                {
                    "name": "long",
                    "check": "bandwidth",
                    "sizes": {"min": 4096, "max": 4096},
                    "warmup": 0,
                    "iters": 100000,
                },
            ],
        }
    )
    events: list[str] = []

    def kill_when_long_runs() -> None:
        deadline = time.monotonic() + 120
        while "long" not in events and time.monotonic() < deadline:  # its ranks report progress
            time.sleep(0.1)
        ray_cluster.remove_node(doomed)

    killer = threading.Thread(target=kill_when_long_runs, daemon=True)
    killer.start()
    store = Store(tmp_path)
    t0 = time.monotonic()
    record = run_suite(
        spec, store, on_event=lambda e: e.kind == "step_progress" and events.append(e.step)
    )
    killer.join(timeout=30)
    assert time.monotonic() - t0 < 60
    steps = {s["step"]: s for s in record.summary["steps"]}
    assert steps["quick"]["status"] == "pass"
    long = steps["long"]
    assert long["status"] == "fail"
    assert [(c["node"], c["reason"]) for c in long["culprits"]] == [("doomed", "crash")]
    assert store.results([record.run_id]).num_rows >= 2  # the quick step's rows are kept
