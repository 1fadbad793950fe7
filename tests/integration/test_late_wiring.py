"""Late ranks from the lateness scorer become `late` culprits: rows, step WARN, the job goes on.

The scorer itself (fleetval.detect.lateness) is another engineer's; here only its seam is replaced
by a fixed answer, to prove the wiring through the real engine, store and CLI.
"""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from fleetval.cli import app
from fleetval.detect import lateness
from fleetval.detect.lateness import LateRank
from fleetval.store.dataset import Store
from fleetval.store.schema import Row

pytestmark = pytest.mark.usefixtures("ray_session")

SUITE = {
    "name": "late",
    "placement": {"world_sizes": [2], "gpus_per_rank": 0},
    "steps": [
        {"name": "bw", "check": "bandwidth", "sizes": {"min": 1024, "max": 1024}, "iters": 3},
        {"name": "after", "check": "collectives", "collectives": ["barrier"]},
    ],
}


def test_late_rank_warns_the_step_and_run_is_shown_and_the_job_goes_on(tmp_path, monkeypatch):
    seen: list[str] = []

    def fake_late_ranks(rows: list[Row], *, metrics: frozenset[str]) -> list[LateRank]:
        assert "step_time_ms" in metrics  # the checks' declarations reach the scorer
        seen.append(rows[0].step)
        if rows[0].step != "bw":
            return []
        r1 = next(r for r in rows if r.rank == 1)
        return [LateRank(1, r1.node, "GPU-fake-1", 4.2, 1500.0, "last in 9 of 10 iterations")]

    monkeypatch.setattr(lateness, "late_ranks_in_step", fake_late_ranks)
    path = tmp_path / "late.yaml"
    path.write_text(yaml.safe_dump(SUITE))
    runner = CliRunner()
    res = runner.invoke(app, ["run", str(path), "--data", str(tmp_path), "--json"])
    assert res.exit_code == 0, res.output  # warnings exit 0 (see fleetval/status.py)
    record = json.loads(res.output)
    assert record["status"] == "warn"
    bw, after = record["summary"]["steps"]
    assert seen == ["bw", "after"]  # called on every finished step's rows
    assert bw["status"] == "warn" and after["status"] == "pass"  # not aborted
    assert [(c["rank"], c["reason"], c["device_id"]) for c in bw["culprits"]] == [
        (1, "late", "GPU-fake-1")
    ]
    assert "late: rank 1 on" in bw["message"]
    rows = Store(tmp_path).results([record["run_id"]]).to_pylist()
    late_rows = [r for r in rows if r["metric"] == "step_outcome"]
    assert [(r["rank"], r["status"], r["device_id"]) for r in late_rows] == [
        (1, "warn", "GPU-fake-1")
    ]
    shown = runner.invoke(app, ["show", record["run_id"], "--data", str(tmp_path)])
    assert shown.exit_code == 0, shown.output
    assert f"rank 1 on {late_rows[0]['node']} device GPU-fake-1 (late)" in shown.output
