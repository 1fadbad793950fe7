"""A store in the documented layout (docs/schema.md) written straight with pyarrow, as
another tool, an older fleetval, or a store whose `index/` was deleted leaves it: no
fleetval writer, no `index/`, no summaries or lateness, files without fleetval's Arrow
metadata, snappy-compressed, timestamps in milliseconds, and no `runs.metrics` column (a
version-1 store: compare infers directions from units).

Every run has its runs/ and nodes/ file; the newest `with_results` runs also have a
results part of bandwidth rows (2 nodes x 2 ranks, 3 sizes, samples), enough for
`fleetval compare` against a baseline of some and a history of the others.

Used by tests/unit/test_foreign_store.py, bench/bench_index.py and bench/bench_api_scale.py.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

BASE = datetime(2026, 1, 1, tzinfo=UTC)
SUITE = "nightly"
SIZES = (1 << 16, 1 << 20, 1 << 24)
WORLD = 4
ITERS = 8
# docs/schema.md, as another tool reads it: the columns it names, in its types.
RUNS = pa.schema(
    [
        ("run_id", pa.string()),
        ("suite", pa.string()),
        ("status", pa.string()),
        ("started_at", pa.timestamp("ms", tz="UTC")),
        ("finished_at", pa.timestamp("ms", tz="UTC")),
        ("labels", pa.map_(pa.string(), pa.string())),
        ("submitter", pa.string()),
        ("backend", pa.string()),
        ("faults", pa.string()),
        ("suite_json", pa.string()),
        ("summary", pa.string()),
        ("message", pa.string()),
    ]
)
NODES = pa.schema(
    [
        ("run_id", pa.string()),
        ("node", pa.string()),
        ("hostname", pa.string()),
        ("gpu_model", pa.string()),
        ("gpu_count", pa.int32()),
        ("driver_version", pa.string()),
        ("rocm_version", pa.string()),
        ("rccl_version", pa.string()),
    ]
)
RESULTS = pa.schema(
    [
        ("run_id", pa.string()),
        ("job", pa.int32()),
        ("step", pa.string()),
        ("check", pa.string()),
        ("collective", pa.string()),
        ("op", pa.string()),
        ("dtype", pa.string()),
        ("size_bytes", pa.int64()),
        ("world_size", pa.int32()),
        ("rank", pa.int32()),
        ("local_rank", pa.int32()),
        ("node", pa.string()),
        ("device", pa.string()),
        ("backend", pa.string()),
        ("iters", pa.int32()),
        ("time_us_median", pa.float64()),
        ("algbw_gbps", pa.float64()),
        ("busbw_gbps", pa.float64()),
        ("wrong", pa.int64()),
        ("status", pa.string()),
        ("message", pa.string()),
        ("samples_us", pa.list_(pa.float64())),
        ("details", pa.string()),
    ]
)
# How this other writer writes: uncompressed, no statistics (a small file per run).
FAST = {"compression": "none", "write_statistics": False}


def run_ids(n: int) -> list[str]:
    """The ids `write_foreign_store(root, n)` writes, oldest first (sortable by start)."""
    return [f"{BASE + timedelta(minutes=i):%Y%m%d-%H%M%S}-{i:06x}" for i in range(n)]


def write_foreign_store(root: Path, runs: int, *, with_results: int = 12) -> list[str]:
    """`runs` finished runs of suite `nightly`, all passing; returns their ids, oldest first."""
    ids = run_ids(runs)
    for d in ("runs", "nodes", "results"):
        (root / d).mkdir(parents=True, exist_ok=True)
    (root / "SCHEMA_VERSION").write_text("1\n")
    # NOTE: each table made once and sliced per file: building 5,000 tiny tables costs more
    # than writing them
    records, nodes = _runs(ids), _nodes(ids)
    for i, run_id in enumerate(ids):
        pq.write_table(records.slice(i, 1), root / "runs" / f"{run_id}.parquet", **FAST)
        pq.write_table(nodes.slice(2 * i, 2), root / "nodes" / f"{run_id}.parquet", **FAST)
    rng = np.random.default_rng(7)
    for run_id in ids[len(ids) - with_results :]:
        (root / "results" / run_id).mkdir()
        pq.write_table(_results(run_id, rng), root / "results" / run_id / "job0-bw.parquet")
    return ids


def _runs(ids: list[str]) -> pa.Table:
    summary = json.dumps(
        {"steps": [{"step": "bw", "status": "pass", "message": "", "seconds": 1.0}]}
    )
    started = [BASE + timedelta(minutes=i) for i in range(len(ids))]
    columns = {
        "run_id": ids,
        "suite": [SUITE] * len(ids),
        "status": ["pass"] * len(ids),
        "started_at": started,
        "finished_at": [t + timedelta(seconds=30) for t in started],
        "labels": [[("nightly", str(i % 7)), ("tool", "foreign")] for i in range(len(ids))],
        "submitter": ["ci"] * len(ids),
        "backend": ["gloo"] * len(ids),
        "faults": ["[]"] * len(ids),
        "suite_json": [json.dumps({"name": SUITE})] * len(ids),
        "summary": [summary] * len(ids),
        "message": [""] * len(ids),
    }
    return pa.Table.from_pydict(columns, schema=RUNS)


def _nodes(ids: list[str]) -> pa.Table:
    """Two nodes per run, a run's rows together."""
    n = 2 * len(ids)
    columns = {
        "run_id": [r for r in ids for _ in range(2)],
        "node": ["n0", "n1"] * len(ids),
        "hostname": ["host0", "host1"] * len(ids),
        "gpu_model": ["AMD Instinct MI300X"] * n,
        "gpu_count": [2] * n,
        "driver_version": ["6.12.12"] * n,
        "rocm_version": ["6.4.1"] * n,
        "rccl_version": ["2.22.3"] * n,
    }
    return pa.Table.from_pydict(columns, schema=NODES)


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
                    "wrong": 0, "status": "pass", "message": "",
                    "samples_us": samples.tolist(), "details": "{}",
                }
            )  # fmt: skip
    return pa.Table.from_pylist(rows, schema=RESULTS)
