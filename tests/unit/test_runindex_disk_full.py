"""A disk that fills while runs are written (issue 24): a real EFBIG, in a writer process
whose files may not grow past RLIMIT_FSIZE (SIGXFSZ ignored, so the write fails instead of
killing it). The run files fit; the run index outgrows the limit and its writes fail. That
process still lists every run, and the next open (normal limits) repairs the index on disk."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq

from fleetval.store.catalog import Catalog
from fleetval.store.dataset import Store

LIMIT = 96 * 1024  # above any one run's file, below the index of 60 runs with long labels
RUNS = 60
WRITER = r"""
import json, resource, signal, sys
from datetime import UTC, datetime, timedelta
import pyarrow as pa

from fleetval.store.dataset import Store
from fleetval.store.records import Run
from fleetval.store.schema import RESULTS_SCHEMA

root, limit, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG, not death, past the limit
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
store = Store(root)
store.runs()  # the index open, as a long-lived writer (the service) holds it
start = datetime(2026, 1, 1, tzinfo=UTC)
for i in range(n):
    run_id = f"2026010{1 + i // 50}-0000{i % 50:02d}-aaaaaa"
    rows = [{"run_id": run_id, "job": 0, "step": "bw", "check": "bandwidth", "rank": r,
             "node": "n0", "status": "pass", "samples_us": [float(i), float(r)]}
            for r in range(4)]
    store.write_results_table(run_id, "job0-bw", pa.Table.from_pylist(rows, RESULTS_SCHEMA))
    store.write_run(Run(run_id=run_id, suite="nightly", status="pass",
                              started_at=start + timedelta(minutes=i),
                              labels={"note": "x" * 1500, "i": str(i)}))
print(json.dumps({"listed": [r.run_id for r in store.runs()]}))
"""


def _indexed_on_disk(root: Path) -> int:
    conn = sqlite3.connect(root / "index" / "runs.sqlite")
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        return int(conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0])
    finally:
        conn.close()


def test_an_index_write_that_hit_a_full_disk_is_repaired_by_the_next_open(tmp_path: Path):
    res = subprocess.run(
        [sys.executable, "-c", WRITER, str(tmp_path), str(LIMIT), str(RUNS)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    # SQLite reports EFBIG as "disk I/O error"; the writer went on from memory
    assert "not in the run index (disk I/O error)" in res.stderr, res.stderr[-2000:]
    assert "kept in memory" in res.stderr
    ids = sorted(p.stem for p in (tmp_path / "runs").glob("*.parquet"))
    assert len(ids) == RUNS  # every run's files were written
    assert json.loads(res.stdout)["listed"] == ids  # and that process listed every run
    assert _indexed_on_disk(tmp_path) < RUNS  # the index on disk really missed some

    catalog = Catalog(tmp_path)  # the next open, with normal limits
    assert [r.run_id for r in catalog.runs()] == ids
    assert _indexed_on_disk(tmp_path) == RUNS  # repaired on disk, for every later process
    assert catalog.run(ids[-1]).labels["i"] == str(RUNS - 1)
    for i, run_id in enumerate(ids):  # what was written before and after is intact
        table = pq.read_table(tmp_path / "results" / run_id / "job0-bw.parquet")
        assert table["samples_us"].to_pylist() == [[float(i), float(r)] for r in range(4)]
    assert Store(tmp_path).results(ids).num_rows == 4 * RUNS
