"""The fleet sweep's pure part: planner, judge, verdict, circuit breaker, drain lists, history."""

from __future__ import annotations

import itertools
import json
import random
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from fleetval.fleet.coverage import (
    Fabric,
    LinkSeen,
    circle,
    covered,
    least_measured,
    matching_of,
)
from fleetval.fleet.coverage import matching as coverage_matching
from fleetval.fleet.drain import drain_lines
from fleetval.fleet.history import link_history, node_histories
from fleetval.fleet.judge import Measurement, Planned, assess
from fleetval.fleet.planner import first_pairs, first_round, next_round, with_controls
from fleetval.fleet.settings import Floor, SweepSettings
from fleetval.fleet.simulate import SimFleet, planted, racked
from fleetval.fleet.topology import Topology, TopologyError
from fleetval.fleet.verdict import BaselineLevels, FleetVerdict, run_rounds
from fleetval.store.records import Run
from fleetval.vocab import NodeState, SweepPhase

EIGHT = [f"node-{i}" for i in range(8)]
LOOSE = SweepSettings(max_drain_share=0.3)  # 8 nodes: two may be drained


def quiet(**kw: object) -> SimFleet:
    """Eight nodes, 2% noise, no transients."""
    return SimFleet(list(EIGHT), noise=0.02, disturbed=0.0, **kw)  # type: ignore[arg-type]


def rounds_of(
    fleet: SimFleet,
    settings: SweepSettings = LOOSE,
    topology: Topology | None = None,
    fabric: Fabric | None = None,
) -> tuple[list[list[Planned]], FleetVerdict]:
    seen: list[list[Planned]] = []

    def measure(jobs: list[Planned]) -> list[Measurement]:
        seen.append(jobs)
        return fleet.measure(jobs)

    fabric = fabric or (Fabric(topology) if topology else Fabric())
    return seen, run_rounds(fleet.nodes, measure, settings, fabric=fabric)


def test_round_one_is_every_node_alone_and_round_two_a_perfect_matching():
    seen, v = rounds_of(quiet())
    assert [j.nodes for j in seen[0]] == [(n,) for n in EIGHT]
    assert all(j.phase == SweepPhase.PAIR for j in seen[1])
    assert sorted(n for j in seen[1] for n in j.nodes) == EIGHT  # each node in exactly one pair
    assert len(seen) == 2 and not v.flagged and not v.named  # a clean fleet: nobody named
    assert all(n.state == NodeState.HEALTHY and n.confidence == "high" for n in v.nodes)


def test_two_slow_nodes_in_different_halves_are_both_drained_and_nobody_else():
    _, v = rounds_of(quiet(compute={"node-2": 0.2, "node-5": 0.2}))
    assert sorted(n.node for n in v.drain) == ["node-2", "node-5"]
    assert [n.node for n in v.named] == ["node-2", "node-5"]
    assert all("(the node itself)" in n.reason and n.confidence == "high" for n in v.drain)


def test_a_node_that_failed_alone_is_never_a_reference():
    seen, v = rounds_of(quiet(dead={"node-3"}, nic={"node-6": 0.2}))
    later = [j for rnd in seen[1:] for j in rnd]
    assert not any("proven-good node-3" in j.why or "proven-good node-6" in j.why for j in later)
    assert sorted(n.node for n in v.drain) == ["node-3", "node-6"]
    assert any("job failed" in e for e in next(n for n in v.drain if n.node == "node-3").evidence)


def test_a_bad_nic_is_found_by_re_pairing_with_proven_good_nodes():
    seen, v = rounds_of(quiet(nic={"node-4": 0.2}))
    repairs = [j for j in seen[2] if "node-4" in j.nodes]
    assert len(repairs) == 1 and "re-pair with proven-good" in repairs[0].why
    assert [n.node for n in v.named] == ["node-4"] and v.drain[0].confidence == "high"
    assert not v.links


def test_a_bad_link_between_two_good_nodes_is_named_and_confirmed():
    fleet = quiet()
    fleet.links_pending = [0.2]  # planted on a pair that round 2 measures
    seen, v = rounds_of(fleet)
    (pair,) = fleet.links
    assert [link.nodes for link in v.links] == [pair] and v.links[0].confirmed
    assert not v.named  # both nodes are healthy: the link is the finding
    assert any(j.why == "confirm link" and j.nodes == pair for j in seen[3])
    assert v.flagged and v.rounds == 4


def test_one_disturbed_alone_job_drains_nobody():
    fleet = quiet()
    judged_first = {"node-1": 0.5}  # slow in round 1 only: measured alone again, then fine
    real = fleet.measure

    def measure(jobs: list[Planned]) -> list[Measurement]:
        out = real(jobs)
        return [
            Measurement(m.job, m.score * judged_first.get(m.job.nodes[0], 1.0))
            if m.job.round == 1 and m.score
            else m
            for m in out
        ]

    v = run_rounds(fleet.nodes, measure, LOOSE)
    assert not v.named, [n.to_dict() for n in v.named]


def test_the_circuit_breaker_holds_drains_above_the_share_and_says_why():
    _, v = rounds_of(quiet(compute={"node-2": 0.2, "node-5": 0.2}), SweepSettings())
    assert v.breaker and not v.drain and v.drain_limit == 0
    assert [n.state for n in v.named] == [NodeState.SUSPECT] * 2
    assert any("fabric or the reference is suspect" in f for f in v.findings)
    assert drain_lines(v, "slurm") == []


def test_everything_equally_slow_is_a_finding_against_a_baseline():
    fleet = quiet(compute={n: 0.2 for n in EIGHT})
    _, v = rounds_of(fleet)
    assert not v.findings and any("fleet's own level only" in n for n in v.notes)
    fleet = quiet(compute={n: 0.2 for n in EIGHT})
    base = BaselineLevels("last-week", {"alone/": 100.0, "pair/": 100.0})
    v = run_rounds(fleet.nodes, fleet.measure, LOOSE, baseline=base)
    assert v.flagged and any("below baseline 'last-week'" in f for f in v.findings)


def test_everything_below_the_sku_floor_is_a_finding_about_the_fleet():
    floor = Floor(sku="H100", size_bytes=1 << 30, alone_gbps=460, pair_gbps=40)

    def measure(jobs: list[Planned]) -> list[Measurement]:
        return [Measurement(j, 300.0, {1 << 30: 300.0}) for j in jobs]

    v = run_rounds(
        EIGHT, measure, SweepSettings(floors=[floor]), skus=dict.fromkeys(EIGHT, "NVIDIA H100 80GB")
    )
    assert v.flagged and v.exit_code == 1 and not v.drain  # the fleet's level, not a node
    assert any("H100 floor 460" in f for f in v.findings)


def test_planner_never_puts_a_node_in_two_jobs_of_a_round():
    fleet = planted(101, 6, 6, seed=3)
    v = run_rounds(fleet.nodes, fleet.measure, SweepSettings(seed=3))  # SimFleet raises otherwise
    assert v.rounds <= SweepSettings().max_rounds and len(v.drain) == 6
    with pytest.raises(ValueError, match="two jobs"):
        fleet.measure([Planned(1, SweepPhase.ALONE, ("node-0000",))] * 2)


def test_rounds_stay_flat_and_everything_planted_is_found_at_1024_nodes():
    for seed in range(3):
        fleet = planted(1024, 16, 16, seed)
        v = run_rounds(fleet.nodes, fleet.measure, SweepSettings(seed=seed))
        assert {n.node for n in v.drain} == set(fleet.compute) | set(fleet.nic)
        found = {link.nodes for link in v.bad_links}  # 16 of 1,024 bad: a few wait a sweep
        assert found <= set(fleet.links) and len(found) >= len(fleet.links) - 2
        assert v.rounds <= 8


def test_a_lone_leftover_is_paired_with_a_proven_good_node():
    nodes = EIGHT[:5]
    a = assess(nodes, [], SweepSettings())
    a.good, a.pending_pair = {"node-0", "node-1"}, {"node-4"}
    (job,) = next_round(nodes, a, 3, SweepSettings())
    assert "node-4" in job.nodes and job.why.startswith("re-pair with proven-good")
    assert [j.nodes for j in first_round(nodes)] == [(n,) for n in nodes]


def test_settings_reject_impossible_values():
    with pytest.raises(ValidationError, match="max_tolerance"):
        SweepSettings(tolerance=0.7, max_tolerance=0.5)
    with pytest.raises(ValidationError, match="alone_gbps or pair_gbps"):
        Floor(sku="H100", size_bytes=1)
    assert SweepSettings().drain_limit(8) == 1 and SweepSettings().drain_limit(1024) == 102


def test_drain_formats_are_ready_to_paste():
    _, v = rounds_of(quiet(compute={"node-2": 0.2}))
    k = drain_lines(v, "kubectl", "run-1")
    assert "kubectl cordon node-2" in k
    assert "kubectl taint nodes node-2 fleetval/verdict=drain:NoSchedule --overwrite" in k
    assert "kubectl label nodes node-2 fleetval/verdict=drain --overwrite" in k
    (s,) = drain_lines(v, "slurm", "run-1")
    assert s.startswith('scontrol update nodename=node-2 state=drain reason="fleetval: ')
    assert s.endswith('(run run-1)"') and s.count('"') == 2
    r = drain_lines(v, "ray")
    assert json.loads(r[-1]) == {"label_selector": {"fleetval/node": "!in(node-2)"}}
    doc = json.loads(drain_lines(v, "json", "run-1")[0])
    assert [d["node"] for d in doc["drain"]] == ["node-2"] and doc["breaker"] is False
    with pytest.raises(ValueError, match="kubectl, slurm, ray, json"):
        drain_lines(v, "ansible")


def _run(i: int, states: dict[str, tuple[str, float]]) -> Run:
    nodes = [
        {"node": n, "state": s, "pair_gbps": g, "alone_gbps": None} for n, (s, g) in states.items()
    ]
    return Run(
        run_id=f"r{i}",
        suite="sweep",
        status="x",
        started_at=datetime(2026, 1, i + 1, tzinfo=UTC),
        summary={"sweep": {"nodes": nodes}},
    )


def test_history_finds_repeat_offenders_flapping_and_drift():
    runs = [
        _run(0, {"a": ("healthy", 10.0), "b": ("drain", 3.0), "c": ("healthy", 10.0)}),
        _run(1, {"a": ("healthy", 10.0), "b": ("healthy", 10.0), "c": ("suspect", 10.0)}),
        _run(2, {"a": ("healthy", 9.0), "b": ("drain", 3.0), "c": ("healthy", 10.0)}),
        _run(3, {"a": ("healthy", 8.0), "b": ("healthy", 10.0), "c": ("healthy", 10.0)}),
    ]
    h = {x.node: x for x in node_histories(runs)}
    assert h["b"].repeat_offender and h["b"].flapping
    assert not h["c"].repeat_offender and h["c"].flapping  # healthy, suspect, healthy
    assert h["a"].findings == ["slow drift -15%"] and h["a"].drifting
    assert [s.run_id for s in h["a"].seen] == ["r0", "r1", "r2", "r3"]
    assert [x.node for x in node_histories(runs, "b")] == ["b"]


def test_first_pairs_are_what_round_two_measures_on_a_clean_fleet():
    seen, _ = rounds_of(quiet())
    assert [j.nodes for j in seen[1]] == first_pairs(EIGHT, LOOSE)
    assert first_pairs(EIGHT, SweepSettings(seed=1)) != first_pairs(EIGHT, LOOSE)


def test_a_link_fault_applies_only_when_both_nodes_share_a_job():
    from fleetval.suite import Fault

    link = Fault(kind="delay", node="node-3", peer="node-6", ms=20)
    on = {"rank": 0, "node": "node-3", "step": "allreduce"}
    assert link.applies(**on, nodes=frozenset({"node-3", "node-6"}))
    assert not link.applies(**on, nodes=frozenset({"node-3", "node-1"}))
    assert not link.applies(**on, nodes=frozenset({"node-3"}))
    with pytest.raises(ValidationError, match="peer"):
        Fault(kind="delay", rank=1, peer="node-6", ms=20)


def test_the_sweep_command_refuses_bad_input_with_exit_2(tmp_path):
    from typer.testing import CliRunner

    from fleetval.cli import app

    run = CliRunner().invoke
    res = run(app, ["sweep", "sweep", "--data", str(tmp_path), "--baseline", "nope"])
    assert res.exit_code == 2 and "no baseline 'nope'" in res.output
    assert run(app, ["sweep", "sweep", "--drain-format", "ansible"]).exit_code == 2
    assert run(app, ["sweep", "sweep", "--repeat", "0"]).exit_code == 2
    assert run(app, ["sweep", "no-such-suite", "--data", str(tmp_path)]).exit_code == 2
    assert not (tmp_path / "runs").exists()  # nothing ran, nothing written
    res = run(app, ["sweep-history", "--data", str(tmp_path), "--node", "node-9"])
    assert res.exit_code == 2 and "no node 'node-9'" in res.output


def test_a_throttled_rank_scores_by_throughput_not_by_its_median_call():
    from fleetval.fleet.score import score_rows

    row = {"check": "bandwidth", "collective": "all_reduce", "size_bytes": 1 << 20,
           "status": "info", "message": "", "algbw_gbps": None, "time_us_median": 100.0}  # fmt: skip
    steady = row | {"busbw_gbps": 10.0, "samples_us": [100.0] * 12}
    # Stopped 10 ms every few calls, all along: every run of 3 calls holds a stop.
    stalled = row | {"busbw_gbps": 10.0, "samples_us": [100.0, 100.0, 10_100.0] * 4}
    # A passing load: one run slowed; the best of the others is the node's speed.
    passing = row | {"busbw_gbps": 10.0, "samples_us": [10_100.0] * 3 + [100.0] * 9}
    assert score_rows([steady])[0] == pytest.approx(10.0)
    assert score_rows([steady, stalled])[0] == pytest.approx(10.0 * 100 / 3433.33, rel=1e-3)
    assert score_rows([steady, passing])[0] == pytest.approx(10.0)


def test_half_the_pairs_slow_still_names_both_nodes_when_alone_jobs_measure_nothing():
    """One rank per node: alone jobs have no score; two bad nodes slow half the pairs."""
    fleet = quiet(nic={"node-2": 0.1, "node-5": 0.1})
    fleet.links_pending = []

    def measure(jobs: list[Planned]) -> list[Measurement]:
        return [
            Measurement(m.job, None) if len(m.job.nodes) == 1 else m for m in fleet.measure(jobs)
        ]

    v = run_rounds(EIGHT, measure, LOOSE)
    assert sorted(n.node for n in v.drain) == ["node-2", "node-5"] and not v.links
    assert [n.node for n in v.named] == ["node-2", "node-5"]


# --- fabric: topology, link coverage from history, trunks, noise -----------------------

TWO_RACKS = Topology({n: {"rack": "rack-a" if i < 4 else "rack-b"} for i, n in enumerate(EIGHT)})


def test_the_round_robin_matchings_hold_every_link_exactly_once():
    for n in (8, 7, 2):
        nodes = [f"n{i}" for i in range(n)]
        order, m = circle(nodes)
        links = [p for r in range(m) for p in coverage_matching(order, r)]
        assert len(links) == len(set(links)) == n * (n - 1) // 2
        for r in range(m):  # each a matching: no node twice
            inside = [x for p in coverage_matching(order, r) for x in p]
            assert len(inside) == len(set(inside))
        where = {x: i for i, x in enumerate(order)}
        for r in range(m):
            for a, b in coverage_matching(order, r):
                assert matching_of(*sorted((where[a], where[b])), m) == r


def test_back_to_back_sweeps_cover_every_link_of_eight_nodes_in_seven():
    stored: list[tuple[str, dict]] = []
    for night in range(7):
        fleet = quiet(seed=night)
        fabric = Fabric(TWO_RACKS, link_history(stored))
        v = run_rounds(EIGHT, fleet.measure, LOOSE, fabric=fabric)
        stored.append((f"r{night}", v.to_dict()))
    seen = link_history(stored)
    assert covered(EIGHT, seen) == (28, 28)
    # Without history every sweep measures the same matching first.
    assert first_pairs(EIGHT, LOOSE) == first_pairs(EIGHT, LOOSE, Fabric())
    assert least_measured(EIGHT, link_history(stored[:1])) != least_measured(EIGHT, {})


def test_a_matching_is_not_put_off_by_a_link_of_it_other_jobs_measured():
    """Crossings and controls measure a link or two of other matchings every sweep: here
    the same one of each. From a store that holds every link, each link is still measured
    within 7 sweeps, every sweep (the schedule keyed by a matching's freshest link chose the
    same matching every night, and 18 links were never measured again)."""
    order, m = circle(EIGHT)
    seen = {
        p: LinkSeen(0, "r0", "fast", 1.0) for r in range(m) for p in coverage_matching(order, r)
    }
    for when in range(1, 3 * m):
        others = [coverage_matching(order, r)[0] for r in range(m)]
        for p in least_measured(EIGHT, seen) + others:
            seen[p] = LinkSeen(when, f"r{when}", "fast", 1.0)
        assert min(s.when for s in seen.values()) > when - m


def test_a_slow_link_outside_tonights_matching_is_named_within_seven_sweeps():
    for seed in range(3):
        first = set(first_pairs(EIGHT, LOOSE))
        rng = random.Random(seed)
        link = rng.choice([p for p in itertools.combinations(EIGHT, 2) if p not in first])
        stored: list[tuple[str, dict]] = []
        for night in range(7):
            fleet = quiet(seed=100 * seed + night, links={link: 0.3})
            v = run_rounds(
                EIGHT, fleet.measure, LOOSE, fabric=Fabric(TWO_RACKS, link_history(stored))
            )
            stored.append((f"r{night}", v.to_dict()))
            assert not v.drain and not v.bad_trunks
            if v.bad_links:
                assert [x.nodes for x in v.bad_links] == [link]
                break
        else:
            pytest.fail(f"{link} not named in 7 sweeps")


def test_a_slow_trunk_between_two_racks_is_named_and_nobody_drained():
    for seed in range(5):
        fleet = quiet(seed=seed, topology=TWO_RACKS, trunks={("rack-a", "rack-b"): 0.4})
        seen, v = rounds_of(fleet, LOOSE, TWO_RACKS)
        assert [(t.groups, t.level, t.confirmed) for t in v.trunks] == [
            (("rack-a", "rack-b"), "rack", True)
        ], (seed, [t.to_dict() for t in v.trunks])
        assert not v.named and not v.links and v.flagged  # no node, no link: the trunk
        assert len(v.trunks[0].evidence) >= 3  # the effect, and two slow crossings at least
        assert len(seen) <= 4


def test_a_bad_nic_in_a_racked_fleet_is_a_node_not_a_trunk():
    fleet = quiet(topology=TWO_RACKS, nic={"node-1": 0.2})
    _, v = rounds_of(fleet, LOOSE, TWO_RACKS)
    assert [n.node for n in v.drain] == ["node-1"] and not v.trunks and not v.links


def test_every_pair_of_racks_is_crossed_in_every_sweep():
    nodes = [f"node-{i:03d}" for i in range(96)]
    topo = racked(nodes, 12)  # 66 pairs of racks; round 2 crosses only some
    fleet = SimFleet(nodes, noise=0.02, disturbed=0.0, topology=topo)
    seen, v = rounds_of(fleet, SweepSettings(), topo)
    crossed = {
        tuple(sorted(topo.group(n, "rack") for n in j.nodes))
        for rnd in seen
        for j in rnd
        if len(j.nodes) == 2
    }
    assert len({p for p in crossed if p[0] != p[1]}) == 66
    assert not v.flagged and v.rounds <= 4


def test_noise_turns_into_unjudged_nodes_not_drains():
    """35% noise (measured at about half that from the faster half of a round): in one sweep
    of the 20 a level from few controls read high and drained healthy nodes (before rounds
    were scaled by their own controls: 2 of these 20; 2 against 4 over seeds 0-39)."""
    false_drains = false_links = unjudged = 0
    for seed in range(20):
        fleet = SimFleet(
            [f"node-{i:02d}" for i in range(32)], noise=0.35, disturbed=0.1, disturbance=0.5,
            seed=seed, compute={"node-07": 0.05},
        )  # fmt: skip
        v = run_rounds(fleet.nodes, fleet.measure, SweepSettings(max_drain_share=0.2))
        assert "node-07" in {n.node for n in v.drain}  # 20x slower: beyond any noise
        false_drains += len(v.drain) > 1
        false_links += bool(v.bad_links)
        unjudged += any("judged only within" in n for n in v.notes)
    assert false_drains == 0 and false_links == 0 and unjudged > 0  # the noise is said


def test_mixed_faults_at_1024_nodes_in_64_racks_are_named_at_their_level():
    fleet = planted(1024, 8, 4, seed=2, racks=64, bad_trunks=3)
    v = run_rounds(
        fleet.nodes, fleet.measure, SweepSettings(seed=2, max_rounds=8),
        fabric=Fabric(fleet.topology),
    )  # fmt: skip
    assert {n.node for n in v.drain} == set(fleet.compute) | set(fleet.nic)
    assert {x.nodes for x in v.bad_links} == set(fleet.links)
    assert {t.groups for t in v.bad_trunks} == set(fleet.trunks)
    assert len(v.named) == 8 and v.rounds <= 8


def test_topology_from_labels_and_a_map_file_and_its_errors():
    labels = {
        "n1": {"fleetval/node": "n1", "fleetval/rack": "r1", "fleetval/domain": "nvl-1"},
        "n2": {"fleetval/node": "n2", "fleetval/rack": "r2"},
        "n3": {"fleetval/node": "n3"},
    }
    topo = Topology.from_labels(labels)
    assert topo.levels == ["rack", "domain"] and topo.group("n3", "rack") is None
    assert topo.split("n1", "n2") == ("rack", "r1", "r2") and topo.split("n1", "n3") is None
    assert topo.same("n1", "n3")  # nothing says otherwise
    merged = topo.merged(Topology.from_map({"n3": {"rack": "r1"}}))
    assert merged.same("n1", "n3") and not merged.same("n2", "n3")
    with pytest.raises(TopologyError, match=r"topology\.n1\.row: not a level"):
        Topology.from_map({"n1": {"row": "x"}})
    with pytest.raises(TopologyError, match=r"topology\.n1: a mapping"):
        Topology.from_map({"n1": "r1"})  # type: ignore[dict-item]


def test_trunks_and_coverage_are_in_the_stored_verdict_and_read_back():
    fleet = quiet(topology=TWO_RACKS, trunks={("rack-a", "rack-b"): 0.4})
    _, v = rounds_of(fleet, LOOSE, TWO_RACKS)
    doc = json.loads(json.dumps(v.to_dict()))
    (trunk,) = doc["trunks"]
    assert trunk["groups"] == ["rack-a", "rack-b"] and trunk["level"] == "rack"
    assert trunk["confirmed"] is True and trunk["evidence"]
    assert {tuple(c["nodes"]) for c in doc["coverage"]} == set(link_history([("r", doc)]))
    assert {c["verdict"] for c in doc["coverage"]} <= {"fast", "slow", "unclear", "failed"}
    back = FleetVerdict.from_dict(doc)
    assert back.bad_trunks == v.bad_trunks and back.flagged
    assert json.loads(drain_lines(v, "json")[0])["drain"] == []  # drain formats unchanged


def test_a_between_fault_slows_every_job_spanning_both_groups_and_no_other():
    from fleetval.suite import Fault

    trunk = Fault(kind="delay", between=["rack-a", "rack-b"], ms=20)
    groups = {"n1": frozenset({"rack-a", "leaf-1"}), "n2": frozenset({"rack-b"}),
              "n3": frozenset({"rack-a"})}  # fmt: skip

    def late(node: str, *job: str) -> bool:
        return trunk.applies(rank=0, node=node, step="x", nodes=frozenset(job), groups=groups)

    # The rack-a ranks of a job across the racks are late; the rack-b ranks wait for them.
    assert late("n1", "n1", "n2") and late("n3", "n3", "n2") and not late("n2", "n1", "n2")
    assert late("n1", "n1", "n2", "n3") and late("n3", "n1", "n2", "n3")
    assert not late("n1", "n1", "n3")  # inside rack-a
    assert not trunk.applies(rank=0, node="n1", step="x", nodes=frozenset({"n1", "n2"}))
    with pytest.raises(ValidationError, match="without `rank`, `node` or `peer`"):
        Fault(kind="delay", between=["rack-a", "rack-b"], node="n1", ms=20)
    with pytest.raises(ValidationError, match="two different groups"):
        Fault(kind="delay", between=["rack-a", "rack-a"], ms=20)
    with pytest.raises(ValidationError, match="at least 2 items"):
        Fault(kind="delay", between=["rack-a"], ms=20)


def test_a_suite_gives_its_topology_inline_or_as_a_file(tmp_path):
    from fleetval.run.fabric import suite_topology
    from fleetval.run.plan import PlanError
    from fleetval.suite import load_suite

    suite = load_suite("sweep")
    path = tmp_path / "map.yaml"
    path.write_text("node-1: {rack: r1, switch: leaf-1}\nnode-2: {rack: r2}\n")
    sweep = suite.sweep.model_copy(
        update={"topology": {"node-1": {"rack": "r9"}}, "topology_file": str(path)}
    )
    topo = suite_topology(suite.model_copy(update={"sweep": sweep}))
    assert topo.to_dict() == {
        "node-1": {"rack": "r1", "switch": "leaf-1"},
        "node-2": {"rack": "r2"},
    }
    path.write_text("node-1: {row: r1}\n")
    with pytest.raises(PlanError, match=r"node-1\.row: not a level"):
        suite_topology(suite.model_copy(update={"sweep": sweep}))
    missing = sweep.model_copy(update={"topology_file": str(tmp_path / "none.yaml")})
    with pytest.raises(PlanError, match=r"sweep\.topology_file: cannot read"):
        suite_topology(suite.model_copy(update={"sweep": missing}))
    with pytest.raises(ValidationError, match=r"topology\.node-1\.row"):
        SweepSettings(topology={"node-1": {"row": "r1"}})


def test_a_slow_trunk_is_confirmed_when_history_makes_the_first_matching_all_cross_rack():
    """After six clean sweeps the least-measured matching of two racks of four crosses the
    racks in all four pairs: without a job inside each rack beside them, the slow trunk
    slows the whole round alike and nothing is slow against the round's own level."""
    stored: list[tuple[str, dict]] = []
    for night in range(6):
        v = run_rounds(EIGHT, quiet(seed=night).measure, LOOSE,
                       fabric=Fabric(TWO_RACKS, link_history(stored)))  # fmt: skip
        stored.append((f"r{night}", v.to_dict()))
    fabric = Fabric(TWO_RACKS, link_history(stored))
    tonight = least_measured(EIGHT, fabric.seen)
    assert all(TWO_RACKS.split(*p) for p in tonight)  # every pair crosses the racks
    for seed in range(5):
        fleet = quiet(seed=seed, topology=TWO_RACKS, trunks={("rack-a", "rack-b"): 0.4})
        seen, v = rounds_of(fleet, LOOSE, fabric=fabric)
        inside = {TWO_RACKS.group(j.nodes[0], "rack") for j in seen[1]
                  if len(j.nodes) == 2 and not TWO_RACKS.split(*j.nodes)}  # fmt: skip
        assert inside == {"rack-a", "rack-b"}  # a control inside each rack in round 2
        assert [(t.groups, t.level, t.confirmed) for t in v.trunks] == [
            (("rack-a", "rack-b"), "rack", True)
        ], (seed, [t.to_dict() for t in v.trunks])
        assert not v.named and not v.links and not v.drain
        measured = {c.nodes for c in v.coverage}
        assert set(tonight) <= measured  # tonight's matching is still measured in full
    two = Topology({"a": {"rack": "r1"}, "b": {"rack": "r2"}, "c": {"rack": "r1"}})
    assert with_controls([("a", "b")], two) == [("a", "b")]  # one node a rack: no control
    big = planted(1024, 0, 0, seed=2, racks=64)  # no rack holds half a round: unchanged
    assert with_controls(least_measured(big.nodes, {}), big.topology) == least_measured(
        big.nodes, {}
    )


# --- late rounds: judged against the level of the controls measured beside them ----------


def test_a_machine_slowed_as_a_whole_drains_nobody_and_a_slow_link_is_still_confirmed():
    """From round 3 on every job runs at 30% of round 2's speed (the load moved). Against
    round 2's level, healthy re-pairs beside two controls read 30% and their nodes were
    drained; against that level scaled by the controls measured beside them, nobody is,
    and a link at 3% is confirmed."""
    for seed in range(3):
        fleet = quiet(seed=seed)
        fleet.links_pending = [0.03]  # on a pair that round 2 measures

        def measure(jobs: list[Planned], fleet: SimFleet = fleet) -> list[Measurement]:
            late = 0.3 if jobs[0].round >= 3 else 1.0
            return [Measurement(m.job, (m.score or 0.0) * late) for m in fleet.measure(jobs)]

        v = run_rounds(EIGHT, measure, LOOSE)
        (pair,) = fleet.links
        assert not v.named, [n.to_dict() for n in v.named]
        assert [(x.nodes, x.confirmed) for x in v.links] == [(pair, True)]
        late = [j.ratio for j in v.trials if j.m.job.round >= 3 and j.nodes != pair]
        assert late and all(0.85 < r < 1.15 for r in late if r)  # each round's own load


def test_a_round_of_re_pairs_keeps_a_control_back_and_re_pairs_inside_each_rack():
    """Two racks, two proven-good and two waiting nodes in each: one pair of good nodes is
    kept back as the round's control, inside one rack, and no waiting node is re-paired
    across the racks (across a slow trunk it would read slow)."""
    for seed in range(8):
        a = assess(EIGHT, [], SweepSettings())
        a.good = {"node-0", "node-2", "node-4", "node-7"}
        a.pending_pair = {"node-1", "node-3", "node-5", "node-6"}
        a.paired = {n: {"x"} for n in a.pending_pair}
        jobs = next_round(EIGHT, a, 3, SweepSettings(seed=seed), Fabric(TWO_RACKS))
        (control,) = [j for j in jobs if j.why == "control"]
        repairs = [j for j in jobs if j.why.startswith("re-pair")]
        # the rack whose good nodes are the control pairs its waiting nodes with each other
        assert TWO_RACKS.same(*control.nodes) and len(repairs) == 3
        assert all(TWO_RACKS.same(*j.nodes) for j in repairs), jobs


def test_a_node_only_ever_unjudged_is_no_repeat_offender_and_does_not_flap():
    from fleetval.fleet.history import SweepSeen, history

    states = [NodeState.UNJUDGED, NodeState.HEALTHY, NodeState.UNJUDGED, NodeState.UNJUDGED]
    h = history("node-1", [SweepSeen(f"r{i}", s, 10.0) for i, s in enumerate(states)])
    assert not h.repeat_offender and not h.flapping and h.findings == []
    slow = [NodeState.SUSPECT, NodeState.UNJUDGED, NodeState.DRAIN]
    h = history("node-2", [SweepSeen(f"r{i}", s, 10.0) for i, s in enumerate(slow)])
    assert h.repeat_offender and not h.flapping
