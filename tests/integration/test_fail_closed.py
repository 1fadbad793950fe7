"""Verdicts that fail closed, end to end on real Ray and gloo: a measurement nothing judged
is never PASS, a run where every row skipped does not sign off, and an error inside a
check's collective is a FAIL of that check with the error.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import ray
from typer.testing import CliRunner

from fleetval.cli.app import app
from fleetval.run.cluster import cluster_shape
from fleetval.run.execute import run_suite
from fleetval.run.job import RunState, job_ranks
from fleetval.run.plan import make_plan
from fleetval.run.step import run_step
from fleetval.signoff.evaluate import build_signoff
from fleetval.signoff.gates import GateName, Waiver
from fleetval.store.dataset import Store, new_run_id
from fleetval.suite import parse_suite
from fleetval.vocab import GateStatus

pytestmark = pytest.mark.usefixtures("ray_session")

CPU_MICROBENCH = """
name: cpu-microbench
placement: {world_sizes: [2], gpus_per_rank: 0}
steps:
  - check: microbench
    cpu_gemm_sizes: [64]
    dtypes: [float32]
    cpu_copy_bytes: 1MiB
    warmup: 1
    iters: 3
"""


def test_cpu_only_microbench_is_unjudged_exits_5_and_says_what_was_recorded(tmp_path: Path):
    suite = tmp_path / "suite.yaml"
    suite.write_text(CPU_MICROBENCH)
    res = CliRunner().invoke(app, ["run", str(suite), "--data", str(tmp_path / "data")])
    assert res.exit_code == 5, res.output  # as pytest's "no tests collected"
    lines = res.output.splitlines()
    assert any(line.startswith("run ") and line.endswith(": unjudged") for line in lines), lines
    # The closing "judged" section: per step, what was judged against what.
    at = next(i for i, line in enumerate(lines) if line.startswith("judged"))
    shown = "\n".join(lines[at:])
    assert "job 0 microbench (microbench): unjudged: 4 skip, 4 info; skipped, e.g. host" in shown
    assert "gemm_tflops float32 64x64: " in shown, shown
    assert "TFLOP/s (slowest: rank " in shown and "recorded only: no expectation for 'cpu'" in shown

    res = CliRunner().invoke(app, ["run", str(suite), "--data", str(tmp_path / "d2"), "--json"])
    assert res.exit_code == 5, res.output
    out = json.loads(res.output)
    assert out["status"] == "unjudged"
    (step,) = out["judged"]
    assert step["status"] == "unjudged" and len(step["figures"]) == 2  # gemm, memory copy


def test_a_run_where_every_row_skipped_fails_sign_off(tmp_path: Path, warm_pool):
    """avg is not a gloo reduction: every row skips; nothing was judged, so nothing passes."""
    store = Store(tmp_path)
    spec = parse_suite(
        {
            "name": "all-skipped",
            "placement": {"world_sizes": [2], "gpus_per_rank": 0},
            "steps": [
                {
                    "check": "collectives",
                    "collectives": ["all_reduce"],
                    "ops": ["avg"],
                    "dtypes": ["float32"],
                    "repeats": 1,
                }
            ],
        }
    )
    record = run_suite(spec, store, pool=warm_pool)
    assert record.status == "unjudged", record.summary
    assert [s["status"] for s in record.summary["steps"]] == ["skip"]
    assert {r["status"] for r in store.results([record.run_id]).to_pylist()} == {"skip"}

    signoff = build_signoff(store, record.run_id)
    gates = {g.gate: g for g in signoff.gates}
    assert signoff.verdict == GateStatus.FAIL and signoff.exit_code == 1
    assert gates[GateName.COMPLETED].status == GateStatus.FAIL
    assert "no step judged anything" in gates[GateName.COMPLETED].summary
    correctness = gates[GateName.CORRECTNESS]
    assert correctness.status == GateStatus.FAIL and correctness.no_evidence
    assert "2 rows, none judged" in correctness.summary
    # Waived with who and why, the completed gate accepts it; correctness still has nothing.
    waived = build_signoff(store, record.run_id, waivers=[Waiver(
        gate=GateName.COMPLETED, by="jane@example.com", reason="recording only")])  # fmt: skip
    assert {g.gate: g.status for g in waived.gates}[GateName.COMPLETED] == GateStatus.WAIVED


def health_suite() -> Any:
    return parse_suite(
        {
            "name": "health-error",
            "placement": {"world_sizes": [2], "gpus_per_rank": 0},
            "timeouts": {"step_s": 60, "collective_s": 5},
            "steps": [{"check": "health"}],
        }
    )


def test_an_error_in_the_health_collective_is_a_fail_with_the_error(tmp_path: Path):
    """Rank 1 destroys its process group before the step (a real closed group, not a mock):
    rank 0's memory-balance all_gather_object raises inside gloo; that finding FAILs with
    the error, and rank 1, left without the job's group, fails it too."""
    spec, store = health_suite(), Store(tmp_path)
    (job,) = make_plan(spec, cluster_shape()).jobs
    state = RunState(new_run_id(), spec, store, lambda e: None, len(job.steps))
    with job_ranks(job, state) as ranks:
        ray.get(ranks[1].actor.leave.remote(), timeout=30)
        outcome = run_step(ranks, job, job.steps[0], state)
    assert outcome.status == "fail" and outcome.culprits == (), outcome
    rows = store.results([state.run_id]).to_pylist()
    balance = {r["rank"]: r for r in rows if r["metric"] == "memory_balance"}
    assert balance[0]["status"] == "fail", balance[0]
    assert balance[0]["message"].startswith("probe failed: "), balance[0]["message"]
    assert "Error" in balance[0]["message"]  # the exception's type, e.g. DistBackendError
    assert balance[1]["status"] == "fail"
    assert "no process group in a job of 2 ranks" in balance[1]["message"]
    assert "memory_balance" in outcome.message or "failing rows" in outcome.message
