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

from fleetval.analysis.compare import compare_runs
from fleetval.store.schema import Row
from fleetval.testing.bandwidth import FleetModel, GenStore

REPO = Path(__file__).resolve().parents[2]

CHILD = """
import json, sys
from fleetval.analysis.compare import compare_runs, fleet_outliers
from fleetval.store.dataset import Store
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


def test_buffer_conversions_match_pyarrows() -> None:
    """np_col and arrow give what to_numpy / pa.array give: nulls, slices, booleans."""
    import numpy as np
    import pyarrow as pa

    from fleetval.arrays import arrow, np_col

    ints = pa.array([3, None, 5, 7, None, 11], pa.int32())
    floats = pa.array([1.5, None, float("nan"), 4.0], pa.float64())
    bools = pa.array([True, False, True, True, False, False, True, False, True])
    for col in (ints, ints.slice(1, 4), floats, floats.slice(2), bools, bools.slice(3, 5)):
        np.testing.assert_array_equal(np_col(col), col.to_numpy(zero_copy_only=False))
        np.testing.assert_array_equal(
            np_col(pa.chunked_array([col, col])), np.r_[np_col(col), np_col(col)]
        )
    assert np_col(ints, null=-1).tolist() == [3, -1, 5, 7, -1, 11]
    x = np.array([1.0, np.nan, 3.0])
    assert arrow(x, nan_is_null=True).equals(pa.array(x, from_pandas=True))
    assert arrow(x).null_count == 0 and np.array_equal(np_col(arrow(x)), x, equal_nan=True)
    assert arrow(np.arange(4, dtype=np.int64)[::2]).equals(pa.array([0, 2], pa.int64()))
    assert arrow(np.array([True, False, True])).equals(pa.array([True, False, True]))
    assert arrow(["a", None, "ü"], pa.string()).equals(pa.array(["a", None, "ü"], pa.string()))
    assert arrow([], pa.string()).equals(pa.array([], pa.string()))


def test_run_value_dictionaries_are_dictionary_encodes() -> None:
    """Strings in run values are encoded as pc.dictionary_encode encodes the plain values."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from fleetval.arrays import _first_seen

    rng = np.random.default_rng(0)
    names = ["b", "a", "c", "a", "d"]  # a repeated name, and d never used
    for codes in (rng.integers(-1, 4, 50), rng.integers(0, 3, 50), np.zeros(0, np.int64)):
        plain = pa.array([names[c] if c >= 0 else None for c in codes.tolist()], pa.string())
        got = _first_seen(codes, names)
        want = pc.dictionary_encode(plain)
        assert got.dictionary.equals(want.dictionary) and got.indices.equals(want.indices)
    assert _first_seen(np.array([-1, -1]), []).to_pylist() == [None, None]
