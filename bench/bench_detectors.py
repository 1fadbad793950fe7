"""Hang and crash detection with faults made from OUTSIDE fleetval, and clean runs.

    python bench/bench_detectors.py [--clean 20] [--stop 5] [--kill 5] [--seed 0]

Each repeat runs a 4-rank gloo bandwidth step on an embedded Ray instance. A `stop` repeat
sends SIGSTOP to one rank process (chosen by the seed) 1-3 s into the step, with the
suite's collective timeout (8 s) below its step deadline (30 s): the peers' own timeouts
fire first, which is what used to blame them. A `kill` repeat sends SIGKILL. A `clean`
repeat touches nothing. Reported per kind: repeats where exactly the struck process was
named with the right reason, misses, false culprits (any other rank named, or anyone named
in a clean run), and the time from the signal to the step's end.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import statistics
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.table import Table

from fleetval.run.execute import connect, run_suite
from fleetval.store.dataset import Store
from fleetval.suite import parse_suite
from fleetval.testing.rayprocs import rank_pids

EXPECTED = {"stop": "hang", "kill": "crash"}
SIGNALS = {"stop": signal.SIGSTOP, "kill": signal.SIGKILL}


def suite(iters: int) -> Any:
    return parse_suite(
        {
            "name": "detectors",
            "placement": {"world_sizes": [4], "gpus_per_rank": 0},
            # Start-up is not under test: generous on a loaded machine.
            "timeouts": {"step_s": 30, "collective_s": 8, "rendezvous_s": 240, "placement_s": 120},
            "steps": [
                {
                    "name": "bw",
                    "check": "bandwidth",
                    "sizes": {"min": 4096, "max": 4096},
                    "warmup": 0,
                    "iters": iters,
                }
            ],
        }
    )


@dataclass
class Tally:
    right: int = 0
    missed: int = 0
    false_culprits: int = 0
    seconds: list[float] = field(default_factory=list)


def one(kind: str, rng: random.Random, store: Store) -> tuple[list[dict[str, Any]], int, float]:
    """One repeat: (culprits, struck pid or 0, seconds from the signal to the step's end)."""
    hit: dict[str, Any] = {}
    delay, victim = rng.uniform(1.0, 3.0), rng.randrange(4)

    def strike() -> None:
        time.sleep(delay)
        pids = rank_pids()
        hit["pid"], hit["at"] = pids[victim], time.monotonic()
        os.kill(hit["pid"], SIGNALS[kind])

    def on_event(e: Any) -> None:
        if e.kind == "step_start" and kind in SIGNALS:
            threading.Thread(target=strike, daemon=True).start()

    # A clean run must finish: few iterations. A struck run must outlast the strike.
    record = run_suite(suite(200 if kind == "clean" else 1_000_000), store, on_event=on_event)
    (step,) = record.summary["steps"]
    ended = time.monotonic()
    return step["culprits"], hit.get("pid", 0), ended - hit.get("at", ended)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clean", type=int, default=20)
    ap.add_argument("--stop", type=int, default=5)
    ap.add_argument("--kill", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    connect(None, min_cpus=4)
    rng = random.Random(args.seed)
    store = Store(tempfile.mkdtemp(prefix="bench-detectors-"))
    tallies = {k: Tally() for k in ("clean", "stop", "kill")}
    plan = ["clean"] * args.clean + ["stop"] * args.stop + ["kill"] * args.kill
    rng.shuffle(plan)
    for i, kind in enumerate(plan):
        culprits, pid, seconds = one(kind, rng, store)
        t = tallies[kind]
        right = [c for c in culprits if c["pid"] == pid and c["reason"] == EXPECTED.get(kind)]
        t.false_culprits += len(culprits) - len(right)
        if kind != "clean":
            t.right += bool(right) and len(culprits) == 1
            t.missed += not right
            t.seconds.append(seconds)
        print(
            f"{i + 1}/{len(plan)} {kind}: {[(c['rank'], c['reason']) for c in culprits]} {seconds:.1f}s",
            flush=True,
        )
    table = Table(title=f"detectors, seed {args.seed}")
    for col in (
        "fault",
        "repeats",
        "named exactly",
        "missed",
        "false culprits",
        "detection s median",
        "max",
    ):
        table.add_column(col, justify="right")
    for kind, t in tallies.items():
        n = plan.count(kind)
        med = f"{statistics.median(t.seconds):.1f}" if t.seconds else "-"
        top = f"{max(t.seconds):.1f}" if t.seconds else "-"
        exact = "-" if kind == "clean" else f"{t.right}/{n}"
        table.add_row(kind, str(n), exact, str(t.missed), str(t.false_culprits), med, top)
    Console().print(table)


if __name__ == "__main__":
    main()
