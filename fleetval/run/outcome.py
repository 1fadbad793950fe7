"""What a run reports while it executes: culprits, step outcomes, progress events, run state.

Shared by the job, step and run modules of the executor (plain data, no Ray).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fleetval.culprit import Culprit as Culprit  # the engine's modules import it from here
from fleetval.vocab import EventKind

if TYPE_CHECKING:  # NOTE: the suite imports the checks (torch), the store pyarrow; readers
    # of outcomes (exit statuses) need neither
    from fleetval.run.pool import WarmRanks
    from fleetval.store.dataset import RunRecord, Store
    from fleetval.suite import Suite


class RunCancelled(Exception):
    """The caller set the run's cancel event: the current job is torn down, nothing more runs."""


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


@dataclass
class RunState:
    """What a run accumulates while its jobs execute."""

    run_id: str
    suite: Suite
    store: Store
    on_event: EventSink
    total_steps: int
    done_steps: int = 0
    backend: str = ""
    outcomes: list[StepOutcome] = field(default_factory=list)
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    record: RunRecord | None = None
    cancel: threading.Event | None = None
    pool: WarmRanks | None = None  # warm ranks kept between jobs (the service's, a sweep's)
    # More for the run's summary (a sweep's verdict).
    summary: dict[str, Any] = field(default_factory=dict)

    def check_cancelled(self) -> None:
        if self.cancel is not None and self.cancel.is_set():
            raise RunCancelled("cancelled by request")

    def event(
        self, kind: str, job: int, step: str, detail: str = "", outcome: StepOutcome | None = None
    ) -> None:
        self.on_event(Event(kind, job, step, self.done_steps, self.total_steps, detail, outcome))
