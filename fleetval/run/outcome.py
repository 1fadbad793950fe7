"""What a run reports while it executes: culprits, step outcomes, progress events.

Shared by the job, step and run modules of the executor (plain data, no Ray). What a run
accumulates (`RunState`) lives with the job (`fleetval.run.job`): it holds the warm ranks a
job takes, so here it would close an import cycle through the pool.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fleetval.culprit import Culprit as Culprit  # the engine's modules import it from here
from fleetval.status import aborts
from fleetval.vocab import EventKind


@dataclass(frozen=True)
class StepOutcome:
    job: int
    world_size: int
    step: str
    check: str
    status: str
    message: str
    seconds: float
    culprits: tuple[Culprit, ...] = ()
    deadline: bool = False  # cut off by its deadline while every rank progressed (no culprit)

    @property
    def breaks_job(self) -> bool:
        """Its ranks can no longer be trusted (cut off at its deadline, or a culprit that
        aborts: crash, hang, error): the job's remaining steps are not run, its ranks torn
        down. The failure policy (`fleetval.status.aborts`) decides which culprits abort."""
        return self.deadline or any(aborts(c) for c in self.culprits)


@dataclass(frozen=True)
class Event:
    """Progress for a front end: a step started, made progress or ended."""

    kind: EventKind  # step_start, step_progress or step_end
    job: int
    step: str
    index: int  # step number across the whole run, from 0
    total: int
    detail: str = ""
    outcome: StepOutcome | None = None


EventSink = Callable[[Event], None]
