"""A slow trunk first crossed in the last rounds of a sweep is still named within 6 rounds.

1,024 nodes in 64 racks of 16 make 2,016 pairs of racks; a rack crosses at most 16 others
a round, so crossing them all takes rounds 2-6, and a pair first crossed in round 6 is named
in round 6 only if it is crossed twice then (two node-disjoint slow crossings) beside a fast
job inside each rack (`fleetval.fleet.planner._crossings`, `_controls`).
"""

from __future__ import annotations

from collections import defaultdict

from fleetval.fleet.coverage import Fabric
from fleetval.fleet.judge import Measurement, Planned
from fleetval.fleet.settings import SweepSettings
from fleetval.fleet.simulate import SimFleet, planted
from fleetval.fleet.verdict import FleetVerdict, run_rounds

Racks = tuple[str, str]


def _sweep(fleet: SimFleet, seed: int) -> tuple[FleetVerdict, dict[int, list[Planned]]]:
    """Six rounds of the sweep, and the pair jobs of each round."""
    rounds: dict[int, list[Planned]] = defaultdict(list)

    def measure(jobs: list[Planned]) -> list[Measurement]:
        for j in jobs:
            if len(j.nodes) == 2:
                rounds[j.round].append(j)
        return fleet.measure(jobs)

    settings = SweepSettings(seed=seed, max_rounds=6)
    return run_rounds(fleet.nodes, measure, settings, fabric=Fabric(fleet.topology)), rounds


def _racks(fleet: SimFleet, job: Planned) -> Racks:
    a, b = sorted(fleet.topology.group(n, "rack") or "" for n in job.nodes)
    return a, b


def _first_crossed(fleet: SimFleet, rounds: dict[int, list[Planned]]) -> dict[Racks, int]:
    first: dict[Racks, int] = {}
    for rnd in sorted(rounds):
        for j in rounds[rnd]:
            if (p := _racks(fleet, j))[0] != p[1]:
                first.setdefault(p, rnd)
    return first


def test_every_pair_of_racks_first_crossed_in_round_6_is_crossed_twice_beside_a_job_inside():
    fleet = planted(1024, 0, 0, seed=3, racks=64)
    _, rounds = _sweep(fleet, 3)
    first = _first_crossed(fleet, rounds)
    assert len(first) == 64 * 63 // 2  # every pair of racks crossed within 6 rounds
    late = sorted(p for p, rnd in first.items() if rnd == 6)
    assert late  # the fleet has pairs first crossed in the last round: what this tests
    inside = {a for js in rounds.values() for j in js if (a := _racks(fleet, j))[0] == a[1]}
    for p in late:
        crossings = [j for j in rounds[6] if _racks(fleet, j) == p]
        assert len(crossings) >= 2, f"{p} crossed once in round 6: a slow trunk waits a round"
        assert not set(crossings[0].nodes) & set(crossings[1].nodes)
        assert {(g, g) for g in p} <= inside, f"{p}: no job inside a rack to confirm it"


def test_a_slow_trunk_first_crossed_in_round_6_is_named_and_confirmed_within_6_rounds():
    clean = planted(1024, 0, 0, seed=3, racks=64)
    _, rounds = _sweep(clean, 3)
    late = max(p for p, rnd in _first_crossed(clean, rounds).items() if rnd == 6)
    fleet = planted(1024, 0, 0, seed=3, racks=64)
    fleet.trunks = {late: 0.5}  # slows nothing before round 6: the same plan until then
    v, _ = _sweep(fleet, 3)
    assert [(t.groups, t.confirmed) for t in v.trunks] == [(late, True)]
    assert v.rounds == 6
    assert not v.drain and not v.bad_links
