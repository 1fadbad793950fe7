"""A run's life as one state machine: its states, the events that move it, who may send them.

    starting ──start──► running ──finish──► finished (status judged from its steps)
       │  └────────fail──────┐ │
      stop              stop │ └──fail──► error (the driver failed: no judged status)
       ▼                     ▼
    stopping ◄───────────────┘
       ├──start────► stopping  (asked to stop before it started: its first look ends it)
       ├──stopped──► cancelled (finished steps are kept)
       ├──finish───► finished  (the stop came after the last step: nothing was left to stop)
       └──fail─────► error

`RunLife` is the only thing that moves a run between these states; an event its state does
not take raises `IllegalTransition`. The engine (`fleetval.run.execute`, the driver of the run)
sends start, finish, stopped and fail; anyone, from any thread, may ask the run to stop
(`request_stop`, with a `StopReason`): the user's cancel through the service, Ctrl-C, the
service stopping. That is the one way to stop a run: every wait of the engine looks at the
life (`check`, at most a poll interval apart), and one that finds it stopping unwinds with
`RunStopped`, which tears the running job down on its way to the engine, which then sends
`stopped`. A caller that holds only a `threading.Event` (a library caller, Ctrl-C) passes it
as the run's cancel event: the life observes it as a stop request (`StopSwitch` says why).

The run's end is read from the life (`outcome`: the terminal state, the run's status, why it
was stopped and what it says), never derived again from how the engine returned.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from fleetval.vocab import QueueStatus, RunStatus

if TYPE_CHECKING:  # NOTE: the record's module is pyarrow-free, but a life needs none of it
    from fleetval.store.records import Run


class RunPhase(StrEnum):
    """Where a run is in its life (`RunLife.state`)."""

    STARTING = "starting"  # built: no job has started
    RUNNING = QueueStatus.RUNNING.value  # its jobs execute, one after another (or side by side)
    STOPPING = "stopping"  # a stop was asked: the running job tears down, nothing more starts
    FINISHED = "finished"  # every job ran to its end: the status is judged from the steps
    CANCELLED = RunStatus.CANCELLED.value  # stopped before its end; finished steps are kept
    ERROR = RunStatus.ERROR.value  # the driver failed (or refused the run): it cannot go on


class RunEvent(StrEnum):
    """What moves a run from one state to the next."""

    START = "start"  # the engine: the run's record is open, its first job may start
    STOP = "stop"  # anyone: stop the run (with a reason)
    FINISH = "finish"  # the engine: no job is left to run
    STOPPED = "stopped"  # the engine: the stop took effect (the running job is torn down)
    FAIL = "break"  # the engine, or the service before the engine started: the run cannot go on


class Mover(StrEnum):
    """Who may send an event."""

    ENGINE = "engine"  # the run's driver (execute.recording / run_suite, a sweep)
    ANYONE = "anyone"  # any thread: the service's cancel watcher, a signal handler, a caller


class StopReason(StrEnum):
    """Why a run was asked to stop."""

    REQUEST = "request"  # the caller's cancel: `POST /v1/runs/{id}/cancel`, a library caller
    CTRL_C = "ctrl_c"  # the first Ctrl-C of a run in the foreground (or KeyboardInterrupt)
    SERVICE = "service"  # the service is stopping while the run executes


S, E = RunPhase, RunEvent
# The transition table: (state, event) -> next state. Nothing else moves a run.
TRANSITIONS: dict[tuple[RunPhase, RunEvent], RunPhase] = {
    (S.STARTING, E.START): S.RUNNING,
    (S.STARTING, E.STOP): S.STOPPING,
    (S.STARTING, E.FAIL): S.ERROR,
    (S.RUNNING, E.STOP): S.STOPPING,
    (S.RUNNING, E.FINISH): S.FINISHED,
    (S.RUNNING, E.FAIL): S.ERROR,
    (S.STOPPING, E.START): S.STOPPING,  # asked to stop before it started: its first look ends it
    (S.STOPPING, E.STOPPED): S.CANCELLED,
    (S.STOPPING, E.FINISH): S.FINISHED,
    (S.STOPPING, E.FAIL): S.ERROR,
}
WHO: dict[RunEvent, Mover] = {
    E.START: Mover.ENGINE,
    E.STOP: Mover.ANYONE,
    E.FINISH: Mover.ENGINE,
    E.STOPPED: Mover.ENGINE,
    E.FAIL: Mover.ENGINE,
}
TERMINAL = frozenset({S.FINISHED, S.CANCELLED, S.ERROR})
# What a stopped run says, by why it was stopped (its record's message).
STOPPED_MESSAGES: dict[StopReason, str] = {
    StopReason.REQUEST: "cancelled by request; finished steps are kept",
    StopReason.CTRL_C: "interrupted; finished steps are kept",
    StopReason.SERVICE: "the service was stopped during the run; finished steps are kept",
}
del S, E


class IllegalTransition(RuntimeError):
    """An event the run's state does not take (a bug in whoever sent it)."""


class RunStopped(Exception):
    """The run is stopping: raised by `RunLife.check` out of the engine's waits, so that the
    running job tears down on its way out. Control flow of the one stop path, not an error."""

    def __init__(self, reason: StopReason) -> None:
        super().__init__(f"stopped: {reason}")
        self.reason = reason


class StopSwitch(threading.Event):
    """A run's cancel event that says why it gets set (Ctrl-C's: `fleetval.run.interrupt`)."""

    def __init__(self, reason: StopReason) -> None:
        super().__init__()
        self.reason = reason


@dataclass(frozen=True)
class RunOutcome:
    """How a run ended: its terminal state, status, why it was stopped, what it says."""

    state: RunPhase
    status: RunStatus
    message: str = ""
    reason: StopReason | None = None  # set when a stop was asked (even one that came too late)
    record: Run | None = None  # the stored record, once the engine wrote it


def failure_message(err: BaseException) -> str:
    """What a failed run says: a refusal (a ValueError: the plan, the cluster, the suite) in
    its own words; anything else with its type."""
    return str(err) if isinstance(err, ValueError) else f"{type(err).__name__}: {err}"


class RunLife:
    """One run's state, moved only through the transition table; safe across threads.

    `cancel`: an event the caller sets to stop the run (observed at every `check`); a
    `StopSwitch` gives its reason, any other event stops the run `by request`.
    """

    def __init__(self, cancel: threading.Event | None = None) -> None:
        self._lock = threading.Lock()
        self._state = RunPhase.STARTING
        self._reason: StopReason | None = None
        self._outcome: RunOutcome | None = None
        self._cancel = cancel
        self.history: list[tuple[RunPhase, RunEvent, RunPhase]] = []  # every move, in order

    # -- what anyone reads -----------------------------------------------------------------

    @property
    def state(self) -> RunPhase:
        return self._state

    @property
    def ended(self) -> bool:
        return self._state in TERMINAL

    @property
    def outcome(self) -> RunOutcome | None:
        """How the run ended; None until it has."""
        return self._outcome

    @property
    def stop_reason(self) -> StopReason | None:
        return self._reason

    @property
    def stopping(self) -> bool:
        """A stop was asked (now, or by the cancel event since the last look)."""
        self._observe_cancel()
        return self._reason is not None

    # -- the one way to stop a run ---------------------------------------------------------

    def request_stop(self, reason: StopReason) -> bool:
        """Ask the run to stop (any thread). False, and nothing changes, when it is already
        stopping or has ended: a request is answered, never refused with an error."""
        with self._lock:
            if (self._state, RunEvent.STOP) not in TRANSITIONS:
                return False
            self._reason = reason
            self._move(RunEvent.STOP)
            return True

    def check(self) -> None:
        """The engine's look at the life while it waits: RunStopped once a stop was asked."""
        if self.stopping and not self.ended:
            raise RunStopped(self._reason or StopReason.REQUEST)

    def _observe_cancel(self) -> None:
        if self._cancel is not None and self._cancel.is_set() and self._reason is None:
            self.request_stop(getattr(self._cancel, "reason", StopReason.REQUEST))

    # -- the engine's events ---------------------------------------------------------------

    def start(self) -> None:
        with self._lock:
            self._move(RunEvent.START)

    def finish(
        self, status: RunStatus, write: Callable[[RunOutcome], Run] | None = None
    ) -> RunOutcome:
        """No job is left: the run's status is `status` (judged from its steps)."""
        return self._end(RunEvent.FINISH, status, "", write)

    def stopped(self, write: Callable[[RunOutcome], Run] | None = None) -> RunOutcome:
        """The stop took effect: the run is cancelled, its message says why."""
        reason = self._reason or StopReason.REQUEST
        return self._end(RunEvent.STOPPED, RunStatus.CANCELLED, STOPPED_MESSAGES[reason], write)

    def fail(
        self, err: BaseException, write: Callable[[RunOutcome], Run] | None = None
    ) -> RunOutcome:
        return self._end(RunEvent.FAIL, RunStatus.ERROR, failure_message(err), write)

    def _end(
        self,
        event: RunEvent,
        status: RunStatus,
        message: str,
        write: Callable[[RunOutcome], Run] | None,
    ) -> RunOutcome:
        """Write the run's record from the outcome the event gives (`write`: the engine's),
        then move to the terminal state. A write that raises moves nothing: the run has not
        ended, and the engine fails it."""
        with self._lock:
            after = self._next(event)
            reason = self._reason
        record = write(RunOutcome(after, status, message, reason)) if write is not None else None
        with self._lock:
            self._move(event)
            self._outcome = RunOutcome(self._state, status, message, self._reason, record)
            return self._outcome

    def _next(self, event: RunEvent) -> RunPhase:
        after = TRANSITIONS.get((self._state, event))
        if after is None:
            raise IllegalTransition(f"a run {self._state} does not take {event}")
        return after

    def _move(self, event: RunEvent) -> None:
        """The one place the state changes (the caller holds the lock)."""
        before, after = self._state, self._next(event)
        self._state = after
        self.history.append((before, event, after))
