"""The scheduler: a supervised thread (`Supervised`) that fires due schedules by submitting their suites.

Every service process runs one (API replicas and uvicorn workers included); they agree
through the database, never through a lock, so schedules fire while any process lives.

Exactly once per fire time, across restarts and processes: a firing's submission has the
id `schedule.<name>.<fire time>`, so submitting it twice gives the same run back (the
queue's unique submission_id), and the schedule moves on to its next fire time with a
compare-and-set on the fire time it was due at (`ServiceDB.claim_firing`): one of the
processes that looked wins and counts it. A process that dies between the two leaves the
schedule due; the next look submits the same id again, which queues nothing new.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime

from pydantic import ValidationError

from fleetval.api import service
from fleetval.api.db import FireOutcome, Schedule, ServiceDB, Token, now
from fleetval.api.db import Scope as TokenScope
from fleetval.api.errors import ApiError
from fleetval.api.executor import Executor
from fleetval.api.limits import Limits
from fleetval.api.models import SubmitRequest
from fleetval.api.schedules import Firing, decide, parse_stamp, stamp
from fleetval.api.supervised import Supervised
from fleetval.run.plan import PlanError
from fleetval.suite import SuiteError
from fleetval.vocab import Catchup

log = logging.getLogger(__name__)

TICK_S = 1.0  # the longest sleep: a schedule made in another process is seen this fast
PRUNE_EVERY_S = 3600.0  # finished submissions older than limits.retain_finished_s go this often
# What a firing's submit may refuse with (the suite, a limit, the plan, the owner's quota):
# the firing is counted as refused with the reason, and the schedule moves on.
REFUSALS = (ApiError, SuiteError, PlanError, ValidationError)


def submission_id(name: str, fire_at: datetime) -> str:
    """The one submission a fire time may make (a prefix only firings may use)."""
    return f"{service.SCHEDULED_PREFIX}{name}.{fire_at.astimezone(UTC):%Y%m%dT%H%M%SZ}"


class Scheduler(Supervised):
    """Fires the due schedules of one service database."""

    what = "scheduler"

    def __init__(self, db: ServiceDB, executor: Executor, limits: Limits) -> None:
        super().__init__()
        self.db, self.executor, self.limits = db, executor, limits
        self._pruned_at = -PRUNE_EVERY_S

    def start(self) -> None:
        self._start_thread(self._supervise)

    def _loop(self) -> None:
        while not self._stopping.is_set():
            self.tick(datetime.now(UTC))
            if time.monotonic() - self._pruned_at >= PRUNE_EVERY_S:
                self.prune()
            self._healthy()
            self._sleep(self._sleep_s())

    def prune(self) -> int:
        """Finished submissions (and their events) older than the retention: the queue's
        history does not grow for ever; the runs stay in the store."""
        self._pruned_at = time.monotonic()
        pruned = self.db.prune(before=now(-self.limits.retain_finished_s))
        if pruned:
            log.info("pruned %d submissions finished over %g s ago", pruned,
                     self.limits.retain_finished_s)  # fmt: skip
        return pruned

    def _sleep_s(self) -> float:
        due = self.db.next_due()
        if due is None:
            return TICK_S
        wait = (parse_stamp(due) - datetime.now(UTC)).total_seconds()
        return min(TICK_S, max(wait, 0.0))

    def tick(self, now: datetime) -> list[str]:
        """Fire every schedule due at `now`; the names this process claimed."""
        return [s.name for s in self.db.due_schedules(stamp(now)) if self.fire(s, now)]

    def fire(self, schedule: Schedule, now: datetime) -> bool:
        """Decide, submit (idempotently) and claim one due schedule; True if this claim won."""
        firing = decide(
            schedule.cron, parse_stamp(schedule.next_fire), now, Catchup(schedule.catchup)
        )
        claim = {"due": schedule.next_fire, "next_fire": stamp(firing.next_fire)}
        if firing.missed:
            log.warning(
                "schedule %s: fire times from %s on were missed; catchup %s runs %s",
                schedule.name, schedule.next_fire, schedule.catchup, firing.fire_at or "none",
            )  # fmt: skip
        if firing.fire_at is None:
            return self.db.claim_firing(schedule.name, outcome=FireOutcome.SKIPPED, **claim)
        try:
            run_id = self._submit(schedule, firing)
        except REFUSALS as err:
            log.warning("schedule %s: firing refused: %s", schedule.name, err)
            return self.db.claim_firing(
                schedule.name, outcome=FireOutcome.REFUSED, error=str(err), **claim
            )
        won = self.db.claim_firing(
            schedule.name, outcome=FireOutcome.FIRED, fired_at=stamp(firing.fire_at),
            run_id=run_id, **claim,
        )  # fmt: skip
        if won:
            log.info("schedule %s fired for %s: run %s", schedule.name, firing.fire_at, run_id)
        return won

    def _submit(self, schedule: Schedule, firing: Firing) -> str:
        """The same submit as POST /v1/runs, as the schedule's owner."""
        assert firing.fire_at is not None
        if not self.db.can_submit(schedule.owner):
            raise ApiError(
                f"its owner {schedule.owner!r} holds no valid token with scope submit any more"
            )
        labels = {**schedule.labels, "schedule": schedule.name, "fire_time": stamp(firing.fire_at)}
        req = SubmitRequest(
            suite=schedule.suite,
            labels=labels,
            submission_id=submission_id(schedule.name, firing.fire_at),
            retries=schedule.retries,
        )
        owner = Token(id="", name=schedule.owner, scope=TokenScope.SUBMIT)
        sub, _ = service.submit(self.db, self.executor, self.limits, req, owner, scheduled=True)
        return sub.run_id
