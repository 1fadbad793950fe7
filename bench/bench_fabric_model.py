"""The fabric model's verdicts over seeded repeats on simulated fleets (`fleet/simulate.py`).

Each row is one scenario: how often the fault was named within the rounds allowed, how
often a healthy node was drained or left suspect, and the exit codes. The peer in the same
run is the scenario's own truth (what was planted); there is no other judge to compare.

    python bench/bench_fabric_model.py large --seeds 40        # 1,024 nodes in 64 racks
    python bench/bench_fabric_model.py clean --seeds 100       # 1,024 clean, 5% and 30% noise
    python bench/bench_fabric_model.py eight --seeds 20        # 8 nodes in 2 racks, fresh and with history
                                                               # (a slow link at 5% and 20%)
    python bench/bench_fabric_model.py fit                     # one fit: 1,024 nodes x 30 sweeps
    python bench/bench_fabric_model.py disturbed --noise 0.075 --seeds 100
                      # 8 nodes, fresh store, transients in 1%, 10%, 20% of jobs (heavy tails)
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from fleetval.fleet.coverage import Fabric
from fleetval.fleet.history import link_history, past_jobs
from fleetval.fleet.judge import assess
from fleetval.fleet.settings import SweepSettings
from fleetval.fleet.simulate import SimFleet, planted, racked
from fleetval.fleet.verdict import FleetVerdict, run_rounds

EIGHT = [f"node-{i}" for i in range(8)]
RACKS8 = racked(EIGHT, 2)


def score(fleet: SimFleet, v: FleetVerdict) -> dict[str, Any]:
    bad = set(fleet.compute) | set(fleet.nic) | fleet.dead
    drained = {n.node for n in v.drain}
    return {
        "nodes": (len(bad & drained), len(bad)),
        "trunks": (len(set(fleet.trunks) & {t.groups for t in v.bad_trunks}), len(fleet.trunks)),
        "links": (len(set(fleet.links) & {x.nodes for x in v.bad_links}), len(fleet.links)),
        "healthy_drained": len(drained - bad),
        "healthy_suspect": len({n.node for n in v.unjudged} - bad),
        "false_links": len({x.nodes for x in v.bad_links} - set(fleet.links)),
        "false_trunks": len({t.groups for t in v.bad_trunks} - set(fleet.trunks)),
        "exit": v.exit_code,
        "rounds": v.rounds,
    }


def large_one(args: tuple[int, str, int]) -> dict[str, Any]:
    seed, kind, cut = args
    if kind == "trunk":
        fleet = planted(1024, 0, 0, seed, racks=64, bad_trunks=3)
    else:
        fleet = planted(1024, 8, 0, seed, racks=64)
    settings = SweepSettings(seed=seed, max_rounds=cut)
    return score(
        fleet, run_rounds(fleet.nodes, fleet.measure, settings, fabric=Fabric(fleet.topology))
    )


def clean_one(args: tuple[int, float]) -> dict[str, Any]:
    seed, noise = args
    fleet = planted(1024, 0, 0, seed, racks=64)
    fleet.noise = noise
    v = run_rounds(
        fleet.nodes, fleet.measure, SweepSettings(seed=seed), fabric=Fabric(fleet.topology)
    )
    return score(fleet, v)


SCENARIOS8: dict[str, Callable[[int, float], SimFleet]] = {
    "clean": lambda s, n: SimFleet(list(EIGHT), topology=RACKS8, seed=s, noise=n),
    "two slow nodes": lambda s, n: SimFleet(
        list(EIGHT),
        topology=RACKS8,
        seed=s,
        noise=n,
        compute={"node-1": 0.05},
        nic={"node-6": 0.05},
    ),
    "slow trunk": lambda s, n: SimFleet(
        list(EIGHT), topology=RACKS8, seed=s, noise=n, trunks={("rack-00", "rack-01"): 0.05}
    ),
    "slow node + trunk": lambda s, n: SimFleet(
        list(EIGHT),
        topology=RACKS8,
        seed=s,
        noise=n,
        nic={"node-2": 0.05},
        trunks={("rack-00", "rack-01"): 0.1},
    ),
}
EIGHT_SETTINGS = SweepSettings(max_drain_share=0.25)
# (share of jobs hit by a transient, the most it slows a job): the simulator's default, and
# the heavy tails of a loaded shared box (a job now and then 2-5x slow beside a 7.5% core)
DISTURBED = ((0.01, 0.12), (0.1, 0.6), (0.2, 0.8))


def disturbed_one(args: tuple[int, str, float, float, float]) -> dict[str, Any]:
    """A fresh store's sweep of SCENARIOS8[name] with transients in `share` of its jobs."""
    seed, name, noise, share_, most = args
    fleet = SCENARIOS8[name](seed, noise)
    fleet.disturbed, fleet.disturbance = share_, most
    return score(fleet, run_rounds(EIGHT, fleet.measure, EIGHT_SETTINGS, fabric=Fabric(RACKS8)))


def history8(nights: int, noise: float, seed: int) -> Fabric:
    stored: list[dict[str, Any]] = []
    for night in range(nights):
        fab = Fabric(RACKS8, link_history([("", v) for v in stored]), past_jobs(stored))
        fleet = SimFleet(list(EIGHT), topology=RACKS8, seed=1000 * seed + night, noise=noise)
        stored.append(run_rounds(EIGHT, fleet.measure, EIGHT_SETTINGS, fabric=fab).to_dict())
    return Fabric(RACKS8, link_history([("", v) for v in stored]), past_jobs(stored))


def eight_one(args: tuple[int, str, float, int]) -> dict[str, Any]:
    seed, name, noise, nights = args
    fabric = history8(nights, noise, seed) if nights else Fabric(RACKS8)
    fleet = SCENARIOS8[name](seed, noise)
    return score(fleet, run_rounds(EIGHT, fleet.measure, EIGHT_SETTINGS, fabric=fabric))


def link8_one(args: tuple[int, float, float, int]) -> dict[str, Any]:
    """A slow link across the racks (at share `slow` of the level), after `nights` clean
    sweeps: the sweep (of up to 7 back to back) that names it."""
    seed, noise, slow, nights = args
    link = ("node-2", "node-5")
    stored: list[dict[str, Any]] = []
    for night in range(nights):
        fab = Fabric(RACKS8, link_history([("", v) for v in stored]), past_jobs(stored))
        fleet = SimFleet(list(EIGHT), topology=RACKS8, seed=1000 * seed + night, noise=noise)
        stored.append(run_rounds(EIGHT, fleet.measure, EIGHT_SETTINGS, fabric=fab).to_dict())
    for night in range(1, 8):
        fab = Fabric(RACKS8, link_history([("", v) for v in stored]), past_jobs(stored))
        fleet = SimFleet(list(EIGHT), topology=RACKS8, seed=100 * seed + night, noise=noise,
                         links={link: slow})  # fmt: skip
        v = run_rounds(EIGHT, fleet.measure, EIGHT_SETTINGS, fabric=fab)
        stored.append(v.to_dict())
        out = score(fleet, v)
        if link in {x.nodes for x in v.bad_links}:
            return out | {"night": night}
    return out | {"night": None}


def run(fn: Callable[[Any], dict[str, Any]], jobs: list[Any], workers: int) -> list[dict[str, Any]]:
    with ProcessPoolExecutor(workers) as pool:
        return list(pool.map(fn, jobs))


def share(rs: list[dict[str, Any]], key: str) -> str:
    a = sum(r[key][0] for r in rs)
    b = sum(r[key][1] for r in rs)
    return f"{a}/{b}"


def line(name: str, rs: list[dict[str, Any]]) -> str:
    exits = Counter(r["exit"] for r in rs)
    return (
        f"| {name} | {len(rs)} | {share(rs, 'nodes')} | {share(rs, 'trunks')} | "
        f"{share(rs, 'links')} | {sum(r['healthy_drained'] for r in rs)} | "
        f"{sum(r['healthy_suspect'] for r in rs)} | {sum(r['false_links'] for r in rs)} | "
        f"{sum(r['false_trunks'] for r in rs)} | {exits[0]}/{exits[1]}/{exits[5]} | "
        f"{statistics.mean(r['rounds'] for r in rs):.1f} / {max(r['rounds'] for r in rs)} |"
    )


HEADER = (
    "| scenario | sweeps | bad nodes drained | trunks named | links named | healthy drained | "
    "healthy suspect or unjudged | false links | false trunks | exit 0/1/5 | rounds mean / max |\n"
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
)


def fit_time() -> None:
    """One fit of 1,024 nodes with 30 stored sweeps (each ~3,000 jobs) beside tonight's."""
    fleet = planted(1024, 0, 0, 0, racks=64)
    stored: list[dict[str, Any]] = []
    for night in range(30):
        f = planted(1024, 0, 0, night, racks=64)
        stored.append(run_rounds(f.nodes, f.measure, SweepSettings(seed=night, max_rounds=4),
                                 fabric=Fabric(f.topology)).to_dict())  # fmt: skip
    past = past_jobs(stored)
    from fleetval.fleet.planner import first_round

    ms = fleet.measure(first_round(fleet.nodes))
    started = time.perf_counter()
    a = assess(fleet.nodes, ms, SweepSettings(), fleet.topology, past=past)
    took = time.perf_counter() - started
    print(f"| 1,024 nodes, 30 stored sweeps | {len(past) + len(ms)} jobs | "
          f"{len(a.fit.effects)} effects | {took:.2f} s |")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("large", "clean", "eight", "fit", "disturbed"))
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--noise", type=float, nargs="+", default=[0.05, 0.3])
    args = ap.parse_args()
    seeds = range(args.seeds)
    if args.what == "fit":
        print("| fit | jobs | effects | seconds |\n|---|---:|---:|---:|")
        return fit_time()
    print(HEADER)
    if args.what == "large":
        for kind, cut in (("trunk", 6), ("node", 4)):
            rs = run(large_one, [(s, kind, cut) for s in seeds], args.workers)
            print(line(f"1,024 nodes / 64 racks, 3 slow trunks, {cut} rounds" if kind == "trunk"
                       else f"1,024 nodes / 64 racks, 8 bad nodes, {cut} rounds", rs))  # fmt: skip
    elif args.what == "disturbed":
        for noise in args.noise:
            for share_, most in DISTURBED:
                for name in ("clean", "two slow nodes"):
                    jobs = [(s, name, noise, share_, most) for s in seeds]
                    rs = run(disturbed_one, jobs, args.workers)
                    print(line(f"8 nodes / 2 racks, {name}, noise {noise:.1%}, transients in "
                               f"{share_:.0%} of jobs (up to {most:.0%} slower)", rs))  # fmt: skip
    elif args.what == "clean":
        for noise in args.noise:
            rs = run(clean_one, [(s, noise) for s in seeds], args.workers)
            print(line(f"1,024 clean nodes / 64 racks, noise {noise:.0%}", rs))
    else:
        for noise in args.noise:
            for nights in (0, 10):
                for name in SCENARIOS8:
                    rs = run(eight_one, [(s, name, noise, nights) for s in seeds], args.workers)
                    store = "fresh store" if not nights else "10 sweeps stored"
                    print(line(f"8 nodes / 2 racks, {name}, noise {noise:.0%}, {store}", rs))
            for slow, nights in ((0.05, 0), (0.05, 10), (0.2, 10)):
                rs = run(link8_one, [(s, noise, slow, nights) for s in seeds], args.workers)
                named = [r["night"] for r in rs if r["night"] is not None]
                store = "fresh store" if not nights else "10 sweeps stored"
                print(line(f"8 nodes / 2 racks, link at {slow:.0%}, noise {noise:.0%}, {store}, "
                           f"named within 7 sweeps: {len(named)}/{len(rs)} "
                           f"(sweep mean {statistics.mean(named or [0]):.1f})", rs))  # fmt: skip


if __name__ == "__main__":
    main()
