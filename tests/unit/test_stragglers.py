"""Stragglers named from a training job's own artefacts: real Flight Recorder dumps and step
logs written by real gloo DDP jobs (tests/data/stragglers, made by
tests/helpers/straggler_job.py), and real step logs and NCCL diagnostics from public threads
(tests/data/stragglers/real, sources in tests/data/README.md)."""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from fleetval.cli import app
from fleetval.detect.stragglers import judge, judge_dumps
from fleetval.formats import frdump, nccldiag, steplog
from fleetval.formats.frdump import RankTrace

DATA = Path(__file__).parents[1] / "data" / "stragglers"
REAL = DATA / "real"


def read_job(name: str) -> tuple[list[RankTrace], list[steplog.StepLine]]:
    root = DATA / name
    traces = [frdump.read(p, host=p.parent.name) for p in sorted(root.glob("dumps/*/fr_rank_*"))]
    steps = [s for p in sorted(root.glob("logs/*.log")) for s in steplog.read(p)]
    return traces, steps


def cli(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(app, ["stragglers", *args])
    return res.exit_code, res.output


# -- real gloo jobs ---------------------------------------------------------------------------


def test_a_rank_slowed_inside_the_loop_is_named_with_its_window_and_lateness() -> None:
    """Rank 2 slept 50 ms before its step's work in steps 20-30 (pickle dumps)."""
    traces, steps = read_job("late-sleep")
    assert {t.rank for t in traces} == {0, 1, 2, 3} and traces[0].version == "2.10"
    r = judge(traces, steps)
    (w,) = r.windows
    (late,) = w.ranks
    assert (late.rank, late.host) == (2, "node-1")
    assert 19 <= w.first_step <= 21 and 29 <= w.last_step <= 31
    assert 0.048 < late.low_s <= late.lateness_s <= late.high_s < 0.056 and late.z > 20
    assert late.late_at >= 10 and late.p_value < 1e-6
    assert 0.4 < late.waited_s < 0.7 and 0.4 < w.step_cost_s < 0.7
    (sw,) = r.step_windows  # the logs see the same steps inflate, naming nobody
    assert (sw.first_step, sw.last_step) == (20, 30)


def test_a_clean_job_names_nobody() -> None:
    traces, steps = read_job("clean")  # JSON dumps
    r = judge(traces, steps)
    assert r.named == [] and r.step_windows == [] and r.collectives["0"] > 50


def test_sigstop_bursts_from_outside_name_the_stopped_rank_inside_its_window() -> None:
    """The parent stopped rank 1 for 30 ms, 30 ms apart, while steps 20-60 ran."""
    r = judge(*read_job("sigstop"))
    assert {x.rank for x in r.named} == {1}
    assert all(w.first_step >= 19 and w.last_step <= 61 for w in r.windows)
    assert sum(x.late_at for x in r.named) >= 10


def test_a_killed_rank_leaves_the_rest_judged_and_is_said_missing() -> None:
    """Rank 1 killed at step 30 (no dump); rank 3 late in steps 10-20."""
    traces, steps = read_job("killed")
    assert sorted(t.rank for t in traces) == [0, 2, 3]
    r = judge(traces, steps)
    assert {x.rank for x in r.named} == {3}
    assert "no dump from rank 1 of 4: its lateness cannot be judged" in r.notes


def test_a_dump_cut_short_is_said() -> None:
    traces, _ = read_job("late-sleep")
    t = traces[3]
    keep = t.seq <= 60
    short = dataclasses.replace(
        t,
        seq=t.seq[keep],
        group=tuple(np.array(t.group)[keep]),
        name=tuple(np.array(t.name)[keep]),
        created_ns=t.created_ns[keep],
        started_ns=t.started_ns[keep],
        completed_ns=t.completed_ns[keep],
    )
    r = judge_dumps([*traces[:3], short])
    assert any(n.startswith("rank 3's record in group 0 stops at collective #60") for n in r.notes)
    assert {x.rank for x in r.named} == {2}


def test_a_pickle_that_is_not_a_dump_runs_nothing(tmp_path: Path) -> None:
    bad = tmp_path / "fr_rank_0"
    bad.write_bytes(pickle.dumps({"entries": [os.system]}))  # names posix.system: refused
    with pytest.raises(ValueError, match="not a readable Flight Recorder dump"):
        frdump.read(bad)


def test_json_and_pickle_dumps_read_alike() -> None:
    (pk, *_), _ = read_job("late-sleep")
    (js, *_), _ = read_job("clean")
    assert pk.name[0].startswith("gloo:") and js.name[0].startswith("gloo:")
    assert np.isnan(js.completed_ns).all() and np.isnan(pk.completed_ns).all()
    assert pk.group_ranks[""] == js.group_ranks[""] == (0, 1, 2, 3)


# -- the model on simulated arrivals ----------------------------------------------------------


def _trace(rank: int, created: np.ndarray) -> RankTrace:
    n = len(created)
    nan = np.full(n, np.nan)
    return RankTrace(rank, f"sim{rank}", ("0",) * n, np.arange(1, n + 1), ("nccl:all_reduce",) * n,
                     created, nan, nan, {"": tuple(range(8))})  # fmt: skip


def simulate(seed: int, late: int | None, delay_s: float = 0.01) -> list[RankTrace]:
    rng = np.random.default_rng(seed)
    base = 1.7e18 + np.cumsum(rng.uniform(5e6, 2e7, 400))
    jitter = rng.standard_t(4, (8, 400)) * 2e5  # heavy tails, 0.2 ms
    if late is not None:
        jitter[late, 150:200:3] += delay_s * 1e9
    return [_trace(r, base + jitter[r]) for r in range(8)]


def test_simulated_clean_jobs_name_nobody_and_a_late_rank_is_found() -> None:
    assert all(judge_dumps(simulate(s, None)).named == [] for s in range(20))
    for s in range(5):
        (w,) = judge_dumps(simulate(s, 5)).windows
        assert [x.rank for x in w.ranks] == [5] and w.first_seq >= 148 and w.last_seq <= 202


# -- step logs and NCCL diagnostics from public threads ---------------------------------------


def test_torchtitan_rank_prefixed_steps_get_durations_from_their_timestamps() -> None:
    lines = steplog.read(REAL / "torchtitan-1287-rank0-steps.log")
    assert [s.step for s in lines] == [200, 210, 220, 230, 240, 250]
    assert {s.rank for s in lines} == {0}
    assert lines[0].duration_s is None
    assert lines[1].duration_s == pytest.approx((64.970 - 50.322) / 10)
    short = steplog.read(REAL / "torchtitan-3393-rank0-steps.log")
    assert [s.step for s in short] == list(range(14, 22))
    assert short[1].duration_s == pytest.approx(1.118)


def test_megatron_iterations_carry_their_elapsed_time() -> None:
    lines = steplog.read(REAL / "megatron-llm-11-iterations.log")
    assert [(s.step, s.duration_s) for s in lines][:2] == [(122, 86.5452), (123, 87.8716)]
    assert all(s.time_s is None and s.rank is None for s in lines)


def test_key_value_lines_name_host_and_rank() -> None:
    (first, *_) = steplog.read(DATA / "late-sleep" / "logs" / "rank2.log")
    assert (first.step, first.rank, first.host) == (1, 2, "node-1")
    assert first.duration_s is not None and first.time_s > 1e9


def test_ras_text_reports_are_read() -> None:
    ras = nccldiag.parse_ras((REAL / "nccl-ras-1911-mismatch.txt").read_text())
    assert (ras.nodes, ras.processes, ras.groups) == (4, 32, [("0", "RUNNING", "MISMATCH")])
    (m,) = ras.mismatches
    assert m.op == "AllGather" and m.counts == ((30, 640), (2, 641))
    assert m.ranks == ((12, "10.137.190.124"), (13, "10.137.190.124"))
    ok = nccldiag.parse_ras((REAL / "nccl-ras-1730-ok.txt").read_text())
    assert (ok.nodes, ok.processes, ok.mismatches) == (32, 256, [])


def test_inspector_records_are_read() -> None:
    recs = nccldiag.parse_inspector((REAL / "nccl-inspector-readme-v4.jsonl").read_text())
    assert [(r.rank, r.coll, r.seq, r.exec_us) for r in recs] == [
        (2, "AllReduce", 1407, 61974.0),
        (4, "ReduceScatter", 1231, 41057.0),
    ]


# -- the command -------------------------------------------------------------------------------


def test_command_exits_1_naming_the_rank_and_0_on_a_clean_job() -> None:
    code, out = cli(str(DATA / "late-sleep"))
    assert code == 1, out
    assert "straggler rank 2 on node-1" in out and "steps 20-30 inflated" in out
    code, out = cli(str(DATA / "clean"), "--json")
    assert code == 0, out
    doc = json.loads(out)
    assert doc["stragglers"] == [] and doc["ranks"] == [0, 1, 2, 3]


def test_command_exits_2_when_nothing_is_readable(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("nothing here\n")
    code, out = cli(str(tmp_path))
    assert code == 2 and "looked for PyTorch Flight Recorder dumps" in out


def test_step_logs_alone_name_nobody_and_say_why() -> None:
    code, out = cli(*map(str, sorted((DATA / "late-sleep" / "logs").iterdir())))
    assert code == 0 and "steps 20-30 inflated" in out and "no rank is named from them" in out


def test_named_node_is_joined_with_its_sweeps(tmp_path: Path) -> None:
    from fleetval.store.dataset import Store
    from fleetval.testing.sweeps import write_sweep

    store = Store(tmp_path)
    ok = {n: ("healthy", 10.0) for n in ("node-0", "node-1")}
    ids = [write_sweep(store, 0, ok), write_sweep(store, 1, {**ok, "node-1": ("suspect", 7.0)})]
    code, out = cli(str(DATA / "late-sleep"), "--json", "--data", str(tmp_path))
    assert code == 1, out
    (seen, *_) = json.loads(out)["nodes"]["node-1"]
    assert seen == f"sweeps, oldest first: healthy ({ids[0]}), suspect ({ids[1]})"


def test_json_lines_shape_is_parsed() -> None:
    """No public sample found (tests/data/README.md): the shape the reader accepts."""
    (s,) = steplog.parse('{"step": 7, "rank": 3, "host": "n1", "time": 1.8e9, "step_time_ms": 950}')
    assert (s.step, s.rank, s.host, s.time_s) == (7, 3, "n1", 1.8e9)
    assert s.duration_s == pytest.approx(0.95)
