"""Building the run index of a store fleetval did not index (issue 24): stores in the
documented layout written straight with pyarrow (`fleetval.testing.foreign`), without `index/`.

    python bench/bench_index.py [--sizes 1000,5000] [--repeats 3]

Per size: the cold build (`Catalog.run_index()` on a store without `index/`: every runs/
Parquet file read, the SQLite index written), the next open (a sync that finds nothing to
do: two directory scans and one query), `fleetval runs --json` as a command on the indexed
store, and how long a service started on it takes to index it (the keeper thread). Medians
of `--repeats`, wall time and this process's CPU time; the store is written once per size.
Then, once per size, `fleetval serve` started on the store without `index/`: /healthz
polled every 0.1 s until it says the index is ready (answers while building, the slowest).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from fleetval.store.catalog import Catalog
from fleetval.testing.foreign import write_foreign_store
from fleetval.testing.serve import serve_argv, spawn


def timed(fn: object) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    fn()  # type: ignore[operator]
    return time.perf_counter() - wall, time.process_time() - cpu


def cold(root: Path) -> tuple[float, float]:
    shutil.rmtree(root / "index", ignore_errors=True)
    return timed(lambda: Catalog(root).run_index().close())


def warm(root: Path) -> tuple[float, float]:
    return timed(lambda: Catalog(root).run_index().close())


def kept(root: Path) -> tuple[float, float]:
    """The service's way: a thread builds it; until then readers are told it is building."""
    shutil.rmtree(root / "index", ignore_errors=True)
    catalog = Catalog(root)

    def build() -> None:
        catalog.keep_index(period_s=1.0, wait_s=600.0)
        catalog.stop_index()

    return timed(build)


def command(root: Path) -> tuple[float, float]:
    cmd = [sys.executable, "-m", "fleetval.cli", "runs", "--json", "--data", str(root)]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - t0, float("nan")  # another process: its CPU is not ours


def served(root: Path, deadline_s: float = 900.0) -> dict[str, float]:
    """`fleetval serve` on a store without `index/`: when /healthz first answered, how many
    answers said "building", the slowest answer, and when the index was ready."""
    shutil.rmtree(root / "index", ignore_errors=True)
    serving = spawn(serve_argv(root, "--no-executor", "--no-scheduler", "--no-access-log"))
    t0, first, building, slowest = time.perf_counter(), None, 0, 0.0
    try:
        while time.perf_counter() - t0 < deadline_s:
            asked = time.perf_counter()
            try:
                state = httpx.get(f"{serving.url}/healthz", timeout=30).json()["index"]
            except httpx.HTTPError:
                time.sleep(0.1)
                continue
            took = time.perf_counter() - asked
            first = first if first is not None else asked - t0
            slowest = max(slowest, took)
            if state == "ready":
                return {"first": first, "building": building, "slowest_ms": slowest * 1e3,
                        "ready": time.perf_counter() - t0}  # fmt: skip
            building += state == "building"
            time.sleep(0.1)
        raise SystemExit(f"index not ready after {deadline_s:g}s: {json.dumps(state)}")
    finally:
        serving.stop()


CASES = {"cold build": cold, "next open": warm, "fleetval runs": command, "service keeper": kept}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000,5000")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    rows = []
    for n in (int(s) for s in args.sizes.split(",")):
        root = Path(tempfile.mkdtemp(prefix=f"fleetval-index-{n}-")) / "data"
        t0 = time.perf_counter()
        write_foreign_store(root, n, with_results=0)
        made = time.perf_counter() - t0
        figures = {}
        for _ in range(args.repeats):
            for name, case in CASES.items():
                figures.setdefault(name, []).append(case(root))
        rows.append((n, made, figures, served(root)))
        shutil.rmtree(root.parent)
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end")
    print(f"medians of {args.repeats}; wall s (CPU s of this process)\n")
    print("| runs | store written (s) | " + " | ".join(CASES) + " |")
    print("|---:|---:|" + "---:|" * len(CASES))
    for n, made, figures, _ in rows:
        cells = []
        for name in CASES:
            wall = statistics.median(f[0] for f in figures[name])
            cpu = statistics.median(f[1] for f in figures[name])
            cells.append(f"{wall:.2f}" + ("" if cpu != cpu else f" ({cpu:.2f})"))
        print(f"| {n:,} | {made:.1f} | " + " | ".join(cells) + " |")
    print("\n`fleetval serve` on the store without index/ (process start included, s):\n")
    print(
        "| runs | /healthz first answered | answers saying building | slowest answer (ms) | index ready |"
    )
    print("|---:|---:|---:|---:|---:|")
    for n, _, _, h in rows:
        print(
            f"| {n:,} | {h['first']:.1f} | {h['building']} | {h['slowest_ms']:.0f} | {h['ready']:.1f} |"
        )


if __name__ == "__main__":
    main()
