"""How a sweep that ran out of rounds reads a node whose slow estimate is still unproven:
suspect only while its q-value over everything tested says a fault is at least as likely as
not; else judged by the bound its jobs give, as every node is."""

from __future__ import annotations

import dataclasses
import math

import pytest

from fleetval.fleet.effects import Q_SUSPECT, Z_HEALTHY, Effect, Fit
from fleetval.fleet.judge import Assessment, bounded
from fleetval.fleet.model import _qvalues
from fleetval.fleet.settings import SweepSettings
from fleetval.fleet.verdict import _node
from fleetval.vocab import NodeState, SweepPhase

SETTINGS = SweepSettings()


def one_node(q: float) -> Assessment:
    """node-1 at 64% of the level (z 2.0 against the tolerance) at 27% noise, over 2,000
    effects tested, its four jobs within 46% of the level (95%)."""
    own = Effect("node", ("node-1",), -0.45, 0.1, 4, 4, z=2.0, p=0.023, q=q, q_all=q)
    net = Effect("nic", ("node-1",), 0.0, 0.1, 3, 3, z=2.0, p=0.023, q=q, q_all=q)
    fit = Fit(0.27, math.log(1 - SETTINGS.tolerance),
              {("node", own.key): own, ("nic", net.key): net}, {}, {}, [], tested=2000)  # fmt: skip
    a = Assessment(fit)
    a.deficits["node-1"] = {SweepPhase.PAIR: [-0.2, -0.5, -0.6], SweepPhase.ALONE: [-0.4]}
    a.paired["node-1"] = {"node-2", "node-3", "node-4"}
    return a


def test_a_slow_estimate_the_noise_explains_is_judged_by_its_bound() -> None:
    a = one_node(q=0.9)
    assert bounded(a, "node-1", SETTINGS) == pytest.approx(1 - math.exp(-0.2 - Z_HEALTHY * 0.27))
    v = _node("node-1", a, {}, 8, SETTINGS)
    assert (v.state, v.confidence) == (NodeState.HEALTHY, "medium")
    assert "estimated at 64%" in v.reason and "q 0.90" in v.reason and "2000 things" in v.reason


def test_a_slow_estimate_likely_a_fault_stays_suspect() -> None:
    v = _node("node-1", one_node(q=Q_SUSPECT / 2), {}, 8, SETTINGS)
    assert v.state == NodeState.SUSPECT and "not proven within 8 rounds" in v.reason


def test_a_fault_as_likely_as_not_on_all_its_jobs_stays_suspect_when_set_aside() -> None:
    """Not flagged on the jobs transients could not have made (q 0.9), but a fault as
    likely as not on all of them: said, not judged healthy (`Effect.q_all`)."""
    a = one_node(q=0.9)
    for key, e in a.fit.effects.items():
        a.fit.effects[key] = dataclasses.replace(e, q_all=Q_SUSPECT / 2, aside=1)
    v = _node("node-1", a, {}, 8, SETTINGS)
    assert v.state == NodeState.SUSPECT and "without its 1 slowest" in v.reason


def test_a_slow_estimate_no_bound_holds_stays_suspect_whatever_its_q() -> None:
    a = one_node(q=0.9)
    a.deficits["node-1"][SweepPhase.PAIR] = [-0.9, -1.0]  # every pair slow: no bound
    assert bounded(a, "node-1", SETTINGS) is None
    assert _node("node-1", a, {}, 8, SETTINGS).state == NodeState.SUSPECT


def test_q_values_are_benjamini_hochberg_adjusted_p_values() -> None:
    p = {("a",): 0.001, ("b",): 0.02, ("c",): 0.03}
    q = _qvalues(p, 10)
    assert q == pytest.approx({("a",): 0.01, ("b",): 0.1, ("c",): 0.1})
    assert _qvalues({("a",): 0.5}, 2000) == {("a",): 1.0}


def test_alone_controls_are_those_measured_alone_least_not_the_same_waiting_nodes() -> None:
    """Two nodes waiting for a re-pair, beside one measured alone again: where the fleet
    has good nodes to spare, the controls are good nodes measured alone once, and the two
    waiting nodes are re-paired (taken as controls every round, they never were)."""
    from fleetval.fleet.coverage import Fabric
    from fleetval.fleet.planner import next_round

    nodes = [f"node-{i:02d}" for i in range(32)]
    a = Assessment(Fit(0.05, math.log(1 - SETTINGS.tolerance), {}, {}, {}, []))
    a.pending_alone = {"node-00"}
    a.pending_pair = {"node-01", "node-02"}
    a.good = set(nodes[3:])
    for n in nodes:
        alone = 4 if n in a.pending_pair else 1
        a.deficits[n] = {SweepPhase.ALONE: [0.0] * alone, SweepPhase.PAIR: [0.0]}
        a.paired[n] = {"node-31" if n != "node-31" else "node-30"}
    jobs = next_round(nodes, a, 5, SweepSettings(seed=0), Fabric())
    controls = [j.nodes[0] for j in jobs if j.why == "alone control"]
    assert len(controls) == 2 and not set(controls) & a.pending_pair, jobs
    repaired = {n for j in jobs if j.why.startswith("re-pair") for n in j.nodes}
    assert a.pending_pair <= repaired, jobs


def test_a_small_fleet_lends_the_good_nodes_its_re_pairs_leave_as_alone_controls() -> None:
    """8 nodes: five good, two waiting, one measured alone again (a seed at 30% noise).
    Five good nodes were "too few to spare", so the two waiting nodes were the alone
    controls in every round and never re-paired; a good node the re-pairs and a control pair
    leave is now a control, and a waiting node is re-paired."""
    from fleetval.fleet.coverage import Fabric
    from fleetval.fleet.planner import next_round

    nodes = [f"node-{i}" for i in range(8)]
    a = Assessment(Fit(0.3, math.log(1 - SETTINGS.tolerance), {}, {}, {}, []))
    a.pending_alone = {"node-0"}
    a.pending_pair = {"node-2", "node-5"}
    a.good = set(nodes) - {"node-0", "node-2", "node-5"}
    for n in nodes:
        alone = 4 if n in a.pending_pair else 1
        a.deficits[n] = {SweepPhase.ALONE: [0.0] * alone, SweepPhase.PAIR: [0.0]}
    a.paired = {"node-0": {"node-2"}, "node-2": {"node-0"}}
    jobs = next_round(nodes, a, 6, SweepSettings(seed=0), Fabric())
    controls = {j.nodes[0] for j in jobs if j.why == "alone control"}
    assert controls & a.good, jobs
    repaired = {n for j in jobs if j.why.startswith("re-pair") for n in j.nodes}
    assert a.pending_pair & repaired, jobs


def test_a_link_or_trunk_still_unproven_at_the_end_keeps_the_sweep_from_exit_0() -> None:
    """Every node healthy but a link (or a trunk) estimated slow and not proven: exit 5, not
    0 (it was not judged either way), and not 1 (nothing was proven)."""
    from fleetval.fleet.verdict import FleetVerdict, LinkVerdict, NodeVerdict, TrunkVerdict

    nodes = tuple(NodeVerdict(n, NodeState.HEALTHY, "high", "fine") for n in ("node-1", "node-2"))
    assert FleetVerdict(nodes=nodes).exit_code == 0
    link = LinkVerdict(("node-1", "node-2"), False, ("link node-1 <-> node-2: 40% ...",))
    assert FleetVerdict(nodes=nodes, links=(link,)).exit_code == 5
    trunk = TrunkVerdict(("rack-a", "rack-b"), "rack", False, ("trunk ...",))
    assert FleetVerdict(nodes=nodes, trunks=(trunk,)).exit_code == 5
    proven = LinkVerdict(link.nodes, True, link.evidence)
    assert FleetVerdict(nodes=nodes, links=(proven, link)).exit_code == 1


def test_controls_are_never_paired_on_a_link_known_slow() -> None:
    """Idle good nodes paired up as a round's controls skip a link flagged or estimated slow
    (a sweep once took a flagged link as a control, and it read as the round's level)."""
    from fleetval.fleet.planner import _pair_up

    assert _pair_up(["node-1", "node-7", "node-3", "node-6"], {("node-1", "node-7")}) == [
        ("node-1", "node-3"),
        ("node-7", "node-6"),
    ]
    assert _pair_up(["node-1", "node-7"], {("node-1", "node-7")}) == []
