"""A comparison stays in pyarrow and numpy: it never imports pandas.

pyarrow imports pandas (~0.25 s, a third of a fleet-sized compare) the first time anything
converts numpy or Python values to Arrow or back through its own converters, so the read
path goes through `reduction.np_col` / `reduction.arrow`. A fresh interpreter checks it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from fleetval.compare import compare_runs
from fleetval.results import Row
from tests.storegen import FleetModel, GenStore

REPO = Path(__file__).resolve().parents[2]

CHILD = """
import json, sys
from fleetval.compare import compare_runs, fleet_outliers
from fleetval.store import Store
store, ids = Store(sys.argv[1]), sys.argv[2:]
out = {}
for per in ("sku", "node"):
    c = compare_runs(store, "base", ids[-1:], per=per)
    out[per] = {v.value: n for v, n in c.counts().items() if n}
slow = [o.unit for o in fleet_outliers(store, ids[-1])]
print(json.dumps({"pandas": "pandas" in sys.modules, "counts": out, "slow": slow}))
"""


def test_compare_does_not_import_pandas(tmp_path: Path) -> None:
    g = GenStore(tmp_path / "s", FleetModel(sizes=(1 << 10, 1 << 20)), 0)
    ids = [*g.baseline(5), g.run(drop={4: 0.3})]
    devices = [  # per-device values too, one GPU slow: the outlier check reads these rows
        Row(run_id=ids[-1], check="microbench", metric="gemm_tflops", unit="TFLOP/s",
            rank=i, node=f"node-{i % 2}", device_id=f"GPU-{i}", value=700.0 - 200 * (i == 5) + i)
        for i in range(8)
    ]  # fmt: skip
    g.store.write_results(ids[-1], "job0-microbench", devices)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(g.store.root), *ids],
        capture_output=True, text=True, check=True, env=env, cwd=REPO,
    )  # fmt: skip
    got = json.loads(out.stdout)
    assert got["pandas"] is False
    here = compare_runs(g.store, "base", ids[-1:], per="sku")
    assert got["counts"]["sku"] == {v.value: n for v, n in here.counts().items() if n}
    assert got["counts"]["sku"].get("regression") == 1
    assert got["slow"] == ["node-1/GPU-5"]
