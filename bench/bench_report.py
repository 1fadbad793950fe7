"""Benchmark: a sign-off report of a fleet-sized run, against `compare_runs` alone as the peer.

The store is bench_compare.py's (nightly bandwidth sweeps of NODES x 8 GPUs, 4 collectives
x 2 dtypes x 30 sizes, the last run the candidate with a planted regression). The report
does everything compare does plus reading the run's rows for the gates, per-iteration busbw
curves for the run and every baseline run, and rendering; the table shows what that costs.

    python bench/bench_report.py                  # 5 runs x 16 nodes (128 ranks)
    python bench/bench_report.py --nodes 64 --runs 9
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_compare import generate

from fleetval.analysis.compare import compare_runs
from fleetval.reports import build_signoff, render


def best_of(repeat: int, fn: Callable[[], object]) -> tuple[float, float, object]:
    """Best wall and CPU seconds of `repeat` calls (CPU time too: the machine is shared)."""
    walls, cpus, out = [], [], None
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        out = fn()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return min(walls), min(cpus), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store, candidate, rows = generate(Path(tmp), args.runs, args.nodes, args.iters)
        peer = best_of(args.repeat, lambda: compare_runs(store, "rocm6.1", [candidate]))
        build = best_of(args.repeat, lambda: build_signoff(store, candidate, baseline="rocm6.1"))
        signoff = build[2]
        timings = {
            fmt: best_of(args.repeat, lambda f=fmt: render(signoff, f))
            for fmt in ("html", "md", "json")
        }
    print(f"{rows:,} rows in {args.runs} runs; candidate {args.nodes * 8} ranks; "
          f"verdict {signoff.verdict.value}; best of {args.repeat}")  # fmt: skip
    print("| step | wall s | CPU s | output |")
    print("|---|---:|---:|---:|")
    print(f"| peer: compare_runs alone | {peer[0]:.2f} | {peer[1]:.2f} | |")
    print(f"| build_signoff (compare + gates + views) | {build[0]:.2f} | {build[1]:.2f} | |")
    for fmt, (wall, cpu, text) in timings.items():
        size = len(str(text).encode()) / 1024
        print(f"| render {fmt} | {wall:.2f} | {cpu:.2f} | {size:.0f} KiB |")


if __name__ == "__main__":
    main()
