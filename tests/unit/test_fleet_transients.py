"""An 8-node fleet in two racks whose jobs transients hit: a fifth of them, each up to 80%
slower, beside a 7.5% core noise (the heavy tail of a loaded shared box). Each seed is one
that drained a healthy node, or named a healthy link, before an effect's evidence had to
stand without the jobs transients may have made (`fleetval.fleet.transients`). Seeds 4 and
70 did until it also stood without jobs unlike the rest of its own (a link, a node, each on
two jobs 2-3x slow, one twice the other's slowness)."""

from __future__ import annotations

import numpy as np

from fleetval.fleet.coverage import Fabric
from fleetval.fleet.settings import SweepSettings
from fleetval.fleet.simulate import SimFleet, racked
from fleetval.fleet.transients import set_aside, unlike
from fleetval.fleet.verdict import FleetVerdict, run_rounds

EIGHT = [f"node-{i}" for i in range(8)]
RACKS = racked(EIGHT, 2)
SETTINGS = SweepSettings(max_drain_share=0.25)
SEEDS = (4, 22, 44, 48, 61, 68, 69, 70, 90)


def sweep(seed: int, **faults: object) -> FleetVerdict:
    f = SimFleet(
        list(EIGHT), topology=RACKS, seed=seed, noise=0.075, disturbed=0.2, disturbance=0.8,
        **faults,  # type: ignore[arg-type]
    )  # fmt: skip
    return run_rounds(EIGHT, f.measure, SETTINGS, fabric=Fabric(RACKS))


def test_a_clean_fleet_hit_by_transients_drains_nothing_and_never_exits_1():
    for seed in SEEDS:
        v = sweep(seed)
        assert not v.drain and not v.bad_links and not v.bad_trunks, (seed, v.to_dict())
        assert v.exit_code in (0, 5), seed


def test_two_slow_nodes_among_the_transients_are_both_drained():
    for seed in SEEDS:
        v = sweep(seed, compute={"node-1": 0.05}, nic={"node-6": 0.05})
        assert sorted(n.node for n in v.drain) == ["node-1", "node-6"], seed
        assert v.exit_code == 1, seed


def test_jobs_far_past_any_transients_size_are_never_set_aside():
    """A link 20x slow in both its jobs beside a clean night: no transient tonight is near."""
    assert set_aside(np.array([2.9, 2.8]), np.array([]), 14, 0.25, 0.01) == 0


def test_two_jobs_as_slow_as_tonights_transients_are_set_aside_as_one_of_them():
    """Two jobs 2-3x slow where tonight's other jobs show transients of that size: the
    slowest could be a transient's, both together could not; where 200 other jobs show no
    transient, neither is set aside."""
    hits = np.array([0.5, 0.9])
    assert set_aside(np.array([0.95, 0.55]), hits, 14, 0.25, 0.01) == 1
    assert set_aside(np.array([0.95, 0.55]), np.array([]), 200, 0.25, 0.01) == 0


def test_a_job_slower_than_the_rest_of_its_effects_by_more_than_the_noise_is_unlike_them():
    """A fault slows its jobs alike: 0.5 slower than its one other job at 10% noise is 5
    noise units (past 3 x sqrt(2)); three jobs within 3% of each other are alike."""
    assert unlike(np.array([-0.5, 0.0]), 0.1) == 1
    assert unlike(np.array([-0.9, -0.5, 0.0, 0.02]), 0.1) == 2
    assert unlike(np.array([-0.31, -0.3, -0.28]), 0.1) == 0
