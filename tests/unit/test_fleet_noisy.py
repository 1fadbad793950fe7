"""The fabric model's sweeps of an 8-node fleet in two racks at 30% noise (a loaded shared
box): few jobs, so the noise is itself uncertain, and the planner must measure what is
still open. Each case is a seed that once went wrong, with its neighbours."""

from __future__ import annotations

from fleetval.fleet.coverage import Fabric
from fleetval.fleet.effects import Obs
from fleetval.fleet.judge import Measurement, Planned, assess
from fleetval.fleet.planner import first_pairs, next_round
from fleetval.fleet.settings import SweepSettings
from fleetval.fleet.simulate import SimFleet, racked
from fleetval.fleet.verdict import FleetVerdict, run_rounds
from fleetval.vocab import SweepPhase

EIGHT = [f"node-{i}" for i in range(8)]
RACKS = racked(EIGHT, 2)
SETTINGS = SweepSettings(max_drain_share=0.25)
NOISE = 0.3
TRUNK = ("rack-00", "rack-01")


def sweep(seed: int, fabric: Fabric | None = None, **faults: object) -> FleetVerdict:
    f = SimFleet(list(EIGHT), topology=RACKS, seed=seed, noise=NOISE, **faults)  # type: ignore[arg-type]
    return run_rounds(EIGHT, f.measure, SETTINGS, fabric=fabric or Fabric(RACKS))


def test_a_slow_link_of_round_2_is_measured_that_sweep_named_and_neither_end_drained():
    """Seeds 8 and 13 read the noise as 15% from 16 jobs and drained an end at z 3.4 (left
    it suspect): each z is now read against Student's t at the noise's degrees of freedom.
    Seeds 15 and 28 measured an end alone again, which broke round 2's pair, and the link
    was not measured that sweep (exit 0): a link of tonight's matching no job measured is
    measured once its ends are proven good."""
    link = next(p for p in first_pairs(EIGHT, SETTINGS, Fabric(RACKS)) if not RACKS.same(*p))
    for seed in (0, 8, 13, 15, 28):
        v = sweep(seed, links={link: 0.05})
        assert not v.drain, (seed, [n.to_dict() for n in v.drain])
        assert any(tuple(sorted(j.nodes)) == link for j in v.trials), seed
        assert [(x.nodes, x.confirmed) for x in v.links] == [(link, True)], seed


def test_a_slow_trunk_is_named_when_nodes_measured_alone_again_break_the_matching():
    """Seed 15: two nodes alone again left round 2 two pairs, both crossing; the fit read
    them as a slow round. The matching now keeps a control inside a rack."""
    for seed in (0, 1, 15):
        v = sweep(seed, trunks={TRUNK: 0.05})
        assert [(t.groups, t.confirmed) for t in v.trunks] == [(TRUNK, True)], seed
        assert not v.drain and not v.named and not v.links, seed


def test_a_trunk_whose_crossings_bound_it_loosely_is_crossed_again():
    """Seed 2: round 2's three slow crossings beside one fast job inside were read as a slow
    round, the trunk at 0, and no crossing came again; a pair of groups its crossings bound
    no better than `max_tolerance` is now crossed again beside jobs inside."""
    v = sweep(2, nic={"node-2": 0.05}, trunks={TRUNK: 0.1})
    assert [n.node for n in v.drain] == ["node-2"]
    assert [(t.groups, t.confirmed) for t in v.trunks] == [(TRUNK, True)]


def last_nights(rounds: list[list[tuple[str, str]]], slow: tuple[str, str]) -> list[Obs]:
    """Last night's pair rounds (from round 2), `slow` at 8% of the others."""
    return [
        Obs(SweepPhase.PAIR, p, 8.0 if p == slow else 100.0 + 3 * i, round=r + 2, age=1)
        for r, pairs in enumerate(rounds)
        for i, p in enumerate(pairs)
    ]


def test_a_link_slow_in_a_past_sweep_is_measured_again_once_its_ends_are_proven():
    """A link slow in last night's one job of it, no job on it tonight yet: with no job of
    tonight's, its past slowness may sit on its change since then as cheaply as on the link,
    and the coverage would come back to it only sweeps later (a 5x link measured in one sweep
    of seven). It is measured again in the first round whose ends are proven good."""
    link = ("node-2", "node-5")
    last_night = [
        [("node-0", "node-1"), ("node-3", "node-4"), ("node-6", "node-7"), link],
        [("node-0", "node-2"), ("node-1", "node-5"), ("node-3", "node-6"), ("node-4", "node-7")],
        [("node-0", "node-3"), ("node-1", "node-2"), ("node-4", "node-5"), ("node-6", "node-7")],
    ]
    past = last_nights(last_night, slow=link)
    tonight = [Measurement(Planned(1, SweepPhase.ALONE, (n,)), None) for n in EIGHT]
    matching = [
        ("node-0", "node-2"),
        ("node-1", "node-5"),
        ("node-3", "node-6"),
        ("node-4", "node-7"),
    ]
    tonight += [
        Measurement(Planned(2, SweepPhase.PAIR, p), 100.0 + i) for i, p in enumerate(matching)
    ]
    a = assess(EIGHT, tonight, SETTINGS, RACKS, past=past)
    assert {"node-2", "node-5"} <= a.good and link in a.recheck_links, a.recheck_links
    jobs = next_round(EIGHT, a, 3, SETTINGS, Fabric(RACKS))
    assert any(j.nodes == link and j.why == "confirm link" for j in jobs), jobs


def test_a_link_slow_tonight_is_measured_again_before_an_ends_link_slow_only_last_night():
    """node-0 <-> node-7 slow in round 2 tonight, both ends fast with others in round 3; node-0
    <-> node-1 slow in last night's one job of it. Both links are open, and they share
    node-0: tonight's evidence is measured first. Taken in name order, the link slow only last
    night went first, and on the 8-node Ray fleet node-0's past links took round after round
    while tonight's slow link waited until round 7."""
    link, old = ("node-0", "node-7"), ("node-0", "node-1")
    last_night = [
        [old, ("node-2", "node-3"), ("node-4", "node-6"), ("node-5", "node-7")],
        [("node-0", "node-4"), ("node-1", "node-2"), ("node-3", "node-7"), ("node-5", "node-6")],
        [("node-0", "node-5"), ("node-1", "node-3"), ("node-2", "node-6"), ("node-4", "node-7")],
    ]
    tonight = [Measurement(Planned(1, SweepPhase.ALONE, (n,)), None) for n in EIGHT]
    r2 = [("node-3", "node-6"), ("node-1", "node-2"), link, ("node-4", "node-5")]
    r3 = [("node-1", "node-3"), ("node-5", "node-6"), ("node-0", "node-2"), ("node-4", "node-7")]
    tonight += [
        Measurement(Planned(2, SweepPhase.PAIR, p), 5.0 if p == link else 100.0 + i)
        for i, p in enumerate(r2)
    ]
    tonight += [Measurement(Planned(3, SweepPhase.PAIR, p), 101.0 + i) for i, p in enumerate(r3)]
    a = assess(EIGHT, tonight, SETTINGS, RACKS, past=last_nights(last_night, slow=old))
    assert list(a.pending_links) == [link] and a.recheck_links == {old}, a
    jobs = next_round(EIGHT, a, 4, SETTINGS, Fabric(RACKS))
    assert [j.nodes for j in jobs if j.why == "confirm link"] == [link], jobs
