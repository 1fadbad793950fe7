"""Rank start-up beside busy processes: Ray's default worker priority (nice 15) against nice 0.

    python bench/bench_rank_priority.py [--busy 3] [--ranks 4]

For each niceness, an embedded Ray (as `fleetval run` starts one, `worker_niceness` set) runs a
one-step suite on fresh CPU ranks while `--busy` processes spin at normal priority: the table
gives the seconds until the step started (actors up, torch imported, process group formed) and
the whole run. The peer is Ray's default, 15, measured in the same run.
"""

from __future__ import annotations

import argparse
import logging
import subprocess
import sys
import tempfile
import time

import ray

from fleetval.run.execute import run_suite
from fleetval.run.outcome import Event
from fleetval.store.dataset import Store
from fleetval.suite import parse_suite
from fleetval.vocab import EventKind


def one(niceness: int, busy: int, ranks: int) -> tuple[float, float, str]:
    """(seconds to the step's start, seconds to the run's end, status) for one niceness."""
    ray.init(
        num_cpus=ranks,
        include_dashboard=False,
        log_to_driver=False,
        logging_level=logging.WARNING,
        _system_config={"worker_niceness": niceness},
    )
    spec = parse_suite(
        {
            "name": "priority",
            "placement": {"world_sizes": [ranks], "gpus_per_rank": 0},
            "timeouts": {"rendezvous_s": 300, "step_s": 300},
            "steps": [{"check": "collectives", "collectives": ["barrier"]}],
        }
    )
    spinners = [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(busy)]
    started: list[float] = []

    def on_event(event: Event) -> None:
        if event.kind == EventKind.STEP_START:
            started.append(time.monotonic())

    t0 = time.monotonic()
    try:
        record = run_suite(spec, Store(tempfile.mkdtemp()), on_event=on_event)
    finally:
        for p in spinners:
            p.kill()
        ray.shutdown()
    return (started[0] - t0 if started else float("nan")), time.monotonic() - t0, record.status


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--busy", type=int, default=3, help="processes spinning at nice 0")
    ap.add_argument("--ranks", type=int, default=4)
    args = ap.parse_args()
    print(f"{args.ranks} CPU ranks beside {args.busy} busy processes")
    print("| rank niceness | to the step's start (s) | whole run (s) | status |")
    print("|---:|---:|---:|---|")
    for niceness in (15, 0):
        start, total, status = one(niceness, args.busy, args.ranks)
        print(f"| {niceness} | {start:.1f} | {total:.1f} | {status} |")


if __name__ == "__main__":
    main()
