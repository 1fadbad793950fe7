"""Fleet sweep verdicts on the simulated 8-node Ray fleet of `fleetval sweep --local-fleet 8`
(`fleetval.run.localfleet`: one CPU per node, two racks labelled `fleetval/rack`, one gloo
rank a node), over seeded repeats: how often each scenario gets the verdict it should, from
a fresh store and from a store with 10 earlier sweeps, at each injected delay. The truth of
each scenario is the fault injected.

    python bench/bench_fleet8.py --repeats 4 --histories 2 --delays 20 5

Every sweep runs through `fleetval.run.sweep.sweep` (what `fleetval sweep` calls) on one
set of warm ranks (`keep_warm`); a scenario's store is a fresh directory, or a copy of one
of `--histories` stores of 10 clean sweeps of the same fleet (repeat i takes store i mod
K; each store's sweeps and repeat i's sweeps have their own `sweep.seed`, so the repeats
plan other matchings, not one history's order every time). Prints one table row per
scenario, store and delay: expected verdicts, healthy nodes drained or left suspect, exit
codes, seconds.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from fleetval.testing import fleet8

NODES = 8  # node-0..3 in rack-a, node-4..7 in rack-b (`localfleet.racks_of`)


def scenario_faults(name: str, ms: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(faults, truth) per scenario: node-1 and node-6 in different racks, link node-2 <->
    node-5 across them."""
    if name == "clean":
        return [], {}
    if name == "two_slow":
        return [{"kind": "delay", "node": n, "ms": ms} for n in ("node-1", "node-6")], {
            "drain": ["node-1", "node-6"]
        }
    if name == "slow_trunk":
        return [{"kind": "delay", "between": ["rack-a", "rack-b"], "ms": ms}], {
            "trunk": ["rack-a", "rack-b"]
        }
    if name == "slow_link":
        return [{"kind": "delay", "node": "node-2", "peer": "node-5", "ms": ms}], {
            "link": ["node-2", "node-5"]
        }
    faults = [{"kind": "delay", "node": "node-1", "ms": ms}]
    faults.append({"kind": "delay", "between": ["rack-a", "rack-b"], "ms": max(1, ms // 2)})
    return faults, {"drain": ["node-1"], "trunk": ["rack-a", "rack-b"]}


SCENARIOS = ("clean", "two_slow", "slow_trunk", "slow_link", "node_and_trunk")


def one(data: Path, name: str, ms: int, seed: int = 0) -> dict[str, Any]:
    from fleetval.run.sweep import sweep
    from fleetval.store.dataset import Store
    from fleetval.suite import Suite

    faults, truth = scenario_faults(name, ms)
    spec = fleet8.suite(faults, max_drain_share=0.25, seed=seed) | {"name": name}
    spec = Suite.model_validate(spec)
    started = time.perf_counter()
    _, v = sweep(spec, Store(data))
    assert v is not None
    drained = sorted(n.node for n in v.drain)
    trunks = [list(t.groups) for t in v.bad_trunks]
    links = [list(x.nodes) for x in v.bad_links]
    right = (
        drained == truth.get("drain", [])
        and trunks == ([truth["trunk"]] if "trunk" in truth else [])
        and links == ([truth["link"]] if "link" in truth else [])
        and (v.exit_code == 0 if not truth else v.exit_code == 1)
    )
    bad = set(truth.get("drain", []))
    if not right and name != "slow_link":  # what was wrong, for the notes beside the table
        named = [(n.node, n.state.value) for n in v.named]
        print(f"# {name} {ms} ms: exit {v.exit_code}, named {named}, trunks {trunks}, "
              f"links {links}, noise {v.references[0].noise if v.references else '?'}",
              file=sys.stderr, flush=True)  # fmt: skip
    return {
        "right": right,
        "healthy_drained": len(set(drained) - bad),
        "healthy_suspect": len({n.node for n in v.unjudged} - bad),
        "exit": v.exit_code,
        "seconds": time.perf_counter() - started,
        "link_named": truth.get("link") in links if "link" in truth else None,
    }


def until_named(data: Path, name: str, ms: int, seed: int) -> dict[str, Any]:
    """One sweep; a slow link, up to 7 back to back in the same store (a sweep measures a
    link only where its matching or re-pairs take it: 7 sweeps cover every link of 8
    nodes): its row says in which sweep the link was named."""
    if name != "slow_link":
        return one(data, name, ms, seed)
    row: dict[str, Any] = {}
    for night in range(1, 8):
        row = one(data, name, ms, seed) | {"night": night}
        if row["link_named"] or row["healthy_drained"]:
            break
    return row | {"right": bool(row["link_named"])}


def table(args: argparse.Namespace, root: Path) -> None:
    """One row per scenario, store and delay; every sweep on the fleet this process is
    connected to, on one set of warm ranks."""
    from fleetval.run.sweep import keep_warm

    print("| scenario | store | delay | right | healthy drained | healthy suspect/unjudged "
          "| exit 0/1/5 | s per sweep (median) |\n|---|---|---:|---:|---:|---:|---:|---:|",
          flush=True)  # fmt: skip
    with keep_warm():
        histories = [root / f"history-{h}" for h in range(args.histories)]
        for h, history in enumerate(histories):
            for _ in range(10):
                one(history, "clean", 0, seed=100 + h)
        for ms in args.delays:
            for name in args.scenarios:
                for store in ("fresh", "history"):
                    rows = []
                    for i in range(args.repeats):
                        data = root / f"{name}-{ms}-{store}-{i}"
                        if store == "history":
                            shutil.copytree(histories[i % len(histories)], data)
                        rows.append(until_named(data, name, ms, seed=i))
                        shutil.rmtree(data, ignore_errors=True)
                    print_row(name, store, ms, rows)


def print_row(name: str, store: str, ms: int, rows: list[dict[str, Any]]) -> None:
    exits = Counter(r["exit"] for r in rows)
    nights = [r["night"] for r in rows if r.get("night") and r["right"]]
    label = name + (f" (named in sweep {nights})" if "night" in rows[0] else "")
    print(
        f"| {label} | {store} | {ms} ms | {sum(r['right'] for r in rows)}/"
        f"{len(rows)} | {sum(r['healthy_drained'] for r in rows)} | "
        f"{sum(r['healthy_suspect'] for r in rows)} | "
        f"{exits[0]}/{exits[1]}/{exits[5]} | "
        f"{statistics.median(r['seconds'] for r in rows):.1f} |",
        flush=True,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--histories", type=int, default=2, help="stores of 10 clean sweeps")
    ap.add_argument("--delays", type=int, nargs="+", default=[20, 5])
    ap.add_argument("--scenarios", nargs="+", default=list(SCENARIOS))
    args = ap.parse_args()
    from fleetval.run.localfleet import simulated_fleet

    root = Path(tempfile.mkdtemp(prefix="bench-fleet8-"))
    try:
        # NOTE: the fleet `fleetval sweep --local-fleet 8` gets (one-CPU nodes in two racks,
        # a head that takes no rank), with this process connected to it
        with simulated_fleet(NODES):
            table(args, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
