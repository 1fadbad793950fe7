"""The one status policy: rows -> step -> run -> exit status, and every question asked of a
status (completed? a baseline? passes compare? sign-off complete?). Nothing else decides.

PASS means judged against an expectation and met; nothing is PASS by default.

- Rows: PASS / WARN / FAIL are judgements; INFO is a measurement with nothing to judge it
  against (a GPU model with no expectation, a CPU rank); SKIP was not measured here.
- A step FAILs when a rank crashed, hung or raised, its deadline ran out (even while every
  rank progressed: a deadline finding that blames no rank), or any of its rows failed.
- A step WARNs when its only culprits are late or slow ranks, or any row warns (none failed).
- A step PASSes when at least one row was judged and met (and none failed or warned).
- A step is SKIP when every row skipped; UNJUDGED when it ran but judged nothing (only
  INFO and SKIP rows, or no rows at all).
- A run FAILs when any step failed; WARNs when any step warned; PASSes when any step
  passed; else (nothing judged: every step skipped or unjudged, or no step) UNJUDGED.
  `cancelled`, `error`, `interrupted` are set by the executor or the service, not here.
- Exit status: 0 for pass AND warn (the checks passed; warnings are shown), 1 for fail /
  cancelled / error / interrupted / incomplete, and 5 for unjudged, unless `strict`, where
  warn is 1 too. NOTE: 5 is pytest's "no tests collected": a CI job must not go green on a
  run that judged nothing, yet a pipeline that only records measurements can accept 5
  explicitly without also accepting failures. Bad input (2) never reaches this module.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from fleetval.culprit import Culprit
from fleetval.vocab import CulpritReason, RunStatus, Status


class HasStatus(Protocol):
    """What the policy reads of anything judged: a result row (`fleetval.store.schema.Row`,
    the one row model, a later stage) or a finding (`fleetval.finding.Finding`)."""

    @property
    def status(self) -> str: ...


# Culprits that mean the job's ranks can no longer be trusted: the job is aborted.
ABORTING = frozenset(
    {
        CulpritReason.CRASH,
        CulpritReason.HANG,
        CulpritReason.ERROR,
        CulpritReason.NOT_PLACED,
        CulpritReason.NOT_JOINED,
    }
)

JUDGED = frozenset({Status.PASS, Status.WARN, Status.FAIL})  # a row or step that judged something

EXIT_PASSED = 0
EXIT_FAILED = 1
EXIT_UNJUDGED = 5  # as pytest's "no tests collected"

# Worst first when a view shows one status for many rows (the report's node x check map).
_SEVERITY = {
    Status.SKIP: 0,
    Status.INFO: 1,
    Status.UNJUDGED: 1,
    Status.PASS: 2,
    Status.WARN: 3,
    Status.FAIL: 4,
}


def aborts(culprit: Culprit) -> bool:
    return culprit.reason in ABORTING


def row_statuses(rows: Iterable[HasStatus]) -> set[str]:
    return {r.status for r in rows}


def judged(status: str) -> bool:
    """Whether a row's or step's status is a judgement (pass, warn or fail)."""
    return status in JUDGED


def measured(status: str) -> bool:
    """Whether a row holds a measurement to use: recorded (info) or judged and not failed."""
    return status in (Status.PASS, Status.WARN, Status.INFO)


def flagged(status: str) -> bool:
    """Whether a row or finding asks for a person: it warned or failed."""
    return status in (Status.WARN, Status.FAIL)


def severity(status: str | None) -> int:
    """How bad a row status is, for showing the worst of several (unknown: -1)."""
    return _SEVERITY.get(status, -1)  # type: ignore[call-overload]  # NOTE: StrEnum keys hash as str


def step_status(
    rows: Sequence[HasStatus], culprits: Sequence[Culprit], *, deadline: bool = False
) -> Status:
    """A finished (or broken) step's status from its rows, culprits and whether its deadline
    ran out with every rank still progressing."""
    statuses = row_statuses(rows)
    if deadline or any(aborts(c) for c in culprits) or Status.FAIL in statuses:
        return Status.FAIL
    if culprits or Status.WARN in statuses:
        return Status.WARN
    if Status.PASS in statuses:
        return Status.PASS
    if statuses == {Status.SKIP.value}:
        return Status.SKIP
    return Status.UNJUDGED


def run_status(step_statuses: Iterable[str]) -> RunStatus:
    """A run's status from its steps' (skipped and unjudged steps are neutral, but a run
    where nothing was judged is UNJUDGED, never PASS)."""
    seen = set(step_statuses)
    if Status.FAIL in seen:
        return RunStatus.FAIL
    if Status.WARN in seen:
        return RunStatus.WARN
    if Status.PASS in seen:
        return RunStatus.PASS
    return RunStatus.UNJUDGED


def exit_status(run: str, *, strict: bool = False) -> int:
    """The exit status of `fleetval run` and `submit --wait` for a run's status."""
    if run == RunStatus.PASS:
        return EXIT_PASSED
    if run == RunStatus.WARN:
        return EXIT_FAILED if strict else EXIT_PASSED
    if run == RunStatus.UNJUDGED:
        return EXIT_UNJUDGED
    return EXIT_FAILED


def combined_exit(*codes: int) -> int:
    """One exit status for several verdicts (a run, then its compare): a failure wins over
    unjudged, unjudged over a pass."""
    if any(c not in (EXIT_PASSED, EXIT_UNJUDGED) for c in codes):
        return max(c for c in codes if c != EXIT_UNJUDGED)
    return EXIT_UNJUDGED if EXIT_UNJUDGED in codes else EXIT_PASSED


def completed(run: str) -> bool:
    """The run went through all its jobs (whatever they found): not cancelled, errored,
    interrupted or cut off before its record was written."""
    return run in (RunStatus.PASS, RunStatus.WARN, RunStatus.FAIL, RunStatus.UNJUDGED)


def usable_as_baseline(run: str) -> bool:
    """Whether a filter-based baseline takes the run (unless the filter names a status).

    NOTE: every completed run: a failed or warned row is judged row by row (failed rows are
    marked in the run's summaries, skipped ones left out), so a failed correctness row or a
    late rank in one step does not spoil the other measurements of the run. A run that did
    not complete has no trustworthy set of measurements.
    """
    return completed(run)


def passes_for_compare(run: str) -> bool:
    """Whether a candidate run passed in its own right (compare fails the gate otherwise).

    Warn passes: its late ranks are compare's outliers to judge. Unjudged does not: a run
    that judged nothing itself is never a pass.
    """
    return run in (RunStatus.PASS, RunStatus.WARN)


def signoff_completed(run: str) -> bool:
    """The sign-off `completed` gate: the run finished AND judged something.

    A failed run completes (what it found is the other gates' to judge); an unjudged one
    fails this gate unless waived: a release is never signed on measurements nothing judged.
    """
    return completed(run) and run != RunStatus.UNJUDGED
