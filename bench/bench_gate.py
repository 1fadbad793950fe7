"""Benchmark: the regression gate's false alarms and power on a hierarchical noise model.

Each trial is a fresh store from tests/storegen.py: 200 identities (4 collectives x 2 dtypes
x 25 sizes, 8 ranks on 2 nodes), each run of an identity drawing its own level (run-level
sd, default 2%) around which 10 iterations scatter (2.5%). Per trial seed: 5 baseline runs,
then candidates compared through `compare_runs` exactly as `fleetval compare` does:

- clean: 1 and 5 candidate runs from the baseline's own distribution; a false alarm is
  exit status 1 (the gate failing) on clean data;
- a busbw drop of 2, 5, 10, 30% planted on one identity (a bandwidth-bound size, rotating
  with the seed), 1 and 5 candidate runs; found = that identity's verdict is regression.

    python bench/bench_gate.py                       # 200 trials, run sd 2%, threshold 2%
    python bench/bench_gate.py --trials 50 --run-sd 0.04
    python bench/bench_gate.py --run-sd-range 0 0.04 # sd drawn per identity in [0, 4%]
    python bench/bench_gate.py --values              # the same model, run values made here

With --values the store is skipped: each run's value per identity is made here exactly as
the store's summaries make it (per iteration the mean over ranks, the median over
iterations, busbw = constant / time) and judged by `compare.judge`, the statistics
`compare_runs` applies after reading the summaries. Thousands of comparisons then take
seconds instead of an hour; the store path is the default.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import pyarrow as pa

from fleetval.analysis.compare import compare_runs, judge
from fleetval.analysis.compare_settings import CompareSettings
from fleetval.metrics import merge
from fleetval.vocab import Verdict
from tests.storegen import SIZES, FleetModel, GenStore

DROPS = (0.02, 0.05, 0.10, 0.30)
DESIGNS = (1, 5)  # candidate runs; the baseline always has 5


def _busbw_identities(model: FleetModel) -> list[int]:
    return [i for i, (_, _, s) in enumerate(model.identities()) if s >= 1 << 20]


def trial(root: Path, seed: int, model: FleetModel, threshold: float) -> dict[tuple, int]:
    """One seed: {(kind, drop, candidates): 1 if the event happened}."""
    g = GenStore(root, model, seed)
    g.baseline(5)
    out: dict[tuple, int] = {}
    targets = _busbw_identities(model)
    for k in DESIGNS:
        clean = compare_runs(g.store, "base", [g.run() for _ in range(k)], threshold_pct=threshold)
        out[("false_alarm", 0.0, k)] = clean.exit_code()
        for drop in DROPS:
            target = targets[seed % len(targets)]
            runs = [g.run(drop={target: drop}) for _ in range(k)]
            c = compare_runs(g.store, "base", runs, threshold_pct=threshold)
            label = model.identities()[target]
            hit = [r for r in c.results if (r.identity.collective, r.identity.dtype,
                   r.identity.size_bytes) == label]  # fmt: skip
            out[("found", drop, k)] = int(hit[0].verdict == Verdict.REGRESSION)
            others = (
                sum(r.verdict == Verdict.REGRESSION for r in c.results) - out[("found", drop, k)]
            )
            out[("other_regressions", drop, k)] = int(others > 0)
    return out


class ValueTrial:
    """Run values of the storegen model without a store (see --values)."""

    def __init__(self, model: FleetModel, seed: int) -> None:
        self.model, self.rng = model, np.random.default_rng(seed)
        self.idents = model.identities()
        sd = model.run_sd
        n = len(self.idents)
        self.run_sd = self.rng.uniform(sd[0], sd[1], n) if isinstance(sd, tuple) else np.full(n, sd)
        size = np.array([s for _, _, s in self.idents], dtype=float)
        self.base = 8.0 + size / 4e4
        self.busbw = size >= 64 * 1024  # the default latency cutoff
        self.count = 0

    def runs(self, k: int, drop: dict[int, float] | None = None) -> list[tuple[str, np.ndarray]]:
        m, rng, n = self.model, self.rng, len(self.idents)
        world = m.nodes * m.ranks_per_node
        out = []
        for _ in range(k):
            level = np.exp(self.run_sd * rng.standard_normal(n))
            for i, d in (drop or {}).items():
                level[i] /= 1 - d
            shared = 1 + m.iter_sd * rng.standard_normal((n, m.iters))
            jitter = (1 + m.rank_sd * rng.standard_normal((n, world, m.iters))).mean(axis=1)
            t = np.median((self.base * level)[:, None] * shared * jitter, axis=1)
            value = np.where(self.busbw, self.base * 40 / t, t)  # busbw: constant / time
            out.append((f"run-{self.count}", value))
            self.count += 1
        return out

    def table(self, runs: list[tuple[str, np.ndarray]]) -> pa.Table:
        n = len(self.idents)
        col = lambda xs: pa.array([x for _ in runs for x in xs])  # noqa: E731
        return pa.table({
            "run_id": pa.array([r for r, _ in runs for _ in range(n)]),
            "check": col(["bandwidth"] * n),
            "collective": col([c for c, _, _ in self.idents]),
            "op": col(["sum"] * n),
            "dtype": col([d for _, d, _ in self.idents]),
            "size_bytes": col([s for _, _, s in self.idents]),
            "world_size": col([self.model.nodes * self.model.ranks_per_node] * n),
            "metric": col(["busbw_gbps" if b else "latency_us" for b in self.busbw]),
            "group": col(["MI300X"] * n),
            "unit": col([None] * n).cast(pa.string()),
            "value": pa.array(np.concatenate([v for _, v in runs])),
            "wrong": col([0] * n),
            "failed": col([0] * n),
        })  # fmt: skip


def value_trial(seed: int, model: FleetModel, threshold: float) -> dict[tuple, int]:
    """`trial` on run values made here, judged by compare.judge."""
    vt = ValueTrial(model, seed)
    settings = CompareSettings(threshold_pct=threshold)
    decls = merge([])
    base = vt.runs(5)
    targets = _busbw_identities(model)
    out: dict[tuple, int] = {}

    def verdicts(cands: list[tuple[str, np.ndarray]]) -> list:
        return judge(vt.table(base + cands), [r for r, _ in cands], settings, decls)

    for k in DESIGNS:
        clean = verdicts(vt.runs(k))
        out[("false_alarm", 0.0, k)] = int(any(r.verdict == Verdict.REGRESSION for r in clean))
        for drop in DROPS:
            target = targets[seed % len(targets)]
            results = verdicts(vt.runs(k, {target: drop}))
            label = vt.idents[target]
            hit = [r for r in results if (r.identity.collective, r.identity.dtype,
                   r.identity.size_bytes) == label]  # fmt: skip
            out[("found", drop, k)] = int(hit[0].verdict == Verdict.REGRESSION)
            others = sum(r.verdict == Verdict.REGRESSION for r in results) - out[("found", drop, k)]
            out[("other_regressions", drop, k)] = int(others > 0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--run-sd", type=float, default=0.02)
    ap.add_argument("--run-sd-range", type=float, nargs=2, default=None)
    ap.add_argument("--threshold", type=float, default=2.0, help="percent (compare --threshold)")
    ap.add_argument("--values", action="store_true", help="judge run values made here (fast)")
    ap.add_argument("--drops", type=float, nargs="+", default=list(DROPS), help="fractions")
    args = ap.parse_args()
    globals()["DROPS"] = tuple(args.drops)
    os.fsync = lambda fd: None  # durability is not under test: thousands of small files
    sd = tuple(args.run_sd_range) if args.run_sd_range else args.run_sd
    model = FleetModel(run_sd=sd)
    totals: dict[tuple, int] = {}
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(args.trials):
            root = Path(tmp) / str(seed)
            if args.values:
                outcome = value_trial(seed, model, args.threshold)
            else:
                outcome = trial(root, seed, model, args.threshold)
                shutil.rmtree(root)
            for key, v in outcome.items():
                totals[key] = totals.get(key, 0) + v
    n = args.trials
    print(
        f"{len(model.identities())} identities, {model.nodes * model.ranks_per_node} ranks on "
        f"{model.nodes} nodes, run sd {sd}, iteration sd {model.iter_sd}, {model.iters} iterations, "
        f"threshold {args.threshold}%, {n} seeded trials, {time.perf_counter() - start:.0f} s, "
        f"{'run values judged by compare.judge' if args.values else 'through the store, compare_runs'}"
    )
    print("\n| baseline + candidate runs | false alarms (clean, exit 1) |"
          + "".join(f" {d:.0%} drop found |" for d in DROPS)
          + " other identity flagged (any drop trial) |")  # fmt: skip
    print("|---|---:|" + "---:|" * len(DROPS) + "---:|")
    for k in DESIGNS:
        fa = totals[("false_alarm", 0.0, k)]
        cells = "".join(f" {totals[('found', d, k)] / n:.1%} |" for d in DROPS)
        other = sum(totals[("other_regressions", d, k)] for d in DROPS)
        print(f"| 5 + {k} | {fa}/{n} = {fa / n:.1%} |{cells} {other}/{n * len(DROPS)} |")
    print(f"\nsizes {SIZES[0]} B .. {SIZES[-1] >> 30} GiB; planted drops on sizes >= 1 MiB (busbw)")


if __name__ == "__main__":
    main()
