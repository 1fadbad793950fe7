"""The health suite on the simulated Ray cluster, with captured nvidia-smi output and kernel
logs standing in for each node's tools: the gpus/ rows, the run's verdict and the drain line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb
import pytest
import yaml
from typer.testing import CliRunner

from fleetval.cli.app import app
from fleetval.store.dataset import Store

pytestmark = pytest.mark.usefixtures("ray_session")

DATA = Path(__file__).resolve().parents[1] / "data"


def test_health_suite_reads_each_nodes_gpus_and_names_the_node_to_drain(tmp_path: Path):
    captures = tmp_path / "captures"
    (captures / "node-a").mkdir(parents=True)
    (captures / "node-b").mkdir(parents=True)
    shutil.copy(DATA / "hw" / "nvsmi-q-535-a10-remap-pending.txt", captures / "node-a" / "q.txt")
    shutil.copy(DATA / "hw" / "journal-xid-79-fallen-off-bus.log", captures / "node-a" / "k.log")
    shutil.copy(DATA / "real" / "nvidia-smi-q-h100-golden.txt", captures / "node-b" / "q.txt")
    suite = {
        "name": "gpu-hardware",
        "placement": {
            "world_sizes": [2],
            "gpus_per_rank": 0,
            "strategy": "STRICT_SPREAD",
            "nodes": ["node-a", "node-b"],
        },
        "timeouts": {"step_s": 60, "collective_s": 10},
        "steps": [
            {
                "check": "health",
                "hardware_source": "captured",
                "hardware_captures": [str(captures / "{node}" / "*")],
            }
        ],
    }
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(suite))
    data = tmp_path / "data"
    res = CliRunner().invoke(app, ["run", str(path), "--data", str(data), "--json"])
    assert res.exit_code == 1, res.output
    out = json.loads(res.output)
    assert out["status"] == "fail"

    store = Store(data)
    gpus = store.gpus([out["run_id"]]).to_pandas().set_index(["node", "device_id"])
    # node-a's Xid 79 names a PCI address no reading has: a row of its own, counters null
    assert sorted(gpus.index) == [("node-a", "0000:01:00"),
                                  ("node-a", "GPU-73d12ef7-f589-f867-4259-c7090ab44736"),
                                  ("node-b", "GPU-8820b3cc-ff52-fc76-f238-e0bc8f3c6a51")]  # fmt: skip
    a, b = gpus.loc[("node-a", "GPU-73d12ef7-f589-f867-4259-c7090ab44736")], gpus.iloc[2]
    ghost = gpus.loc[("node-a", "0000:01:00")]
    assert (list(ghost["findings"]), ghost["action"]) == (["xid_79"], "reboot node")
    assert ghost[["name", "pcie_replays", "ecc_blocks"]].isna().all()
    assert (a["name"], a["remap_pending"], a["remap_uncorrected"]) == ("NVIDIA A10", True, 4)
    assert (a["status"], a["action"], list(a["findings"])) == ("fail", "reset GPU",
                                                               ["row_remap_pending"])  # fmt: skip
    assert (b["model"], b["status"], b["action"], b["driver_version"]) == (
        "NVIDIA H100 SXM", "pass", "none", "580.159.04")  # fmt: skip
    n = (
        duckdb.connect()
        .execute(
            f"SELECT count(*) FROM read_parquet('{data}/gpus/*/*.parquet') WHERE remap_pending"
        )
        .fetchone()
    )
    assert n == (1,)

    rows = store.results([out["run_id"]]).to_pylist()
    drain = {r["node"]: r for r in rows if r["metric"] == "hw_node_action"}
    assert drain["node-a"]["status"] == "fail"
    assert drain["node-a"]["message"].startswith(
        "drain node-a: reboot node: PCI 0000:01:00: xid_79"
    )
    assert drain["node-b"]["status"] == "pass"
    # a node's hardware is read once, by its first rank
    assert all(r["local_rank"] == 0 for r in rows if r["metric"] == "gpu_hardware")

    shown = CliRunner().invoke(app, ["show", out["run_id"], "--data", str(data)])
    assert shown.exit_code == 0, shown.output
    assert "GPU hardware" in shown.output and "drain node-a: reboot node" in shown.output
    assert "row_remap_pending: Remapped Rows Pending: Yes" in shown.output
