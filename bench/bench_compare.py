"""Benchmark: `compare_runs` over a generated store of ~10 million result rows.

A fleet of NODES x 8 GPUs runs a bandwidth sweep (4 collectives x 2 dtypes x 30 sizes,
8 B .. 4 GiB, ITERS per-iteration samples per row) every night; the baseline is a filter
(`rocm_version=6.1.*`) matching every nightly run but the last, which is the candidate.
Runs are written through the store, so each has its summaries (one row per identity and
node) and its ranks' lateness (one row per rank and collective), made when the run is
written; compare reads the summaries of every run, and the candidate's lateness and
per-device rows for its fleet outliers: never the samples. Statistics included: run
values, the family-prior test per identity, Benjamini-Hochberg, late ranks, environment
diff.

    python bench/bench_compare.py                      # 41 runs x 245,760 rows = 10.1 M rows
    python bench/bench_compare.py --runs 5 --per node  # smaller, per-node matching

Wall time, CPU time and peak RSS (resource.getrusage, the whole process, generation
excluded by running the comparison in a fresh child process, imports excluded) are printed
as a table: the best wall and the best CPU of the repeats (on a shared machine the CPU
time is the steadier floor), the highest peak RSS, and the load average around them.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from fleetval.analysis.baselines import Baselines
from fleetval.store.dataset import Store
from fleetval.store.records import Run
from fleetval.testing.bandwidth import COLLECTIVES, DTYPES, bandwidth_table
from fleetval.testing.builder import SyntheticRun, build_store

SIZES = [1 << e for e in range(3, 33)]  # 8 B .. 4 GiB: 30 sizes
GPUS_PER_NODE = 8


def _run_table(
    run_id: str, nodes: int, iters: int, rng: np.random.Generator, slow: float
) -> pa.Table:
    """One run's rows (columns built by the test store generator: Row objects would dominate)."""
    world = nodes * GPUS_PER_NODE
    idents = [(c, d, s) for c in COLLECTIVES for d in DTYPES for s in SIZES]
    n = len(idents) * world
    coll = np.repeat([c for c, _, _ in idents], world)
    size = np.repeat(np.array([s for _, _, s in idents], dtype=np.int64), world)
    base = 8.0 + size / 4e4  # microseconds: latency floor + ~40 GB/s
    shared = 1 + 0.025 * rng.standard_normal((len(idents), 1, iters))  # per-iteration noise
    jitter = 1 + 0.005 * rng.standard_normal((len(idents), world, iters))
    samples = (base.reshape(len(idents), world, 1) * shared * jitter).reshape(n, iters)
    samples[(coll == "all_reduce") & (size == 1 << 24)] *= slow  # the planted regression
    return bandwidth_table(run_id, idents, world, GPUS_PER_NODE, samples)


def generate(root: Path, runs: int, nodes: int, iters: int) -> tuple[Store, str, int]:
    """Nightly runs; the last is the candidate (ROCm 6.2, 5% slower all_reduce at 16 MiB)."""
    store = Store(root)
    rng = np.random.default_rng(0)
    rows = 0
    for i in range(runs):
        last = i == runs - 1
        started = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(days=i)
        run_id = f"{started:%Y%m%d}-020000-{i:06x}"
        table = _run_table(run_id, nodes, iters, rng, slow=1 / 0.95 if last else 1.0)
        rows += len(table)
        env = {"gpu_model": "MI300X", "driver_version": "6.8.5", "rccl_version": "2.20.5"}
        env["rocm_version"] = "6.2.0" if last else "6.1.3"
        record = Run(run_id=run_id, suite="nightly", status="pass", started_at=started)
        nodes_of = [{"node": f"node-{j}", **env} for j in range(nodes)]
        # the rows (then their summary), the nodes, the record: through the store's writer
        build_store(store, [SyntheticRun(record, {"bandwidth": table}, nodes_of)])
    Baselines(store).set("rocm6.1", where={"rocm_version": "6.1.*"})
    return store, store.runs()[-1].run_id, rows


def measure(root: str, candidate: str, per: str) -> dict[str, float]:
    """Run in a fresh process so peak RSS is the comparison's, not the generator's."""
    from fleetval.analysis.compare import compare_runs

    r0 = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    result = compare_runs(Store(root), "rocm6.1", [candidate], per=per)  # type: ignore[arg-type]
    wall = time.perf_counter() - start
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime  # on a shared machine: the floor
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB (Linux)
    counts = {v.value: n for v, n in result.counts().items() if n}
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "peak_gib": peak,
        "identities": len(result.results),
        **counts,
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--runs", type=int, default=41)
    ap.add_argument("--nodes", type=int, default=128)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--per", choices=["sku", "node"], default="sku")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--store", type=Path, help="keep the generated store here and reuse it")
    ap.add_argument("--measure", nargs=2, metavar=("ROOT", "CANDIDATE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:
        print(json.dumps(measure(*args.measure, per=args.per)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        root = args.store or Path(tmp)
        t0 = time.perf_counter()
        if (root / "runs").exists():  # --store: generated by an earlier call, reused
            store = Store(root)
            candidate = store.runs()[-1].run_id
            rows = sum(
                pq.ParquetFile(f).metadata.num_rows for f in root.rglob("results/*/*.parquet")
            )
        else:
            _, candidate, rows = generate(root, args.runs, args.nodes, args.iters)
            print(
                f"generated {rows:,} rows in {args.runs} runs in {time.perf_counter() - t0:.0f} s"
            )
        cmd = [sys.executable, __file__, "--per", args.per, "--measure", str(root), candidate]
        load = os.getloadavg()[0]
        results = [json.loads(subprocess.check_output(cmd)) for _ in range(args.repeat)]
        load_after = os.getloadavg()[0]
    best = min(results, key=lambda r: r["wall_s"])
    n = args.repeat
    print(
        f"| rows | runs | per | samples/row | wall s (best of {n}) | CPU s (best of {n}) "
        "| peak RSS GiB | verdicts |"
    )
    print("|---:|---:|---|---:|---:|---:|---:|---|")
    verdicts = ", ".join(
        f"{k} {int(v)}" for k, v in best.items() if k not in ("wall_s", "cpu_s", "peak_gib")
    )
    print(
        f"| {rows:,} | {args.runs} | {args.per} | {args.iters} | {best['wall_s']:.2f} "
        f"| {min(r['cpu_s'] for r in results):.2f} "
        f"| {max(r['peak_gib'] for r in results):.2f} | {verdicts} |"
    )
    print(f"load average (1 min) {load:.2f} before, {load_after:.2f} after")


if __name__ == "__main__":
    main()
