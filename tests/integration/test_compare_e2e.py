"""Issue 4 end to end: real runs, a baseline from the first, regressions caught by compare."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from fleetval.cli import app

pytestmark = pytest.mark.usefixtures("ray_session")
runner = CliRunner()

SUITE = {
    "name": "compare-e2e",
    "placement": {"world_sizes": [4], "gpus_per_rank": 0},
    "steps": [
        {
            "name": "bw",
            "check": "bandwidth",
            "sizes": {"min": 1024, "max": 16384, "factor": 4},
            "warmup": 2,
            "iters": 20,
        }
    ],
    # gloo over loopback on 2 shared cores drifts tens of percent between runs; a 20 ms
    # delay per collective is ~100x. The suite's own threshold keeps noise out of the gate.
    "compare": {"threshold_pct": 60},
}


def run(tmp_path: Path, data: str, label: str, faults: list | None = None) -> str:
    path = tmp_path / f"{label.replace('=', '-')}.yaml"
    path.write_text(yaml.safe_dump({**SUITE, "faults": faults or []}))
    res = runner.invoke(app, ["run", str(path), "--data", data, "--label", label, "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.output)["run_id"]


def test_baseline_then_clean_and_delayed_candidates(tmp_path):
    data = str(tmp_path / "data")
    first = run(tmp_path, data, "stack=old")
    second = run(tmp_path, data, "stack=new")

    res = runner.invoke(app, ["baseline", "set", "old", "--where", "stack=old", "--data", data])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["baseline", "show", "old", "--data", data])
    assert first in res.output and second not in res.output

    res = runner.invoke(
        app, ["compare", "--baseline", "old", "--run", second, "--format", "json", "--data", data]
    )
    assert res.exit_code == 0, res.output
    verdicts = json.loads(res.output)
    assert verdicts["summary"].get("regression", 0) == 0 and verdicts["exit_code"] == 0
    judged = verdicts["summary"]["unchanged"] + verdicts["summary"]["noisy"]
    assert judged == 3  # all three sizes matched and judged; none missing or new

    slow = run(tmp_path, data, "stack=slow", faults=[{"kind": "delay", "rank": 1, "ms": 20}])
    res = runner.invoke(
        app, ["compare", "--baseline", "old", "--run", slow, "--format", "junit", "--data", data]
    )
    assert res.exit_code == 1, res.output
    assert "<failure" in res.output and "regression" in res.output
    res = runner.invoke(app, ["compare", "--baseline", "nope", "--latest", "--data", data])
    assert res.exit_code == 2 and "old" in res.output  # unknown baseline lists the known ones
