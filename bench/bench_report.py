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

from fleetval.compare import compare_runs
from fleetval.reports import build_signoff, render


def best_of(repeat: int, fn: Callable[[], object]) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return min(times), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store, candidate, rows = generate(Path(tmp), args.runs, args.nodes, args.iters)
        peer, _ = best_of(args.repeat, lambda: compare_runs(store, "rocm6.1", [candidate]))
        build, signoff = best_of(
            args.repeat, lambda: build_signoff(store, candidate, baseline="rocm6.1")
        )
        sizes = {}
        timings = {}
        for fmt in ("html", "md", "json"):
            timings[fmt], text = best_of(args.repeat, lambda f=fmt: render(signoff, f))
            sizes[fmt] = len(text.encode())
    print(f"{rows:,} rows in {args.runs} runs; candidate {args.nodes * 8} ranks; "
          f"verdict {signoff.verdict.value}; best of {args.repeat}")  # fmt: skip
    print("| step | wall s | output |")
    print("|---|---:|---:|")
    print(f"| peer: compare_runs alone | {peer:.2f} | |")
    print(f"| build_signoff (compare + gates + views) | {build:.2f} | |")
    for fmt in ("html", "md", "json"):
        print(f"| render {fmt} | {timings[fmt]:.2f} | {sizes[fmt] / 1024:.0f} KiB |")


if __name__ == "__main__":
    main()
