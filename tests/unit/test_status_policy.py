"""The one status policy: rows -> step -> run -> exit status."""

from __future__ import annotations

import pytest

from fleetval.run.outcome import Culprit
from fleetval.status import exit_status, run_status, step_status
from fleetval.store.schema import Row
from fleetval.vocab import Status


def rows(*statuses: str) -> list[Row]:
    return [Row(rank=i, status=s) for i, s in enumerate(statuses)]


def culprit(reason: str) -> Culprit:
    return Culprit(1, "node-a", None, reason, "")


@pytest.mark.parametrize(
    ("statuses", "culprits", "want"),
    [
        (("pass", "pass"), [], Status.PASS),
        (("pass", "warn"), [], Status.WARN),
        (("warn", "fail"), [], Status.FAIL),
        (("skip", "skip"), [], Status.SKIP),
        (("pass", "skip"), [], Status.PASS),
        (("pass", "pass"), [culprit("late")], Status.WARN),  # late ranks warn, the job goes on
        (("pass",), [culprit("hang")], Status.FAIL),
        ((), [culprit("crash")], Status.FAIL),
        ((), [culprit("not placed")], Status.FAIL),
        (("fail",), [culprit("late")], Status.FAIL),
    ],
)
def test_step_status(statuses, culprits, want):
    assert step_status(rows(*statuses), culprits) == want


@pytest.mark.parametrize(
    ("steps", "want"),
    [
        (["pass", "pass"], Status.PASS),
        (["pass", "warn"], Status.WARN),  # WARN reaches the run's status
        (["warn", "fail", "skip"], Status.FAIL),
        (["pass", "skip"], Status.PASS),
        ([], Status.PASS),
    ],
)
def test_run_status(steps, want):
    assert run_status(steps) == want


@pytest.mark.parametrize(
    ("run", "strict", "code"),
    [
        ("pass", False, 0),
        ("warn", False, 0),
        ("warn", True, 1),
        ("fail", False, 1),
        ("cancelled", False, 1),
        ("error", False, 1),
    ],
)
def test_exit_status(run, strict, code):
    assert exit_status(run, strict=strict) == code
