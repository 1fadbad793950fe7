"""`fleetval compare | trend | baseline` through Typer's CliRunner on generated stores."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from xml.etree import ElementTree as ET

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from fleetval.cli import compare_cmds, inspect_cmds
from fleetval.store.dataset import Store
from fleetval.store.records import Run
from fleetval.store.schema import Row

# NOTE: a local app with just these commands, so the test does not depend on the others.
app = typer.Typer()
app.command("compare")(compare_cmds.compare)
app.command("trend")(compare_cmds.trend)
app.add_typer(compare_cmds.baseline_app, name="baseline")
app.command("runs")(inspect_cmds.runs)
app.command("show")(inspect_cmds.show)
app.command("results")(inspect_cmds.results)
runner = CliRunner()


def _write(
    store: Store,
    i: int,
    rng: np.random.Generator,
    *,
    slow: float = 1.0,
    rocm: str = "6.1.2",
    gpu: str | None = "MI300X",
) -> str:
    started = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(days=i)
    run_id = f"{started:%Y%m%d}-000000-{i:06x}"
    rows = []
    for size in (1024, 1 << 20):
        shared = 1 + 0.025 * rng.standard_normal(20)
        for rank in range(2):
            t = (10 + size / 1e4) * (slow if size == 1 << 20 else 1.0) * shared
            med = float(np.median(t))
            rows.append(
                Row(run_id=run_id, check="bandwidth", collective="all_reduce", op="sum", dtype="float32",
                    size_bytes=size, world_size=2, rank=rank, node="node-0", time_us_median=med,
                    busbw_gbps=size / med / 1e3, samples_us=tuple(t))
            )  # fmt: skip
    store.write_results(run_id, "bandwidth", rows)
    store.write_nodes(run_id, [{"node": "node-0", "gpu_model": gpu, "gpu_count": 8 if gpu else 0,
                                "rocm_version": rocm}])  # fmt: skip
    store.write_run(Run(run_id=run_id, suite="bw", status="pass", started_at=started))
    return run_id


@pytest.fixture
def data(tmp_path: Path) -> Path:
    store, rng = Store(tmp_path), np.random.default_rng(0)
    for i in range(3):
        _write(store, i, rng)
    _write(store, 3, rng, rocm="6.2.0")  # clean candidate
    _write(store, 4, rng, slow=1.25, rocm="6.2.0")  # 20% slower at 1 MiB
    return tmp_path


def _cli(data: Path, *args: str):
    return runner.invoke(app, [*args, "--data", str(data)])


def _ids(data: Path) -> list[str]:
    return [r.run_id for r in Store(data).runs()]


def test_baseline_set_list_show_delete(data: Path) -> None:
    ids = _ids(data)
    res = _cli(data, "baseline", "set", "rocm6.1", "--where", "rocm_version=6.1.*")
    assert res.exit_code == 0, res.output
    assert "3 runs" in res.output
    assert _cli(data, "baseline", "set", "pinned", "--run", ids[0], "--run", ids[1]).exit_code == 0
    listing = _cli(data, "baseline", "list")
    assert listing.exit_code == 0 and "rocm6.1" in listing.output and "pinned" in listing.output
    shown = _cli(data, "baseline", "show", "pinned")
    assert shown.exit_code == 0 and ids[1] in shown.output
    assert _cli(data, "baseline", "delete", "pinned").exit_code == 0
    assert _cli(data, "baseline", "show", "pinned").exit_code == 2


def test_bad_baseline_input_exits_2(data: Path) -> None:
    assert _cli(data, "baseline", "set", "x", "--where", "nonsense").exit_code == 2
    assert _cli(data, "baseline", "set", "x", "--where", "colour=red").exit_code == 2
    assert _cli(data, "baseline", "set", "x", "--run", "nope").exit_code == 2


def test_compare_exit_codes(data: Path) -> None:
    ids = _ids(data)
    assert _cli(data, "baseline", "set", "rocm6.1", "--where", "rocm_version=6.1.*").exit_code == 0
    clean = _cli(data, "compare", "--baseline", "rocm6.1", "--run", ids[3])
    assert clean.exit_code == 0, clean.output
    assert "gate passes" in clean.output and "rocm_version" in clean.output
    regressed = _cli(data, "compare", "--baseline", "rocm6.1", "--latest")
    assert regressed.exit_code == 1 and "regression" in regressed.output
    assert _cli(data, "compare", "--baseline", "nope", "--latest").exit_code == 2
    assert _cli(data, "compare", "--baseline", "rocm6.1", "--format", "xml").exit_code == 2
    assert _cli(data, "compare", "--baseline", "rocm6.1", "--run", "missing-run").exit_code == 2
    assert (
        _cli(data, "compare", "--baseline", "rocm6.1", "--latest", "--threshold", "50").exit_code
        == 0
    )


def test_machine_formats_parse(data: Path, tmp_path: Path) -> None:
    assert _cli(data, "baseline", "set", "rocm6.1", "--where", "rocm_version=6.1.*").exit_code == 0
    out = _cli(data, "compare", "-b", "rocm6.1", "--latest", "--format", "json")
    doc = json.loads(out.stdout)
    assert out.exit_code == 1 and doc["exit_code"] == 1 and doc["summary"]["regression"] == 1
    assert {r["verdict"] for r in doc["results"]} == {"regression", "unchanged"}
    assert doc["env_diff"][0]["key"] == "rocm_version"
    md = _cli(data, "compare", "-b", "rocm6.1", "--latest", "--format", "markdown").stdout
    assert md.startswith("## ❌") and "| regression |" in md and "rocm_version" in md
    junit = tmp_path / "compare.xml"
    res = _cli(data, "compare", "-b", "rocm6.1", "--latest", "--format", "junit", "-o", str(junit))
    suite = ET.parse(junit).getroot().find("testsuite")
    assert res.exit_code == 1 and suite is not None
    assert suite.get("tests") == "2" and suite.get("failures") == "1"
    assert len(suite.findall("testcase/failure")) == 1


def test_trend_command(data: Path) -> None:
    res = _cli(data, "trend", "--format", "json")
    assert res.exit_code in (0, 1) and json.loads(res.stdout)["series"] == 2
    assert _cli(data, "trend", "--select", "colour=red").exit_code == 2


def test_listing_commands_speak_json(data: Path) -> None:
    ids = _ids(data)
    runs = json.loads(_cli(data, "runs", "--json").stdout)
    assert [r["run_id"] for r in runs] == ids and "suite_json" not in runs[0]
    assert _cli(data, "baseline", "set", "rocm6.1", "--where", "rocm_version=6.1.*").exit_code == 0
    (listed,) = json.loads(_cli(data, "baseline", "list", "--json").stdout)
    assert listed["name"] == "rocm6.1" and listed["resolved"] == ids[:3]
    assert json.loads(_cli(data, "baseline", "show", "rocm6.1", "--json").stdout)["resolved"]
    shown = json.loads(_cli(data, "show", ids[0], "--json").stdout)
    assert shown["run"]["run_id"] == ids[0] and shown["outliers"] == []
    doc = json.loads(_cli(data, "compare", "-b", "rocm6.1", "--latest", "--json").stdout)
    assert doc["gate"] == ["1 regression"]
    assert "series" in json.loads(_cli(data, "trend", "--json").stdout)


def test_results_filters_and_nccl_summary(data: Path) -> None:
    run = _ids(data)[0]
    rows = json.loads(_cli(data, "results", run, "--json", "--rank", "1").stdout)
    assert rows and {r["rank"] for r in rows} == {1}
    nowhere = _cli(data, "results", run, "--json", "--node", "nowhere")
    assert nowhere.exit_code == 2 and "(the run's nodes: node-0)" in nowhere.output
    summary = json.loads(_cli(data, "results", run, "--summary", "--json").stdout)
    ranks = len({r["rank"] for r in json.loads(_cli(data, "results", run, "--json").stdout)})
    line = summary[0]
    assert line["ranks"] == ranks and line["count"] == line["size"] // 4  # float32
    assert line["time_min_us"] <= line["time_avg_us"] <= line["time_max_us"]
    table = _cli(data, "results", run, "--summary")
    assert table.exit_code == 0 and "busbw_gbps" in table.output


def test_compare_of_cpu_runs_says_cpu_and_that_a_short_history_went_unused(
    tmp_path: Path,
) -> None:
    """CPU nodes (no GPU model) are the group `cpu`, as `run` and `health` say it; one run per
    side with 2 earlier runs: every reason and the notes say the history was too short to use
    (3 are needed), not only that the spread is unknown."""
    store, rng = Store(tmp_path), np.random.default_rng(1)
    runs = [_write(store, i, rng, gpu=None) for i in range(4)]  # 2 earlier, baseline, candidate
    assert _cli(tmp_path, "baseline", "set", "one", "--run", runs[2]).exit_code == 0
    res = _cli(tmp_path, "compare", "-b", "one", "--run", runs[3], "--json")
    doc = json.loads(res.stdout)
    assert doc["history_runs"] == runs[:2]
    assert {r["identity"]["group"] for r in doc["results"]} == {"cpu"}
    timed = [r for r in doc["results"] if r["history_runs"]]
    assert timed and all(
        "its 2 earlier runs: too few for a history, 3 are needed" in r["reason"] for r in timed
    )
    assert any("2 earlier runs of the suite: too few" in n for n in doc["notes"])
    assert not any("run-to-run spreads also from" in n for n in doc["notes"])


def test_one_run_baseline_noisy_passes_compare_and_fails_signoff_saying_why(
    tmp_path: Path,
) -> None:
    """One run a side with a 25% drop: `compare` passes (noisy is not a regression), the
    sign-off fails its regression gate (noisy fails it); both say so, and why."""
    from fleetval.cli import app as full_app

    store, rng = Store(tmp_path), np.random.default_rng(2)
    base, cand = _write(store, 0, rng), _write(store, 1, rng, slow=1.25)
    assert _cli(tmp_path, "baseline", "set", "one", "--run", base).exit_code == 0
    res = _cli(tmp_path, "compare", "-b", "one", "--run", cand, "--history", "0", "--json")
    doc = json.loads(res.stdout)
    assert res.exit_code == 0 and doc["summary"].get("noisy")
    [note] = [n for n in doc["notes"] if "noisy (unproven)" in n]
    assert "`compare --strict` and a sign-off (`fleetval report`) fail on them" in note
    assert "against one baseline run no change can be shown unchanged" in note
    out = tmp_path / "r.json"
    rep = runner.invoke(full_app, ["report", cand, "-b", "one", "-o", str(out),
                                   "--data", str(tmp_path)])  # fmt: skip
    assert rep.exit_code == 1, rep.output
    gate = next(g for g in json.loads(out.read_text())["gates"] if g["gate"] == "regression")
    assert gate["status"] == "FAIL"
    assert "noisy fails a sign-off, as `compare --strict`: `compare` alone passes it" in (
        gate["summary"])  # fmt: skip
    assert "with 1 baseline run no change can be shown unchanged" in gate["summary"]
