"""Fleet sweep planner and verdict on simulated fleets: found, drained, rounds.

For each fleet size and seed: a simulated fleet (fleetval.fleet.simulate.planted) with
0-16 bad nodes per 1,024 (half slow alone, half with a bad NIC, each at 30-70% speed) and as many
bad links on measured pairs, log-normal noise (3%) and 1% of jobs disturbed by up to 12%.
The sweep (`run_rounds`) is scored against what was planted; the peer in the same run is
the bisection the sweep used before (`fleetval.detect.bisection.isolate`) on the same
fleet, where a group scores as its slowest member.

    python bench/bench_sweep.py --seeds 200 --sizes 64 256 1024

Fabric (`--fabric`): 1,024 nodes in 64 racks with mixed faults (bad nodes, bad links, slow
trunks between pairs of racks), each fault scored at its level, with the sweep cut at 6
rounds and run to its end; `--noise` sets the jobs' log-normal noise (false drains per
1,000 healthy nodes). Coverage (`--coverage`): back-to-back sweeps that plan from the
links the earlier ones measured, against the old fixed matching.

    python bench/bench_sweep.py --fabric --seeds 20
    python bench/bench_sweep.py --fabric --seeds 20 --noise 0.15 --disturbed 0.05
    python bench/bench_sweep.py --fabric --seed-list 14 27 33   # chosen seeds only
    python bench/bench_sweep.py --coverage --nights 30
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import time
from dataclasses import dataclass, field

from fleetval.detect.bisection import isolate
from fleetval.fleet.coverage import Fabric, LinkSeen, Pair, covered
from fleetval.fleet.history import link_history
from fleetval.fleet.settings import SweepSettings
from fleetval.fleet.simulate import SimFleet, planted, racked
from fleetval.fleet.verdict import FleetVerdict, run_rounds
from fleetval.vocab import NodeState


@dataclass
class Tally:
    sweeps: int = 0
    bad_nodes: int = 0
    found_nodes: int = 0
    drained_bad: int = 0
    bad_links: int = 0
    found_links: int = 0
    healthy_drained: int = 0
    healthy_named: int = 0  # suspect, not drained
    false_links: int = 0
    rounds: list[int] = field(default_factory=list)
    jobs: list[int] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)


def sweep_once(fleet: SimFleet, settings: SweepSettings, t: Tally) -> None:
    started = time.perf_counter()
    v = run_rounds(fleet.nodes, fleet.measure, settings)
    t.seconds.append(time.perf_counter() - started)
    bad = set(fleet.compute) | set(fleet.nic)
    named = {n.node for n in v.named}
    drained = {n.node for n in v.drain}
    links = {link.nodes for link in v.bad_links}
    t.sweeps += 1
    t.bad_nodes += len(bad)
    t.found_nodes += len(bad & named)
    t.drained_bad += len(bad & drained)
    t.bad_links += len(fleet.links)
    t.found_links += len(set(fleet.links) & links)
    t.healthy_drained += len(drained - bad)
    t.healthy_named += len(named - bad - drained)
    t.false_links += len(links - set(fleet.links))
    t.rounds.append(v.rounds)
    t.jobs.append(fleet.jobs)


def bisect_once(fleet: SimFleet, t: Tally) -> None:
    """The peer: bisection, a group scoring as its slowest member (links inside it too)."""
    rng = random.Random(fleet.seed)

    def measure(group: tuple[str, ...]) -> float:
        t.jobs[-1] += 1
        factor = min(fleet.compute.get(n, 1.0) * fleet.nic.get(n, 1.0) for n in group)
        inside = [f for (a, b), f in fleet.links.items() if a in group and b in group]
        return fleet.base * min([factor, *inside]) * math.exp(rng.gauss(0, fleet.noise))

    t.jobs.append(0)
    started = time.perf_counter()
    found = isolate(fleet.nodes, measure)
    t.seconds.append(time.perf_counter() - started)
    bad = set(fleet.compute) | set(fleet.nic)
    t.sweeps += 1
    t.bad_nodes += len(bad)
    t.found_nodes += len(bad & set(found.flagged))
    t.healthy_named += len(set(found.flagged) - bad)
    t.bad_links += len(fleet.links)
    t.rounds.append(found.rounds)


def row(name: str, n: int, t: Tally) -> str:
    def share(a: int, b: int) -> str:
        return f"{a}/{b}" + (f" ({a / b:.1%})" if b else "")

    return (
        f"| {name} | {n} | {t.sweeps} | {share(t.found_nodes, t.bad_nodes)} | "
        f"{share(t.drained_bad, t.bad_nodes)} | {share(t.found_links, t.bad_links)} | "
        f"{t.healthy_drained} | {t.healthy_named} | {t.false_links} | "
        f"{statistics.mean(t.rounds):.2f} / {max(t.rounds)} | {statistics.mean(t.jobs):.0f} | "
        f"{statistics.median(t.seconds) * 1000:.0f} |"
    )


@dataclass
class Levels:
    """Faults found at their own level, and what was named that was not planted."""

    sweeps: int = 0
    found: dict[str, list[int]] = field(default_factory=dict)  # level -> [named, planted]
    healthy: int = 0
    false_drains: int = 0
    false_named: int = 0  # suspect or unjudged, not drained
    unjudged: int = 0
    false_links: int = 0
    false_trunks: int = 0
    rounds: list[int] = field(default_factory=list)

    def add(self, level: str, named: int, planted: int) -> None:
        got = self.found.setdefault(level, [0, 0])
        got[0] += named
        got[1] += planted


def score_fabric(fleet: SimFleet, v: FleetVerdict, t: Levels) -> None:
    bad = set(fleet.compute) | set(fleet.nic)
    drained = {n.node for n in v.drain}
    links = {link.nodes for link in v.bad_links}
    trunks = {t.groups for t in v.bad_trunks}
    t.sweeps += 1
    t.add("node", len(bad & drained), len(bad))
    t.add("link", len(set(fleet.links) & links), len(fleet.links))
    t.add("trunk", len(set(fleet.trunks) & trunks), len(fleet.trunks))
    t.healthy += len(fleet.nodes) - len(bad)
    t.false_drains += len(drained - bad)
    t.false_named += len({n.node for n in v.named} - bad - drained)
    t.unjudged += sum(n.state == NodeState.UNJUDGED for n in v.nodes)
    t.false_links += len(links - set(fleet.links))
    t.false_trunks += len(trunks - set(fleet.trunks))
    t.rounds.append(v.rounds)


def fabric(args: argparse.Namespace) -> None:
    """Mixed faults in a racked fleet, each scored at its level; cut at 6 rounds and not."""
    print(
        "| rounds allowed | sweeps | nodes drained | links named | trunks named | healthy "
        "drained (per 1,000) | healthy suspect or unjudged | unjudged | false links | false "
        "trunks | rounds mean / max |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for cut in (6, 16):
        t = Levels()
        for seed in args.seed_list or range(args.seeds):
            fleet = planted(
                args.nodes, args.bad_nodes, args.bad_links, seed, racks=args.racks,
                bad_trunks=args.bad_trunks,
            )  # fmt: skip
            fleet.noise, fleet.disturbed = args.noise, args.disturbed
            settings = SweepSettings(seed=seed, max_rounds=cut)
            v = run_rounds(fleet.nodes, fleet.measure, settings, fabric=Fabric(fleet.topology))
            score_fabric(fleet, v, t)
        share = {level: f"{a}/{b}" for level, (a, b) in t.found.items()}
        print(
            f"| {cut} | {t.sweeps} | {share['node']} | {share['link']} | {share['trunk']} | "
            f"{t.false_drains} of {t.healthy} ({1000 * t.false_drains / t.healthy:.2f}) | "
            f"{t.false_named} | {t.unjudged} | {t.false_links} | {t.false_trunks} | "
            f"{statistics.mean(t.rounds):.2f} / {max(t.rounds)} |"
        )


def nightly(nodes: list[str], nights: int, racks: int, history: bool) -> list[int]:
    """Links of a clean fleet measured after each of `nights` sweeps (cumulative)."""
    topology = racked(nodes, racks) if racks else None
    seen: dict[Pair, LinkSeen] = {}
    stored: list[tuple[str, dict]] = []
    out = []
    for night in range(nights):
        fleet = SimFleet(list(nodes), seed=night, **({"topology": topology} if topology else {}))
        fab = Fabric(fleet.topology, link_history(stored) if history else {})
        v = run_rounds(nodes, fleet.measure, SweepSettings(), fabric=fab)
        stored.append((f"night-{night}", v.to_dict()))
        seen |= link_history(stored[-1:])
        out.append(covered(nodes, seen)[0])
    return out


def coverage(args: argparse.Namespace) -> None:
    """Links covered by back-to-back sweeps: planned from history, and the fixed matching."""
    print("| fleet | sweeps | links in all | covered, planned from history | covered, fixed seed |")
    print("|---|---:|---:|---:|---:|")
    for n, racks, nights in ((8, 2, 7), (args.nodes, args.racks, args.nights)):
        nodes = [f"node-{i:04d}" for i in range(n)]
        total = n * (n - 1) // 2
        ours = nightly(nodes, nights, racks, True)
        fixed = nightly(nodes, nights, racks, False)
        for k in sorted({1, min(7, nights), nights}):
            print(
                f"| {n} nodes, {racks} racks | {k} | {total} | {ours[k - 1]} "
                f"({ours[k - 1] / total:.1%}) | {fixed[k - 1]} ({fixed[k - 1] / total:.1%}) |"
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=200)
    ap.add_argument(
        "--seed-list", type=int, nargs="+", help="--fabric: these seeds, not 0..seeds-1"
    )
    ap.add_argument("--sizes", type=int, nargs="+", default=[64, 256, 1024])
    ap.add_argument("--max-bad", type=int, default=16)
    ap.add_argument("--no-peer", action="store_true", help="skip the bisection peer")
    ap.add_argument("--fabric", action="store_true", help="racked fleet, mixed faults")
    ap.add_argument("--coverage", action="store_true", help="links covered by nightly sweeps")
    ap.add_argument("--nodes", type=int, default=1024)
    ap.add_argument("--racks", type=int, default=64)
    ap.add_argument("--bad-nodes", type=int, default=8)
    ap.add_argument("--bad-links", type=int, default=4)
    ap.add_argument("--bad-trunks", type=int, default=3)
    ap.add_argument("--noise", type=float, default=0.03)
    ap.add_argument("--disturbed", type=float, default=0.01)
    ap.add_argument("--nights", type=int, default=30)
    args = ap.parse_args()
    if args.fabric:
        return fabric(args)
    if args.coverage:
        return coverage(args)
    print(
        "| method | nodes | sweeps | bad nodes named | bad nodes drained | bad links named "
        "| healthy drained | healthy suspect | false bad links | rounds mean / max | jobs mean "
        "| ms per sweep (median) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in args.sizes:
        ours, peer = Tally(), Tally()
        most = max(1, round(args.max_bad * n / 1024))  # 0..16 bad of 1,024: the same share
        for seed in range(args.seeds):
            bad = seed % (most + 1)  # bad nodes, and as many bad links
            settings = SweepSettings(seed=seed)
            sweep_once(planted(n, bad, bad, seed), settings, ours)
            if not args.no_peer:
                bisect_once(planted(n, bad, bad, seed), peer)
        print(row("sweep (phases)", n, ours))
        if not args.no_peer:
            print(row("bisection (peer)", n, peer))


if __name__ == "__main__":
    main()
