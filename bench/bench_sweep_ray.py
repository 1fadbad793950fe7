"""Fleet sweeps on the 8-node two-rack Ray fleet, repeated: clean, two slow nodes, a slow link.

Real `fleetval sweep` runs (one rank per node, gloo) on the simulated fleet of
`fleetval.testing.fleet8` (`simulated_fleet8`: eight one-CPU Ray nodes, node-0..3 in rack-a,
node-4..7 in rack-b), with its suite, fault size (`DELAY_MS`) and sweep runner, repeated to
count:
- clean: sweeps of a healthy fleet in one store (history rotates the matchings), passed when
  nothing is drained and no link or trunk is confirmed;
- two slow: a `delay` on one node of each of the sweep's first two pairs
  (`fleet8.two_slow`), passed when exactly those two are drained;
- slow link: per trial, a fresh store and a `delay` on a link outside the first sweep's
  matching (`peer`), swept back to back; passed when the link is confirmed within 7 sweeps
  with nothing else drained or confirmed (a fault the first matching does not measure is
  found as later sweeps cover the other links).

    python bench/bench_sweep_ray.py --clean 20 --two-slow 20 --slow-link 3
    FLEET8_START_S=300 python bench/bench_sweep_ray.py --clean 2 --two-slow 2 --slow-link 1

Every sweep runs on one set of warm ranks (`keep_warm`): the first pays the ranks' start-up,
the others form process groups among them. Each sweep took 30-150 s on 2 shared cores
before that; `FLEET8_START_S` lengthens the rank start-up
deadlines on a loaded machine (see fleet8.py). Prints one line per sweep, then the table.
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleetval.testing import fleet8

SWEEPS_FOR_A_LINK = len(fleet8.NODES) - 1  # back-to-back sweeps cover every link within N-1


@dataclass
class Tally:
    scenario: str
    passed: int = 0
    runs: int = 0
    sweeps: int = 0
    seconds: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def row(self) -> str:
        median = statistics.median(self.seconds) if self.seconds else 0.0
        notes = "; ".join(self.notes) or "-"
        return (
            f"| {self.scenario} | {self.runs} | {self.passed}/{self.runs} | {self.sweeps} "
            f"| {median:.1f} | {max(self.seconds, default=0.0):.1f} | {notes} |"
        )


def confirmed(doc: dict[str, Any]) -> tuple[list[list[str]], list[list[str]]]:
    """(links, trunks) the sweep confirmed."""
    v = doc["verdict"] or {}
    links = [x["nodes"] for x in v.get("links", []) if x["confirmed"]]
    return links, [t["groups"] for t in v.get("trunks", []) if t["confirmed"]]


def timed(t: Tally, run: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
    started = time.monotonic()
    doc = run(*args)
    t.seconds.append(time.monotonic() - started)
    t.sweeps += 1
    v = doc["verdict"] or {}
    print(f"  {doc['scenario']}: exit {doc['exit_code']}, rounds {v.get('rounds')}, "
          f"drain {v.get('drain')}, confirmed {confirmed(doc)}, {t.seconds[-1]:.0f} s",
          flush=True)  # fmt: skip
    return doc


def clean(cluster: Any, data: Path, n: int) -> Tally:
    t = Tally("clean: nothing drained or confirmed")
    for i in range(n):
        doc = timed(t, fleet8.sweep, cluster, data, f"clean-{i}", fleet8.suite())
        t.runs += 1
        links, trunks = confirmed(doc)
        ok = doc["verdict"] is not None and not doc["verdict"]["drain"] and not links + trunks
        t.passed += ok
        if not ok:
            t.notes.append(f"clean-{i}: drain {doc['verdict'] and doc['verdict']['drain']}, "
                           f"links {links}, trunks {trunks}")  # fmt: skip
    return t


def two_slow(cluster: Any, data: Path, n: int) -> Tally:
    t = Tally(f"two slow nodes ({fleet8.DELAY_MS} ms): both drained, nobody else")
    for _ in range(n):
        doc = timed(t, fleet8.two_slow, cluster, data)
        t.runs += 1
        drained = sorted((doc["verdict"] or {}).get("drain", []))
        t.passed += drained == doc["slow"]
        if drained != doc["slow"]:
            t.notes.append(f"slow {doc['slow']}, drained {drained}")
    return t


def slow_link(cluster: Any, base: Path, n: int, seed: int) -> Tally:
    t = Tally(f"slow link ({fleet8.DELAY_MS} ms) outside the first matching: named within "
              f"{SWEEPS_FOR_A_LINK} sweeps")  # fmt: skip
    rng = random.Random(seed)
    for trial in range(n):
        data = base / f"link-{trial}"
        first = {tuple(p) for p in fleet8._first_pairs(data)}
        a, b = rng.choice([p for p in itertools.combinations(fleet8.NODES, 2) if p not in first])
        fault = {"kind": "delay", "node": a, "peer": b, "ms": fleet8.DELAY_MS}
        t.runs += 1
        for night in range(SWEEPS_FOR_A_LINK):
            spec = fleet8.suite([fault])
            doc = timed(t, fleet8.sweep, cluster, data, f"link-{trial}-{night}", spec)
            links, trunks = confirmed(doc)
            wrong = (
                [x for x in links if x != [a, b]] + trunks + (doc["verdict"] or {}).get("drain", [])
            )
            if wrong:
                t.notes.append(f"{a}<->{b}: sweep {night + 1} also named {wrong}")
            if [a, b] in links:
                t.passed += not wrong
                t.notes.append(f"{a}<->{b} named in sweep {night + 1}")
                break
        else:
            t.notes.append(f"{a}<->{b} not named in {SWEEPS_FOR_A_LINK} sweeps")
    return t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clean", type=int, default=20)
    ap.add_argument("--two-slow", type=int, default=20)
    ap.add_argument("--slow-link", type=int, default=3, help="trials of up to 7 sweeps each")
    ap.add_argument("--seed", type=int, default=0, help="which links the slow-link trials pick")
    ap.add_argument("--data", type=Path, default=None, help="stores (default: a temp dir)")
    ap.add_argument("--deadline-s", type=float, default=7200, help="everything ends by then")
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ["COLUMNS"] = "250"
    from fleetval.run.sweep import keep_warm

    base = args.data or Path(tempfile.mkdtemp(prefix="bench-sweep-ray-"))
    tallies: list[Tally] = []

    def said() -> None:
        print(f"deadline of {args.deadline_s:g}s passed; so far:", flush=True)
        for t in tallies:
            print(t.row(), flush=True)

    # NOTE: every sweep on one set of warm ranks, as a nightly loop's
    with fleet8.simulated_fleet8(args.deadline_s, said) as cluster, keep_warm():
        if args.clean:
            tallies.append(clean(cluster, base / "clean", args.clean))
        if args.two_slow:
            tallies.append(two_slow(cluster, base / "two_slow", args.two_slow))
        if args.slow_link:
            tallies.append(slow_link(cluster, base, args.slow_link, args.seed))
    print("\n| scenario | runs | passed | sweeps | s per sweep (median) | slowest | notes |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for t in tallies:
        print(t.row())
    print(f"\nstores: {base}")


if __name__ == "__main__":
    main()
