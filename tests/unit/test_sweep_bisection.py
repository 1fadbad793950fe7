"""Bisection isolates one slow node among N in about log2(N) rounds; a healthy fleet flags none."""

from __future__ import annotations

import math
import random

import pytest

from fleetval.detect.bisection import isolate
from fleetval.fleet.score import score_rows


def fleet(n: int) -> list[str]:
    return [f"node-{i:02d}" for i in range(n)]


def measure_with(bad: set[str], seed: int = 0):
    rng = random.Random(seed)
    calls: list[tuple[str, ...]] = []

    def measure(group: tuple[str, ...]) -> float:
        calls.append(group)
        base = 5.0 if bad & set(group) else 10.0  # a slow node halves its group's busbw
        return base * (1 + rng.uniform(-0.05, 0.05))  # +-5% noise

    return measure, calls


@pytest.mark.parametrize("n", [4, 5, 7, 8, 13, 16, 33, 64])
def test_one_slow_node_is_found_in_log_rounds(n):
    for position in range(0, n, max(1, n // 7)):
        bad = fleet(n)[position]
        measure, calls = measure_with({bad}, seed=position)
        found = isolate(fleet(n), measure)
        assert found.flagged == [bad], (n, bad, found)
        # O(log N): per halving level one round of two jobs, plus two for a node set aside
        # (it and a cleared pair), plus three once when two halves tie (is either slow?)
        levels = math.ceil(math.log2(n))
        assert found.rounds <= 2 * levels
        assert len(calls) <= 3 * levels + 3
        assert all(len(g) >= 2 for g in calls)  # every job is a real collective group


def test_power_of_two_fleet_takes_exactly_log2_rounds():
    measure, calls = measure_with({"node-11"})
    found = isolate(fleet(16), measure)
    assert found.flagged == ["node-11"] and found.rounds == 4 and len(calls) == 8


@pytest.mark.parametrize("n", [2, 3, 4, 9, 16])
def test_healthy_fleet_flags_nobody(n):
    measure, _ = measure_with(set())
    assert isolate(fleet(n), measure).flagged == []


def test_small_fleets_use_all_pairs():
    measure, calls = measure_with({"node-02"})
    found = isolate(fleet(3), measure)
    assert found.flagged == ["node-02"] and len(calls) == 3


def test_a_slow_pair_of_nodes_is_flagged_whole_after_a_fresh_comparison():
    measure, calls = measure_with({"node-04", "node-05"})
    found = isolate(fleet(8), measure)
    assert found.flagged == ["node-04", "node-05"] and "equally slow" in found.note
    # round 2 tied, so both halves were measured again beside two cleared nodes
    assert calls[-3:] == [("node-04", "node-00"), ("node-05", "node-00"), ("node-00", "node-01")]


def test_confirmation_drops_a_verdict_seen_once():
    seen = iter([5.0, 10.0])  # the first measurement of group A is a fluke

    def measure(group):
        return next(seen, 10.0) if group[0] == "node-00" else 10.0

    found = isolate(fleet(8), measure, confirm=True)
    # seen, not seen again, not seen a third time: noise
    assert found.flagged == [] and len(found.trials) == 6


def test_confirmation_is_not_undone_by_one_disturbed_measurement():
    calls = []

    def measure(group):
        calls.append(group)
        disturbed = len(calls) in (3, 4)  # the whole second measurement of round 1
        return 5.0 if "node-05" in group and not disturbed else 10.0

    found = isolate(fleet(8), measure, confirm=True)
    assert found.flagged == ["node-05"]
    assert [t.score for t in found.trials[:6]] == [10.0, 5.0, 10.0, 10.0, 10.0, 5.0]


def test_a_failed_group_counts_as_slow():
    def measure(group):
        return None if "node-05" in group else 10.0

    assert isolate(fleet(8), measure).flagged == ["node-05"]


def row(size: int, busbw: float | None, time_us: float | None = 10.0, status: str = "pass") -> dict:
    return {
        "step": "bw", "check": "bandwidth", "collective": "all_reduce", "op": "sum",
        "dtype": "float32", "size_bytes": size, "busbw_gbps": busbw, "algbw_gbps": None,
        "time_us_median": time_us, "status": status, "message": "",
    }  # fmt: skip


def test_a_sweep_job_scores_its_slowest_rank_at_the_largest_size():
    # Two ranks, three sizes; the late rank (second reading) waits least, so reads fast.
    rows = [
        row(s, b) for s, pair in ((1, (1.0, 9.0)), (2, (2.0, 9.0)), (3, (3.0, 9.0))) for b in pair
    ]
    assert score_rows(rows) == (3.0, {1: 1.0, 2: 2.0, 3: 3.0}, "")
    assert score_rows([row(1, None, 4.0), row(1, None, 8.0)])[0] == 125_000.0  # 1 / slower time
    assert score_rows([*rows, row(4, None, None, "fail")])[0] is None
    assert score_rows([])[0] is None
