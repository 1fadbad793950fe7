"""`fleetval sweep --local-fleet N`: a sweep tried on one machine, as the README shows it.

Run as a user would, in a subprocess (its own simulated Ray fleet, stopped at its end)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fleetval.store.dataset import Store

pytestmark = [pytest.mark.slow, pytest.mark.multinode, pytest.mark.own_cluster,
              pytest.mark.timeout(400)]  # fmt: skip


def test_a_sweep_on_a_local_fleet_judges_every_node_and_stops_its_cluster(tmp_path: Path):
    cmd = [sys.executable, "-m", "fleetval", "sweep", "sweep", "--local-fleet", "3",
           "--data", str(tmp_path), "--format", "json"]  # fmt: skip
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=360)
    assert res.returncode in (0, 1, 5), res.stdout[-2000:] + res.stderr[-3000:]
    doc = json.loads(res.stdout[res.stdout.index("{") :])
    assert [n["node"] for n in doc["nodes"]] == ["node-0", "node-1", "node-2"]
    assert {g["rack"] for g in doc["topology"].values()} == {"rack-a", "rack-b"}
    assert doc["jobs"] >= 3 and Store(tmp_path).latest_run().summary["sweep"]["jobs"] == doc["jobs"]
    left = subprocess.run(["pgrep", "-f", f"ray.*{tmp_path.name}"], capture_output=True)
    assert left.returncode == 1  # no process of its cluster left


def test_local_fleet_bad_sizes_and_an_address_beside_it_are_bad_input(tmp_path: Path):
    from typer.testing import CliRunner

    from fleetval.cli import app

    for args in (["--local-fleet", "1"], ["--local-fleet", "99"],
                 ["--local-fleet", "3", "--address", "ray://x:1"]):  # fmt: skip
        res = CliRunner().invoke(app, ["sweep", "sweep", "--data", str(tmp_path), *args])
        assert res.exit_code == 2 and "--local-fleet" in res.output, res.output
