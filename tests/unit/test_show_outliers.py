"""`fleetval show` flags a node far below its peers in one run, with no baseline."""

from __future__ import annotations

from datetime import UTC, datetime

from typer.testing import CliRunner

from fleetval.cli import app
from fleetval.store.dataset import Store
from fleetval.store.records import Run
from fleetval.store.schema import Row


def test_show_flags_the_slow_gpu_of_a_run(tmp_path):
    store = Store(tmp_path)
    nodes = [f"node-{i}" for i in range(8)]
    rows = [
        Row(run_id="r1", check="microbench", metric="gemm_tflops", unit="TFLOP/s", dtype="bfloat16",
            rank=0, node=n, device_id=f"GPU-{n}", value=(500.0 if n == "node-3" else 700.0) * (1 + 0.005 * i))
        for i, n in enumerate(nodes)
    ]  # fmt: skip
    store.write_results("r1", "job0-microbench", rows)
    store.write_nodes("r1", [{"node": n, "gpu_model": "NVIDIA H100 80GB HBM3"} for n in nodes])
    store.write_run(Run(run_id="r1", suite="health", status="pass", started_at=datetime.now(UTC)))
    res = CliRunner().invoke(app, ["show", "r1", "--data", str(tmp_path)])
    assert res.exit_code == 0, res.output
    flagged = [line for line in res.output.splitlines() if line.startswith("outlier")]
    assert len(flagged) == 1 and "node-3/GPU-node-3" in flagged[0] and "gemm_tflops" in flagged[0]
