"""End to end on real runs of the shipped `smoke` suite, as a user runs it (fresh processes,
the embedded local Ray): clean runs pass the gate; a run with one rank delayed 30 ms fails
it and the output names that rank. RESULTS.md has the 10-repeat figure."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fleetval.suite import load_suite

pytestmark = [pytest.mark.slow, pytest.mark.own_cluster]


def _cli(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    cmd = [sys.executable, "-m", "fleetval.cli", *args]
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, env=env, check=False
    )


def _run(data: str, suite: str) -> str:
    return _record(data, suite)["run_id"]


def _record(data: str, suite: str) -> dict:
    proc = _cli("run", suite, "--data", data, "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def test_clean_smoke_runs_pass_and_a_late_rank_fails_by_name(tmp_path: Path) -> None:
    data = str(tmp_path / "data")
    # The README's main command, as a user types it: no address, a local Ray, CPU and gloo.
    record = _record(data, "smoke")
    assert record["status"] == "pass" and record["backend"] == "gloo"
    assert [s["status"] for s in record["summary"]["steps"]] == ["pass", "pass"]
    first = record["run_id"]
    assert _cli("baseline", "set", "first", "--run", first, "--data", data).returncode == 0
    clean = _cli("compare", "-b", "first", "--run", _run(data, "smoke"), "--json", "--data", data)
    doc = json.loads(clean.stdout)
    assert clean.returncode == 0 and doc["gate"] == [], clean.stdout[-3000:]
    assert doc["summary"]["regression"] == 0 and doc["summary"]["missing"] == 0

    suite = json.loads(load_suite("smoke").to_json())
    suite["faults"] = [{"kind": "delay", "rank": 2, "ms": 30}]
    path = tmp_path / "late.yaml"
    path.write_text(yaml.safe_dump(suite))
    late = _run(data, str(path))
    table = _cli("compare", "-b", "first", "--run", late, "--data", data)
    assert table.returncode == 1, table.stdout[-3000:]
    assert "late rank" in table.stdout and "rank 2 (" in table.stdout
    doc = json.loads(_cli("compare", "-b", "first", "--run", late, "--json", "--data", data).stdout)
    (outlier,) = doc["outliers"]
    assert outlier["rank"] == 2 and outlier["kind"] == "late_rank"
