"""End to end on real runs of the shipped `smoke` suite: clean runs pass the gate; a run
with one rank delayed 30 ms fails it and the output names that rank."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from fleetval.cli import app
from fleetval.suite import load_suite

pytestmark = [pytest.mark.usefixtures("ray_session"), pytest.mark.slow]
runner = CliRunner()


def _run(data: str, suite: str, label: str) -> str:
    res = runner.invoke(app, ["run", suite, "--data", data, "--label", label, "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.output)["run_id"]


def _compare(data: str, run_id: str, *extra: str) -> tuple[int, str]:
    res = runner.invoke(
        app, ["compare", "--baseline", "first", "--run", run_id, "--data", data, *extra]
    )
    return res.exit_code, res.output


def test_clean_smoke_runs_pass_and_a_late_rank_fails_by_name(tmp_path: Path) -> None:
    data = str(tmp_path / "data")
    first = _run(data, "smoke", "try=0")
    res = runner.invoke(app, ["baseline", "set", "first", "--run", first, "--data", data])
    assert res.exit_code == 0, res.output
    for i in (1, 2):  # RESULTS.md: 10 of 10 repeats (bench_gate.py's smoke section)
        code, out = _compare(data, _run(data, "smoke", f"try={i}"), "--json")
        doc = json.loads(out)
        assert code == 0 and doc["gate"] == [], out
        assert doc["summary"]["regression"] == 0 and doc["summary"]["missing"] == 0

    suite = json.loads(load_suite("smoke").to_json())
    suite["faults"] = [{"kind": "delay", "rank": 2, "ms": 30}]
    path = tmp_path / "late.yaml"
    path.write_text(yaml.safe_dump(suite))
    late = _run(data, str(path), "try=late")
    code, out = _compare(data, late)
    assert code == 1, out
    assert "late rank" in out and "rank 2 (" in out
    doc = json.loads(_compare(data, late, "--json")[1])
    (outlier,) = doc["outliers"]
    assert outlier["rank"] == 2 and outlier["kind"] == "late_rank"
