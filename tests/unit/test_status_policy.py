"""The one status policy: rows -> step -> run -> exit status."""

from __future__ import annotations

import pytest

from fleetval.culprit import Culprit
from fleetval.status import (
    combined_exit,
    completed,
    exit_status,
    passes_for_compare,
    run_status,
    signoff_completed,
    step_status,
    usable_as_baseline,
)
from fleetval.store.schema import Row
from fleetval.vocab import RunStatus, Status


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
        (("pass", "info"), [], Status.PASS),  # something judged and met; the rest recorded
        (("info", "info"), [], Status.UNJUDGED),  # measured, nothing to judge it against
        (("info", "skip"), [], Status.UNJUDGED),
        ((), [], Status.UNJUDGED),  # ran, returned nothing: nothing was judged
        (("pass", "pass"), [culprit("late")], Status.WARN),  # late ranks warn, the job goes on
        (("info",), [culprit("slow")], Status.WARN),
        (("pass",), [culprit("hang")], Status.FAIL),
        ((), [culprit("crash")], Status.FAIL),
        ((), [culprit("not placed")], Status.FAIL),
        (("fail",), [culprit("late")], Status.FAIL),
    ],
)
def test_step_status(statuses, culprits, want):
    assert step_status(rows(*statuses), culprits) == want


def test_a_deadline_that_ran_out_fails_the_step_without_a_culprit():
    assert step_status(rows("pass"), [], deadline=True) == Status.FAIL
    assert step_status([], [], deadline=True) == Status.FAIL


def test_a_row_is_not_pass_unless_a_check_says_so():
    assert Row().status == Status.INFO


@pytest.mark.parametrize(
    ("steps", "want"),
    [
        (["pass", "pass"], RunStatus.PASS),
        (["pass", "warn"], RunStatus.WARN),  # WARN reaches the run's status
        (["warn", "fail", "skip"], RunStatus.FAIL),
        (["pass", "skip"], RunStatus.PASS),
        (["pass", "unjudged"], RunStatus.PASS),  # the unjudged step is shown as such
        (["skip", "skip"], RunStatus.UNJUDGED),  # every row skipped: nothing was judged
        (["unjudged"], RunStatus.UNJUDGED),
        ([], RunStatus.UNJUDGED),  # no steps: nothing was judged
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
        ("unjudged", False, 5),  # as pytest's "no tests collected"
        ("unjudged", True, 5),
        ("cancelled", False, 1),
        ("error", False, 1),
        ("interrupted", False, 1),
        ("incomplete", False, 1),
    ],
)
def test_exit_status(run, strict, code):
    assert exit_status(run, strict=strict) == code


@pytest.mark.parametrize(
    ("codes", "want"), [((0, 0), 0), ((5, 0), 5), ((5, 1), 1), ((0, 1), 1), ((5, 5), 5)]
)
def test_combined_exit(codes, want):
    assert combined_exit(*codes) == want


@pytest.mark.parametrize(
    ("run", "done", "baseline", "compare", "signoff"),
    [
        ("pass", True, True, True, True),
        ("warn", True, True, True, True),
        ("fail", True, True, False, True),  # what it found is the other gates' to judge
        ("unjudged", True, True, False, False),  # never a pass, never signed off unwaived
        ("cancelled", False, False, False, False),
        ("error", False, False, False, False),
        ("interrupted", False, False, False, False),
        ("incomplete", False, False, False, False),
    ],
)
def test_one_answer_per_question(run, done, baseline, compare, signoff):
    assert completed(run) is done
    assert usable_as_baseline(run) is baseline
    assert passes_for_compare(run) is compare
    assert signoff_completed(run) is signoff


def test_every_run_status_has_an_answer():
    """A new RunStatus must be placed in the policy, not fall through silently."""
    for run in RunStatus:
        assert exit_status(run) in (0, 1, 5)
        assert completed(run) == (run in ("pass", "warn", "fail", "unjudged"))
