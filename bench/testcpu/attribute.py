"""Which tests the CPU of a test run went to, per process, from Linux process accounting.

    accton /tmp/run.pacct                       # as root; Debian's `acct`
    TLDIR=/tmp/run-tl PYTHONPATH=bench/testcpu PYTEST_ADDOPTS="-p timeline" bash scripts/test.sh
    accton off
    python bench/testcpu/attribute.py /tmp/run.pacct /tmp/run-tl

Every exited process (its user + system CPU, from `dump-acct`) is charged to the test that was
running on the pytest worker it descends from when it started: rank actors to the test whose
run placed them, a CLI's embedded Ray to the test that ran the CLI. Prints CPU by module, the
tests that cost most with their processes, and rank actors per test.
"""

from __future__ import annotations

import argparse
import bisect
import collections
import glob
import json
import subprocess
from datetime import datetime
from typing import NamedTuple


class Proc(NamedTuple):
    comm: str
    cpu: float
    ppid: int
    start: float


def processes(pacct: str) -> dict[int, Proc]:
    out = subprocess.run(["dump-acct", pacct], capture_output=True, text=True, check=True).stdout
    procs = {}
    for line in out.splitlines():
        f = [x.strip() for x in line.split("|")]
        start = datetime.strptime(f[14], "%a %b %d %H:%M:%S %Y").timestamp()
        procs[int(f[9])] = Proc(f[0], (float(f[2]) + float(f[3])) / 100, int(f[10]), start)
    return procs


def timelines(prefix: str) -> dict[int, list[tuple[str, float, float]]]:
    workers = {}
    for path in glob.glob(f"{prefix}-*.json"):
        with open(path) as f:
            doc = json.load(f)
        workers[doc["pid"]] = sorted(doc["tests"], key=lambda t: t[1])
    return workers


def charge(procs: dict[int, Proc], workers: dict[int, list]) -> dict[int, str]:
    """Each process's test ('' where no worker is among its ancestors)."""
    tests = {}
    for pid, p in procs.items():
        parent, hops = p.ppid, 0
        while parent not in workers and parent in procs and hops < 20:
            parent, hops = procs[parent].ppid, hops + 1
        if pid in workers:
            tests[pid] = f"<pytest worker {pid}>"
        elif parent in workers:
            runs = workers[parent]
            i = bisect.bisect_right([t[1] for t in runs], p.start + 0.999) - 1  # 1 s resolution
            tests[pid] = runs[max(i, 0)][0]
        else:
            tests[pid] = ""
    return tests


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pacct")
    ap.add_argument("timeline_prefix")
    args = ap.parse_args()
    procs = processes(args.pacct)
    tests = charge(procs, timelines(args.timeline_prefix))
    by_test: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    ranks: collections.Counter[str] = collections.Counter()
    for pid, p in procs.items():
        by_test[tests[pid] or "<not under a worker>"][p.comm] += p.cpu
        ranks[tests[pid]] += p.comm.startswith("ray::RankActor")
    total = sum(p.cpu for p in procs.values())
    print(f"{total:.0f} CPU-s in {len(procs)} processes")
    modules: collections.Counter[str] = collections.Counter()
    for test, comms in by_test.items():
        modules[test.split("::")[0]] += sum(comms.values())
    print("\nCPU-s  module")
    for module, cpu in modules.most_common(30):
        print(f"{cpu:6.1f}  {module}")
    print("\nCPU-s  test  (its costliest processes)")
    for test, comms in sorted(by_test.items(), key=lambda kv: -sum(kv[1].values()))[:25]:
        top = ", ".join(f"{c} {v:.1f}" for c, v in comms.most_common(3))
        print(f"{sum(comms.values()):6.1f}  {test[:110]}  ({top})")
    print(f"\nrank actors: {sum(ranks.values())}")
    for test, n in ranks.most_common(40):
        if n:
            print(f"{n:4d}  {test[:120]}")


if __name__ == "__main__":
    main()
