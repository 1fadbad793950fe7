"""A store in the documented layout (docs/schema.md) written straight with pyarrow, as
another tool, an older fleetval, or a store whose `index/` was deleted leaves it: no
fleetval writer, no `index/`, no summaries or lateness, files without fleetval's Arrow
metadata, snappy-compressed, timestamps in milliseconds, and no `runs.metrics` column (a
version-1 store: compare infers directions from units).

Every run has its runs/ and nodes/ file; the newest `with_results` runs also have a
results part of bandwidth rows (2 nodes x 2 ranks, 3 sizes, samples), enough for
`fleetval compare` against a baseline of some and a history of the others.

A recipe of `fleetval.testing.builder` (its foreign layout). Used by tests/unit/test_run_index.py,
tests/integration/test_foreign_store.py, bench/bench_index.py and bench/bench_api_scale.py.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa

from fleetval.store.records import Run
from fleetval.testing.builder import FOREIGN_RESULTS, Layout, SyntheticRun, build_store
from fleetval.vocab import RunStatus, Status

BASE = datetime(2026, 1, 1, tzinfo=UTC)
SUITE = "nightly"
SIZES = (1 << 16, 1 << 20, 1 << 24)
WORLD = 4
ITERS = 8


def run_ids(n: int) -> list[str]:
    """The ids `write_foreign_store(root, n)` writes, oldest first (sortable by start)."""
    return [f"{BASE + timedelta(minutes=i):%Y%m%d-%H%M%S}-{i:06x}" for i in range(n)]


def write_foreign_store(root: Path, runs: int, *, with_results: int = 12) -> list[str]:
    """`runs` finished runs of suite `nightly`, all passing; returns their ids, oldest first."""
    ids = run_ids(runs)
    rng = np.random.default_rng(7)
    results = {r: {"job0-bw": _results(r, rng)} for r in ids[len(ids) - with_results :]}
    return build_store(root, (_run(i, r, results.get(r, {})) for i, r in enumerate(ids)),
                       layout=Layout.FOREIGN)  # fmt: skip


SUMMARY = {"steps": [{"step": "bw", "status": Status.PASS.value, "message": "", "seconds": 1.0}]}


def _run(i: int, run_id: str, results: dict[str, pa.Table]) -> SyntheticRun:
    """The run's record and its two nodes."""
    started = BASE + timedelta(minutes=i)
    record = Run(
        run_id=run_id, suite=SUITE, status=RunStatus.PASS.value, started_at=started,
        finished_at=started + timedelta(seconds=30),
        labels={"nightly": str(i % 7), "tool": "foreign"}, submitter="ci", backend="gloo",
        suite_json=json.dumps({"name": SUITE}), summary=SUMMARY,
    )  # fmt: skip
    nodes = [
        {"node": f"n{k}", "hostname": f"host{k}", "gpu_model": "AMD Instinct MI300X",
         "gpu_count": 2, "driver_version": "6.12.12", "rocm_version": "6.4.1",
         "rccl_version": "2.22.3"}
        for k in range(2)
    ]  # fmt: skip
    return SyntheticRun(record, results, nodes)


def _results(run_id: str, rng: np.random.Generator) -> pa.Table:
    """all_reduce bandwidth rows: one per rank and size, a run-level level plus iteration noise."""
    level = rng.lognormal(0.0, 0.02)
    rows = []
    for size in SIZES:
        base_us = 20.0 + size / 5e3
        for rank in range(WORLD):
            samples = base_us * level * rng.lognormal(0.0, 0.02, ITERS)
            t = float(np.median(samples))
            algbw = size / t / 1e3
            rows.append(
                {
                    "run_id": run_id, "job": 0, "step": "bw", "check": "bandwidth",
                    "collective": "all_reduce", "op": "sum", "dtype": "float32",
                    "size_bytes": size, "world_size": WORLD, "rank": rank,
                    "local_rank": rank % 2, "node": f"n{rank // 2}", "device": "cpu",
                    "backend": "gloo", "iters": ITERS, "time_us_median": t,
                    "algbw_gbps": algbw, "busbw_gbps": algbw * 2 * (WORLD - 1) / WORLD,
                    "wrong": 0, "status": Status.PASS.value, "message": "",
                    "samples_us": samples.tolist(), "details": "{}",
                }
            )  # fmt: skip
    return pa.Table.from_pylist(rows, schema=FOREIGN_RESULTS)
