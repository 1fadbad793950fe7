"""An injected delay counts in the bandwidth check's time per call, as a slow device's would
(real Ray, real gloo): two delayed ranks paired together, neither waiting for the other, are
slow, not healthy; their samples still hold only the collective (late arrival)."""

from __future__ import annotations

import statistics

import pytest

from fleetval.detect.lateness import late_ranks_in_step
from fleetval.run.execute import run_suite
from fleetval.store.dataset import Store
from fleetval.suite import parse_suite

pytestmark = [pytest.mark.usefixtures("ray_session"), pytest.mark.multinode]

DELAY_MS = 20
STEP = {"name": "bw", "check": "bandwidth", "collectives": ["all_reduce"],
        "sizes": {"min": 1024, "max": 1024}, "warmup": 1, "iters": 20}  # fmt: skip
PLACEMENT = {"world_sizes": [2], "gpus_per_rank": 0, "nodes": ["node-a", "node-b"]}


def test_two_delayed_ranks_together_time_their_delay_per_call(tmp_path, warm_pool):
    faults = [{"kind": "delay", "rank": r, "ms": DELAY_MS} for r in (0, 1)]
    spec = parse_suite({"name": "both-late", "placement": PLACEMENT, "steps": [STEP],
                        "faults": faults})  # fmt: skip
    store = Store(tmp_path)
    record = run_suite(spec, store, pool=warm_pool)
    rows = [r for r in store.results([record.run_id]).to_pylist() if r["step"] == "bw"]
    assert sorted(r["rank"] for r in rows) == [0, 1], record.summary
    for r in rows:
        # Each call: the rank's 20 ms delay, then a collective nobody waits in.
        assert r["time_us_median"] >= DELAY_MS * 1000, r
        assert r["busbw_gbps"] <= 1024 / (DELAY_MS * 1e-3) / 1e9, r
        # The samples hold the collective alone: neither rank waited out the other's delay.
        assert statistics.median(r["samples_us"]) < r["time_us_median"] - 0.9 * DELAY_MS * 1000
    assert late_ranks_in_step(rows) == []  # late alike: nobody arrives late against the other
