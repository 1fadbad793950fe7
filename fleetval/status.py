"""The one status policy: rows -> step -> run -> exit status.

- A step FAILs when a rank crashed, hung or raised, or any of its rows failed.
- A step WARNs when its only culprits are late ranks, or any row warns (and none failed).
- A step is SKIP when it ran nothing measurable (every row skipped, or it never ran).
- A run FAILs when any step failed; WARNs when any step warned; else PASSes. Skipped
  steps are neutral. `cancelled` and `error` are set by the executor, not derived here.
- Exit status: 0 for pass AND warn (the checks passed; warnings are shown in the summary
  and in `fleetval show`), 1 for fail / cancelled / error, unless `strict`, where warn is 1
  too (a CI gate that wants a clean fleet). Bad input (2) never reaches this module.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from fleetval.run.outcome import Culprit
from fleetval.vocab import CulpritReason, Status

if TYPE_CHECKING:  # NOTE: the results module imports pyarrow; exit statuses need none
    from fleetval.store.schema import Row

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


def aborts(culprit: Culprit) -> bool:
    return culprit.reason in ABORTING


def row_statuses(rows: Iterable[Row]) -> set[str]:
    return {r.status for r in rows}


def step_status(rows: Sequence[Row], culprits: Sequence[Culprit]) -> Status:
    """A finished (or broken) step's status from its rows and culprits."""
    statuses = row_statuses(rows)
    if any(aborts(c) for c in culprits) or Status.FAIL.value in statuses:
        return Status.FAIL
    if culprits or Status.WARN.value in statuses:
        return Status.WARN
    if statuses and statuses <= {Status.SKIP.value}:
        return Status.SKIP
    return Status.PASS


def run_status(step_statuses: Iterable[str]) -> Status:
    """A run's status from its steps' (skipped steps are neutral)."""
    seen = set(step_statuses)
    if Status.FAIL.value in seen:
        return Status.FAIL
    if Status.WARN.value in seen:
        return Status.WARN
    return Status.PASS


def exit_status(run: str, *, strict: bool = False) -> int:
    """The process exit status of `fleetval run` (and `submit --wait`) for a run's status."""
    if run == Status.PASS.value:
        return 0
    if run == Status.WARN.value:
        return 1 if strict else 0
    return 1
