"""Benchmark: how often `fleetval stragglers` names a rank in a clean job (false alarm) or
misses a slowed one, over seeded repeats; and how long 64 ranks x 10,000 collectives take
to read (pickle dumps, as torch writes them) and judge.

    python bench/bench_stragglers.py                 # 200 repeats per case, then the scale run
    python bench/bench_stragglers.py --repeats 50 --no-scale

Simulated arrivals model a data-parallel job: each collective c is reached at t_c (the
step's compute, 5-20 ms apart) plus each rank's jitter, Student-t with 4 degrees of freedom
(heavy tails: a rank sometimes arrives very late for no reason), scale `jitter`. A slowed
rank arrives `delay` later at one collective in every `every` (once a step) over a window
of 50 steps. A case's false alarm: any rank named in a clean job; a miss: the slowed rank
not named, or named only outside its window. Exits 1 when clean jobs name a rank in more
than 1% of repeats.
"""

from __future__ import annotations

import argparse
import pickle
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fleetval.detect.stragglers import judge_dumps
from fleetval.formats import frdump
from fleetval.formats.frdump import RankTrace

CASES = [  # (name, ranks, collectives, delay in jitter units, late every n collectives)
    ("clean 8 ranks", 8, 600, 0.0, 3),
    ("clean 64 ranks", 64, 600, 0.0, 3),
    ("late 5x jitter, 8 ranks", 8, 600, 5.0, 3),
    ("late 10x jitter, 8 ranks", 8, 600, 10.0, 3),
    ("late 20x jitter, 8 ranks", 8, 600, 20.0, 3),
    ("late 10x jitter, 64 ranks", 64, 600, 10.0, 3),
    ("late 20x jitter, 64 ranks", 64, 600, 20.0, 3),
]
JITTER_NS = 2e5  # 0.2 ms
WINDOW = (200, 350)


def arrivals(seed: int, ranks: int, n: int, delay: float, every: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    base = 1.7e18 + np.cumsum(rng.uniform(5e6, 2e7, n))
    a = base + rng.standard_t(4, (ranks, n)) * JITTER_NS
    if delay:
        a[ranks // 2, WINDOW[0] : WINDOW[1] : every] += delay * JITTER_NS
    return a


def traces(a: np.ndarray) -> list[RankTrace]:
    ranks, n = a.shape
    nan = np.full(n, np.nan)
    seq = np.arange(1, n + 1)
    return [
        RankTrace(r, f"sim{r}", ("0",) * n, seq, ("nccl:all_reduce",) * n, a[r], nan, nan)
        for r in range(ranks)
    ]


def run_cases(repeats: int) -> bool:
    print("| case | repeats | false alarm | missed | window spills over by > 3 collectives |")
    print("|---|---:|---:|---:|---:|")
    ok = True
    for name, ranks, n, delay, every in CASES:
        false = missed = outside = 0
        for seed in range(repeats):
            r = judge_dumps(traces(arrivals(seed, ranks, n, delay, every)))
            slow = ranks // 2 if delay else None
            false += any(x.rank != slow for x in r.named)
            if slow is not None:
                hit = [w for w in r.windows if any(x.rank == slow for x in w.ranks)]
                inside = [
                    w for w in hit if w.first_seq >= WINDOW[0] - 3 and w.last_seq <= WINDOW[1] + 3
                ]
                missed += not hit
                outside += bool(hit) and len(inside) < len(hit)
        if not delay and false / repeats > 0.01:
            ok = False
        print(f"| {name} | {repeats} | {false / repeats:.1%} | "
              f"{f'{missed / repeats:.1%}' if delay else '-'} | {outside / repeats:.1%} |")  # fmt: skip
    return ok


def scale(ranks: int = 64, n: int = 10_000) -> None:
    """Dumps written as torch writes them (pickle, one per rank), then read and judged."""
    a = arrivals(0, ranks, n, 10.0, 3)
    with tempfile.TemporaryDirectory() as folder:
        for r in range(ranks):
            entries = [
                {"record_id": i, "pg_id": 0, "process_group": ("0", "default_pg"),
                 "collective_seq_id": i + 1, "p2p_seq_id": 0, "op_id": i + 1,
                 "profiling_name": "nccl:all_reduce", "time_created_ns": int(a[r, i]),
                 "input_sizes": [[1000]], "input_dtypes": ["Float"], "output_sizes": [[1000]],
                 "output_dtypes": ["Float"], "state": "completed",
                 "time_discovered_started_ns": None, "time_discovered_completed_ns": None,
                 "retired": True, "timeout_ms": 600000, "is_p2p": False}
                for i in range(n)
            ]  # fmt: skip
            doc = {"version": "2.10", "pg_config": {"": {"ranks": str(list(range(ranks)))}},
                   "entries": entries}  # fmt: skip
            Path(folder, f"fr_rank_{r}").write_bytes(pickle.dumps(doc))
        t0 = time.perf_counter()
        read = [frdump.read(p) for p in sorted(Path(folder).iterdir())]
        t1 = time.perf_counter()
        r = judge_dumps(read)
        t2 = time.perf_counter()
    names = sorted({x.rank for x in r.named})
    print(f"\n{ranks} ranks x {n} collectives: read {t1 - t0:.2f} s, judged {t2 - t1:.2f} s, "
          f"total {t2 - t0:.2f} s; named rank {names} (slowed: {ranks // 2})")  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--repeats", type=int, default=200)
    p.add_argument("--no-scale", action="store_true")
    a = p.parse_args()
    ok = run_cases(a.repeats)
    if not a.no_scale:
        scale()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
