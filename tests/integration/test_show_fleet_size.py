"""`fleetval show` and the sign-off report at fleet size, on an 80-column console: a generated
store (`fleetval.testing.bandwidth`'s rows, a per-device metric with planted slow nodes, culprits
in the run summary) of 16 and of 1,024 nodes. The environment reads as groups of identical
nodes with only what differs; every listing that grows with the fleet is cut with "and N more";
`--json` holds everything."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from fleetval.cli.app import app
from fleetval.metrics import BUSBW, CORRECT, LATENCY
from fleetval.nodesets import SHOWN
from fleetval.store.dataset import Store
from fleetval.store.records import Run
from fleetval.store.schema import Row
from fleetval.testing.bandwidth import bandwidth_table

SLOW_EVERY = 37  # from node-3, every 37th node's GEMM is at half speed: 28 of 1,024, 1 of 16
FP = {"gpu_model": "AMD Instinct MI300X", "gpu_count": 8, "driver_version": "6.12.12",
      "rocm_version": "6.4.1", "torch_version": "2.7.1+rocm6.4", "ray_version": "2.49.0",
      "python_version": "3.12.3", "cpu_model": "AMD EPYC 9654 96-Core Processor"}  # fmt: skip


def fleet_store(root: Path, n: int) -> tuple[str, list[int]]:
    """One nightly run of `n` nodes; node-7 has an older RCCL, every 100th an older kernel."""
    store = Store(root)
    run_id = f"20260101-000000-{n:06x}"
    rng = np.random.default_rng(n)
    samples = 1700 * (1 + 0.01 * rng.standard_normal((n, 10)))
    store.write_results_table(
        run_id, "bandwidth", bandwidth_table(run_id, [("all_reduce", "float32", 1 << 26)], n, 1,
                                             samples))  # fmt: skip
    slow = list(range(3, n, SLOW_EVERY))
    tflops = 600 * (1 + 0.005 * rng.standard_normal(n))
    tflops[slow] /= 2
    store.write_results(run_id, "gemm", [
        Row(run_id=run_id, step="gemm", check="microbench", metric="gemm_tflops", unit="TFLOPS",
            value=float(tflops[j]), dtype="bfloat16", world_size=n, rank=j, node=f"node-{j}",
            device="cuda:0", status="pass") for j in range(n)])  # fmt: skip
    store.write_nodes(run_id, [
        {"node": f"node-{j}", "hostname": f"node-{j}", **FP,
         "rccl_version": "2.21.5" if j == 7 else "2.22.3",
         "kernel": "6.8.0-57-generic" if j % 100 == 0 else "6.8.0-60-generic"}
        for j in range(n)])  # fmt: skip
    culprits = [{"rank": j, "node": f"node-{j}", "device_id": None, "reason": "late",
                 "detail": "late by 5 ms"} for j in slow]  # fmt: skip
    step = {"job": 0, "world_size": n, "step": "bandwidth", "check": "bandwidth",
            "status": "warn", "seconds": 1.0, "message": "late ranks", "culprits": culprits}  # fmt: skip
    t = datetime(2026, 1, 1, tzinfo=UTC)
    store.write_run(Run(run_id=run_id, suite="nightly", status="warn", started_at=t,
                        finished_at=t, summary={"steps": [step]},
                        metrics=[BUSBW, LATENCY, CORRECT]))  # fmt: skip
    return run_id, slow


def fleetval(data: Path, *args: str) -> str:
    """The real command in its own process, on a terminal 80 columns wide (Rich's
    TTY_COMPATIBLE: a pipe gets full-width plain text), its styles taken out."""
    env = {**os.environ, "COLUMNS": "80", "FLEETVAL_DATA": str(data), "TTY_COMPATIBLE": "1"}
    proc = subprocess.run([sys.executable, "-m", "fleetval", *args], capture_output=True,
                          text=True, env=env, timeout=120, check=False)  # fmt: skip
    assert proc.returncode in (0, 1), proc.stderr
    return re.sub(r"\x1b\[[0-9;]*m", "", proc.stdout)


@pytest.fixture(scope="module", params=[16, 1024], ids=["16-nodes", "1024-nodes"])
def fleet(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple:
    root = tmp_path_factory.mktemp(f"fleet{request.param}") / "store"
    run_id, slow = fleet_store(root, request.param)
    return root, request.param, run_id, slow


def test_show_groups_the_environment_and_cuts_listings_on_80_columns(fleet: tuple) -> None:
    root, n, run_id, slow = fleet
    out = fleetval(root, "show", run_id)
    lines = out.splitlines()
    assert max(map(len, lines)) <= 80, max(lines, key=len)
    env = out[: out.index("run " + run_id)]
    assert f"environment of {n:,} nodes" in env
    # what every node shares, once
    assert "driver 6.12.12, ROCm 6.4.1" in " ".join(env.split())
    assert env.count("6.12.12") == 1 and env.count("MI300X") == 1
    # only what differs, on which nodes
    assert f"node-[0-{n - 1}]" in env  # the "all" row
    assert "RCCL 2.21.5, kernel 6.8.0-60-generic" in env and "node-7" in env
    old_kernel = "node-0" if n == 16 else "node-[0,100,200,300,400,500,600,700,800,900...]"
    assert old_kernel in env
    # listings that grow with the fleet
    culprits = [line for line in lines if line.startswith("  culprit:")]
    outliers = [line for line in lines if "gemm_tflops" in line]
    assert len(culprits) == min(len(slow), SHOWN) and len(outliers) == min(len(slow), SHOWN)
    if len(slow) > SHOWN:
        assert f"and {len(slow) - SHOWN} more culprits" in out
        assert f"and {len(slow) - SHOWN} more outliers (fleetval show {run_id} --json)" in out
        assert "and 122 more nodes" in env  # the 1,012 nodes of the largest group
    assert len(lines) < 60  # a screen, at 16 nodes as at 1,024


def test_show_json_holds_every_node_and_outlier(fleet: tuple) -> None:
    root, n, run_id, slow = fleet
    res = CliRunner().invoke(app, ["show", run_id, "--json", "--data", str(root)])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert len(doc["nodes"]) == n
    groups = doc["environment"]["groups"]
    assert sum(len(g["nodes"]) for g in groups) == n
    assert {g["values"]["rccl_version"] for g in groups if "node-7" in g["nodes"]} == {"2.21.5"}
    assert doc["environment"]["common"]["rocm_version"] == "6.4.1"
    flagged = sorted(int(o["unit"].split("/")[0].removeprefix("node-")) for o in doc["outliers"])
    assert flagged == slow


def test_report_environment_section_is_grouped(fleet: tuple, tmp_path: Path) -> None:
    root, n, run_id, _ = fleet
    md = tmp_path / "report.md"
    res = CliRunner().invoke(app, ["report", run_id, "-o", str(md), "--data", str(root)])
    assert res.exit_code in (0, 1), res.output
    section = md.read_text().split(f"### Environment of {n:,} nodes", 1)[1].split("\n### ", 1)[0]
    every = f"Every node (node-[0-{n - 1}]): GPU AMD Instinct MI300X, GPUs 8, driver 6.12.12, ROCm"
    assert every in section
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    assert rows[0] == "| nodes | rccl_version | kernel | hosts |"
    assert rows[1].startswith(f"| {n - 1 - (n + 99) // 100} | 2.22.3 | 6.8.0-60-generic | `node-[")
    assert "| 1 | 2.21.5 | 6.8.0-60-generic | `node-7` |" in rows
    assert len(rows) == 4  # the header and three groups: at 1,024 nodes as at 16


def test_html_report_reads_at_fleet_size(fleet: tuple, tmp_path: Path) -> None:
    """The HTML report's environment, incidents and heat map: grouped and cut, at 1,024
    nodes as at 16 (the heat map draws the worst nodes, so this takes seconds, not a minute)."""
    root, n, run_id, slow = fleet
    html = tmp_path / "report.html"
    res = CliRunner().invoke(app, ["report", run_id, "-o", str(html), "--data", str(root)])
    assert res.exit_code in (0, 1), res.output
    page = html.read_text()
    section = page.split('<section id="environment">', 1)[1].split("</section>", 1)[0]
    assert f"<h2>Environment of {n:,} nodes</h2>" in section and f"node-[0-{n - 1}]" in section
    assert section.count("<tr>") == 4  # the header and three groups
    assert '<td>2.21.5</td><td>6.8.0-60-generic</td><td class="small">node-7</td>' in section
    assert f'<td class="num">{n - 1 - (n + 99) // 100}</td><td>2.22.3</td>' in section
    incidents = page.split('<section id="incidents">', 1)[1].split("</section>", 1)[0]
    listed = incidents.split('id="incident-list"', 1)[1].count('<tr class="bad">')
    total = len(slow)  # a late culprit per slow node (outliers need a baseline in a report)
    assert listed == min(total, SHOWN)
    if total > SHOWN:
        assert f"and {total - SHOWN} more incidents: the JSON report lists every one" in incidents
        assert '<td>late</td><td>bandwidth</td><td class="num">28</td>' in incidents
        assert "node-[3,40,77,114,151,188,225,262,299,336...] and 18 more nodes" in incidents
    heat = page.split('<section id="heat">', 1)[1].split("</section>", 1)[0]
    assert ("and 992 more nodes" in heat) == (n == 1024)
