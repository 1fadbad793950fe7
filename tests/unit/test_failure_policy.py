"""The one failure policy (fleetval.policy.FailurePolicy): set from a suite's `timeouts:`,
checked at load, and the only place the engine's thresholds live."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from pydantic import ValidationError

from fleetval.checks.base import Progress
from fleetval.policy import FailurePolicy
from fleetval.run.culprits import RankEvidence, name_culprits, progressed
from fleetval.suite import SuiteError, parse_suite

ROOT = Path(__file__).resolve().parents[2]
ENGINE = ["fleetval/run/job.py", "fleetval/run/step.py", "fleetval/run/culprits.py",
          "fleetval/run/pool.py", "fleetval/run/sweep.py", "fleetval/status.py"]  # fmt: skip


def suite(timeouts: dict[str, object]) -> dict[str, object]:
    return {"name": "t", "timeouts": timeouts, "steps": [{"check": "collectives"}]}


def test_a_suite_sets_any_field_of_the_policy_and_keeps_the_defaults_of_the_rest():
    spec = parse_suite(suite({"step_s": 60, "probe_answer_s": 3, "far_behind": 0.25}), "test")
    policy = spec.timeouts
    assert isinstance(policy, FailurePolicy)
    assert (policy.step_s, policy.probe_answer_s, policy.far_behind) == (60, 3, 0.25)
    assert policy.collective == 30  # half of step_s when unset
    assert policy.ping_s == FailurePolicy().ping_s
    with pytest.raises(ValidationError):
        policy.step_s = 1  # frozen: what crosses into the job threads cannot change under them


@pytest.mark.parametrize(
    ("timeouts", "said"),
    [
        ({"stale": 2}, "timeouts.stale"),  # a misspelt key is refused, never ignored
        ({"step_s": 0}, "timeouts.step_s"),
        ({"collective_s": 60, "step_s": 60}, "collective_s (60s) must be shorter than step_s"),
        ({"far_behind": 1.5}, "far_behind (1.5) is a share of calls: at most 1"),
        ({"probe_every_s": 5}, "probe_every_s (5s) must be shorter than probe_answer_s (5s)"),
        ({"port_retries": 0}, "timeouts.port_retries"),
    ],
)
def test_an_inconsistent_policy_is_bad_input_with_its_field_path(timeouts, said):
    with pytest.raises(SuiteError) as err:
        parse_suite(suite(timeouts), "test")
    assert said in str(err.value)


def progress(calls: int, *, age: float, rate: float = 100.0, now: float = 1000.0) -> Progress:
    updated = now - age
    return Progress(step="bw", collective="all_reduce", iteration=calls, phase="in", seq=calls,
                    updated_at=updated, calls=calls, planned=60_000,
                    step_started_at=updated - calls / rate)  # fmt: skip


def ev(rank: int, p: Progress) -> RankEvidence:
    return RankEvidence(rank=rank, node=f"node-{rank}", device_id=None, outcome="pending",
                        progress=p)  # fmt: skip


def test_the_policy_decides_when_a_rank_stopped_moving():
    """Rank 1's heartbeat is 3 s old, the others' fresh: behind and stopped under the default
    stale_s (2 s), still moving under a policy that allows 5 s."""
    evidence = [ev(0, progress(500, age=0.1)), ev(1, progress(400, age=3.0))]
    assert [(c.rank, c.reason) for c in name_culprits(evidence, now=1000.0)] == [(1, "hang")]
    patient = FailurePolicy(stale_s=5.0)
    assert progressed(evidence, 60.0, now=1000.0) is None
    finding = progressed(evidence, 60.0, now=1000.0, policy=patient)
    assert finding is not None and finding.slow == ()  # a deadline finding, nobody blamed
    strict = FailurePolicy(stale_s=5.0, far_behind=0.9)  # 400 of 500 calls: far behind at 90%
    finding = progressed(evidence, 60.0, now=1000.0, policy=strict)
    assert finding is not None and [c.rank for c in finding.slow] == [1]


def test_the_advice_uses_the_policys_headroom():
    evidence = [ev(0, progress(1000, age=0.1)), ev(1, progress(1000, age=0.1))]
    default = progressed(evidence, 10.0, now=1000.0)
    roomy = progressed(evidence, 10.0, now=1000.0, policy=FailurePolicy(fit_headroom=2.0))
    assert default is not None and roomy is not None and default.fits_s is not None
    assert roomy.fits_s == pytest.approx(default.fits_s / 1.2 * 2.0)


def _thresholds(path: Path) -> list[str]:
    """Module-level numeric constants named like a threshold (`*_S`, `*_RETRIES`, ...)."""
    tree = ast.parse(path.read_text())
    out = []
    for node in tree.body:
        value = (
            node.value.value
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
            else None
        )
        if isinstance(value, int | float) and not isinstance(value, bool):
            out += [ast.unparse(t) for t in node.targets]  # type: ignore[union-attr]
    return [n for n in out if n.isupper() and not n.startswith("EXIT_")]


def test_no_threshold_lives_outside_the_policy():
    found = {f: _thresholds(ROOT / f) for f in ENGINE}
    assert {f: names for f, names in found.items() if names} == {}
