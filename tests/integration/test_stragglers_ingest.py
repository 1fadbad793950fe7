"""`fleetval ingest` of a training job's artefacts: the real Flight Recorder dumps and step
logs of real 4-rank gloo DDP jobs (tests/data/stragglers, made by
tests/helpers/straggler_job.py) stored as a run labelled job=NAME, read back with pandas,
DuckDB and `show`, signed off by `report`, harmless to `trend`, and shown by `sweep-history`
beside the sweeps' verdicts on the same nodes."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pandas as pd
from typer.testing import CliRunner

from fleetval.cli.app import app
from fleetval.store.dataset import Store
from fleetval.testing.sweeps import write_sweep

DATA = Path(__file__).resolve().parents[1] / "data" / "stragglers"
TABLE = Path(__file__).resolve().parents[1] / "data" / "real" / "nccl-tests-a3mega-h100-2node.txt"
runner = CliRunner()


def cli(*args: str) -> tuple[int, str]:
    res = runner.invoke(app, list(args))
    return res.exit_code, res.output


def ingest(data: Path, *paths: Path | str) -> list[dict]:
    code, out = cli("ingest", *map(str, paths), "--data", str(data), "--json")
    assert code == 0, out
    return json.loads(out)


def rows(data: Path, run_id: str) -> pd.DataFrame:
    return pd.read_parquet(data / "results" / run_id).sort_values(["step", "rank"])


def test_a_job_folder_becomes_a_run_naming_its_straggler(tmp_path: Path) -> None:
    """Rank 2 on node-1 slept 50 ms before its work in steps 20-30."""
    data = tmp_path / "data"
    (run,) = ingest(data, DATA / "late-sleep")
    assert run["suite"] == "ingest-job" and run["status"] == "warn"
    assert run["labels"]["job"] == "late-sleep" and run["backend"] == "gloo"

    df = rows(data, run["run_id"])
    late = df[df["status"] == "warn"].set_index("check")
    assert sorted(late.index) == ["job_step_times", "job_stragglers"]
    named = late.loc["job_stragglers"]
    assert (named["rank"], named["node"], named["metric"]) == (2, "node-1", "lateness_ms")
    assert 48 < named["value"] < 56 and named["world_size"] == 4
    window = json.loads(named["details"])["window"]
    assert 19 <= window["first_step"] <= 21 and 29 <= window["last_step"] <= 31
    on_time = df[(df["check"] == "job_stragglers") & (df["status"] == "pass")]
    assert sorted(on_time["rank"]) == [0, 1, 3]
    steps = late.loc["job_step_times"]  # the logs see the steps inflate, naming nobody
    assert (steps["rank"], steps["node"], steps["metric"]) == (-1, "", "step_time_lost_s")
    assert "steps 20-30 inflated" in steps["message"]

    ((job,),) = duckdb.sql(
        f"SELECT labels['job'] FROM read_parquet('{data}/runs/*.parquet') "
        f"WHERE run_id = '{run['run_id']}'"
    ).fetchall()
    assert job == "late-sleep"
    code, out = cli("show", run["run_id"], "--data", str(data))
    assert code == 0, out
    assert "rank 2 on node-1 (late)" in out and "steps 20-30" in out and "ms" in out


def test_the_run_holds_what_fleetval_stragglers_says(tmp_path: Path) -> None:
    """One judgement: the stored summary is the JSON of `fleetval stragglers --json`."""
    data = tmp_path / "data"
    data.mkdir()  # NOTE: a store that exists: both read its (empty) say on the named node
    (run,) = ingest(data, DATA / "sigstop")
    code, out = cli("stragglers", str(DATA / "sigstop"), "--json", "--data", str(data))
    assert code == 1, out
    said = json.loads(out)
    stored = run["summary"]["stragglers"]
    for key in ("stragglers", "windows", "step_windows", "notes", "nodes"):
        assert stored[key] == said[key], key
    assert stored["stragglers"] == [1]
    culprits = [c for s in run["summary"]["steps"] for c in s["culprits"]]
    assert {(c["rank"], c["reason"]) for c in culprits} == {(1, "late")}


def test_files_named_one_by_one_take_their_shared_folder_as_the_job(tmp_path: Path) -> None:
    root = DATA / "sigstop"
    files = sorted(root.glob("dumps/*/fr_rank_*")) + sorted(root.glob("logs/*.log"))
    (run,) = ingest(tmp_path / "data", *files)
    assert run["labels"]["job"] == "sigstop" and run["summary"]["stragglers"]["stragglers"] == [1]


def test_a_killed_rank_is_a_skip_row_and_said_by_show(tmp_path: Path) -> None:
    """Rank 1 killed at step 30 (no dump); rank 3 late in steps 10-20."""
    data = tmp_path / "data"
    code, out = cli("ingest", str(DATA / "killed"), "--job", "train-42", "--label", "team=llm",
                    "--data", str(data), "--json")  # fmt: skip
    assert code == 0, out
    (run,) = json.loads(out)
    assert run["labels"] == {**run["labels"], "job": "train-42", "team": "llm"}
    df = rows(data, run["run_id"])
    by_rank = df[df["check"] == "job_stragglers"].set_index("rank")["status"].to_dict()
    assert by_rank == {0: "pass", 1: "skip", 2: "pass", 3: "warn"}
    code, out = cli("show", run["run_id"], "--data", str(data))
    assert "no dump from rank 1 of 4" in out and "rank 3 on node-1 (late)" in out


def test_a_clean_job_passes_and_report_trend_sweep_history_read_it(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (clean,) = ingest(data, DATA / "clean")
    assert clean["status"] == "pass" and "nobody late" in clean["message"]
    (late,) = ingest(data, DATA / "late-sleep")
    code, out = cli(
        "report", clean["run_id"], "-o", str(tmp_path / "clean.md"), "--data", str(data)
    )
    assert code == 0, out
    code, out = cli("report", late["run_id"], "-o", str(tmp_path / "late.md"), "--data", str(data))
    assert code == 1, out
    md = (tmp_path / "late.md").read_text()
    assert "| late | stragglers | 2 | node-1 |" in md and "steps 20-30" in md
    for args in (["trend"], ["trend", "--where", "job=late-sleep"], ["sweep-history"]):
        code, out = cli(*args, "--data", str(data))
        assert code == 0, (args, out)


def test_step_logs_alone_name_no_rank(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (run,) = ingest(data, DATA / "late-sleep" / "logs")
    assert run["labels"]["job"] == "logs" and run["status"] == "warn"
    df = rows(data, run["run_id"])
    assert set(df["check"]) == {"job_step_times"} and set(df["rank"]) == {-1}
    assert "no rank is named" in run["summary"]["steps"][0]["message"]


def test_results_and_a_job_in_one_command_are_two_runs(tmp_path: Path) -> None:
    runs = ingest(tmp_path / "data", TABLE, DATA / "clean")
    assert [r["suite"] for r in runs] == ["ingest-nccl-tests", "ingest-job"]


def test_bad_input_exits_2_and_writes_nothing(tmp_path: Path) -> None:
    data = tmp_path / "data"
    junk = tmp_path / "job"
    junk.mkdir()
    (junk / "notes.txt").write_text("nothing a job writes\n")
    code, out = cli("ingest", str(DATA / "clean"), str(junk / "notes.txt"), "--data", str(data))
    assert code == 2 and "not a results file" in out and "Flight Recorder" in out
    code, out = cli("ingest", str(junk), "--data", str(data))
    assert code == 2 and "nothing readable" in out and "Flight Recorder" in out
    code, out = cli("ingest", str(TABLE), "--job", "x", "--data", str(data))
    assert code == 2 and "--job x: no Flight Recorder dump" in out
    assert not data.exists() or not any(data.rglob("*.parquet"))


def sweeps_and_jobs(data: Path) -> tuple[list[str], dict[str, str]]:
    """Two sweeps of node-0 and node-1 (node-1 suspect in the second), then two real jobs:
    late-sleep (rank 2 on node-1 late) and sigstop (rank 1 on node-0 late). The sweeps'
    run ids are older than any run ingested now, so both jobs fall in their window."""
    ok = {n: ("healthy", 10.0) for n in ("node-0", "node-1")}
    store = Store(data)
    sweeps = [write_sweep(store, 0, ok), write_sweep(store, 1, {**ok, "node-1": ("suspect", 7.0)})]
    jobs = {name: ingest(data, DATA / name)[0]["run_id"] for name in ("late-sleep", "sigstop")}
    return sweeps, jobs


def test_sweep_history_names_each_node_with_the_job_that_found_it_late(tmp_path: Path) -> None:
    data = tmp_path / "data"
    sweeps, jobs = sweeps_and_jobs(data)
    code, out = cli("sweep-history", "--data", str(data), "--json")
    assert code == 0, out
    doc = json.loads(out)
    (late,) = doc["late_in_jobs"]["node-1"]
    assert (late["job"], late["run_id"], late["rank"]) == ("late-sleep", jobs["late-sleep"], 2)
    assert 48 < late["lateness_ms"] < 56 and 19 <= late["first_step"] <= 21
    assert late["start_s"] < late["end_s"]
    assert {j["job"] for j in doc["late_in_jobs"]["node-0"]} == {"sigstop"}
    # only node-1 was both suspected by a sweep and found late by a job
    (hint,) = doc["strongest_hints"]
    assert hint.startswith(f"strongest hint node-1: suspect in sweep {sweeps[1]}; late in job")
    assert f"late-sleep (run {jobs['late-sleep']}, rank 2)" in hint

    code, out = cli("sweep-history", "--data", str(data))
    assert code == 0, out
    assert f"node-1: late in job late-sleep (run {jobs['late-sleep']}), rank 2, " in out
    assert "steps 20-30" in out and "node-0: late in job sigstop" in out
    assert hint in out and "strongest hint node-0" not in out


def test_jobs_outside_the_window_or_node_are_left_out(tmp_path: Path) -> None:
    """--until an old sweep: jobs stored after it are not its past; --node: one node's jobs."""
    data = tmp_path / "data"
    sweeps, _ = sweeps_and_jobs(data)
    ingest(data, DATA / "clean")  # names nobody: adds nothing
    code, out = cli("sweep-history", "--data", str(data), "--json", "--until", sweeps[1])
    assert code == 0, out
    assert json.loads(out)["late_in_jobs"] == {} and json.loads(out)["strongest_hints"] == []
    code, out = cli("sweep-history", "--data", str(data), "--json", "--node", "node-0")
    assert code == 0, out
    doc = json.loads(out)
    assert list(doc["late_in_jobs"]) == ["node-0"] and doc["strongest_hints"] == []
    assert [j["job"] for j in doc["late_in_jobs"]["node-0"]] == ["sigstop"]
