"""Fleet sweep planner and verdict on simulated fleets: found, drained, rounds.

For each fleet size and seed: a simulated fleet (fleetval.fleet.simulate.planted) with
0-16 bad nodes per 1,024 (half slow alone, half with a bad NIC, each at 30-70% speed) and as many
bad links on measured pairs, log-normal noise (3%) and 1% of jobs disturbed by up to 12%.
The sweep (`run_rounds`) is scored against what was planted; the peer in the same run is
the bisection the sweep used before (`fleetval.detect.bisection.isolate`) on the same
fleet, where a group scores as its slowest member.

    python bench/bench_sweep.py --seeds 200 --sizes 64 256 1024
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import time
from dataclasses import dataclass, field

from fleetval.detect.bisection import isolate
from fleetval.fleet.settings import SweepSettings
from fleetval.fleet.simulate import SimFleet, planted
from fleetval.fleet.verdict import run_rounds


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=200)
    ap.add_argument("--sizes", type=int, nargs="+", default=[64, 256, 1024])
    ap.add_argument("--max-bad", type=int, default=16)
    ap.add_argument("--no-peer", action="store_true", help="skip the bisection peer")
    args = ap.parse_args()
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
