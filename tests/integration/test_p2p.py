"""The p2p check end to end: real gloo send/recv between every pair, exact, with its sign-off
gate (the `ray_session` fixture asserts that no actor or placement group is left behind)."""

from __future__ import annotations

import json

import pytest

from fleetval.run.execute import run_suite
from fleetval.signoff.evaluate import build_signoff
from fleetval.signoff.gates import GateName
from fleetval.store.dataset import Store
from fleetval.suite import parse_suite
from fleetval.vocab import GateStatus

pytestmark = pytest.mark.usefixtures("ray_session")


def _suite(min_gbps: float, faults: list[dict] | None = None) -> object:
    return parse_suite(
        {
            "name": "p2p",
            "placement": {"world_sizes": [4], "gpus_per_rank": 0},
            "steps": [
                {"check": "p2p", "pattern": "all", "sizes": {"min": "4KiB", "max": "64KiB",
                 "factor": 4}, "warmup": 1, "iters": 5},
            ],
            "gates": {"p2p": {"min_gbps": min_gbps}},
            "faults": faults or [],
        }
    )  # fmt: skip


def test_every_pair_is_measured_exactly_and_judged_by_its_gate(tmp_path, warm_pool):
    store = Store(tmp_path)
    record = run_suite(_suite(min_gbps=1e-6), store, pool=warm_pool)
    assert record.status == "pass", record.summary
    rows = store.results([record.run_id]).to_pylist()
    pairs = {(r["rank"], json.loads(r["details"])["peer"]) for r in rows}
    assert pairs == {(a, b) for a in range(4) for b in range(4) if a != b}  # both directions
    assert {r["size_bytes"] for r in rows} == {4096, 16384, 65536}
    assert all(r["wrong"] == 0 and r["busbw_gbps"] > 0 for r in rows)
    assert all(r["collective"] == "send_recv" and len(r["samples_us"]) == 5 for r in rows)
    gate = next(g for g in build_signoff(store, record.run_id).gates if g.gate == GateName.P2P)
    assert gate.status == GateStatus.PASS and gate.evidence_total == 12  # 12 directions at 64 KiB


def test_a_floor_no_pair_reaches_fails_the_gate_naming_the_pairs(tmp_path, warm_pool):
    store = Store(tmp_path)
    record = run_suite(
        _suite(min_gbps=1e6), store, pool=warm_pool
    )  # 1 PB/s: no loopback link reaches it
    gate = next(g for g in build_signoff(store, record.run_id).gates if g.gate == GateName.P2P)
    assert gate.status == GateStatus.FAIL
    assert len(gate.failing) == 12 and "<->" in gate.failing[0].text
